//! Half-precision tables and optimizer state end to end: the ledger prices every tensor at its
//! element size (and the allocator agrees on lavapipe, f16 on the device and bf16 on the host
//! tier), f16/bf16 tables with stochastic rounding train to the f32 loss on the CPU, and a
//! precision the adapter lacks is refused before the run, naming the key and the adapter.

use crate::common;

use common::{has_wgpu, json, widebag};

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

#[test]
fn half_tables_with_stochastic_rounding_train_to_the_f32_loss_on_cpu() {
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
