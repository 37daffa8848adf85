//! Criterion benches of the burn-free hot paths: parallel CSR batch assembly at 240k width
//! (rows/s) and the budget solver planning the seed model (the solver's < 50 ms bar). The
//! burn-side paths (embedding bag, table optimizers) need the wgpu build and are timed by the
//! trainer's own examples/s (`widebag bench sparse-vs-dense`, `widebag sweep`).

use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use widebag_csr::CsrBatch;
use widebag_data::{BatchSource, SyntheticSpec, SyntheticStream};
use widebag_ledger::step::DeviceFacts;
use widebag_solver::{Calibration, Pins, Problem, RowSample, solve};

fn csr_assembly(c: &mut Criterion) {
    let spec = SyntheticSpec::default();
    let stream = SyntheticStream::new(spec.clone()).expect("valid spec");
    let mut group = c.benchmark_group("csr_assembly");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for batch in [128usize, 1024, 4096] {
        let (rows, targets): (Vec<_>, Vec<_>) = (0..batch as u64).map(|i| stream.row(i)).unzip();
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::new("from_rows", batch), &batch, |b, _| {
            b.iter(|| {
                let csr = CsrBatch::from_rows(&rows, &targets, spec.width, spec.n_classes)
                    .expect("valid rows");
                std::hint::black_box(csr.unique_ids().len())
            })
        });
    }
    group.finish();
}

fn plan_seed(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/seed-sparse.toml");
    let config = widebag_config::load(Some(&path), &[]).expect("the seed config");
    let stream = SyntheticStream::new(widebag_prepare::synthetic_spec(&config)).expect("spec");
    let source = BatchSource::Synthetic(stream);
    let rows =
        RowSample::collect(&source, config.data.width, config.plan.max_batch, 8).expect("sample");
    let calibration = Calibration::lavapipe_2core();
    let bands = widebag_config::bands::ModelBands::resolve(&config).expect("explicit cutoffs");
    let device = DeviceFacts {
        max_buffer_bytes: 128 << 20,
        alignment_bytes: 32,
        host_threads: 0,
        bf16: false,
        host_memory: false,
    };
    let mut group = c.benchmark_group("solver");
    group.sample_size(20);
    for budget_gib in [4u64, 8, 16] {
        group.bench_with_input(
            BenchmarkId::new("plan_seed_model_gib", budget_gib),
            &budget_gib,
            |b, &g| {
                b.iter(|| {
                    let plan = solve(&Problem {
                        config: &config,
                        bands: &bands,
                        device,
                        budget_bytes: g << 30,
                        sample: &rows,
                        pins: Pins::default(),
                        calibration: Some(&calibration),
                        ranks: 1,
                    })
                    .expect("plans");
                    std::hint::black_box(plan.chosen.batch_size)
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, csr_assembly, plan_seed);
criterion_main!(benches);
