//! The memory ledger: every tensor a training step holds, with its shape, bytes, category,
//! placement and lifetime across the step's phases, and the peak per placement with the phase
//! where it happens. It is plain data (serde), shared by the CLI, the solver and the plots.
//!
//! This crate has no burn dependency. [`dense::dense_ledger`] builds the ledger of the naive
//! dense formulation (what a PyTorch user writes: dense input batch, dense weights, full logits).

pub mod dense;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The phases of one training step, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    Backward,
    TableUpdate,
    DenseUpdate,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::Forward,
        Phase::Backward,
        Phase::TableUpdate,
        Phase::DenseUpdate,
    ];
}

/// What a tensor is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameters,
    DenseGradients,
    RowGradients,
    OptimizerState,
    Activations,
    BatchBuffers,
    Logits,
    Temporaries,
    AllocatorOverhead,
}

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    Device,
    Host,
}

/// The phases during which a tensor is alive: `Persistent` for the whole run, or a span of
/// phases (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifetime {
    Persistent,
    Span { from: Phase, to: Phase },
}

impl Lifetime {
    pub fn during(phase: Phase) -> Self {
        Lifetime::Span {
            from: phase,
            to: phase,
        }
    }

    pub fn alive_in(self, phase: Phase) -> bool {
        match self {
            Lifetime::Persistent => true,
            Lifetime::Span { from, to } => from <= phase && phase <= to,
        }
    }
}

/// One tensor of the step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    /// The layer it belongs to (`"input"`, `"hidden.0"`, `"output"`, `"batch"`, …).
    pub layer: String,
    pub shape: Vec<u64>,
    pub element_bytes: u64,
    pub category: Category,
    pub placement: Placement,
    pub lifetime: Lifetime,
}

impl Entry {
    pub fn bytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.element_bytes
    }
}

/// The peak of one placement: bytes and the phase where they are reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    pub bytes: u64,
    pub phase: Phase,
}

/// Every tensor of a step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub entries: Vec<Entry>,
}

impl Ledger {
    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// Bytes alive on `placement` during `phase`.
    pub fn live_bytes(&self, placement: Placement, phase: Phase) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.placement == placement && e.lifetime.alive_in(phase))
            .map(Entry::bytes)
            .sum()
    }

    /// The largest live total on `placement` and its phase (the earliest on ties).
    pub fn peak(&self, placement: Placement) -> Peak {
        Phase::ALL
            .iter()
            .map(|&phase| Peak {
                bytes: self.live_bytes(placement, phase),
                phase,
            })
            .fold(
                Peak {
                    bytes: 0,
                    phase: Phase::Forward,
                },
                |best, p| if p.bytes > best.bytes { p } else { best },
            )
    }

    /// Bytes per category on `placement` alive at `phase`.
    pub fn categories_at(&self, placement: Placement, phase: Phase) -> BTreeMap<Category, u64> {
        let mut out = BTreeMap::new();
        for e in self
            .entries
            .iter()
            .filter(|e| e.placement == placement && e.lifetime.alive_in(phase))
        {
            *out.entry(e.category).or_insert(0) += e.bytes();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, n: u64, category: Category, lifetime: Lifetime) -> Entry {
        Entry {
            name: name.into(),
            layer: "l".into(),
            shape: vec![n],
            element_bytes: 4,
            category,
            placement: Placement::Device,
            lifetime,
        }
    }

    #[test]
    fn peak_follows_lifetimes() {
        let mut l = Ledger::default();
        l.push(entry("w", 100, Category::Parameters, Lifetime::Persistent));
        l.push(entry(
            "act",
            50,
            Category::Activations,
            Lifetime::Span {
                from: Phase::Forward,
                to: Phase::Backward,
            },
        ));
        l.push(entry(
            "grad",
            100,
            Category::DenseGradients,
            Lifetime::Span {
                from: Phase::Backward,
                to: Phase::DenseUpdate,
            },
        ));
        assert_eq!(l.live_bytes(Placement::Device, Phase::Forward), 600);
        assert_eq!(
            l.peak(Placement::Device),
            Peak {
                bytes: 1000,
                phase: Phase::Backward
            }
        );
        assert_eq!(l.peak(Placement::Host).bytes, 0);
        let c = l.categories_at(Placement::Device, Phase::DenseUpdate);
        assert_eq!(c[&Category::DenseGradients], 400);
        assert!(!c.contains_key(&Category::Activations));
    }
}
