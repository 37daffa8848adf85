//! The allocator's policy for a training step's buffers: memory a step frees is kept for the
//! next step's allocations instead of going back to the kernel, so a step does not fault in,
//! and zero, the same pages again: glibc's thresholds, and a cache of the blocks too large for
//! glibc to keep ([`BlockCache`]).
//!
//! By default glibc serves a block larger than its (adaptive, at most 32 MiB) mmap threshold
//! with a fresh mapping and unmaps it when freed, and gives the free top of a heap back to the
//! kernel once it passes 2 × that threshold. A step on flex frees and allocates far more than
//! that every step (the output gradient, the hidden layers' activations and gradients, burn's
//! intermediate tensors), so every step paid a minor fault per 4 KiB page of them: the seed
//! model's head/tail step took 44,000 faults and a third of its time in the kernel. The policy:
//! blocks up to 32 MiB (glibc's largest threshold) from the heaps, and a heap's free top kept up
//! to [`KEPT_FREE_BYTES`]. glibc still maps each block larger than 32 MiB and unmaps it when it
//! is freed (the sparse seed model's 491 MiB output gradient: 120,000 faults a step), so
//! [`BlockCache`] keeps such blocks, by exact size, for the next allocation of that size (a
//! step's shapes repeat every step), up to [`KEPT_FREE_BYTES`] in all. glibc still unmaps a thread
//! arena's extra heap (64 MiB each) once it is wholly free.
//!
//! The resident set size keeps up to [`KEPT_FREE_BYTES`] of freed heap per arena after the peak:
//! memory the process already used at its peak, not more. The heap counter ([`crate::heap`]),
//! which the ledger is checked against, counts live allocations only and is unchanged.

/// The largest block served from the heaps: glibc's maximum mmap threshold on 64-bit
/// (`HEAP_MAX_SIZE / 2`).
/// The ledger prices the blocks above it as kept by size (`widebag_ledger::heap`).
pub const HEAP_BLOCK_MAX_BYTES: usize = widebag_ledger::heap::KEPT_BLOCK_BYTES as usize;

/// Free memory a heap keeps at its top before giving it back to the kernel.
pub const KEPT_FREE_BYTES: usize = 1 << 30;

/// Blocks [`BlockCache`] keeps at most.
const CACHED_BLOCKS: usize = 8;

/// Freed blocks larger than [`HEAP_BLOCK_MAX_BYTES`], kept by size and alignment for the next
/// allocation of the same layout (the global allocator, [`crate::heap::Counting`], asks it
/// first and offers it what it frees). It allocates nothing itself: a fixed table of slots
/// behind a lock (a futex: no allocation either).
pub struct BlockCache {
    slots: std::sync::Mutex<[Slot; CACHED_BLOCKS]>,
}

/// A kept block (`size == 0`: an empty slot); `age` orders evictions, oldest first.
#[derive(Clone, Copy)]
struct Slot {
    ptr: usize,
    size: usize,
    align: usize,
    age: u64,
}

const EMPTY: Slot = Slot {
    ptr: 0,
    size: 0,
    align: 0,
    age: 0,
};

/// A block the cache let go of: the caller frees it (outside the lock).
pub type Evicted = Option<(*mut u8, std::alloc::Layout)>;

impl BlockCache {
    pub const fn new() -> Self {
        Self {
            slots: std::sync::Mutex::new([EMPTY; CACHED_BLOCKS]),
        }
    }

    /// Whether a block of `layout` is one the cache deals in.
    pub fn takes(layout: std::alloc::Layout) -> bool {
        layout.size() > HEAP_BLOCK_MAX_BYTES && layout.size() <= KEPT_FREE_BYTES
    }

    /// A kept block of exactly `layout`, if one is kept.
    pub fn take(&self, layout: std::alloc::Layout) -> Option<*mut u8> {
        if !Self::takes(layout) {
            return None;
        }
        let mut slots = self.slots.lock().ok()?;
        let s = slots
            .iter_mut()
            .find(|s| s.size == layout.size() && s.align == layout.align())?;
        let ptr = s.ptr as *mut u8;
        *s = EMPTY;
        Some(ptr)
    }

    /// Keeps `ptr` (a block of `layout` from the system allocator); gives back the blocks to
    /// free: `ptr` itself when it is not kept, or the older blocks it displaces.
    pub fn keep(&self, ptr: *mut u8, layout: std::alloc::Layout) -> [Evicted; CACHED_BLOCKS + 1] {
        let mut out = [None; CACHED_BLOCKS + 1];
        let Some(mut slots) = Self::takes(layout)
            .then(|| self.slots.lock().ok())
            .flatten()
        else {
            out[0] = Some((ptr, layout));
            return out;
        };
        let age = slots.iter().map(|s| s.age).max().unwrap_or(0) + 1;
        let mut n = 0;
        // The oldest blocks go until the new one fits in the budget and in a slot.
        loop {
            let kept: usize = slots.iter().map(|s| s.size).sum();
            let full = slots.iter().all(|s| s.size != 0);
            if kept + layout.size() <= KEPT_FREE_BYTES && !full {
                break;
            }
            let Some(old) = slots
                .iter_mut()
                .filter(|s| s.size != 0)
                .min_by_key(|s| s.age)
            else {
                break;
            };
            // SAFETY of the layout: the slot holds what `keep` was given, which was valid.
            let l = std::alloc::Layout::from_size_align(old.size, old.align).ok();
            out[n] = l.map(|l| (old.ptr as *mut u8, l));
            n += 1;
            *old = EMPTY;
        }
        let slot = slots.iter_mut().find(|s| s.size == 0);
        match slot {
            Some(s) => {
                *s = Slot {
                    ptr: ptr as usize,
                    size: layout.size(),
                    align: layout.align(),
                    age,
                }
            }
            None => out[n] = Some((ptr, layout)),
        }
        out
    }

