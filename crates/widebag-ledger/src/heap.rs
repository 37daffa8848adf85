//! The process's heap as widebag's allocator policy keeps it, for a device that computes there
//! (flex): memory a step frees stays resident for the next step's allocations. A block larger
//! than [`KEPT_BLOCK_BYTES`] is kept by its exact size for the next allocation of that size
//! (the binary's block cache), so each such size holds as many blocks as were ever alive at once;
//! smaller blocks return to the heap's free lists and serve any later allocation.

use std::collections::BTreeMap;

use crate::{Ledger, Placement};

/// Blocks larger than this are kept by exact size when freed (glibc's largest mmap threshold on
/// 64-bit, above which it maps each block alone).
pub const KEPT_BLOCK_BYTES: u64 = 32 << 20;

/// Bytes of the heap the step's device tensors keep resident: for each size above
/// [`KEPT_BLOCK_BYTES`], the most blocks of it alive at once, times the size; below, the largest
/// total alive at once.
pub fn resident_bytes(ledger: &Ledger) -> u64 {
    let mut large: BTreeMap<u64, u64> = BTreeMap::new();
    let mut small_peak = 0u64;
    for &point in &ledger.points {
        let mut small = 0u64;
        let mut here: BTreeMap<u64, u64> = BTreeMap::new();
        for e in (ledger.entries.iter())
            .filter(|e| e.placement == Placement::Device && e.lifetime.alive_at(point))
        {
            match e.bytes_each() > KEPT_BLOCK_BYTES {
                true => *here.entry(e.bytes_each()).or_default() += e.count,
                false => small += e.bytes(),
            }
        }
        for (size, n) in here {
            let most = large.entry(size).or_default();
            *most = (*most).max(n);
        }
        small_peak = small_peak.max(small);
    }
    small_peak + large.iter().map(|(size, n)| size * n).sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Category, Entry, Lifetime, Point, Pool};

    fn entry(bytes: u64, from: Point, to: Point) -> Entry {
        Entry {
            name: format!("{bytes}"),
            layer: "l".into(),
            shape: vec![bytes],
            element_bytes: 1,
            count: 1,
            category: Category::Temporaries,
            placement: Placement::Device,
            pool: Pool::Dynamic,
            lifetime: Lifetime::span(from, to),
        }
    }

    #[test]
    fn large_blocks_of_other_sizes_stay_resident_small_ones_are_reused() {
        let big = KEPT_BLOCK_BYTES + 1;
        let mut l = Ledger::default();
        // Two large blocks of different sizes never alive together: both stay resident.
        l.push(entry(big, Point::ForwardLogits, Point::ForwardEnd));
        l.push(entry(2 * big, Point::BackwardLogits, Point::BackwardEnd));
        // Two small ones never alive together: the larger is what the heap keeps.
        l.push(entry(1000, Point::ForwardLogits, Point::ForwardLogits));
        l.push(entry(3000, Point::DenseUpdate, Point::DenseUpdate));
        assert_eq!(resident_bytes(&l), 3 * big + 3000);
        assert_eq!(l.peak(Placement::Device).bytes, 2 * big);
        // The same large size twice at once, then once: two blocks.
        l.push(entry(big, Point::ForwardEnd, Point::ForwardEnd));
        assert_eq!(resident_bytes(&l), 4 * big + 3000);
    }
}
