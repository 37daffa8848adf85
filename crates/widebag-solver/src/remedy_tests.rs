//! Tests of the layout remedies: the ladder in its documented order, pins and what is taken;
//! checkpointing and the adaptive softmax taken by the solver only where they change the plan.

use super::*;
use crate::solve::tests::{config, logits_bound, plan, sample};
use widebag_config::DenseOptim;

#[test]
fn the_ladder_adds_remedies_in_order_skipping_pins_and_what_is_taken() {
    let c = Config::default();
    let rungs = ladder(&c, 1, Pins::default(), false);
    let taken: Vec<Vec<Remedy>> = rungs.iter().map(|(r, _)| r.clone()).collect();
    // One band on a device without bf16: the narrowest chunk, the host tier, then f16
    // tables; the moments then live on the host, so bf16 moments follow.
    // The logits are recomputed already (the default): that rung changes nothing.
    let [_logits, chunk, ckpt, host, half, moments, input, adaptive] = Remedy::ORDER;
    assert_eq!(
        taken,
        vec![
            vec![],
            vec![chunk],
            vec![chunk, ckpt],
            vec![chunk, ckpt, host],
            vec![chunk, ckpt, host, half],
            vec![chunk, ckpt, host, half, moments],
            vec![chunk, ckpt, host, half, moments, input],
            vec![chunk, ckpt, host, half, moments, input, adaptive],
        ]
    );
    // Head/tail inputs at the default side budget: a fifth of the unsplit table's bytes
    // (at the rung's f16 rows and bf16 moments), every band on the host.
    let cut = &rungs[6].1;
    let cuts = cut.model.input_bands.cutoffs.ids();
    assert!(!cuts.is_empty());
    let unsplit = bands::input_side_bytes(&rungs[5].1, &[]);
    assert!(bands::input_side_bytes(cut, cuts) <= unsplit / 5);
    assert!((0..3).all(|k| cut.model.input_bands.placement_of(k) == BandPlacement::Host));
    // The adaptive softmax at the default side budget: a fifth of the full layer's bytes.
    let cut = &rungs[7].1;
    assert_eq!(cut.model.output, OutputKind::Adaptive);
    let cuts = cut.model.output_bands.cutoffs.ids();
    assert!(!cuts.is_empty());
    let full = bands::output_side_bytes(&c, &[]);
    assert!(bands::output_side_bytes(cut, cuts) <= full / 5);
    let last = &rungs[5].1;
    assert_eq!(last.model.checkpointing, Checkpointing::Mlp);
    assert_eq!(last.model.class_chunk, 240_000usize.div_ceil(MAX_CHUNKS));
    assert_eq!(last.model.input_bands.placement, vec![BandPlacement::Host]);
    assert_eq!(last.model.input_bands.dtype, vec![Precision::F16]);
    assert_eq!(last.optim.state_dtype, Precision::Bf16);
    let pins = Pins {
        placement: true,
        class_chunk: true,
        checkpointing: true,
        input_cutoffs: true,
        output_bands: true,
        ..Pins::default()
    };
    // Pinned on the device (no bf16 there): only f16 tables.
    let rungs = ladder(&c, 1, pins, false);
    assert_eq!(rungs.len(), 2);
    assert_eq!(rungs[1].0, vec![Remedy::HalfTables]);
    assert!(with_remedies(&c, &[Remedy::HalfMoments], 1, false).is_none());
    assert!(with_remedies(&c, &[Remedy::HalfMoments], 1, true).is_some());
    // On a device with bf16 (flex, most GPUs) bf16 moments need no host tier.
    assert_eq!(ladder(&c, 1, pins, true).len(), 3);
    let mut dense = c.clone();
    dense.model.layout = Layout::Dense;
    assert_eq!(ladder(&dense, 1, Pins::default(), false).len(), 1);
}

