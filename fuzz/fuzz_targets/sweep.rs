//! Sweep files: arbitrary text as a sweep (`[base]`, `[grid]`, `[[exclude]]`), every point built
//! and checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = widebag_fuzz::file("sweep.toml", data);
    let _ = widebag_config::sweep::load_sweep(&path, &[]);
});
