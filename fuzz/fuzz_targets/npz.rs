//! scipy `.npz` archives from arbitrary bytes: the zip layer, the npy headers and the CSR arrays,
//! read whole and streamed by `data pack` (each member element by element from the map).
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_data::packed::PackOptions;
use widebag_data::{Format, ReadOptions, Source, load};

fuzz_target!(|data: &[u8]| {
    let path = widebag_fuzz::file("f.npz", data);
    let _ = load(&Source::new(&path, Format::Npz));
    let out = widebag_fuzz::scratch().join("f.wbp");
    let options = PackOptions::default();
    let _ = widebag_data::npz::pack_npz(&path, &ReadOptions::default(), "npz", &out, options);
});
