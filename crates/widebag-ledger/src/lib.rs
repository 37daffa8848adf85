//! The memory ledger: every tensor a training step holds, with its shape, bytes, category,
//! placement, pool and lifetime across the step's sample points, and the peak per placement with
//! the point and phase where it happens. It is plain data (serde), shared by the CLI, the solver
//! and the plots.
//!
//! A step is observed at fixed [`Point`]s (the trainer reads the allocator at the same points), so
//! a prediction and a measurement are compared point by point. Device bytes are counted as the
//! allocator counts them: each allocation rounded up to the device's alignment
//! ([`Ledger::alignment_bytes`]); the rounding is reported as [`Category::AllocatorPadding`].
//!
//! This crate has no burn dependency. [`step::ledger`] builds the ledger of a configured run in
//! the sparse or the dense layout.

pub mod alloc;
pub mod heap;
pub mod host_side;
pub mod reserved;
pub mod shapes;
pub mod step;

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

    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::TableUpdate => "table_update",
            Phase::DenseUpdate => "dense_update",
        }
    }
}

/// The moments of a step at which memory is predicted and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// Before the step: parameters and optimizer state.
    Setup,
    /// Forward, inside the output layer with the last class chunk's logits alive.
    ForwardLogits,
    /// Forward done, the loss read; what autodiff saved is alive.
    ForwardEnd,
    /// Backward, inside the output layer with the (last chunk's) logit gradient alive.
    BackwardLogits,
    /// Dense layout only: inside autodiff's backward as the first layer's weight gradient is
    /// formed, every other gradient and the saved dense input alive.
    BackwardInput,
    /// Backward done: every gradient alive.
    BackwardEnd,
    /// Inside the table update of the largest run of rows, its temporaries alive.
    TableUpdate,
    /// The table updated, the dense gradients not yet applied.
    DenseUpdate,
    /// After the step.
    StepEnd,
}

impl Point {
    pub const ALL: [Point; 9] = [
        Point::Setup,
        Point::ForwardLogits,
        Point::ForwardEnd,
        Point::BackwardLogits,
        Point::BackwardInput,
        Point::BackwardEnd,
        Point::TableUpdate,
        Point::DenseUpdate,
        Point::StepEnd,
    ];

    pub fn phase(self) -> Phase {
        match self {
            Point::Setup | Point::ForwardLogits | Point::ForwardEnd => Phase::Forward,
            Point::BackwardLogits | Point::BackwardInput | Point::BackwardEnd => Phase::Backward,
            Point::TableUpdate => Phase::TableUpdate,
            Point::DenseUpdate | Point::StepEnd => Phase::DenseUpdate,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Point::Setup => "setup",
            Point::ForwardLogits => "forward.logits",
            Point::ForwardEnd => "forward.end",
            Point::BackwardLogits => "backward.logits",
            Point::BackwardInput => "backward.input",
            Point::BackwardEnd => "backward.end",
            Point::TableUpdate => "table_update",
            Point::DenseUpdate => "dense_update",
            Point::StepEnd => "step.end",
        }
    }
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
    /// Buffers of the exchanges between ranks (multi-process runs only).
    Communication,
    /// Bytes the allocator adds to round each allocation up to the device's alignment.
    AllocatorPadding,
    /// The data's rows, order and maps resident in host memory (the host side only).
    Data,
    /// The process's own memory before its data: start-up and the backend's context (the host
    /// side only).
    Process,
}

impl Category {
    pub const ALL: [Category; 12] = [
        Category::Parameters,
        Category::DenseGradients,
        Category::RowGradients,
        Category::OptimizerState,
        Category::Activations,
        Category::BatchBuffers,
        Category::Logits,
        Category::Temporaries,
        Category::Communication,
        Category::AllocatorPadding,
        Category::Data,
        Category::Process,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::DenseGradients => "dense_gradients",
            Category::RowGradients => "row_gradients",
            Category::OptimizerState => "optimizer_state",
            Category::Activations => "activations",
            Category::BatchBuffers => "batch_buffers",
            Category::Logits => "logits",
            Category::Temporaries => "temporaries",
            Category::Communication => "communication",
            Category::AllocatorPadding => "allocator_padding",
            Category::Data => "data",
            Category::Process => "process",
        }
    }
}

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    Device,
    Host,
}

