//! The sampled output losses (`model.output = "sampled_softmax" | "negative_sampling" |
//! "cosine_contrastive"`) on flex and on wgpu: with every class drawn the sampled softmax is the
//! full softmax (loss and every gradient), each loss's gradients against finite differences
//! (rows, trunk, the sampled columns), the same negatives after a resume, and bad keys refused
//! with exit 2 naming the key.

use std::path::{Path, PathBuf};

use crate::common;

use common::{
    assert_close, assert_fd, batch, fd_dense, fd_table, flex, wgpu_or_skip, wide, widebag,
};
use widebag_config::{Activation, Config, OutputKind, Proposal, Score, TargetKind};
use widebag_ledger::shapes::step_length_bucket;
use widebag_model::Compute;
use widebag_model::output::negatives::NegativeStream;
use widebag_model::tensors::to_vec;

const CLASSES: usize = 30;

fn sampled_config(output: OutputKind, negatives: usize) -> Config {
    let mut c = Config::default();
    c.data.width = 60;
    c.data.n_classes = Some(CLASSES);
    c.data.nnz = 6.0;
    c.data.nnz_spread = 3.0;
    c.data.target = TargetKind::Bag;
    c.model.dim = 8;
    c.model.hidden = vec![6];
    // Smooth: no ReLU kink within the finite differences' reach.
    c.model.activation = Activation::Tanh;
    c.model.output = output;
    c.model.sampling.negatives = negatives;
    c.train.batch_size = 6;
    c.train.seed = 5;
    c
}

/// With every class drawn, the sampled softmax's loss and gradients are the multinomial full
/// softmax's: the same rows, trunk and output gradients (the sampled columns are every class,
/// in order).
fn check_every_class_drawn(compute: Compute, label: &str) {
    let full_cfg = sampled_config(OutputKind::Multinomial, CLASSES);
    let cfg = sampled_config(OutputKind::SampledSoftmax, CLASSES);
    let b = batch(&cfg, 11);
    let full = wide(&full_cfg, &compute).gradients(&b).unwrap();
    let sampled = wide(&cfg, &compute).gradients(&b).unwrap();
    let what = format!("{label}: every class drawn");
    assert_same_gradients(&what, &sampled, &full);
}

/// `got`'s loss, row gradients and dense gradients (in order; a sampled layer's are its
/// columns') are `want`'s within 1e-5 absolute and 1e-4 relative.
fn assert_same_gradients(what: &str, got: &widebag_model::Grads, want: &widebag_model::Grads) {
    assert!(
        (got.loss - want.loss).abs() <= 1e-5 * (1.0 + want.loss.abs()),
        "{what}: loss {} vs {}",
        got.loss,
        want.loss
    );
    let rows = |g: &widebag_model::Grads| g.rows_to_vec().unwrap();
    assert_close(&format!("{what} rows"), &rows(got), &rows(want), 1e-5, 1e-4);
    let dense = |g: &widebag_model::Grads| -> Vec<Vec<f32>> {
        g.dense()
            .into_iter()
            .map(|t| to_vec(t.clone()).unwrap())
            .collect()
    };
    let (g, w) = (dense(got), dense(want));
    assert_eq!(g.len(), w.len(), "{what}: one gradient per dense parameter");
    for (k, (g, w)) in g.iter().zip(&w).enumerate() {
        assert_close(&format!("{what} dense {k}"), g, w, 1e-5, 1e-4);
    }
}

#[test]
fn every_class_drawn_is_the_full_softmax_on_flex() {
    check_every_class_drawn(flex(), "flex");
}

#[test]
fn every_class_drawn_is_the_full_softmax_on_wgpu() {
    if let Some(c) = wgpu_or_skip("sampled_full_on_wgpu") {
        check_every_class_drawn(c, "wgpu");
    }
}

