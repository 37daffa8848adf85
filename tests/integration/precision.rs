//! Half-precision tables and optimizer state end to end: the ledger prices every tensor at its
//! element size (and the allocator agrees on lavapipe, f16 on the device and bf16 on the host
//! tier); stochastic rounding keeps, in expectation, updates under half a unit in the last place
//! that rounding to the nearest loses — on every storage of a table (host tier, resident rows,
//! device tensors on flex and on wgpu), and in training, where f16/bf16 tables move as the f32
//! table does and train to its loss; and a precision the adapter lacks is refused before the
//! run, naming the key and the adapter.

use crate::common;

use common::{Facility, batch, flex, has_wgpu, json, require, wgpu_or_skip, wide, widebag};
use widebag_config::{BandPlacement, Config, Precision, Rounding};
use widebag_model::Compute;
use widebag_model::device::ComputePath;
use widebag_model::table::{RowFormat, ShardedTable};
use widebag_model::tensors::floats;

const SMALL: [&str; 6] = [
    "--set",
    "data.width=3000",
    "--set",
    "data.n_classes=3000",
    "--set",
    "train.batch_size=64",
];

fn run(command: &[&str], sets: &[&str]) -> serde_json::Value {
    let mut args = command.to_vec();
    args.extend(["--json"]);
    args.extend(SMALL);
    for s in sets {
        args.extend(["--set", s]);
    }
    json(&widebag(&args))
}

#[test]
fn the_ledger_prices_half_tables_and_moments_at_two_bytes() {
    let explain = ["explain", "--device", "cpu"];
    let f32 = run(&explain, &[]);
    let half = run(
        &explain,
        &[
            "model.input_bands.dtype=[\"f16\"]",
            "optim.state_dtype=\"bf16\"",
        ],
    );
    let cat = |v: &serde_json::Value, c: &str| v["categories"][c].as_u64().unwrap();
    // The 3000 × 32 table at 2 bytes instead of 4; lazy Adam's two moments likewise.
    let table_f32 = 3000 * 32 * 4;
    assert_eq!(
        cat(&f32, "parameters") - cat(&half, "parameters"),
        table_f32 / 2
    );
    assert_eq!(
        cat(&f32, "optimizer_state") - cat(&half, "optimizer_state"),
        table_f32
    );
}

/// Rows of a 1024 × 4 table start in `[1, 1.5)`, where a unit in the last place is 2⁻¹⁰ in f16
/// and 2⁻⁷ in bf16; each of `STEPS` updates adds 1e-4 to 4e-4 to every element, under half of
/// either unit (f16's is 4.9e-4), so rounding to the nearest loses every one of them.
const ROWS: usize = 1024;
const DIM: usize = 4;
const STEPS: u64 = 200;

fn init(r: usize, out: &mut [f32]) {
    for (j, o) in out.iter_mut().enumerate() {
        *o = 1.0 + ((r * DIM + j) % 97) as f32 / 200.0;
    }
}

fn tiny(i: usize) -> f32 {
    1e-4 * (1.0 + (i % 13) as f32 / 4.0)
}

/// The mean change of a table's values after [`STEPS`] updates of [`tiny`] to every row, on
/// `compute` in `placement` along `path`, stored as `format` (an 8-shard table: 2 KiB shards).
fn mean_change(
    compute: &Compute,
    placement: BandPlacement,
    path: ComputePath,
    format: RowFormat,
) -> f64 {
    let device = &compute.device;
    let mut table = ShardedTable::placed(ROWS, DIM, 2048, device, placement, path, format, init);
    let before = table.to_vec().unwrap();
    let ids: Vec<u32> = (0..ROWS as u32).collect();
    let ids = widebag_model::SortedIds::new(&ids).unwrap();
    let delta: Vec<f32> = (0..ROWS * DIM).map(tiny).collect();
    for step in 1..=STEPS {
        table.set_update_step(step);
        table
            .scatter_add(ids, floats(delta.clone(), [ROWS, DIM], device))
            .unwrap();
    }
    let after = table.to_vec().unwrap();
    assert_eq!(after.len(), before.len());
    after
        .iter()
        .zip(&before)
        .map(|(a, b)| (a - b) as f64)
        .sum::<f64>()
        / before.len() as f64
}