/// Which of cubecl's pools serves a device tensor: the persistent pool (exact-size slices, for
/// tables and optimizer state) or the dynamic pools (slices carved from shared pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    Persistent,
    Dynamic,
}

/// The points during which a tensor is alive: `Persistent` for the whole run, or a span of
/// points (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifetime {
    Persistent,
    Span { from: Point, to: Point },
}

impl Lifetime {
    pub fn span(from: Point, to: Point) -> Self {
        Lifetime::Span { from, to }
    }

    pub fn at(point: Point) -> Self {
        Lifetime::Span {
            from: point,
            to: point,
        }
    }

    pub fn alive_at(self, point: Point) -> bool {
        match self {
            Lifetime::Persistent => true,
            Lifetime::Span { from, to } => from <= point && point <= to,
        }
    }
}

/// One tensor (or a group of identical tensors, `count` of them) of the step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    /// The layer it belongs to (`"table"`, `"hidden.0"`, `"output"`, `"batch"`, …).
    pub layer: String,
    pub shape: Vec<u64>,
    pub element_bytes: u64,
    /// Identical allocations this entry stands for (shards, chunks, pieces).
    pub count: u64,
    pub category: Category,
    pub placement: Placement,
    pub pool: Pool,
    pub lifetime: Lifetime,
}

impl Entry {
    /// Bytes of one allocation, unpadded.
    pub fn bytes_each(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.element_bytes
    }

    /// Bytes of all `count` allocations, unpadded.
    pub fn bytes(&self) -> u64 {
        self.bytes_each() * self.count
    }

    /// Padding the allocator adds to the `count` allocations (none on the host).
    pub fn padding_bytes(&self, alignment_bytes: u64) -> u64 {
        match self.placement {
            Placement::Host => 0,
            Placement::Device => {
                alloc::padding_bytes(self.bytes_each(), alignment_bytes) * self.count
            }
        }
    }
}

/// The peak of one placement: bytes and the point (and its phase) where they are reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    pub bytes: u64,
    pub point: Point,
    pub phase: Phase,
}

/// Every tensor of a step, and the points the layout is observed at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// The points this layout's step passes through, in order.
    pub points: Vec<Point>,
    /// Points the trainer cannot read the allocator at (inside autodiff's backward): predicted
    /// only, and left out of the comparison with a measurement.
    #[serde(default)]
    pub unsampled: Vec<Point>,
    /// Every device allocation is rounded up to a multiple of this.
    pub alignment_bytes: u64,
    pub entries: Vec<Entry>,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            points: Point::ALL.to_vec(),
            unsampled: Vec::new(),
            alignment_bytes: 1,
            entries: Vec::new(),
        }
    }
}

impl Ledger {
    pub fn push(&mut self, entry: Entry) {
        if entry.count > 0 && entry.bytes_each() > 0 {
            self.entries.push(entry);
        }
    }

