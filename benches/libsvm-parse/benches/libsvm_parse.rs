//! Criterion bench of the libsvm reader: parse throughput in MB/s of file bytes, into the same
//! in-memory CSR rows training uses. The file is `$WIDEBAG_BENCH_LIBSVM`, or a synthetic one
//! (200,000 rows, width 240,000, ~20 ids per row) written to the target directory on first use.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use widebag_data::libsvm::{read_libsvm, write_libsvm};
use widebag_data::synthetic::to_dataset;
use widebag_data::{ReadOptions, SyntheticSpec, SyntheticStream};

fn bench_file() -> PathBuf {
    if let Some(p) = std::env::var_os("WIDEBAG_BENCH_LIBSVM") {
        return PathBuf::from(p);
    }
    let path = std::env::temp_dir().join("widebag-bench-200k.svm");
    if !path.exists() {
        let stream = SyntheticStream::new(SyntheticSpec {
            n_classes: 4096,
            ..SyntheticSpec::default()
        })
        .expect("valid spec");
        write_libsvm(&to_dataset(&stream, 200_000), &path, true).expect("writes the bench file");
    }
    path
}

fn parse(c: &mut Criterion) {
    let path = bench_file();
    let bytes = std::fs::metadata(&path).expect("bench file").len();
    let mut group = c.benchmark_group("libsvm_parse");
    group.throughput(Throughput::Bytes(bytes));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("read_libsvm", |b| {
        b.iter(|| {
            let d = read_libsvm(&path, &ReadOptions::default()).expect("parses");
            std::hint::black_box(d.rows.nnz())
        })
    });
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