/// On `compute`, every `(placement, path)` storage of `halves`: the mean change of a table of
/// stochastically rounded rows is the f32 table's within 4% (its standard error is about 0.6% in
/// bf16, 0.2% in f16: 4% is over six of them, and rounding to the nearest, which keeps nothing,
/// misses it by 100%); the same table rounding to the nearest does not move (the control: these
/// updates are ones the nearest loses).
fn tiny_updates_are_kept(
    what: &str,
    compute: &Compute,
    storages: &[(BandPlacement, ComputePath)],
    halves: &[Precision],
) {
    let f32 = mean_change(
        &flex(),
        BandPlacement::Device,
        ComputePath::Host,
        RowFormat::F32,
    );
    let expected = (0..ROWS * DIM).map(|i| tiny(i) as f64).sum::<f64>() / (ROWS * DIM) as f64;
    assert!(
        (f32 - STEPS as f64 * expected).abs() <= 1e-3 * f32,
        "the f32 reference {f32}"
    );
    for &(placement, path) in storages {
        for &precision in halves {
            let format = |rounding| RowFormat {
                precision,
                rounding,
                seed: 5,
            };
            let stochastic = mean_change(compute, placement, path, format(Rounding::Stochastic));
            assert!(
                (stochastic - f32).abs() <= 0.04 * f32,
                "{what} {placement:?} {path:?} {precision:?}: stochastic rounding moved the \
                 rows by {stochastic} on average, f32 by {f32}"
            );
            let nearest = mean_change(compute, placement, path, format(Rounding::Nearest));
            assert_eq!(
                nearest, 0.0,
                "{what} {placement:?} {path:?} {precision:?}: the nearest keeps nothing"
            );
        }
    }
}

const EVERY_STORAGE: [(BandPlacement, ComputePath); 3] = [
    (BandPlacement::Host, ComputePath::Tensor),
    (BandPlacement::Device, ComputePath::Host),
    (BandPlacement::Device, ComputePath::Tensor),
];

#[test]
fn tiny_updates_to_half_rows_are_kept_in_expectation_on_every_storage_on_flex() {
    // flex stores both formats: the host tier, resident rows (host kernels) and the device
    // tensors with the device's rounding (`device_round`).
    let both = [Precision::F16, Precision::Bf16];
    tiny_updates_are_kept("flex", &flex(), &EVERY_STORAGE, &both);
}

#[test]
fn tiny_updates_to_half_rows_are_kept_in_expectation_on_wgpu() {
    let test = "tiny_updates_to_half_rows_are_kept_in_expectation_on_wgpu";
    let Some(gpu) = wgpu_or_skip(test) else {
        return;
    };
    // The host tier on any adapter; the device's own rounding for the formats it stores. A
    // format it does not store (lavapipe's bf16) is refused for a band on it, naming the key.
    let host_tier = [(BandPlacement::Host, ComputePath::Tensor)];
    tiny_updates_are_kept("wgpu", &gpu, &host_tier, &[Precision::F16, Precision::Bf16]);
    let on_device = [(BandPlacement::Device, ComputePath::Tensor)];
    tiny_updates_are_kept("wgpu", &gpu, &on_device, &[Precision::F16]);
    let bf16 = widebag_model::device::stores_bf16(&gpu);
    if !bf16 {
        let mut config = Config::default();
        config.model.input_bands.dtype = vec![Precision::Bf16];
        let e = widebag_model::device::check_precisions(&config, &gpu, 1).unwrap_err();
        assert!(
            e.to_string().contains("model.input_bands.dtype")
                && e.to_string().contains("does not support it"),
            "{e}"
        );
    }
    let why = format!(
        "{} does not store bf16 (its refusal was checked)",
        gpu.adapter
    );
    if require(test, Facility::Bf16, bf16, why) {
        tiny_updates_are_kept("wgpu", &gpu, &on_device, &[Precision::Bf16]);
    }
}

/// The input table's values after `steps` training steps of `config` on flex, and before.
fn table_moves(config: &Config, steps: u64) -> (Vec<f32>, Vec<f32>) {
    let mut model = wide(config, &flex());
    let before = model.bands()[0].table.to_vec().unwrap();
    let mut probe = widebag_model::StepProbe::new(model.device());
    for step in 0..steps {
        let b = batch(config, step * config.train.batch_size as u64);
        model.train_step(&b, &mut probe).unwrap();
    }
    model.flush_deferred().unwrap();
    (before, model.bands()[0].table.to_vec().unwrap())
}