    fn live(&self, placement: Placement, point: Point) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(move |e| e.placement == placement && e.lifetime.alive_at(point))
    }

    /// Bytes alive on `placement` at `point`, with the allocator's padding.
    pub fn live_bytes(&self, placement: Placement, point: Point) -> u64 {
        self.live(placement, point)
            .map(|e| e.bytes() + e.padding_bytes(self.alignment_bytes))
            .sum()
    }

    /// The largest live total on `placement` among the layout's points (the earliest on ties).
    pub fn peak(&self, placement: Placement) -> Peak {
        self.peak_among(placement, &self.points)
    }

    /// The largest live total among the points the trainer reads: what a measurement is
    /// compared with.
    pub fn sampled_peak(&self, placement: Placement) -> Peak {
        let sampled: Vec<Point> = self
            .points
            .iter()
            .copied()
            .filter(|p| !self.unsampled.contains(p))
            .collect();
        self.peak_among(placement, &sampled)
    }

    fn peak_among(&self, placement: Placement, points: &[Point]) -> Peak {
        let first = points.first().copied().unwrap_or(Point::Setup);
        points
            .iter()
            .map(|&point| Peak {
                bytes: self.live_bytes(placement, point),
                point,
                phase: point.phase(),
            })
            .fold(
                Peak {
                    bytes: 0,
                    point: first,
                    phase: first.phase(),
                },
                |best, p| if p.bytes > best.bytes { p } else { best },
            )
    }

    /// The peak of each phase on `placement` (the largest of its points).
    pub fn phase_peaks(&self, placement: Placement) -> BTreeMap<Phase, u64> {
        let mut out = BTreeMap::new();
        for &point in &self.points {
            let p = out.entry(point.phase()).or_insert(0);
            *p = (*p).max(self.live_bytes(placement, point));
        }
        out
    }

    /// Bytes per category on `placement` alive at `point`, padding as its own category.
    pub fn categories_at(&self, placement: Placement, point: Point) -> BTreeMap<Category, u64> {
        let mut out = BTreeMap::new();
        for e in self.live(placement, point) {
            *out.entry(e.category).or_insert(0) += e.bytes();
            let pad = e.padding_bytes(self.alignment_bytes);
            if pad > 0 {
                *out.entry(Category::AllocatorPadding).or_insert(0) += pad;
            }
        }
        out
    }

    /// Bytes per pool on the device at `point`, with padding.
    pub fn pools_at(&self, point: Point) -> BTreeMap<Pool, u64> {
        let mut out = BTreeMap::new();
        for e in self.live(Placement::Device, point) {
            *out.entry(e.pool).or_insert(0) += e.bytes() + e.padding_bytes(self.alignment_bytes);
        }
        out
    }

    /// The largest single device allocation and its entry's name.
    pub fn largest_allocation(&self) -> Option<(&str, u64)> {
        self.entries
            .iter()
            .filter(|e| e.placement == Placement::Device)
            .map(|e| (e.name.as_str(), e.bytes_each()))
            .max_by_key(|&(_, b)| b)
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
            count: 1,
            category,
            placement: Placement::Device,
            pool: Pool::Dynamic,
            lifetime,
        }
    }

    #[test]
    fn peak_follows_lifetimes_and_padding() {
        let mut l = Ledger {
            alignment_bytes: 32,
            ..Ledger::default()
        };
        l.push(entry("w", 100, Category::Parameters, Lifetime::Persistent));
        l.push(entry(
            "act",
            50,
            Category::Activations,
            Lifetime::span(Point::ForwardEnd, Point::BackwardLogits),
        ));
        l.push(entry(
            "grad",
            100,
            Category::DenseGradients,
            Lifetime::span(Point::BackwardEnd, Point::DenseUpdate),
        ));
        // 400 B rounds to 416, 200 B to 224.
        assert_eq!(l.live_bytes(Placement::Device, Point::ForwardEnd), 640);
        assert_eq!(
            l.peak(Placement::Device),
            Peak {
                bytes: 832,
                point: Point::BackwardEnd,
                phase: Phase::Backward,
            }
        );
        assert_eq!(l.peak(Placement::Host).bytes, 0);
        let c = l.categories_at(Placement::Device, Point::DenseUpdate);
        assert_eq!(c[&Category::DenseGradients], 400);
        assert_eq!(c[&Category::AllocatorPadding], 32);
        assert!(!c.contains_key(&Category::Activations));
        assert_eq!(l.phase_peaks(Placement::Device)[&Phase::Forward], 640);
        assert_eq!(l.largest_allocation().map(|(_, b)| b), Some(400));
    }
}
