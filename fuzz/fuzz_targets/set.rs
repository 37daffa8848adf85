//! `--set key=value` arguments: each line of the input one override of the quickstart.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let sets: Vec<String> = text.lines().map(str::to_string).collect();
    let _ = widebag_config::load(None, &sets);
});
