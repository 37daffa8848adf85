//! Packed datasets from arbitrary bytes: the prelude, the metadata and every block, read as
//! `data.path` reads them (recognised by the magic bytes, whatever the format says).
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_data::{Format, Source, load};

fuzz_target!(|data: &[u8]| {
    let _ = load(&Source::new(
        widebag_fuzz::file("f.wbp", data),
        Format::Libsvm,
    ));
});
