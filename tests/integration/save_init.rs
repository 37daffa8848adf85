//! `train --save-init`: the initial weights, as a checkpoint names them (the PyTorch peer's
//! parity mode starts from them), the same numbers in every layout, and `model.input_init`'s
//! distributions.

use std::path::{Path, PathBuf};

use crate::common::{safetensors_f32 as tensors, widebag};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-init-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn final_checkpoint(run: &Path, step: u64) -> PathBuf {
    run.join("checkpoints").join(format!("step-{step:08}"))
}

/// `train --save-init F`: the weights before the first step, named as a checkpoint names them
/// (the parity bench's PyTorch peer starts from them). The dense and sparse layouts start from
/// the same numbers; `model.input_init` picks the table's distribution.
#[test]
fn save_init_writes_the_initial_weights_every_layout_starts_from() {
    let dir = tmp("save-init");
    let run = |layout: &str, init: &str, extra: &[&str]| {
        let file = dir.join(format!("{layout}-{init}.safetensors"));
        let mut args = vec![
            "train",
            "--device",
            "cpu",
            "--set",
            "data.width=600",
            "--set",
            "data.n_classes=40",
            "--set",
            "model.dim=16",
            "--set",
            "train.steps=3",
        ];
        let layout_set = format!("model.layout=\"{layout}\"");
        let init_set = format!("model.input_init=\"{init}\"");
        args.extend(["--set", &layout_set, "--set", &init_set]);
        args.extend(extra);
        args.extend(["--save-init", file.to_str().unwrap()]);
        let o = widebag(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        tensors(&file)
    };
    // The names and shapes of the sparse layout's checkpoint.
    let out = dir.join("run");
    let sparse = run("sparse", "uniform", &["--out", out.to_str().unwrap()]);
    let ck = tensors(&final_checkpoint(&out, 3).join("weights.safetensors"));
    let shapes = |m: &std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)>| {
        m.iter()
            .map(|(n, (s, _))| (n.clone(), s.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(shapes(&sparse), shapes(&ck));
    assert_ne!(
        sparse["output.0.weight"].1, ck["output.0.weight"].1,
        "trained"
    );
    // The dense layout starts from the same numbers.
    let dense = run("dense", "uniform", &[]);
    for (d, s) in [
        ("input.weight", "input.0.weight.shard0"),
        ("input.bias", "bag.bias"),
        ("hidden.0.weight", "hidden.0.weight"),
        ("output.weight", "output.0.weight"),
        ("output.bias", "output.0.bias"),
    ] {
        assert_eq!(dense[d], sparse[s], "{d} and {s}");
    }
    // Each distribution: uniform U(±sqrt(3/16)), normal N(0, 1), fan_in U(±1/sqrt(600)).
    for (init, bound, var) in [
        ("uniform", (3.0f32 / 16.0).sqrt(), 1.0f32 / 16.0),
        ("normal", f32::INFINITY, 1.0),
        ("fan_in", 1.0 / 600f32.sqrt(), 1.0 / (3.0 * 600.0)),
    ] {
        let t = &run("sparse", init, &[])["input.0.weight.shard0"].1;
        assert_eq!(t.len(), 600 * 16);
        let n = t.len() as f32;
        let mean = t.iter().sum::<f32>() / n;
        let v = t.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
        assert!(
            t.iter().all(|x| x.abs() <= bound),
            "{init}: inside ±{bound}"
        );
        assert!(mean.abs() < 0.1 * var.sqrt(), "{init}: mean {mean}");
        assert!(
            (v / var - 1.0).abs() < 0.1,
            "{init}: variance {v}, want {var}"
        );
    }
    // One process, a fresh run.
    let o = widebag(&["train", "--ranks", "2", "--save-init", "x.safetensors"]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}
