//! LightGCN interaction lists: a training and a test file (the input cut at its first NUL),
//! loaded together and as a held-out file read against the training one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_data::{Format, Source, load, load_held_out};

fuzz_target!(|data: &[u8]| {
    let p = widebag_fuzz::parts(data, 2);
    let (train, test) = (
        widebag_fuzz::file("train.txt", p[0]),
        widebag_fuzz::file("test.txt", p[1]),
    );
    let mut s = Source::new(&train, Format::Lightgcn);
    s.test_path = Some(test.clone());
    let _ = load(&s);
    s.test_path = None;
    if let Ok(loaded) = load(&s) {
        let _ = load_held_out(&s, &test, &loaded);
    }
});