#[test]
fn half_tables_with_stochastic_rounding_train_as_the_f32_table_on_cpu() {
    // At a table learning rate of 1e-5 lazy Adam's steps (about the rate) are under half a unit
    // in the last place of nearly every weight (the U(±0.31) init: f16's half unit at 0.15 is
    // 6e-5, bf16's 5e-4). How far each table moves is measured against the f32 table's
    // displacement D: the part of the half table's displacement along D, (D_h · D) / (D · D), is
    // 1 in expectation with stochastic rounding (within 10%: the rounding noise is about 1% of
    // it over these 96,000 weights, and the trajectories differ a little), near 0 when rounding
    // to the nearest, which loses the updates (asserted below 0.5: the control).
    let mut config = Config::default();
    config.data.width = 3000;
    config.data.n_classes = Some(3000);
    config.train.batch_size = 64;
    config.optim.table_lr = Some(1e-5);
    let steps = 100;
    let (start, f32_end) = table_moves(&config, steps);
    let d: Vec<f64> = f32_end
        .iter()
        .zip(&start)
        .map(|(a, b)| (a - b) as f64)
        .collect();
    let dd: f64 = d.iter().map(|x| x * x).sum();
    assert!(dd > 0.0, "the f32 table moved");
    for precision in [Precision::F16, Precision::Bf16] {
        for rounding in [Rounding::Stochastic, Rounding::Nearest] {
            let mut c = config.clone();
            c.model.input_bands.dtype = vec![precision];
            c.optim.rounding = rounding;
            let (start, end) = table_moves(&c, steps);
            assert_eq!((start.len(), end.len()), (d.len(), d.len()));
            let along = end
                .iter()
                .zip(&start)
                .zip(&d)
                .map(|((a, b), d)| (a - b) as f64 * d)
                .sum::<f64>()
                / dd;
            let what =
                format!("{precision:?} {rounding:?}: moved {along:.3} of the f32 table's way");
            match rounding {
                Rounding::Stochastic => assert!((along - 1.0).abs() <= 0.1, "{what}"),
                Rounding::Nearest => assert!(along < 0.5, "{what} (the control)"),
            }
            eprintln!("{what}");
        }
    }
    // And at the default learning rate (1e-3, 150 steps) they train to the f32 loss.
    let train = ["train", "--device", "cpu"];
    let steps = "train.steps=150";
    let loss = |sets: &[&str]| {
        let mut all = vec![steps];
        all.extend(sets);
        run(&train, &all)["final_loss"].as_f64().unwrap()
    };
    let f32 = loss(&[]);
    for (sets, bar) in [
        (&["model.input_bands.dtype=[\"f16\"]"][..], 0.01),
        (
            &[
                "model.input_bands.dtype=[\"bf16\"]",
                "optim.state_dtype=\"bf16\"",
            ][..],
            0.01,
        ),
    ] {
        let got = loss(sets);
        assert!(
            (got - f32).abs() <= bar * f32.abs(),
            "{sets:?}: {got} against f32 {f32}"
        );
    }
}

#[test]
fn a_dtype_the_adapter_lacks_is_refused_and_the_host_tier_takes_any() {
    if !has_wgpu("dtype_refused") {
        return;
    }
    let mut args = vec!["train", "--device", "wgpu"];
    args.extend(SMALL);
    args.extend(["--set", "model.input_bands.dtype=[\"bf16\"]"]);
    let o = widebag(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    // lavapipe has f16, not bf16; a GPU with bf16 trains (exit 0).
    if o.status.code() == Some(2) {
        assert!(
            err.contains("model.input_bands.dtype: bf16 for input band 0")
                && err.contains("does not support it"),
            "{err}"
        );
    } else {
        assert!(o.status.success(), "{err}");
    }
    // The host tier stores bf16 whatever the adapter; the ledger holds against the allocator
    // with f16 on the device, bf16 on the host and f16 moments.
    let v = run(
        &["explain", "--device", "wgpu", "--measure", "--steps", "2"],
        &[
            "model.input_bands.cutoffs=[500]",
            "model.input_bands.dtype=[\"f16\", \"bf16\"]",
            "model.input_bands.placement=[\"device\", \"host\"]",
            "optim.state_dtype=\"f16\"",
        ],
    );
    let predicted = v["predicted_sampled_peak_bytes"].as_u64().unwrap() as f64;
    let measured = v["measured_peak_bytes"].as_u64().unwrap() as f64;
    assert!(
        (predicted - measured).abs() <= 0.01 * measured,
        "predicted {predicted}, measured {measured}"
    );
}
