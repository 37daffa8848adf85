//! `model.output_precision`: the full softmax's three products (the logits, `dL/dh`, the weight
//! gradient) with f16 or bf16 operands summed in f32, on burn's tensors. Their values against
//! f32 are in `numerics` (the chunked softmax over 240,000 classes, the gap printed); here the
//! runs: training beside f32, the ledger at every point it reads on lavapipe, and every place
//! the key cannot run refused with exit 2 naming it.

use crate::common;

use common::{has_wgpu, json, widebag};
use widebag_model::open_device;

/// `train --json` on `device` for `steps` steps with `sets`.
fn train(device: &str, steps: &str, sets: &[&str]) -> serde_json::Value {
    let steps = format!("train.steps={steps}");
    let mut args = vec!["train", "--device", device, "--set", &steps, "--json"];
    for s in sets {
        args.extend(["--set", s]);
    }
    json(&widebag(&args))
}

/// The final loss (mean of the last 10 steps) of f32 and of `half` products on `device`, the
/// other keys `sets`: within `bound` of each other, relative.
fn trains_beside_f32(device: &str, half: &str, sets: &[&str], bound: f64) {
    let loss = |p: &str| {
        let key = format!("model.output_precision=\"{p}\"");
        let mut all = sets.to_vec();
        all.push(&key);
        let v = train(device, "40", &all);
        v["final_loss_mean10"].as_f64().unwrap()
    };
    let (f32_loss, half_loss) = (loss("f32"), loss(half));
    let gap = (half_loss - f32_loss).abs() / f32_loss;
    eprintln!("{device} {half}: final loss {half_loss:.5} against f32's {f32_loss:.5} ({gap:.2e})");
    assert!(
        gap < bound,
        "{device} {half}: {half_loss} against {f32_loss}"
    );
}

#[test]
fn f16_products_train_as_f32_and_the_ledger_holds_on_lavapipe() {
    if !has_wgpu("f16_products_on_lavapipe") {
        return;
    }
    for layout in ["sparse", "dense"] {
        let layout_key = format!("model.layout=\"{layout}\"");
        trains_beside_f32("wgpu", "f16", &[&layout_key], 5e-3);
        let v = json(&widebag(&[
            "explain",
            "--device",
            "wgpu",
            "--set",
            &layout_key,
            "--set",
            "model.output_precision=\"f16\"",
            "--measure",
            "--steps",
            "3",
            "--json",
            "--svg",
            "/dev/null",
        ]));
        let names: Vec<&str> = v["ledger"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.contains("in f16 (the products' operand)")),
            "{layout}: {names:?}"
        );
        let mut read = 0;
        for p in v["points"].as_array().unwrap() {
            if let Some(e) = p["error_pct"].as_f64() {
                read += 1;
                assert!(e.abs() < 0.5, "{layout} {}: {e} %", p["point"]);
            }
        }
        assert!(read >= 5, "{layout}: {read} points read");
    }
}

#[test]
fn bf16_and_f16_products_train_as_f32_on_flex_tensors() {
    let tensors = "train.cpu_kernels=\"tensor\"";
    trains_beside_f32("cpu", "bf16", &[tensors], 1e-2);
    trains_beside_f32("cpu", "f16", &[tensors], 5e-3);
}

#[test]
fn half_products_are_refused_where_they_cannot_run() {
    let refused = |device: &str, sets: &[&str], says: &str| {
        let mut args = vec!["train", "--device", device, "--set", "train.steps=1"];
        for s in sets {
            args.extend(["--set", s]);
        }
        let out = widebag(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sets:?}: {err}");
        assert!(
            err.contains("model.output_precision") && err.contains(says),
            "{sets:?}: {err}"
        );
    };
    let f16 = "model.output_precision=\"f16\"";
    // flex's host kernels compute the output layer in f32.
    refused("cpu", &[f16], "host kernels");
    // Output layers other than the full softmax with dot scores.
    refused(
        "cpu",
        &[
            f16,
            "train.cpu_kernels=\"tensor\"",
            "model.score=\"cosine\"",
        ],
        "cosine scores",
    );
    refused(
        "cpu",
        &[
            f16,
            "model.output=\"adaptive\"",
            "model.output_bands.cutoffs=\"auto\"",
        ],
        "adaptive softmax",
    );
    // A device without the dtype: lavapipe has f16, not bf16.
    if has_wgpu("half_products_refused_on_lavapipe") {
        let gpu = open_device(widebag_config::DeviceChoice::Wgpu).unwrap();
        if gpu.device.supports_dtype(burn::tensor::DType::BF16) {
            eprintln!("{} stores bf16: no refusal to check", gpu.adapter);
        } else {
            refused(
                "wgpu",
                &["model.output_precision=\"bf16\""],
                "does not support it",
            );
        }
    }
}
