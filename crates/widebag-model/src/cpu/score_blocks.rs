//! The full softmax's class scores for evaluation on flex, one class block at a time: each block's
//! `[rows, block]` scores made into a scratch buffer each thread reuses (bias added as it is
//! read back) and handed to a visitor while it is in cache, the blocks in parallel. Nothing is
//! allocated per batch but the threads' scratch, and no `[rows, classes]` chunk is held.

use rayon::prelude::*;

use super::blocks::{BlockZ, ChunkRef, block_cols, blocks};

/// A class block's scores: `n_rows` rows of `n` classes starting at class `class_start`
/// (absolute), row-major and contiguous.
pub struct ScoreBlock<'a> {
    /// The block's position in the pass (a visitor may start each block at a different row).
    pub index: usize,
    pub class_start: usize,
    pub n: usize,
    pub scores: &'a [f32],
}

impl ScoreBlock<'_> {
    /// Row `r`'s scores.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.scores[r * self.n..(r + 1) * self.n]
    }
}

/// Visits the scores `h · W + b` of every class of `layer` (chunks starting at
/// `chunk_offsets`) for the `[n_rows, hidden]` rows of `h`, block by block, the blocks in
/// parallel (each thread's scratch `[n_rows, block_cols(n_rows)]`, as the training step's).
pub fn visit_score_blocks(
    h: &[f32],
    hidden: usize,
    layer: &[ChunkRef],
    chunk_offsets: &[usize],
    visit: &(dyn Fn(ScoreBlock<'_>) + Sync),
) {
    let n_rows = h.len() / hidden.max(1);
    if n_rows == 0 {
        return;
    }
    let blocks = blocks(layer, block_cols(n_rows));
    blocks
        .par_iter()
        .enumerate()
        .for_each_init(Vec::new, |scratch, (index, &b)| {
            let c = layer[b.chunk];
            let z = BlockZ::at(b, n_rows, scratch, None, c.n());
            z.fill(h, hidden, c, b);
            visit(ScoreBlock {
                index,
                class_start: chunk_offsets[b.chunk] + b.start,
                n: b.n,
                scores: &scratch[..n_rows * b.n],
            });
        });
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Every class's score is visited once, equal to the definition.
    #[test]
    fn blocks_cover_every_class_once_with_the_definitions_scores() {
        let (rows, hidden) = (3, 5);
        let sizes = [700usize, 9];
        let h: Vec<f32> = (0..rows * hidden)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let ws: Vec<Vec<f32>> = sizes
            .iter()
            .map(|&n| (0..hidden * n).map(|i| (i as f32 * 0.11).cos()).collect())
            .collect();
        let bs: Vec<Vec<f32>> = sizes
            .iter()
            .map(|&n| (0..n).map(|j| j as f32 * 0.01).collect())
            .collect();
        let layer: Vec<ChunkRef> = ws.iter().zip(&bs).map(|(w, b)| ChunkRef { w, b }).collect();
        let total: usize = sizes.iter().sum();
        let seen = Mutex::new(vec![vec![None; total]; rows]);
        visit_score_blocks(&h, hidden, &layer, &[0, sizes[0]], &|blk| {
            let mut seen = seen.lock().unwrap();
            for (r, row) in seen.iter_mut().enumerate() {
                for (j, &s) in blk.row(r).iter().enumerate() {
                    assert!(
                        row[blk.class_start + j].replace(s).is_none(),
                        "visited twice"
                    );
                }
            }
        });
        let seen = seen.into_inner().unwrap();
        for (r, row) in seen.iter().enumerate() {
            for (class, s) in row.iter().enumerate() {
                let (k, j) = match class < sizes[0] {
                    true => (0, class),
                    false => (1, class - sizes[0]),
                };
                let want: f32 = bs[k][j]
                    + (0..hidden)
                        .map(|i| h[r * hidden + i] * ws[k][i * sizes[k] + j])
                        .sum::<f32>();
                let got = s.expect("every class visited");
                assert!(
                    (got - want).abs() < 1e-5,
                    "row {r} class {class}: {got} vs {want}"
                );
            }
        }
    }
}
