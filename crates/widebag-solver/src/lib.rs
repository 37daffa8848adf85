//! The budget solver: which batch size and which optimizers fit a memory budget, answered from
//! the ledger alone (no trial runs), with the runner-ups and, when nothing fits, the smallest
//! changes that would. It chooses the layout too: the configured one, or with the layout
//! remedies ([`Remedy`]: class chunks, MLP checkpointing, the host tier, half tables, half
//! moments, head/tail input, the adaptive softmax) in their documented order when they reach a
//! better plan.
//!
//! A candidate is a batch size and a (table, dense) optimizer pair; its cost is the ledger's
//! predicted device peak for the step ([`widebag_ledger::step::ledger`]) with batch statistics
//! read from the data itself ([`RowSample`]). A candidate fits when no tensor exceeds the
//! device's largest buffer and `peak + slack ≤ budget` ([`slack_bytes`]: the ledger's measured
//! error plus the allocator's few unmodelled KiB). No burn.
//!
//! One file per role, as TorchRec's planner: `problem` (what is asked), `enumerate` (the
//! optimizer pairs), `estimate` (the only caller of the ledger), `search` (bisecting the batch,
//! choosing per objective), `remedy` (the layout remedies and the ladder of layouts compared),
//! `reference` (what each remedy cost on the reference datasets, printed beside it), `suggest`
//! (changes when nothing fits), `logits` (the full softmax's logits kept, made again or tiled,
//! chosen by time), `report` (the output types), and `solve`, which runs them in order.

mod enumerate;
mod estimate;
mod logits;
mod problem;
mod reference;
mod remedy;
mod report;
pub mod sample;
mod search;
mod solve;
mod suggest;
pub mod throughput;

pub use enumerate::capability;
pub use problem::{Pins, Problem, SolverError, default_budget_bytes, reserve_bytes, slack_bytes};
pub use remedy::{Change, LayoutOption, Remedy, RemedyTaken};
pub use report::{Candidate, LogitsChoice, LogitsOption, Plan, RankPlan, Suggestion};
pub use sample::RowSample;
pub use solve::solve;
pub use throughput::{Calibration, StepWork};
