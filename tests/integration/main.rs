//! The integration tests, one binary: each module was once its own test binary, and each of those
//! linked burn. The allocator memory test stays apart (`tests/wgpu_table_memory.rs`) so that the
//! device's counters see only its allocations.

mod common;

mod access;
mod accuracy_grids;
mod architecture;
mod bad_inputs;
mod checkpointing;
mod cli;
mod data_files;
mod device;
mod device_profile;
mod docs;
mod faults;
mod frontier;
mod headlines;
mod headtail;
mod host_side;
mod kept_logits;
mod kernels;
mod layers;
mod ledger;
mod modcycles;
mod mpi;
mod numerics;
mod out_of_memory;
mod output_precision;
mod plan;
mod precision;
mod ranks;
mod ranks_plan;
mod ranks_runs;
mod results;
mod results_eval;
mod sampled;
mod save_init;
mod sweep;
mod tidy;
mod tied;
mod user_vector;
