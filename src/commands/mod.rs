//! The commands, one module each: a command takes its validated request, runs it and prints its
//! own output.

pub mod bench;
pub mod data;
pub mod eval;
pub mod explain;
pub mod export;
pub mod frontier;
pub mod plan;
pub mod predict;
pub mod sweep;
pub mod train;