/// On flex the sampled softmax runs the host softmax's kernel over the gathered columns
/// (`output::sampled_host`); with `train.cpu_kernels = "tensor"` it runs on burn's tensors with
/// autodiff. Both give the same loss, rows, trunk and sampled columns' gradients, for dot and
/// cosine scores, over a step with drawn negatives.
#[test]
fn the_host_sampled_softmax_matches_the_tensor_path_on_flex() {
    let mut cosine = sampled_config(OutputKind::SampledSoftmax, 8);
    cosine.model.score = Score::Cosine;
    cosine.model.temperature = 0.25;
    for (name, cfg) in [
        ("dot", sampled_config(OutputKind::SampledSoftmax, 8)),
        ("cosine / 0.25", cosine),
    ] {
        let mut tensor_cfg = cfg.clone();
        tensor_cfg.train.cpu_kernels = widebag_config::CpuKernels::Tensor;
        let b = batch(&cfg, 13);
        let host = wide(&cfg, &flex()).gradients(&b).unwrap();
        let tensor = wide(&tensor_cfg, &flex()).gradients(&b).unwrap();
        assert_same_gradients(&format!("host against tensor, {name}"), &host, &tensor);
    }
}

/// The candidates of `config`'s first step on `b`: its targets and the step's draw, sorted.
/// Step 1's candidates: the batch's targets and the drawn classes, on wgpu (`filled`) filled up
/// to their length bucket with the stream's fill.
fn candidates(config: &Config, b: &widebag_csr::CsrBatch, filled: bool) -> Vec<u32> {
    let s = &config.model.sampling;
    let stream = NegativeStream::new(
        config.train.seed,
        CLASSES,
        s.negatives,
        s.proposal,
        s.alpha,
        &[],
    );
    let mut c: Vec<u32> = b.targets().classes.clone();
    c.extend(stream.draw(1).unwrap());
    c.sort_unstable();
    c.dedup();
    if filled {
        let length = step_length_bucket(c.len(), CLASSES);
        c.extend(stream.fill(1, &c, length - c.len()).classes);
        c.sort_unstable();
    }
    c
}

fn sampled_cases() -> Vec<(&'static str, Config)> {
    let softmax = sampled_config(OutputKind::SampledSoftmax, 8);
    let mut cosine_softmax = sampled_config(OutputKind::SampledSoftmax, 8);
    cosine_softmax.model.score = Score::Cosine;
    cosine_softmax.model.temperature = 0.25;
    let mut own_only = sampled_config(OutputKind::SampledSoftmax, 8);
    own_only.model.sampling.batch_negatives = false;
    let ns = sampled_config(OutputKind::NegativeSampling, 8);
    let mut ccl = sampled_config(OutputKind::CosineContrastive, 8);
    ccl.model.score = Score::Cosine;
    // A margin every negative's cosine clears: no hinge kink within the differences' reach.
    ccl.model.sampling.margin = -0.95;
    ccl.model.sampling.negative_weight = 3.0;
    vec![
        ("sampled softmax", softmax),
        ("sampled softmax, cosine / 0.25", cosine_softmax),
        ("sampled softmax, drawn negatives only", own_only),
        ("negative sampling", ns),
        ("cosine contrastive", ccl),
    ]
}

