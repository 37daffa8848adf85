//! What a checkpoint holds of a model, by name ([`CheckpointEntry`]): a table band and its
//! optimizer state (shard by shard, [`table_entries`]), a dense parameter and its state under
//! PyTorch's optimizer-state names ([`dense_entries`]), lazy AdamW's last-step vector; and which
//! of a checkpoint's files each goes to ([`CheckpointFile`]). The models list theirs; the
//! checkpoint reads and writes them.

use burn::tensor::Tensor;

use crate::optim::dense::{DenseParam, DenseState};
use crate::table::ShardedTable;
use crate::table::optim::TableState;

/// Which file of a checkpoint a tensor goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointFile {
    /// `weights.safetensors`: the model.
    Weights,
    /// `optimizer.safetensors`: the optimizers' state.
    Optimizer,
}

/// A place a checkpoint reads from and writes to.
pub enum Slot<'a> {
    /// A table, saved as one tensor per shard (`NAME.shardS`).
    Table(&'a mut ShardedTable),
    /// A dense matrix.
    Dense(&'a mut Tensor<2>),
    /// One u64 per table row (lazy AdamW's last step).
    Steps(&'a mut Vec<u64>),
}

/// A named slot.
pub struct CheckpointEntry<'a> {
    pub name: String,
    pub file: CheckpointFile,
    pub slot: Slot<'a>,
}

fn named(name: String, file: CheckpointFile, slot: Slot<'_>) -> CheckpointEntry<'_> {
    CheckpointEntry { name, file, slot }
}

/// A table band's state entries.
fn table_state<'a>(prefix: &str, state: &'a mut TableState, out: &mut Vec<CheckpointEntry<'a>>) {
    let o = CheckpointFile::Optimizer;
    match state {
        TableState::Sgd => {}
        TableState::Momentum { buf } => {
            out.push(named(format!("{prefix}.momentum"), o, Slot::Table(buf)))
        }
        TableState::Adam { m, v } => {
            out.push(named(format!("{prefix}.exp_avg"), o, Slot::Table(m)));
            out.push(named(format!("{prefix}.exp_avg_sq"), o, Slot::Table(v)));
        }
        TableState::AdamW { m, v, last_step } => {
            out.push(named(format!("{prefix}.exp_avg"), o, Slot::Table(m)));
            out.push(named(format!("{prefix}.exp_avg_sq"), o, Slot::Table(v)));
            out.push(named(
                format!("{prefix}.last_step"),
                o,
                Slot::Steps(last_step),
            ));
        }
        TableState::RowwiseAdagrad { acc } => {
            out.push(named(format!("{prefix}.sum"), o, Slot::Table(acc)));
        }
    }
}

/// A dense parameter's value and state entries (PyTorch's optimizer state names).
pub fn dense_entries<'a>(p: &'a mut DenseParam, out: &mut Vec<CheckpointEntry<'a>>) {
    let name = p.name.clone();
    out.push(named(
        name.clone(),
        CheckpointFile::Weights,
        Slot::Dense(&mut p.value),
    ));
    let o = CheckpointFile::Optimizer;
    match &mut p.state {
        DenseState::Sgd => {}
        DenseState::Momentum(buf) => out.push(named(
            format!("{name}.momentum_buffer"),
            o,
            Slot::Dense(buf),
        )),
        DenseState::Adam { moments, .. } => {
            out.push(named(
                format!("{name}.exp_avg"),
                o,
                Slot::Dense(&mut moments.m),
            ));
            out.push(named(
                format!("{name}.exp_avg_sq"),
                o,
                Slot::Dense(&mut moments.v),
            ));
        }
    }
}

/// A table band's entries: `{prefix}.weight` and its optimizer state's.
pub fn table_entries<'a>(
    prefix: &str,
    table: &'a mut ShardedTable,
    state: &'a mut TableState,
    out: &mut Vec<CheckpointEntry<'a>>,
) {
    out.push(named(
        format!("{prefix}.weight"),
        CheckpointFile::Weights,
        Slot::Table(table),
    ));
    table_state(prefix, state, out);
}
