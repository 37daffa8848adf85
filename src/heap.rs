//! The process's heap in use: the global allocator wrapped with a counter of live bytes, so a
//! run on the CPU backend (whose tensors live on the heap and whose pool has no counters) can
//! still log what it holds, step by step, next to the resident set size; and an allocation the
//! system refuses reported, before Rust aborts the process, with the step and stage under way
//! and the ledger's prediction for it (stable Rust cannot recover from a failed allocation).

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::malloc_policy::BlockCache;

/// The system allocator, counting the bytes of live allocations, with the blocks too large for
/// glibc to keep kept for reuse ([`BlockCache`]).
pub struct Counting;

/// The freed blocks [`Counting`] keeps (not counted as live).
static CACHE: BlockCache = BlockCache::new();

/// Frees the blocks the cache let go of.
fn free_evicted(blocks: &[crate::malloc_policy::Evicted]) {
    for &(ptr, layout) in blocks.iter().flatten() {
        // SAFETY: each block came from `System` with this layout and is no longer in use.
        #[allow(unsafe_code, reason = "frees what the cache kept")]
        unsafe {
            System.dealloc(ptr, layout)
        };
    }
}

/// `allocate` from the system; when it refuses, once more after freeing the kept blocks.
fn from_system(allocate: impl Fn() -> *mut u8) -> *mut u8 {
    let p = allocate();
    if !p.is_null() {
        return p;
    }
    free_evicted(&CACHE.drain());
    allocate()
}

static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);

/// What the run expected (the ledger's prediction), for the out-of-memory reports.
static CONTEXT: Mutex<String> = Mutex::new(String::new());

/// Sets what an out-of-memory report says the run expected.
pub fn set_context(text: String) {
    if let Ok(mut c) = CONTEXT.lock() {
        *c = text;
    }
}

/// Writes [`set_context`]'s text to `out`, if it can be had without waiting.
pub fn write_context(out: &mut dyn std::fmt::Write) {
    if let Ok(c) = CONTEXT.try_lock()
        && !c.is_empty()
    {
        let _ = write!(out, "\n  {}", c.as_str());
    }
}

/// A fixed buffer to format into without allocating (the report runs inside the allocator).
struct Stack {
    buf: [u8; 1024],
    len: usize,
}

impl std::fmt::Write for Stack {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Counts `bytes` of a new allocation `p`, or reports the refusal when it is null.
fn counted(p: *mut u8, bytes: usize) -> *mut u8 {
    if p.is_null() {
        refused(bytes);
    } else {
        LIVE_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    p
}

/// Reports a refused allocation on stderr without allocating.
fn refused(bytes: usize) {
    let mut m = Stack {
        buf: [0; 1024],
        len: 0,
    };
    let _ = write!(
        m,
        "error: out of host memory: an allocation of {bytes} bytes was refused during "
    );
    let _ = widebag_model::probe::progress::describe(&mut m);
    let _ = write!(m, " (heap in use {} bytes)", in_use_bytes());
    write_context(&mut m);
    let _ = m.write_str("\n  the process ends (Rust aborts on a failed allocation)\n");
    let _ = std::io::stderr().write_all(&m.buf[..m.len]);
}

#[allow(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; each method forwards to System or reuses a block System gave"
)]
// SAFETY: every call is forwarded to `System`, or hands out a block `System` gave with the
// same layout and that nothing uses any more; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(p) = CACHE.take(layout) {
            return counted(p, layout.size());
        }
        // SAFETY: forwarded with the caller's layout.
        counted(
            from_system(|| unsafe { System.alloc(layout) }),
            layout.size(),
        )
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if let Some(p) = CACHE.take(layout) {
            // SAFETY: a kept block of exactly `layout.size()` bytes, no longer in use.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
            return counted(p, layout.size());
        }
        // SAFETY: forwarded with the caller's layout.
        counted(
            from_system(|| unsafe { System.alloc_zeroed(layout) }),
            layout.size(),
        )
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // A block over 32 MiB is kept for the next allocation of the same layout (or freed by
        // the cache's rules); any other goes straight back to `System`.
        match BlockCache::takes(layout) {
            true => free_evicted(&CACHE.keep(ptr, layout)),
            // SAFETY: `ptr` came from this allocator (from `System`) with `layout`.
            false => unsafe { System.dealloc(ptr, layout) },
        }
        LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`.
        let p = counted(unsafe { System.realloc(ptr, layout, new_size) }, new_size);
        if !p.is_null() {
            LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        p
    }
}

/// Gives the memory the process freed back to the kernel: the blocks the cache keeps, and what
/// glibc keeps of its heaps (`malloc_trim`). Called once the data is prepared, so that what
/// reading it freed (parsed line blocks, merged parts, samples) is not resident through the
/// run: the host side the ledger prices is then what the process holds.
pub fn give_back_freed() {
    free_evicted(&CACHE.drain());
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code, reason = "malloc_trim has no safe wrapper")]
    // SAFETY: malloc_trim only returns free pages of glibc's heaps to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes of the heap's live allocations now.
pub fn in_use_bytes() -> u64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// The resident set size now (`/proc/self/statm`'s second field), where Linux has it.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The library's own tests count as the binary does: with [`Counting`] as their allocator.
#[cfg(test)]
#[global_allocator]
static TEST_HEAP: Counting = Counting;

#[cfg(test)]
mod tests {
    #[test]
    fn counts_a_live_allocation_and_its_release() {
        let before = super::in_use_bytes();
        let v = vec![0u8; 64 << 20];
        // Other test threads allocate too; 64 MiB stands well clear of their noise.
        assert!(super::in_use_bytes() >= before + (60 << 20));
        drop(v);
        assert!(super::in_use_bytes() < before + (60 << 20));
        assert!(super::rss_bytes().is_some_and(|b| b > 0));
    }
}
