//! Planning one prepared run for a budget, shared by `plan`, `train --budget`, `sweep` and
//! `frontier`: the planner (`planner`: the budget, the pins, the device's facts, the solver call),
//! the plan's report (`report`: what `plan --json` prints and its rendering for a terminal, with
//! the ranks' parts (`per_rank`), the host side (`host`) and what the device measured
//! (`measured`)), and `train --budget`'s plan applied to the run (`budget`).

pub mod budget;
pub mod host;
pub mod measured;
pub mod per_rank;
pub mod planner;
pub mod report;
