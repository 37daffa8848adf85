//! Criterion bench: synthetic batch generation and parallel CSR assembly at 240k width.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use widebag_data::{SyntheticSpec, SyntheticStream};

fn assembly(c: &mut Criterion) {
    let stream = SyntheticStream::new(SyntheticSpec::default()).expect("valid spec");
    let mut group = c.benchmark_group("synthetic_csr_batch");
    for batch_size in [128usize, 1024, 4096] {
        group.throughput(Throughput::Elements(batch_size as u64));
        group.bench_function(format!("rows_{batch_size}"), |b| {
            let mut first = 0u64;
            b.iter(|| {
                let batch = stream.batch_at(first, batch_size).expect("valid batch");
                first += batch_size as u64;
                batch.unique_ids().len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, assembly);
criterion_main!(benches);
