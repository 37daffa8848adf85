//! Checkpoints: a `state.json` and a safetensors file (the input cut at its first NUL; the
//! safetensors part may hold NULs), parsed on their own and verified together as a checkpoint
//! directory, then every tensor the header admits read from the range it names.
#![no_main]

use std::io::{Read, Seek, SeekFrom};

use libfuzzer_sys::fuzz_target;
use widebag_checkpoint::{Header, Manifest};

fuzz_target!(|data: &[u8]| {
    let p = widebag_fuzz::parts(data, 2);
    let _ = Manifest::parse(&String::from_utf8_lossy(p[0]));
    let dir = widebag_fuzz::scratch().join("checkpoint");
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    std::fs::write(dir.join("state.json"), p[0]).expect("writing state.json");
    let weights = dir.join("weights.safetensors");
    std::fs::write(&weights, p[1]).expect("writing the weights");
    let _ = Manifest::read_verified(&dir);
    let mut file = std::fs::File::open(&weights).expect("reopening the weights");
    if let Ok(h) = Header::read(&mut file, p[1].len() as u64) {
        for e in h.entries.values() {
            let mut buf = vec![0u8; e.n_bytes() as usize];
            file.seek(SeekFrom::Start(h.data_start + e.data_offsets[0]))
                .expect("a seek inside the file");
            file.read_exact(&mut buf)
                .expect("the range lies inside the file");
        }
    }
});
