//! scipy `.npz` archives from arbitrary bytes: the zip layer, the npy headers and the CSR arrays.
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_data::{Format, Source, load};

fuzz_target!(|data: &[u8]| {
    let _ = load(&Source::new(widebag_fuzz::file("f.npz", data), Format::Npz));
});
