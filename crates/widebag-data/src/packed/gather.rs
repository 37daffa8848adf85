//! Rows read in place from a packed dataset's map, in any order: what a batch of a run that
//! trains on a packed file is assembled from. Nothing beyond the rows asked for is copied; each
//! block holding one of them is checked at its first read, and a row is found in its block by
//! its stored end, in one read.

use std::ops::Range;

use crate::dataset::RowStore;
use crate::error::DataError;
use crate::packed::read::{PackedFile, Part, row_range, words};

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
        let blocks = self.blocks(part);
        let mut store = RowStore::new();
        for &r in rows {
            let (block, local) = (r / per, r % per);
            if blocks.get(block).is_none_or(|b| local >= b.rows as usize) {
                let n_rows: usize = blocks.iter().map(|b| b.rows as usize).sum();
                return Err(DataError::InvalidSpec {
                    key: "data.path",
                    message: format!(
                        "{}: row {r} asked for; the file holds {n_rows}",
                        self.path().display()
                    ),
                });
            }
            let v = self.block(part, block)?;
            let ids = row_range(v.row_end, local);
            store.ids.extend(words(&v.ids[4 * ids.start..4 * ids.end]));
            floats(v.values, ids, &mut store.values);
            store.row_ptr.push(store.ids.len());
            let targets = row_range(v.target_end, local);
            store
                .targets
                .extend(words(&v.targets[4 * targets.start..4 * targets.end]));
            floats(v.weights, targets, &mut store.target_weights);
            store.target_ptr.push(store.targets.len());
        }
        Ok(store)
    }
}