fn check_finite_differences(compute: Compute, label: &str, cases: &[(&str, Config)]) {
    let mut filled = 0;
    for (name, config) in cases {
        assert_eq!(config.model.sampling.proposal, Proposal::Uniform);
        let what = format!("{label}/{name}");
        let mut model = wide(config, &compute);
        let b = batch(config, 17);
        let grads = model.gradients(&b).unwrap();
        assert!(
            grads.loss.is_finite() && grads.loss > 0.0,
            "{what}: loss {}",
            grads.loss
        );
        let eps = 1e-2;
        // Rows of the table the batch touched.
        let uniq = b.unique_ids().to_vec();
        for (s, g) in &grads.rows {
            let g = to_vec(g.clone()).unwrap();
            let dim = model.bands()[s.band].band.dim;
            for (i, pos) in s.global().enumerate().take(3) {
                let (id, col) = (uniq[pos], (i + pos) % dim);
                let fd = fd_table(&mut model, &b, (id, col), eps);
                assert_fd(&format!("{what} row {id} col {col}"), fd, g[i * dim + col]);
            }
        }
        // The trunk's parameters.
        let names: Vec<String> = model
            .dense_params()
            .into_iter()
            .map(|p| p.name.clone())
            .collect();
        let dense = grads.dense();
        let n_trunk = names.iter().filter(|n| !n.starts_with("output.")).count();
        for (param, name) in names.iter().enumerate().take(n_trunk) {
            let g = to_vec(dense[param].clone()).unwrap();
            let index = (param * 7) % g.len();
            let fd = fd_dense(&mut model, &b, (name, index), eps);
            assert_fd(&format!("{what} {name}[{index}]"), fd, g[index]);
        }
        // The sampled columns: gradient column j is class `cand[j]` of the whole weight.
        let cand = candidates(config, &b, label == "wgpu");
        filled += cand.len() - candidates(config, &b, false).len();
        assert!(cand.len() < CLASSES, "{what}: {} candidates", cand.len());
        let dw = to_vec(dense[n_trunk].clone()).unwrap();
        let db = to_vec(dense[n_trunk + 1].clone()).unwrap();
        assert_eq!(
            dw.len(),
            6 * cand.len(),
            "{what}: [last hidden, candidates]"
        );
        for (j, &class) in cand.iter().enumerate().step_by(3) {
            let row = j % 6;
            let index = row * CLASSES + class as usize;
            let fd = fd_dense(&mut model, &b, ("output.0.weight", index), eps);
            assert_fd(
                &format!("{what} weight[{row}, {class}]"),
                fd,
                dw[row * cand.len() + j],
            );
            let fd = fd_dense(&mut model, &b, ("output.0.bias", class as usize), eps);
            assert_fd(&format!("{what} bias[{class}]"), fd, db[j]);
        }
        // A class outside the candidates does not move the loss.
        let outside = (0..CLASSES as u32).find(|c| !cand.contains(c)).unwrap();
        let fd = fd_dense(&mut model, &b, ("output.0.weight", outside as usize), eps);
        assert_eq!(fd, 0.0, "{what}: class {outside} was not sampled");
    }
    // On wgpu some candidates were filled in, and their columns' gradients checked above.
    assert_eq!(
        filled > 0,
        label == "wgpu",
        "{label}: {filled} classes filled in"
    );
}

#[test]
fn sampled_losses_match_finite_differences_on_flex() {
    check_finite_differences(flex(), "flex", &sampled_cases());
}

#[test]
fn sampled_losses_match_finite_differences_on_wgpu() {
    if let Some(c) = wgpu_or_skip("sampled_fd_on_wgpu") {
        let cases = sampled_cases();
        // Three on lavapipe (each new shape compiles kernels): one per loss.
        let picked: Vec<(&str, Config)> = cases
            .into_iter()
            .filter(|(n, _)| !n.contains(','))
            .collect();
        check_finite_differences(c, "wgpu", &picked);
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-sampled-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn step_losses(run: &Path) -> Vec<String> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| v.get("loss").map(|l| l.to_string()))
        .collect()
}

const RUN: [&str; 10] = [
    "--set",
    "model.output=sampled_softmax",
    "--set",
    "model.sampling.negatives=300",
    "--set",
    "train.steps=12",
    "--set",
    "train.checkpoint_every=6",
    "--set",
    "data.n_classes=2000",
];

