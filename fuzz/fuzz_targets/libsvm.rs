//! libsvm/svmlight rows from arbitrary bytes: the base detected or forced by the first byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_data::{Format, Source, load};

fuzz_target!(|data: &[u8]| {
    let (mode, body) = data.split_first().map_or((0, data), |(m, b)| (*m, b));
    let mut s = Source::new(widebag_fuzz::file("f.svm", body), Format::Libsvm);
    s.read.zero_based = [None, Some(true), Some(false)][mode as usize % 3];
    s.read.skip_bad_lines = mode & 4 != 0;
    let _ = load(&s);
});
