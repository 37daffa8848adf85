//! Rows read in place from a packed dataset's map, in any order: what a batch of a run that
//! trains on a packed file is assembled from. Nothing beyond the rows asked for is copied; each
//! block holding one of them is checked at its first read.

use std::ops::Range;

use crate::DataError;
use crate::dataset::RowStore;
use crate::packed::read::{PackedFile, Part, word, words};

/// Where one asked-for row lies: its block, and its ids' and targets' word ranges there.
#[derive(Clone, Default)]
struct Span {
    block: usize,
    ids: Range<usize>,
    targets: Range<usize>,
}

/// `words[range]` as f32s, or ones when the section is left out (every value 1).
fn floats(section: Option<&[u8]>, range: Range<usize>, out: &mut Vec<f32>) {
    match section {
        Some(b) => out.extend(words(&b[4 * range.start..4 * range.end]).map(f32::from_bits)),
        None => out.resize(out.len() + range.len(), 1.0),
    }
}

impl PackedFile {
    /// Rows `rows` of `part` (0-based, any order, repeats allowed), in that order.
    pub fn gather(&self, part: Part, rows: &[usize]) -> Result<RowStore, DataError> {
        let per = self.meta.block_rows as usize;
        let n_rows: usize = self.blocks(part).iter().map(|b| b.rows as usize).sum();
        let mut by_row: Vec<(usize, usize)> =
            rows.iter().enumerate().map(|(k, &r)| (r, k)).collect();
        by_row.sort_unstable();
        if let Some(&(r, _)) = by_row.last().filter(|(r, _)| *r >= n_rows) {
            return Err(DataError::InvalidSpec {
                key: "data.path",
                message: format!(
                    "{}: row {r} asked for; the file holds {n_rows}",
                    self.path().display()
                ),
            });
        }
        let mut spans = vec![Span::default(); rows.len()];
        let mut i = 0;
        while i < by_row.len() {
            let block = by_row[i].0 / per;
            let v = self.block(part, block)?;
            let (mut local, mut id_at, mut t_at) = (0, 0, 0);
            while i < by_row.len() && by_row[i].0 / per == block {
                let (r, k) = by_row[i];
                for j in local..r - block * per {
                    id_at += word(v.row_len, j) as usize;
                    t_at += word(v.target_len, j) as usize;
                }
                local = r - block * per;
                let (n, t) = (
                    word(v.row_len, local) as usize,
                    word(v.target_len, local) as usize,
                );
                spans[k] = Span {
                    block,
                    ids: id_at..id_at + n,
                    targets: t_at..t_at + t,
                };
                i += 1;
            }
        }
        let mut store = RowStore::new();
        for s in spans {
            let v = self.block(part, s.block)?;
            store
                .ids
                .extend(words(&v.ids[4 * s.ids.start..4 * s.ids.end]));
            floats(v.values, s.ids, &mut store.values);
            store.row_ptr.push(store.ids.len());
            let t = &v.targets[4 * s.targets.start..4 * s.targets.end];
            store.targets.extend(words(t));
            floats(v.weights, s.targets, &mut store.target_weights);
            store.target_ptr.push(store.targets.len());
        }
        Ok(store)
    }
}
