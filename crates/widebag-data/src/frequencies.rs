//! How often each id and each class occurs, weighted: each id's summed `|value|` and each
//! class's summed `|weight|`, summed in row order so that a packed dataset's stored figures and
//! those counted from the rows in memory are the same numbers. Head/tail bands renumber by them.

use crate::dataset::RowStore;

/// Each id's summed `|value|` (`width` of them) and each class's summed `|weight|`
/// (`n_classes`), over every row of `rows`, in row order.
pub fn of_store(rows: &RowStore, width: usize, n_classes: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut ids, mut classes) = (vec![0.0; width], vec![0.0; n_classes]);
    add(&mut ids, &rows.ids, &rows.values);
    add(&mut classes, &rows.targets, &rows.target_weights);
    (ids, classes)
}

/// Adds `|weights[i]|` to `into[keys[i]]` in order (keys past the end are left out: readers
/// and the packed reader's block check refuse them before this runs).
pub fn add(into: &mut [f64], keys: &[u32], weights: &[f32]) {
    for (&k, &w) in keys.iter().zip(weights) {
        if let Some(f) = into.get_mut(k as usize) {
            *f += w.abs() as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_weights_are_summed_by_magnitude() {
        let mut rows = RowStore::new();
        rows.push(&[0, 2], &[1.0, -2.0], &[1], &[1.0]);
        rows.push(&[2], &[0.5], &[0, 1], &[0.25, 3.0]);
        let (ids, classes) = of_store(&rows, 3, 2);
        assert_eq!(ids, vec![1.0, 0.0, 2.5]);
        assert_eq!(classes, vec![0.25, 4.0]);
    }
}
