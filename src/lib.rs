//! The `widebag` commands as a library: each command's request (arguments plus configuration,
//! validated once), its run, and what it reports. The `widebag` binary (`main.rs`) parses the
//! arguments into these requests and maps a failure to its exit code; the Python package
//! (`crates/widebag-py`) builds the same requests from the same arguments and takes the reports
//! as values.

pub mod args;
pub mod chart;
pub mod commands;
pub mod data_args;
pub mod device_args;
pub mod failure;
pub mod heap;
pub mod host_memory;
pub mod malloc_policy;
pub mod measure;
pub mod output;
pub mod plan;
pub mod preflight;
pub mod process;
pub mod request;
pub mod run;
pub mod run_args;
pub mod run_dir;
