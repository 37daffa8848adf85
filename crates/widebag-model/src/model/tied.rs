//! The input table tied to the output layer (`model.tie_output`): one vector per id, read by
//! the bag as the table's row and by the full softmax as its weight's column. The table keeps
//! the rows the bag gathers and the output layer the same values transposed for the host
//! kernels' matmuls; a step adds the rows' gradients into the weight's gradient
//! (`crate::step::tied`), `optim.dense` updates the weight, and the table's rows are written
//! again from its columns, in place (here).

use rayon::prelude::*;

use crate::ModelError;
use crate::cpu::Kernels;
use crate::cpu::access::update_in_place;
use crate::model::WideModel;
use crate::model::params::OutputParams;
use crate::table::Storage;
use crate::table::host_store::HostRows;

/// Table rows written per task when the table is refreshed (a block of rows stays in cache
/// while every weight row is read once).
const ROWS_PER_TASK: usize = 64;

impl WideModel {
    /// Whether the output layer's weight is the input table (`model.tie_output`).
    pub fn tied(&self) -> bool {
        self.spec.tied
    }

    /// Checks that this model can tie (flex's host kernels, one process, one f32 table, the
    /// full softmax) and makes the table the output weight's transpose: a tied vector starts as
    /// the output layer's column (U(±1/√dim), PyTorch's `nn.Linear(dim, classes)`), the use
    /// that scales the logits.
    pub(crate) fn tie(&mut self) -> Result<(), ModelError> {
        let refuse = |message: &str| {
            Err(ModelError::Unsupported {
                key: "model.tie_output",
                message: message.into(),
            })
        };
        if self.spec.kernels != Kernels::Host {
            return refuse("runs on flex's host kernels only (train.device = \"cpu\")");
        }
        if self.ranks.size != 1 {
            return refuse("trains in one process only");
        }
        let table_is_f32 = matches!(
            self.bands.as_slice(),
            [b] if matches!(b.table.storage, Storage::Host(HostRows::F32(_)))
        );
        if !table_is_f32 || !matches!(self.dense.output, OutputParams::Full { .. }) {
            return refuse("needs one f32 table and the full softmax");
        }
        self.refresh_tied_table()
    }

    /// Writes the table's rows again from the output weight's columns (after the weight's
    /// update), in place.
    pub(crate) fn refresh_tied_table(&mut self) -> Result<(), ModelError> {
        let dim = self.spec.dim;
        let Storage::Host(HostRows::F32(table)) = &mut self.bands[0].table.storage else {
            return Err(ModelError::Shape(
                "a tied table is one f32 host table".into(),
            ));
        };
        let OutputParams::Full { chunks } = &mut self.dense.output else {
            return Err(ModelError::Shape(
                "a tied output layer is a full softmax".into(),
            ));
        };
        for (chunk, layer) in self.chunks.iter().zip(chunks) {
            let rows = &mut table[chunk.offset * dim..(chunk.offset + chunk.n) * dim];
            let n = chunk.n;
            update_in_place(&mut layer.weight.value, |w| {
                let w: &[f32] = w;
                rows.par_chunks_mut(ROWS_PER_TASK * dim)
                    .enumerate()
                    .for_each(|(task, out)| {
                        let first = task * ROWS_PER_TASK;
                        let count = out.len() / dim;
                        for h in 0..dim {
                            let src = &w[h * n + first..h * n + first + count];
                            for (r, &x) in src.iter().enumerate() {
                                out[r * dim + h] = x;
                            }
                        }
                    });
            })?;
        }
        Ok(())
    }
}
