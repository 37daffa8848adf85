//! `model.logits = "keep"`: flex's host softmax keeps the full softmax's `[batch, classes]`
//! logits (the adaptive softmax's head's) for the backward pass instead of making them again
//! block by block. The gradients are the recomputed ones (full softmax in several chunks, the
//! multinomial bag output, the adaptive softmax), the ledger prices the kept buffer, and the
//! solver gives it up first when a budget needs the bytes.

use crate::common;

use common::{assert_close, batch, flat_grads, flex, json, wide, widebag};
use widebag_config::{Config, Cutoffs, Logits, OutputKind, TableOptim, TargetKind};

#[test]
fn kept_logits_give_the_recomputed_gradients_on_flex() {
    let mut c = Config::default();
    c.data.width = 60;
    c.data.n_classes = Some(700);
    c.data.nnz = 6.0;
    c.data.target = TargetKind::Bag;
    c.model.dim = 8;
    c.model.hidden = vec![6];
    c.train.batch_size = 9;
    c.optim.table = TableOptim::Adam;
    let mut multinomial = c.clone();
    multinomial.model.output = OutputKind::Multinomial;
    let mut adaptive = c.clone();
    adaptive.data.target = TargetKind::NextId;
    adaptive.model.output = OutputKind::Adaptive;
    adaptive.model.output_bands.cutoffs = Cutoffs::Ids(vec![300, 500]);
    for (name, config) in [
        ("full", c),
        ("multinomial", multinomial),
        ("adaptive", adaptive),
    ] {
        // A small buffer cap: several output chunks, each kept whole (the adaptive softmax's
        // head is one buffer).
        let compute = match name {
            "adaptive" => flex(),
            _ => flex().with_buffer_cap(2048),
        };
        let grads = |logits: Logits| {
            let mut c = config.clone();
            c.model.logits = logits;
            flat_grads(wide(&c, &compute).gradients(&batch(&c, 3)).unwrap())
        };
        let (recomputed, kept) = (grads(Logits::Recompute), grads(Logits::Keep));
        assert!(recomputed.iter().any(|&g| g != 0.0) && recomputed.len() > 1000);
        assert_close(
            &format!("{name}: kept against recomputed"),
            &kept,
            &recomputed,
            1e-6,
            1e-5,
        );
    }
}

/// The quickstart's model (240,000 classes, batch 64) with `model.logits` set in a config file.
fn config_file(dir: &std::path::Path, logits: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{logits}.toml"));
    std::fs::write(&path, format!("[model]\nlogits = \"{logits}\"\n")).unwrap();
    path
}

#[test]
fn the_ledger_prices_kept_logits_and_the_solver_gives_them_up_first() {
    let dir = std::env::temp_dir().join(format!("widebag-kept-logits-{}", std::process::id()));
    let peak = |logits: &str| {
        let file = config_file(&dir, logits);
        let f = file.to_str().unwrap();
        let v = json(&widebag(&[
            "explain", "--device", "cpu", "--config", f, "--json",
        ]));
        v["predicted_peak_bytes"].as_u64().unwrap()
    };
    let (recompute, keep) = (peak("recompute"), peak("keep"));
    // The kept [64, 240,000] f32 logits, less the two threads' blocks they replace.
    let kept_bytes = 64 * 240_000 * 4;
    assert!(
        keep > recompute && keep - recompute > kept_bytes * 9 / 10 && keep - recompute < kept_bytes,
        "{keep} against {recompute}"
    );
    // A budget between the two: the solver recomputes the logits and keeps everything else.
    let keep_file = config_file(&dir, "keep");
    let budget = ((recompute + keep) / 2).to_string();
    let v = json(&widebag(&[
        "plan",
        "--device",
        "cpu",
        "--config",
        keep_file.to_str().unwrap(),
        "--budget",
        &budget,
        "--pin",
        "train.batch_size",
        "--json",
    ]));
    assert_eq!(v["fits"], true, "{v}");
    let remedies = v["plan"]["remedies"].as_array().unwrap();
    let keys: Vec<&str> = remedies
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["model.logits"], "{v}");
    assert_eq!(v["optimizer"]["table"], "adam");
    assert_eq!(v["optimizer"]["dense"], "adam");
    let _ = std::fs::remove_dir_all(dir);
}
