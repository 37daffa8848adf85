//! A 240,000 × 1024 f32 table (938 MiB, over lavapipe's 128 MiB buffer limit) trains on wgpu,
//! and the allocator's peak stays under 1.25 × the table: no dense gradient or table copy.
//! Alone in its test binary so no other test's allocations share the device's counters.

#[path = "integration/common/mod.rs"]
mod common;

use widebag_collective::local::Local;
use widebag_config::{Config, DenseOptim, TableOptim};
use widebag_model::{RunOptions, train};

#[test]
fn table_240k_by_1024_trains_with_row_sparse_sgd_under_1_25x_table_bytes() {
    let Some(compute) = common::wgpu_or_skip("table_240k_by_1024") else {
        return;
    };
    let mut config = Config::default();
    config.data.width = 240_000;
    config.data.n_classes = Some(16);
    config.model.dim = 1024;
    config.model.hidden = vec![64];
    config.train.batch_size = 128;
    config.train.steps = 3;
    config.optim.table = TableOptim::Sgd;
    config.optim.dense = DenseOptim::Sgd;
    config.optim.lr = 0.01;
    let summary = train(
        widebag_prepare::open_data(&config, &widebag_prepare::PrepareOptions::TRAIN).unwrap(),
        &compute,
        &Local,
        RunOptions::default(),
        |_| {},
    )
    .unwrap();
    let table = summary.table_bytes;
    assert_eq!(table, 240_000 * 1024 * 4);
    assert!(
        summary.table_shards as u64 >= table.div_ceil(compute.max_buffer_bytes),
        "{} shards for a {} byte limit",
        summary.table_shards,
        compute.max_buffer_bytes
    );
    let peak = summary
        .peak_in_use_bytes
        .expect("wgpu reports allocator counters");
    eprintln!(
        "table {table} B, peak in use {peak} B ({:.3}x), reserved {:?}, pool high water {:?}, phases {:?}",
        peak as f64 / table as f64,
        summary.peak_reserved_bytes,
        summary.pool_high_water_bytes,
        summary.phase_peak_in_use_bytes
    );
    assert!(peak >= table, "the table itself must be counted");
    assert!(
        (peak as f64) < 1.25 * table as f64,
        "peak in use {peak} B is not under 1.25 × table {table} B"
    );
    assert!(summary.final_loss.is_finite());
}
