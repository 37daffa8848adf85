//! dictd databases: an `.index` and a `.dict` (or, by the first byte, a `.dict.dz` gzip member)
//! cut from the input at its first NUL, read whole and packed streamed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_data::{Format, Source, load};

fuzz_target!(|data: &[u8]| {
    let (mode, body) = data.split_first().map_or((0, data), |(m, b)| (*m, b));
    let p = widebag_fuzz::parts(body, 2);
    let dir = widebag_fuzz::scratch();
    for stale in ["d.dict", "d.dict.dz"] {
        let _ = std::fs::remove_file(dir.join(stale));
    }
    let index = widebag_fuzz::file("d.index", p[0]);
    widebag_fuzz::file(if mode & 1 == 0 { "d.dict" } else { "d.dict.dz" }, p[1]);
    let mut s = Source::new(&index, Format::Dictd);
    s.read.skip_bad_lines = mode & 2 != 0;
    let _ = load(&s);
    let out = widebag_fuzz::scratch().join("d.wbp");
    let options = widebag_data::packed::PackOptions::default();
    let _ = widebag_data::dictd::pack_dictd(&index, &s.read, &s.text, "d", &out, options);
});
