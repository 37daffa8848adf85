//! Held-out rows: a seeded choice of a data file's rows kept for evaluation, named by their
//! place in the file (the rows themselves are not copied).

/// The `n_eval` rows of `n` whose seeded hashes are smallest, sorted: found with a heap of
/// `n_eval` entries, so choosing them costs memory in proportion to `n_eval`, not to `n` (a
/// packed dataset of a billion rows holds out its rows without a billion keys).
pub(crate) fn held_rows(n: usize, n_eval: usize, seed: u64) -> Vec<usize> {
    let key = |r: usize| (widebag_data::rng::hash2(seed ^ 0x0e7a_15e7, r as u64), r);
    let mut heap = std::collections::BinaryHeap::with_capacity(n_eval.min(n) + 1);
    for r in 0..n {
        let k = key(r);
        if heap.len() < n_eval {
            heap.push(k);
        } else if heap.peek().is_some_and(|top| k < *top) {
            heap.pop();
            heap.push(k);
        }
    }
    let mut held: Vec<usize> = heap.into_iter().map(|(_, r)| r).collect();
    held.sort_unstable();
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_choice_of_distinct_rows() {
        let a = held_rows(100, 10, 7);
        assert_eq!(a.len(), 10);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a, held_rows(100, 10, 7));
        assert_ne!(a, held_rows(100, 10, 8));
        assert_eq!(held_rows(5, 9, 1), vec![0, 1, 2, 3, 4]);
        // The rows with the smallest hashes, as sorting every key finds them.
        let mut keys: Vec<(u64, usize)> = (0..1000)
            .map(|r| (widebag_data::rng::hash2(3 ^ 0x0e7a_15e7, r as u64), r))
            .collect();
        keys.sort_unstable();
        let mut want: Vec<usize> = keys[..37].iter().map(|k| k.1).collect();
        want.sort_unstable();
        assert_eq!(held_rows(1000, 37, 3), want);
    }
}
