//! criterion benches of the burn-side hot paths at width 240,000, dim 64, batch 256 of the
//! synthetic Zipf data: the embedding bag (forward; forward and backward to the unique rows'
//! gradients), the row update of each table optimizer, and the host tier's gather (assemble the
//! batch's rows on the host, upload) and scatter (download the deltas, add them in place).
//! `WIDEBAG_BENCH_DEVICE=wgpu` runs them on the wgpu adapter (default: flex, the CPU backend).
//! Every iteration ends with `Device::sync`, so queued work is timed.
//!   cd benches/burn-paths && cargo bench

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use widebag_config::bands::ModelBands;
use widebag_config::{BandPlacement, Config, DeviceChoice, OptimConfig, TableOptim};
use widebag_data::SyntheticStream;
use widebag_model::table::ShardedTable;
use widebag_model::table::optim::TableState;
use widebag_model::tensors::floats;
use widebag_model::{Compute, SortedIds, SparseModel, StepProbe, open_device};
use widebag_prepare::synthetic_spec;

const WIDTH: usize = 240_000;
const DIM: usize = 64;
const BATCH_ROWS: usize = 256;

fn compute() -> Compute {
    match std::env::var("WIDEBAG_BENCH_DEVICE").as_deref() {
        Ok("wgpu") => open_device(DeviceChoice::Wgpu).expect("a wgpu adapter"),
        _ => Compute::flex(),
    }
}

fn backend_name(compute: &Compute) -> &'static str {
    match compute.backend {
        widebag_model::BackendKind::Wgpu => "wgpu",
        widebag_model::BackendKind::Flex => "flex",
    }
}

fn config() -> Config {
    let mut c = Config::default();
    c.data.width = WIDTH;
    c.data.n_classes = Some(1_000);
    c.model.dim = DIM;
    c.model.hidden = vec![DIM];
    c.train.batch_size = BATCH_ROWS;
    c
}

/// A pseudo-random `[rows, cols]` gradient.
fn noise(rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|k| ((k as f32) * 0.618).sin() * 1e-2)
        .collect()
}

fn embedding_bag(c: &mut Criterion) {
    let compute = compute();
    let config = config();
    let bands = ModelBands::resolve(&config).expect("explicit cutoffs");
    let model = SparseModel::new(&config, &bands, &compute).expect("a model");
    let batch = SyntheticStream::new(synthetic_spec(&config))
        .expect("valid spec")
        .batch_at(0, BATCH_ROWS)
        .expect("valid batch");
    let device = compute.device.clone();
    let mut g = c.benchmark_group(format!("embedding_bag/{}", backend_name(&compute)));
    g.throughput(Throughput::Elements(BATCH_ROWS as u64));
    g.bench_function("forward", |b| {
        b.iter(|| {
            let out = model.bag_forward(&batch).expect("forward");
            device.sync().expect("sync");
            out
        })
    });
    let upstream = noise(BATCH_ROWS, DIM);
    g.bench_function("forward_backward", |b| {
        b.iter(|| {
            let up = floats(upstream.clone(), [BATCH_ROWS, DIM], &device);
            let grads = model.bag_row_gradients(&batch, up).expect("backward");
            device.sync().expect("sync");
            grads
        })
    });
    g.finish();
}

/// The batch's sorted unique ids (what a row update and the host tier see).
fn unique_ids() -> Vec<u32> {
    let config = config();
    SyntheticStream::new(synthetic_spec(&config))
        .expect("valid spec")
        .batch_at(0, BATCH_ROWS)
        .expect("valid batch")
        .unique_ids()
        .to_vec()
}

fn table_update(c: &mut Criterion) {
    let compute = compute();
    let device = compute.device.clone();
    let uniq = unique_ids();
    let ids = SortedIds::new(&uniq).expect("sorted unique ids");
    let grad = noise(uniq.len(), DIM);
    let optim = OptimConfig::default();
    let mut g = c.benchmark_group(format!("table_update/{}", backend_name(&compute)));
    g.throughput(Throughput::Elements(uniq.len() as u64));
    for kind in [
        TableOptim::Sgd,
        TableOptim::Momentum,
        TableOptim::Adam,
        TableOptim::AdamW,
        TableOptim::RowwiseAdagrad,
    ] {
        let mut table = ShardedTable::zeros(WIDTH, DIM, compute.max_buffer_bytes, &device);
        let mut state = TableState::new(
            kind,
            &table,
            compute.max_buffer_bytes,
            widebag_config::Precision::F32,
        );
        let mut probe = StepProbe::new(&device);
        let mut step = 0u64;
        g.bench_function(BenchmarkId::from_parameter(kind.name()), |b| {
            b.iter(|| {
                step += 1;
                let gr = floats(grad.clone(), [uniq.len(), DIM], &device);
                state
                    .step(&mut table, ids, gr, &optim, step, &mut probe)
                    .expect("row update");
                device.sync().expect("sync");
            })
        });
    }
    g.finish();
}

fn host_tier(c: &mut Criterion) {
    let compute = compute();
    let device = compute.device.clone();
    let uniq = unique_ids();
    let ids = SortedIds::new(&uniq).expect("sorted unique ids");
    let delta = noise(uniq.len(), DIM);
    let mut g = c.benchmark_group(format!("host_tier/{}", backend_name(&compute)));
    g.throughput(Throughput::Elements(uniq.len() as u64));
    for placement in [BandPlacement::Device, BandPlacement::Host] {
        let mut table = ShardedTable::placed(
            WIDTH,
            DIM,
            compute.max_buffer_bytes,
            &device,
            placement,
            // The tensor path for the device table: what the host tier is compared with.
            widebag_model::device::ComputePath::Tensor,
            widebag_model::table::RowFormat::F32,
            |r, out| out.fill(r as f32 * 1e-6),
        );
        g.bench_function(format!("gather/{}", placement.name()), |b| {
            b.iter(|| {
                let rows = table.gather(ids).expect("gather");
                device.sync().expect("sync");
                rows
            })
        });
        g.bench_function(format!("scatter_add/{}", placement.name()), |b| {
            b.iter(|| {
                let d = floats(delta.clone(), [uniq.len(), DIM], &device);
                table.scatter_add(ids, d).expect("scatter");
                device.sync().expect("sync");
            })
        });
    }
    g.finish();
}

criterion_group!(benches, embedding_bag, table_update, host_tier);
criterion_main!(benches);
