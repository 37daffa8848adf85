//! The bytes cubecl's allocator reserves at a ledger's peak: the pools of `alloc` filled with the
//! ledger's device entries.

use crate::alloc::{SMALL_PAGE_BYTES, SMALL_SLICE_BYTES, arena_page_bytes, padding_bytes};
use crate::{Entry, Ledger, Placement, Pool};

/// An estimate of the bytes the allocator reserves at the ledger's peak: the persistent pool
/// exactly, the small pool in whole pages, the arena's large allocations in whole pages of the
/// size its largest allocation sets. Pages are filled without fragmentation, so this is a lower
/// bound on what the driver is asked for; widebag's accuracy bar is on bytes in use, not on this.
pub fn reserved_estimate_bytes(ledger: &Ledger, max_page_bytes: u64) -> u64 {
    let a = ledger.alignment_bytes;
    let padded = |e: &Entry| e.bytes_each() + padding_bytes(e.bytes_each(), a);
    let device = || {
        ledger
            .entries
            .iter()
            .filter(|e| e.placement == Placement::Device)
    };
    let persistent: u64 = device()
        .filter(|e| e.pool == Pool::Persistent)
        .map(|e| padded(e) * e.count)
        .sum();
    let largest = device()
        .filter(|e| e.pool == Pool::Dynamic)
        .map(padded)
        .max()
        .unwrap_or(0);
    let page = arena_page_bytes(largest, a, max_page_bytes);
    let (mut small_peak, mut large_peak) = (0u64, 0u64);
    for &point in &ledger.points {
        let (mut small, mut large) = (0u64, 0u64);
        for e in device().filter(|e| e.pool == Pool::Dynamic && e.lifetime.alive_at(point)) {
            if padded(e) <= SMALL_SLICE_BYTES {
                small += padded(e) * e.count;
            } else {
                large += padded(e) * e.count;
            }
        }
        small_peak = small_peak.max(small);
        large_peak = large_peak.max(large);
    }
    persistent
        + small_peak.div_ceil(SMALL_PAGE_BYTES) * SMALL_PAGE_BYTES
        + large_peak.div_ceil(page) * page
}