#[test]
fn checkpointing_is_taken_only_where_it_changes_the_answer() {
    // Every other knob pinned: the logits-bound run at the budget its recomputed trunk meets.
    let c = logits_bound();
    let rows = sample(&c);
    let peak = |c: &Config| {
        plan(c, &rows, 1 << 30, Pins::ALL)
            .chosen
            .predicted_peak_bytes
    };
    let mut ckpt = c.clone();
    ckpt.model.checkpointing = Checkpointing::Mlp;
    let (none, mlp) = (peak(&c), peak(&ckpt));
    assert!(none > mlp + (100 << 10), "{none} vs {mlp}");
    let budget = (mlp + (16 << 10)) * 400 / 399 + 1;
    let pins = Pins {
        checkpointing: false,
        ..Pins::ALL
    };
    assert!(!plan(&c, &rows, budget, Pins::ALL).fits);
    let p = plan(&c, &rows, budget, pins);
    assert!(p.fits, "{}", p.chosen.verdict);
    let keys: Vec<&str> = p.remedies.iter().map(|r| r.key).collect();
    assert_eq!(keys, ["model.checkpointing"]);
    assert_eq!(p.remedies[0].to, "mlp");
    assert!(p.remedies[0].saves_bytes > 0);
    // With room for the saved activations it is not taken.
    let p = plan(&c, &rows, none + (1 << 20), pins);
    assert!(p.fits && p.remedies.is_empty());
}

#[test]
fn an_output_bound_run_keeps_adam_by_cutting_the_output_into_an_adaptive_softmax() {
    // 20,000 classes on a 64-wide last layer at batch 32: the output layer with Adam's moments
    // (20.5 MB) is what does not fit 12 MiB; SGD would (10.3 MB).
    let c = config(&[
        "data.n_classes=20000",
        "model.hidden=[64]",
        "train.batch_size=32",
        "optim.table=adam",
        "optim.dense=adam",
        "plan.max_batch=256",
    ]);
    let rows = sample(&c);
    let budget = 12 << 20;
    let batch_only = Pins {
        batch_size: true,
        ..Pins::default()
    };
    // The output pinned: a weaker dense optimizer is the answer.
    let pinned = Pins {
        output_bands: true,
        ..batch_only
    };
    let p = plan(&c, &rows, budget, pinned);
    assert!(p.fits && p.chosen.dense != DenseOptim::Adam);
    assert!(
        p.remedies
            .iter()
            .all(|r| r.remedy != Remedy::AdaptiveOutput)
    );
    // Free: the adaptive softmax keeps Adam, and its head is as large as the budget allows.
    let p = plan(&c, &rows, budget, batch_only);
    assert!(p.fits, "{}", p.chosen.verdict);
    assert_eq!(
        (p.chosen.table, p.chosen.dense),
        (TableOptim::Adam, DenseOptim::Adam)
    );
    let keys: Vec<&str> = p.remedies.iter().map(|r| r.key).collect();
    assert_eq!(keys, ["model.output_bands"]);
    let mut chosen = c.clone();
    p.remedies[0].apply(&mut chosen);
    assert_eq!(chosen.model.output, OutputKind::Adaptive);
    let cuts = chosen.model.output_bands.cutoffs.ids().to_vec();
    assert!(plan(&chosen, &rows, budget, Pins::ALL).fits);
    // The side budget was raised to within 1/256 of its range: 1/128 of the full layer's
    // bytes more does not fit.
    let full = bands::output_side_bytes(&c, &[]);
    let chosen_bytes = bands::output_side_bytes(&chosen, &cuts);
    let wider = with_output_budget(&chosen, chosen_bytes + full / 128).unwrap();
    assert!(wider.model.output_bands.cutoffs.ids()[0] > cuts[0]);
    assert!(!plan(&wider, &rows, budget, Pins::ALL).fits);
}

#[test]
fn kept_logits_are_the_first_thing_given_up() {
    let mut c = Config::default();
    c.model.logits = Logits::Keep;
    let rungs = ladder(&c, 1, Pins::default(), false);
    assert_eq!(rungs[1].0, vec![Remedy::RecomputeLogits]);
    assert_eq!(rungs[1].1.model.logits, Logits::Recompute);
    // Pinned, it stays.
    let pins = Pins {
        logits: true,
        ..Pins::default()
    };
    let rungs = ladder(&c, 1, pins, false);
    assert!(
        rungs
            .iter()
            .all(|(r, c)| !r.contains(&Remedy::RecomputeLogits) && c.model.logits == Logits::Keep)
    );
    assert_eq!(Pins::from_keys(["model.logits"]).keys(), ["model.logits"]);
}