#[test]
fn a_resumed_sampled_run_draws_the_same_negatives() {
    let whole = tmp("whole");
    let mut args = vec!["train", "--out", whole.to_str().unwrap()];
    args.extend(RUN);
    let o = widebag(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = step_losses(&whole);
    assert_eq!(want.len(), 12);
    let cut = tmp("cut");
    std::fs::create_dir_all(&cut).unwrap();
    let copied = std::process::Command::new("cp")
        .args([
            "-r",
            &format!("{}/.", whole.display()),
            cut.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::remove_dir_all(cut.join("checkpoints").join("step-00000012")).unwrap();
    let o = widebag(&["train", "--resume", cut.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(step_losses(&cut), want, "resumed at step 6");
    for d in [whole, cut] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn bad_sampled_keys_exit_2_naming_the_key() {
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "model.output=sampled_softmax",
                "model.sampling.negatives=5000",
            ],
            "model.sampling.negatives",
        ),
        (
            &[
                "model.output=negative_sampling",
                "model.sampling.alpha=-0.5",
            ],
            "model.sampling.alpha",
        ),
        (&["model.output=cosine_contrastive"], "model.score"),
        (
            &["model.output=sampled_softmax", "model.sampling.negatives=0"],
            "model.sampling.negatives",
        ),
        (
            &["model.score=cosine", "model.temperature=0"],
            "model.temperature",
        ),
    ];
    for (sets, key) in cases {
        let mut args = vec!["train".to_string()];
        for s in sets {
            args.extend(["--set".to_string(), s.to_string()]);
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = widebag(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{sets:?}: {err}");
        assert!(err.contains(key), "{sets:?} names {key}: {err}");
    }
}

/// `explain --measure` holds the ledger's bar (3 % at the sampled peak) for each sampled loss,
/// on flex and, where there is one, on a wgpu adapter.
#[test]
fn explain_measure_prices_each_sampled_loss_within_the_bar() {
    let mut devices = vec!["cpu"];
    if common::has_wgpu("sampled_explain_measure") {
        devices.push("wgpu");
    }
    for device in devices {
        for output in ["sampled_softmax", "negative_sampling", "cosine_contrastive"] {
            let sets = [
                format!("train.device={device}"),
                format!("model.output={output}"),
                "model.score=cosine".to_string(),
                "train.batch_size=256".into(),
                "model.hidden=[128]".into(),
                "data.n_classes=30000".into(),
                "model.sampling.negatives=4096".into(),
            ];
            let mut args = vec!["explain", "--measure", "--json"];
            for s in &sets {
                args.extend(["--set", s.as_str()]);
            }
            let o = widebag(&args);
            assert!(
                o.status.success(),
                "{device} {output}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let v = common::json(&o);
            let err = v["error_pct"].as_f64().unwrap();
            assert!(
                err.abs() <= 3.0,
                "{device} {output}: ledger off by {err} %: {v}"
            );
            assert_eq!(v["spec"]["sampled"]["negatives"], 4096, "{device} {output}");
        }
    }
}

/// The unigram proposal draws by the training targets' class counts, which run preparation
/// counts for it on a file and on the synthetic stream; on a file, more negatives than the
/// file's classes are refused with exit 2 naming the key and the file.
#[test]
fn the_unigram_proposal_trains_on_a_file_and_on_synthetic_rows() {
    let file = common::repo_root().join("datasets/sample/interactions/train.txt");
    let path = format!("data.path=\"{}\"", file.display());
    let on_file = [path.as_str(), "data.format=lightgcn", "train.batch_size=8"];
    for (data, loss) in [
        (&on_file[..], "sampled_softmax"),
        (&[][..], "negative_sampling"),
    ] {
        let output = format!("model.output={loss}");
        let mut sets = vec![
            output.as_str(),
            "model.sampling.proposal=unigram",
            "model.sampling.negatives=16",
            "train.steps=6",
        ];
        sets.extend(data);
        let mut args = vec!["train", "--json"];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let o = widebag(&args);
        assert!(
            o.status.success(),
            "{sets:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v = common::json(&o);
        assert!(
            v["final_loss"].as_f64().unwrap().is_finite(),
            "{sets:?}: {v}"
        );
    }
    let mut args = vec!["train"];
    for s in on_file.iter().chain(&[
        "model.output=sampled_softmax",
        "model.sampling.negatives=900",
    ]) {
        args.extend(["--set", s]);
    }
    let o = widebag(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("model.sampling.negatives") && err.contains("train.txt"),
        "{err}"
    );
}
