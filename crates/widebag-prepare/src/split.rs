//! Held-out rows: a seeded split of a loaded data file into training and evaluation rows.

use widebag_data::{Dataset, RowStore};

/// Splits off `n_eval` rows chosen by a seeded hash: `(train, held_out)`.
pub(crate) fn split_rows(data: &Dataset, n_eval: usize, seed: u64) -> (Dataset, Dataset) {
    let n = data.n_rows();
    let mut keys: Vec<(u64, usize)> = (0..n)
        .map(|r| (widebag_data::rng::hash2(seed ^ 0x0e7a_15e7, r as u64), r))
        .collect();
    if n_eval < n {
        keys.select_nth_unstable(n_eval);
    }
    let mut held = vec![false; n];
    for &(_, r) in &keys[..n_eval.min(n)] {
        held[r] = true;
    }
    let (mut train, mut eval) = (RowStore::new(), RowStore::new());
    for (r, &h) in held.iter().enumerate() {
        let (ids, values) = data.rows.row(r);
        let (t, w) = data.rows.row_targets(r);
        if h { &mut eval } else { &mut train }.push(ids, values, t, w);
    }
    let with = |rows| Dataset {
        rows,
        ..Dataset {
            source: data.source.clone(),
            width: data.width,
            n_classes: data.n_classes,
            rows: RowStore::new(),
            skipped_lines: data.skipped_lines,
            notes: data.notes.clone(),
        }
    };
    (with(train), with(eval))
}
