//! The process's own anonymous memory, the baseline of the ledger's host side: read when the
//! process starts (its runtime and allocator), once the data is ready (what reading it freed is
//! given back to the kernel first; what the allocator could not give back, pages shared with the
//! rows it keeps, is measured), and across each opening of a device (the backend's context: a
//! driver, its threads and their scratch). All are measured on the machine that runs, never
//! assumed.

use std::sync::atomic::{AtomicU64, Ordering};

use widebag_model::probe::anon_rss_bytes;

static AT_START: AtomicU64 = AtomicU64::new(0);
static BACKEND: AtomicU64 = AtomicU64::new(0);
/// Anonymous memory once the data was ready (0: not read).
static DATA_READY: AtomicU64 = AtomicU64::new(0);

/// Reads the process's anonymous memory at start-up (first in `main`).
pub fn record_start() {
    AT_START.store(anon_rss_bytes().unwrap_or(0), Ordering::Relaxed);
}

/// The data is prepared: gives back what reading it freed and reads the process's memory.
pub fn data_ready() {
    crate::heap::give_back_freed();
    DATA_READY.store(anon_rss_bytes().unwrap_or(0), Ordering::Relaxed);
}

/// What reading the data left resident beyond `itemized_bytes` (the data's parts the ledger
/// prices): freed memory the allocator could not give back. 0 when the data was not read here.
pub fn reading_retained_bytes(itemized_bytes: u64) -> u64 {
    let ready = DATA_READY.load(Ordering::Relaxed);
    match ready {
        0 => 0,
        _ => ready.saturating_sub(AT_START.load(Ordering::Relaxed) + itemized_bytes),
    }
}

/// Runs `open` (a device's opening) and keeps the anonymous memory it added (the largest over
/// the devices opened).
pub fn opening<T>(open: impl FnOnce() -> T) -> T {
    let before = anon_rss_bytes();
    let opened = open();
    if let (Some(b), Some(a)) = (before, anon_rss_bytes()) {
        BACKEND.fetch_max(a.saturating_sub(b), Ordering::Relaxed);
    }
    opened
}

/// The host side's baseline: the process at start-up and the backend's context.
pub fn baseline_bytes() -> u64 {
    AT_START.load(Ordering::Relaxed) + BACKEND.load(Ordering::Relaxed)
}
