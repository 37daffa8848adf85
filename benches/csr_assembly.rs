//! Bench (plain harness, `cargo bench --bench csr_assembly`): synthetic batch generation and
//! parallel CSR assembly at 240k width, in rows per second. Criterion is left out on purpose: its
//! dependencies change the feature set burn is built with, which would make `cargo test` and
//! `cargo run` build burn twice.

use std::time::Instant;

use widebag_data::{SyntheticSpec, SyntheticStream};

fn main() {
    let stream = SyntheticStream::new(SyntheticSpec::default()).expect("valid spec");
    for batch_size in [128usize, 1024, 4096] {
        let reps = (200_000 / batch_size).max(5);
        let _ = stream.batch_at(0, batch_size).expect("valid batch"); // warm-up
        let start = Instant::now();
        let mut unique = 0usize;
        for r in 0..reps {
            let batch = stream
                .batch_at((r * batch_size) as u64, batch_size)
                .expect("valid batch");
            unique += batch.unique_ids().len();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "synthetic_csr_batch/rows_{batch_size}: {:.0} rows/s ({:.1} unique ids per batch, {reps} batches)",
            (reps * batch_size) as f64 / secs,
            unique as f64 / reps as f64
        );
    }
}
