//! cubecl's allocator as the ledger models it (cubecl-server 0.11 `memory_management`): alignment
//! padding per allocation, the persistent pool (exact-size slices) and the adaptive dynamic pools
//! (a small-allocation pool of 8 MiB pages for slices up to 64 KiB; an arena whose pages are sized
//! to the largest allocation served, plus 1 MiB of slack, rounded up to the MiB, at least 2 MiB).

/// Largest allocation the small pool serves.
pub const SMALL_SLICE_BYTES: u64 = 64 << 10;
/// Page size of the small pool.
pub const SMALL_PAGE_BYTES: u64 = 8 << 20;
/// Slack an arena page keeps past the allocation it was sized for.
pub const PAGE_SLACK_BYTES: u64 = 1 << 20;
/// Smallest arena page.
pub const MIN_PAGE_BYTES: u64 = 2 << 20;

/// Bytes the allocator adds to an allocation of `size_bytes` to reach the next multiple of
/// `alignment_bytes` (cubecl's `calculate_padding`).
pub fn padding_bytes(size_bytes: u64, alignment_bytes: u64) -> u64 {
    let a = alignment_bytes.max(1);
    match size_bytes % a {
        0 => 0,
        r => a - r,
    }
}

/// The arena's page size once it has served an allocation of `largest_bytes`.
pub fn arena_page_bytes(largest_bytes: u64, alignment_bytes: u64, max_page_bytes: u64) -> u64 {
    let a = alignment_bytes.max(1);
    (largest_bytes + PAGE_SLACK_BYTES)
        .next_multiple_of(1 << 20)
        .next_multiple_of(a)
        .clamp(MIN_PAGE_BYTES.min(max_page_bytes), max_page_bytes.max(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_and_pages() {
        assert_eq!(padding_bytes(100, 32), 28);
        assert_eq!(padding_bytes(128, 32), 0);
        assert_eq!(padding_bytes(0, 32), 0);
        // 100 MiB + 1 MiB slack.
        assert_eq!(arena_page_bytes(100 << 20, 256, 128 << 20), 101 << 20);
        assert_eq!(arena_page_bytes(10, 256, 128 << 20), 2 << 20);
        assert_eq!(arena_page_bytes(200 << 20, 256, 128 << 20), 128 << 20);
    }
}
