//! `model.checkpointing = "mlp"`: the trunk recomputed in backward gives the gradients that
//! saving it gives (full softmax in several chunks, adaptive softmax, head/tail input bands with a
//! host tail, on flex and on wgpu), and the ledger's prediction of the recomputed step holds
//! point by point against lavapipe's allocator, the recomputation point included.

use crate::common;

use common::{assert_close, batch, flat_grads, flex, json, wgpu_or_skip, wide, widebag};
use widebag_config::{
    BandPlacement, Checkpointing, Config, Cutoffs, OutputKind, TableOptim, TargetKind,
};
use widebag_model::Compute;

/// A small model in three output/input layouts.
fn configs() -> Vec<(&'static str, Config)> {
    let mut c = Config::default();
    c.data.width = 60;
    c.data.n_classes = Some(12);
    c.data.nnz = 6.0;
    c.data.target = TargetKind::Bag;
    c.model.dim = 8;
    c.model.hidden = vec![6, 5];
    c.train.batch_size = 9;
    c.optim.table = TableOptim::Adam;
    let full = c.clone();
    let mut adaptive = c.clone();
    adaptive.model.output = OutputKind::Adaptive;
    adaptive.model.output_bands.cutoffs = Cutoffs::Ids(vec![4, 8]);
    let mut bands = c;
    bands.model.input_bands.cutoffs = Cutoffs::Ids(vec![10, 30]);
    bands.model.input_bands.placement = vec![BandPlacement::Device, BandPlacement::Host];
    vec![("full", full), ("adaptive", adaptive), ("bands", bands)]
}

fn check(compute: Compute, label: &str) {
    for (name, config) in configs() {
        // A small buffer cap: several table shards and output chunks.
        let compute = compute.clone().with_buffer_cap(320);
        let grads = |mode: Checkpointing| {
            let mut c = config.clone();
            c.model.checkpointing = mode;
            let mut model = wide(&c, &compute);
            flat_grads(model.gradients(&batch(&c, 5)).unwrap())
        };
        let (saved, recomputed) = (grads(Checkpointing::None), grads(Checkpointing::Mlp));
        assert!(saved.iter().any(|&g| g != 0.0) && saved.len() > 100);
        let what = format!("{label}/{name}: recomputed against saved");
        assert_close(&what, &recomputed, &saved, 1e-6, 1e-5);
    }
}

#[test]
fn the_recomputed_trunk_gives_the_saved_trunks_gradients_on_flex() {
    check(flex(), "flex");
}

#[test]
fn the_recomputed_trunk_gives_the_saved_trunks_gradients_on_wgpu() {
    if let Some(c) = wgpu_or_skip("the_recomputed_trunk_gives_the_saved_trunks_gradients_on_wgpu") {
        check(c, "wgpu");
    }
}

#[test]
fn the_ledger_of_a_recomputed_step_holds_against_the_allocator() {
    if !common::has_wgpu("the_ledger_of_a_recomputed_step_holds_against_the_allocator") {
        return;
    }
    let o = widebag(&[
        "explain",
        "--device",
        "wgpu",
        "--measure",
        "--json",
        "--set",
        "model.checkpointing=\"mlp\"",
        "--set",
        "model.hidden=[256, 128]",
    ]);
    let v = json(&o);
    let points = v["points"].as_array().unwrap();
    let input = points
        .iter()
        .find(|p| p["point"] == "backward_input")
        .expect("the recomputation is a sampled point");
    assert!(input["measured_bytes"].as_u64().is_some());
    for p in points {
        let e = p["error_pct"].as_f64().unwrap();
        assert!(e < 1.0, "{}: {e}%", p["point"]);
    }
    // explain says what it saves, however small.
    let c = &v["checkpointing"];
    assert_eq!(c["saved_bytes_per_example"], (32 + 256 + 128) * 2 * 4);
    assert!(c["output_backward_saving_bytes"].as_u64().unwrap() > 0);
}
