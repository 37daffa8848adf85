//! What a checkpoint holds of a layout, by name: every table band and its optimizer state
//! (shard by shard), every dense parameter and its state, lazy AdamW's last-step vector.

use burn::tensor::Tensor;

use crate::layout::dense::DenseModel;
use crate::model::WideModel;
use crate::model::dense_optim::{DenseParam, DenseState};
use crate::table::ShardedTable;
use crate::table::optim::TableState;

/// Which file of a checkpoint a tensor goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
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
pub struct Named<'a> {
    pub name: String,
    pub part: Part,
    pub slot: Slot<'a>,
}

fn named(name: String, part: Part, slot: Slot<'_>) -> Named<'_> {
    Named { name, part, slot }
}

/// A table band's state slots.
fn table_state<'a>(prefix: &str, state: &'a mut TableState, out: &mut Vec<Named<'a>>) {
    let o = Part::Optimizer;
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

/// A dense parameter's value and state slots (PyTorch's optimizer state names).
fn dense<'a>(p: &'a mut DenseParam, out: &mut Vec<Named<'a>>) {
    let name = p.name.clone();
    out.push(named(
        name.clone(),
        Part::Weights,
        Slot::Dense(&mut p.value),
    ));
    let o = Part::Optimizer;
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

impl WideModel {
    /// Every slot of the sparse layout, in a fixed order.
    pub fn slots(&mut self) -> Vec<Named<'_>> {
        let mut out = Vec::new();
        for (k, band) in self.bands.iter_mut().enumerate() {
            let prefix = format!("input.{k}");
            out.push(named(
                format!("{prefix}.weight"),
                Part::Weights,
                Slot::Table(&mut band.table),
            ));
            table_state(&prefix, &mut band.state, &mut out);
        }
        for p in self.dense.iter_mut() {
            dense(p, &mut out);
        }
        out
    }
}

impl DenseModel {
    /// Every slot of the dense layout, in a fixed order.
    pub fn slots(&mut self) -> Vec<Named<'_>> {
        let mut out = Vec::new();
        dense(&mut self.input_weight, &mut out);
        for p in self.params.iter_mut() {
            dense(p, &mut out);
        }
        out
    }
}
