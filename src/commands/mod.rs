//! The commands, one module each: a command takes its validated request, runs it and prints its
//! own output. (`eval`, `export` and `predict` are to come, each as a module here.)

pub mod bench;
pub mod data;
pub mod explain;
pub mod plan;
pub mod sweep;
pub mod train;
