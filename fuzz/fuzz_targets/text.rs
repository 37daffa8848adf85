//! Text corpora: bag-of-words or CBOW rows, plain or `word/TAG` tokens (chosen by the first
//! byte), a training file and a held-out file read with its vocabulary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use widebag_data::{Format, Source, TextMode, TokenFormat, load, load_held_out};

fuzz_target!(|data: &[u8]| {
    let (mode, body) = data.split_first().map_or((0, data), |(m, b)| (*m, b));
    let p = widebag_fuzz::parts(body, 2);
    let (train, test) = (
        widebag_fuzz::file("train.txt", p[0]),
        widebag_fuzz::file("test.txt", p[1]),
    );
    let mut s = Source::new(&train, Format::Text);
    s.text.mode = if mode & 1 == 0 {
        TextMode::Bow
    } else {
        TextMode::Cbow
    };
    s.text.tokens = if mode & 2 == 0 {
        TokenFormat::Plain
    } else {
        TokenFormat::Tagged
    };
    s.text.window = 1 + (mode as usize >> 2) % 4;
    s.text.min_count = 1 + (mode as u64 >> 4) % 3;
    s.read.skip_bad_lines = mode & 64 != 0;
    if let Ok(loaded) = load(&s) {
        let _ = load_held_out(&s, &test, &loaded);
    }
});
