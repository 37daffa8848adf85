//! The budget solver: which batch size and which optimizers fit a memory budget, answered from
//! the ledger alone (no trial runs), with the runner-ups and, when nothing fits, the smallest
//! changes that would.
//!
//! A candidate is a batch size and a (table, dense) optimizer pair; its cost is the ledger's
//! predicted device peak for the step ([`widebag_ledger::step::ledger`]) with batch statistics
//! read from the data itself ([`RowSample`]). A candidate fits when no tensor exceeds the
//! device's largest buffer and `peak + slack ≤ budget` ([`slack_bytes`]: the ledger's measured
//! error plus the allocator's few unmodelled KiB). No burn.

pub mod sample;
mod solve;
pub mod throughput;

pub use sample::RowSample;
pub use solve::{
    Candidate, Pins, Plan, Problem, SolverError, Suggestion, capability, default_budget_bytes,
    reserve_bytes, slack_bytes, solve,
};
pub use throughput::{Calibration, StepWork};
