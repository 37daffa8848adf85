//! What a training step asks of a wgpu device (`train --profile --json`'s `device_profile`), on
//! whatever adapter there is (lavapipe in CI): kernel launches per step, reads that block the
//! host, new device buffers, and kernels compiled after the first step, for the seed model's
//! layouts at the quickstart's size, on burn's tensor operations and on widebag's CubeCL
//! softmax kernels, and for the sampled softmax.

use crate::common;

use common::{has_wgpu, json, widebag};

fn device_profile(sets: &[&str]) -> serde_json::Value {
    let mut args = vec!["train", "--device", "wgpu", "--profile", "--json"];
    args.extend(["--set", "train.steps=8"]);
    for s in sets {
        args.extend(["--set", s]);
    }
    let o = widebag(&args);
    assert!(
        o.status.success(),
        "{sets:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    json(&o)["profile"]["device_profile"].clone()
}

#[test]
fn sparse_and_dense_steps_compile_nothing_after_the_first_and_block_once_on_the_loss() {
    if !has_wgpu("device_profile") {
        return;
    }
    // Each layout on burn's tensor operations (the default) and on widebag's CubeCL softmax
    // kernels, whose cube sizes do not follow a step's target count.
    for (layout, sets) in [
        ("sparse", vec![]),
        ("dense", vec!["model.layout=dense", "data.width=20000"]),
        ("sparse, cubecl", vec!["train.gpu_kernels=cubecl"]),
        // configs/gowalla-fast.toml's output: a step's candidates (its targets and the drawn
        // classes) and target entries filled up to a few lengths (48 kernels compiled after
        // step 1 when each step had its own counts).
        (
            "sampled softmax",
            vec![
                "model.output=sampled_softmax",
                "model.score=cosine",
                "model.sampling.negatives=512",
                "model.sampling.batch_negatives=true",
            ],
        ),
        (
            "dense, cubecl",
            vec![
                "model.layout=dense",
                "data.width=20000",
                "train.gpu_kernels=cubecl",
            ],
        ),
    ] {
        let d = device_profile(&sets);
        assert_eq!(d["steps"], 7, "{layout}: steps 2 to 8 counted: {d}");
        assert_eq!(
            d["compiled_after_step_1"], 0,
            "{layout}: the op stream keeps its shapes: {d}"
        );
        assert_eq!(
            d["reads_per_step"], 1.0,
            "{layout}: the loss is the one read: {d}"
        );
        // The dense layout stepping its output layer inside the backward pass frees in another
        // order, and its pool takes one page more once, at step 2 (16 steps: still one); a
        // buffer a step would be 7 here.
        let settling = if layout == "dense, cubecl" { 1.0 } else { 0.0 };
        let new_buffers = d["allocations_per_step"].as_f64().unwrap() * 7.0;
        assert!(
            new_buffers.round() <= settling,
            "{layout}: the pools reuse their pages: {d}"
        );
        let dispatches = d["dispatches_per_step"].as_f64().unwrap();
        assert!(
            dispatches >= 10.0 && dispatches.fract() == 0.0,
            "{layout}: {d}"
        );
        let named: f64 = d["top_kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["calls_per_step"].as_f64().unwrap())
            .sum();
        assert!(named > 0.0 && named <= dispatches, "{layout}: {d}");
    }
    // The adaptive softmax: a step's tail clusters take the rows whose targets fall in them
    // (on the CubeCL kernels, padded to a power of two) and their targets, so its shapes
    // follow the batch and kernels are still compiled after step 1, fewer on the kernels than
    // on autodiff (7 against 16 when written); the loss, summed on the device over the
    // clusters, is the one read.
    let adaptive = |kernels: &str| {
        let kernels = format!("train.gpu_kernels={kernels}");
        device_profile(&[
            "model.output=adaptive",
            "model.output_bands.cutoffs=auto",
            &kernels,
        ])
    };
    let (cube, autodiff) = (adaptive("cubecl"), adaptive("tensor"));
    let compiled = |d: &serde_json::Value| d["compiled_after_step_1"].as_u64().unwrap();
    assert!(compiled(&cube) < compiled(&autodiff), "{cube}\n{autodiff}");
    assert_eq!(cube["reads_per_step"], 1.0, "adaptive, cubecl: {cube}");
}

#[test]
fn flex_and_an_unprofiled_run_report_no_device_profile() {
    let o = widebag(&[
        "train",
        "--device",
        "cpu",
        "--profile",
        "--json",
        "--set",
        "train.steps=3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(json(&o)["profile"]["device_profile"].is_null());
    if has_wgpu("device_profile_unprofiled") {
        let o = widebag(&[
            "train",
            "--device",
            "wgpu",
            "--json",
            "--set",
            "train.steps=3",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(json(&o)["profile"]["device_profile"].is_null());
    }
}