    /// Every kept block, to free (when the system refuses an allocation).
    pub fn drain(&self) -> [Evicted; CACHED_BLOCKS + 1] {
        let mut out = [None; CACHED_BLOCKS + 1];
        if let Ok(mut slots) = self.slots.lock() {
            for (o, s) in out.iter_mut().zip(slots.iter_mut()) {
                if s.size != 0 {
                    *o = std::alloc::Layout::from_size_align(s.size, s.align)
                        .ok()
                        .map(|l| (s.ptr as *mut u8, l));
                    *s = EMPTY;
                }
            }
        }
        out
    }
}

impl Default for BlockCache {
    fn default() -> Self {
        Self::new()
    }
}

/// Sets the policy; runs once at start-up, before any thread allocates. Elsewhere than glibc
/// it does nothing (other allocators keep freed memory by their own rules).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(
        unsafe_code,
        reason = "mallopt has no safe wrapper; called once at start-up"
    )]
    // SAFETY: mallopt only sets two of the allocator's parameters; called before other threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_BLOCK_MAX_BYTES as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE_BYTES as libc::c_int);
    }
}

#[cfg(test)]
mod cache_tests {
    use std::alloc::Layout;

    use super::*;

    fn layout(mib: usize) -> Layout {
        Layout::from_size_align(mib << 20, 64).unwrap()
    }

    fn freed(e: &[Evicted]) -> Vec<usize> {
        e.iter().flatten().map(|(p, _)| *p as usize).collect()
    }

    #[test]
    fn keeps_large_blocks_by_exact_layout_and_evicts_the_oldest_over_budget() {
        let cache = BlockCache::new();
        // Small blocks are glibc's to keep.
        assert_eq!(
            freed(&cache.keep(0x1000 as *mut u8, layout(8))),
            vec![0x1000]
        );
        assert!(cache.take(layout(8)).is_none());
        // Kept, and found again only at the same size.
        assert!(freed(&cache.keep(0x2000 as *mut u8, layout(400))).is_empty());
        assert!(cache.take(layout(401)).is_none());
        assert_eq!(cache.take(layout(400)), Some(0x2000 as *mut u8));
        assert!(cache.take(layout(400)).is_none());
        // Over the 1 GiB budget the oldest goes first.
        assert!(freed(&cache.keep(0x3000 as *mut u8, layout(400))).is_empty());
        assert!(freed(&cache.keep(0x4000 as *mut u8, layout(500))).is_empty());
        assert_eq!(
            freed(&cache.keep(0x5000 as *mut u8, layout(300))),
            vec![0x3000]
        );
        assert_eq!(cache.take(layout(300)), Some(0x5000 as *mut u8));
        // A block larger than the budget is never kept.
        assert_eq!(
            freed(&cache.keep(0x6000 as *mut u8, layout(2048))),
            vec![0x6000]
        );
        // At most CACHED_BLOCKS blocks.
        let many: Vec<usize> = (0..CACHED_BLOCKS + 1)
            .flat_map(|k| freed(&cache.keep((0x10000 * (k + 1)) as *mut u8, layout(33 + k))))
            .collect();
        assert_eq!(many, vec![0x4000, 0x10000]);
        assert_eq!(freed(&cache.drain()).len(), CACHED_BLOCKS);
        assert!(freed(&cache.drain()).is_empty());
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Minor page faults of the calling thread so far (`getrusage(RUSAGE_THREAD)`).
    fn thread_minor_faults() -> i64 {
        const RUSAGE_THREAD: libc::c_int = 1;
        #[allow(unsafe_code, reason = "getrusage fills a plain struct")]
        // SAFETY: `usage` is a valid, writable rusage.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(RUSAGE_THREAD, &mut usage), 0);
            usage.ru_minflt
        }
    }

    /// Allocates, touches and frees a step's worth of blocks; the faults it took.
    fn one_step() -> i64 {
        let before = thread_minor_faults();
        let blocks: Vec<Vec<u8>> = (0..4)
            .map(|k| {
                let mut v = vec![0u8; (10 << 20) + k * 4096];
                v.iter_mut().step_by(4096).for_each(|b| *b = 1);
                v
            })
            .collect();
        std::hint::black_box(&blocks);
        drop(blocks);
        thread_minor_faults() - before
    }

    #[test]
    fn a_second_step_reuses_the_first_steps_pages() {
        // The test binary does not run `process::set_up`; the policy is set here (it is
        // idempotent). 40 MiB of 10 MiB blocks, within one heap of a thread's arena (glibc
        // deletes a thread's further heaps whenever they are wholly free, whatever the policy):
        // under glibc's defaults the blocks are mapped and unmapped, or the heap's free top
        // (over 2 × the adapted 10 MiB threshold) given back, so every step faults in about
        // 10,000 pages again.
        keep_freed_memory();
        let first = one_step();
        let second = one_step();
        assert!(first > 8_000, "the first step faults its pages in: {first}");
        assert!(
            second < first / 20,
            "the second step faulted {second} pages (first {first})"
        );
    }
}
