//! A tied table's row gradients joined to the output weight's gradient (`model.tie_output`):
//! the batch's rows are columns of the weight, so their gradients add into its columns and the
//! row updates have nothing left to do.

use rayon::prelude::*;

use crate::ModelError;
use crate::cpu::access::{HostMatrix, update_in_place};
use crate::model::WideModel;
use crate::model::params::OutputParams;
use crate::step::Grads;

impl WideModel {
    /// Moves the rows' gradients into the output weight's gradient: row `id`'s gradient is
    /// added to column `id`, so the weight's gradient is the whole parameter's and no row is
    /// left for the row updates.
    pub fn tie_gradients(&self, grads: &mut Grads) -> Result<(), ModelError> {
        let dim = self.spec.dim;
        let OutputParams::Full { chunks } = &mut grads.dense.output else {
            return Err(ModelError::Shape(
                "a tied output layer is a full softmax".into(),
            ));
        };
        for (s, g) in std::mem::take(&mut grads.rows) {
            let ids = grads.ids.of(&s).as_slice();
            let g = HostMatrix::take(g)?;
            let g = g.as_slice();
            for (chunk, layer) in self.chunks.iter().zip(chunks.iter_mut()) {
                let first = ids.partition_point(|&id| (id as usize) < chunk.offset);
                let end = ids.partition_point(|&id| (id as usize) < chunk.offset + chunk.n);
                if first == end {
                    continue;
                }
                update_in_place(&mut layer.weight, |w| {
                    w.par_chunks_mut(chunk.n).enumerate().for_each(|(h, col)| {
                        for (r, &id) in ids.iter().enumerate().take(end).skip(first) {
                            col[id as usize - chunk.offset] += g[r * dim + h];
                        }
                    });
                })?;
            }
        }
        Ok(())
    }
}
