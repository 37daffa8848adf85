//! Frequency order: a bijection that renumbers ids (and classes) by how often they occur, so the
//! head band of a head/tail layout holds the most frequent ones whatever the data's own numbering.

use widebag_csr::{RowTarget, SparseRow};

use crate::dataset::{Dataset, RowStore};

/// New id of every old id, most frequent first (ties keep the data's order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renumbering {
    new_of_old: Vec<u32>,
}

impl Renumbering {
    /// Ranks `counts` (one per id) from the largest down.
    pub fn by_frequency(counts: &[f64]) -> Self {
        let mut old: Vec<u32> = (0..counts.len() as u32).collect();
        old.sort_by(|&a, &b| {
            counts[b as usize]
                .total_cmp(&counts[a as usize])
                .then(a.cmp(&b))
        });
        let mut new_of_old = vec![0u32; counts.len()];
        for (new, &o) in old.iter().enumerate() {
            new_of_old[o as usize] = new as u32;
        }
        Self { new_of_old }
    }

    /// Whether it leaves every id where it is.
    pub fn is_identity(&self) -> bool {
        self.new_of_old
            .iter()
            .enumerate()
            .all(|(i, &n)| i as u32 == n)
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        self.new_of_old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.new_of_old.is_empty()
    }

    /// The new id of `old` (ids past the end are left alone; batch assembly rejects them).
    pub fn map(&self, old: u32) -> u32 {
        self.new_of_old.get(old as usize).copied().unwrap_or(old)
    }

    /// Moves per-id figures to the new numbering.
    pub fn permute(&self, per_old: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; per_old.len()];
        for (o, &v) in per_old.iter().enumerate() {
            out[self.map(o as u32) as usize] = v;
        }
        out
    }
}

/// The renumberings of the input ids and of the target classes (either may be absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Relabel {
    pub ids: Option<Renumbering>,
    pub classes: Option<Renumbering>,
}

impl Relabel {
    /// Bytes its maps hold on the heap.
    pub fn heap_bytes(&self) -> u64 {
        [&self.ids, &self.classes]
            .into_iter()
            .flatten()
            .map(|r| r.new_of_old.capacity() as u64 * 4)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_none() && self.classes.is_none()
    }

    /// One generated row, renumbered.
    pub fn row(&self, mut row: SparseRow, target: RowTarget) -> (SparseRow, RowTarget) {
        if let Some(r) = &self.ids {
            row.ids.iter_mut().for_each(|id| *id = r.map(*id));
        }
        let target = match (&self.classes, target) {
            (Some(r), RowTarget::Class(c)) => RowTarget::Class(r.map(c)),
            (Some(r), RowTarget::Bag(mut b)) => {
                b.ids.iter_mut().for_each(|c| *c = r.map(*c));
                RowTarget::Bag(b)
            }
            (None, t) => t,
        };
        (row, target)
    }

    /// Renumbers a loaded dataset in place (rows are re-sorted when batches are assembled).
    pub fn dataset(&self, data: &mut Dataset) {
        self.store(&mut data.rows);
    }

    /// Renumbers rows in place.
    pub fn store(&self, rows: &mut RowStore) {
        if let Some(r) = &self.ids {
            rows.ids.iter_mut().for_each(|id| *id = r.map(*id));
        }
        if let Some(r) = &self.classes {
            rows.targets.iter_mut().for_each(|c| *c = r.map(*c));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_frequent_first_ties_in_data_order_and_a_bijection() {
        let r = Renumbering::by_frequency(&[1.0, 5.0, 0.0, 5.0, 2.0]);
        let new: Vec<u32> = (0..5).map(|o| r.map(o)).collect();
        assert_eq!(new, vec![3, 0, 4, 1, 2]);
        let mut seen = new.clone();
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        assert_eq!(
            r.permute(&[1.0, 5.0, 0.0, 5.0, 2.0]),
            vec![5.0, 5.0, 2.0, 1.0, 0.0]
        );
        assert!(!r.is_identity());
        assert!(Renumbering::by_frequency(&[3.0, 2.0, 2.0, 0.0]).is_identity());
    }

    #[test]
    fn rows_and_bag_targets_are_renumbered() {
        let relabel = Relabel {
            ids: Some(Renumbering::by_frequency(&[0.0, 1.0, 2.0])),
            classes: Some(Renumbering::by_frequency(&[0.0, 1.0])),
        };
        let (row, t) = relabel.row(
            SparseRow::bag(vec![0, 2]),
            RowTarget::Bag(SparseRow::bag(vec![0, 1])),
        );
        assert_eq!(row.ids, vec![2, 0]);
        assert_eq!(t, RowTarget::Bag(SparseRow::bag(vec![1, 0])));
    }
}
