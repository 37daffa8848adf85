//! The suggestions when nothing fits: single changes (a weaker optimizer, a smaller batch, a
//! layout remedy: a narrower class chunk, checkpointing, the host tier, half-precision tables
//! or moments, head/tail inputs, the adaptive softmax; the sparse layout, a narrower embedding, a larger budget), each checked against the ledger and
//! ranked.

use widebag_config::bands::{Band, ModelBands, band_dim};
use widebag_config::units::format_bytes;
use widebag_config::{BandPlacement, Config, DenseOptim, Layout, Precision, TableOptim};

use crate::enumerate::capability;
use crate::estimate::{Estimator, Variant};
use crate::problem::Problem;
use crate::remedy::{Remedy, bands_of};
use crate::report::{Candidate, Suggestion};
use crate::search::largest_batch;

/// Single changes that would make the run fit, ranked: the optimizer, batch and layout-remedy
/// changes first (the model stays), then the sparse layout, then both optimizers at once, then a narrower embedding,
/// each group by the bytes it frees (the smallest sufficient change first); a larger budget last.
/// Per optimizer knob only the most capable alternative that fits is listed.
pub(crate) fn suggestions(
    est: &Estimator,
    min_batch: usize,
    (ct, cd): (TableOptim, DenseOptim),
    base: &Candidate,
) -> Vec<Suggestion> {
    let mut found = Found {
        est,
        min_batch,
        ct,
        cd,
        base,
        tiered: Vec::new(),
    };
    let single_optimizer = found.weaker_optimizer();
    found.smaller_batch();
    found.layout_remedies();
    found.sparse_layout();
    found.both_optimizers(single_optimizer);
    found.narrower_embedding();
    let mut out = found.ranked();
    out.extend(larger_budget(est.p, base));
    out
}

/// The changes found so far, each with its tier (its group in the ranking), and what they are
/// found for: the run that does not fit (`base`, at the smallest batch with the cheapest
/// optimizer pair).
struct Found<'e, 'a> {
    est: &'e Estimator<'a>,
    min_batch: usize,
    ct: TableOptim,
    cd: DenseOptim,
    base: &'e Candidate,
    tiered: Vec<(u8, Suggestion)>,
}

impl Found<'_, '_> {
    /// Adds the change `key`: `from` → `to` when its candidate `c` fits; whether it did.
    fn push(&mut self, tier: u8, key: &str, from: String, to: String, c: &Candidate) -> bool {
        if !c.fits {
            return false;
        }
        let base = self.base;
        let frees = base
            .predicted_peak_bytes
            .saturating_sub(c.predicted_peak_bytes);
        let effect = if c.predicted_peak_bytes <= base.predicted_peak_bytes {
            format!("frees {}", format_bytes(frees))
        } else {
            format!(
                "fits ({} peak, no tensor over the largest buffer)",
                format_bytes(c.predicted_peak_bytes)
            )
        };
        self.tiered.push((
            tier,
            Suggestion {
                key: key.to_string(),
                text: format!("{key} {from} → {to} {effect}"),
                from,
                to,
                frees_bytes: frees,
            },
        ));
        true
    }

    /// A weaker table optimizer, then a weaker dense one (each when pinned): the most capable
    /// one that fits. Whether either was found.
    fn weaker_optimizer(&mut self) -> bool {
        let (est, p, min_batch) = (self.est, self.est.p, self.min_batch);
        let (ct, cd) = (self.ct, self.cd);
        let layout = p.config.model.layout;
        let mut single_optimizer = false;
        if p.pins.table && layout == Layout::Sparse {
            for t in [
                TableOptim::RowwiseAdagrad,
                TableOptim::Momentum,
                TableOptim::Sgd,
            ] {
                if capability(layout, t, cd) < capability(layout, ct, cd) {
                    let c = est.candidate(min_batch, t, cd);
                    if self.push(0, "optim.table", ct.name().into(), t.name().into(), &c) {
                        single_optimizer = true;
                        break;
                    }
                }
            }
        }
        if p.pins.dense {
            for d in [DenseOptim::Momentum, DenseOptim::Sgd] {
                if d.state_per_weight() < cd.state_per_weight() {
                    let c = est.candidate(min_batch, ct, d);
                    if self.push(0, "optim.dense", cd.name().into(), d.name().into(), &c) {
                        single_optimizer = true;
                        break;
                    }
                }
            }
        }
        single_optimizer
    }

    /// A smaller batch: the largest below the smallest allowed that fits.
    fn smaller_batch(&mut self) {
        let (est, min_batch, ct, cd) = (self.est, self.min_batch, self.ct, self.cd);
        if min_batch > 1
            && let Some(b) = largest_batch(1, min_batch - 1, |b| est.fits(b, ct, cd))
        {
            let c = est.candidate(b, ct, cd);
            let key = if est.p.pins.batch_size {
                "train.batch_size"
            } else {
                "plan.min_batch"
            };
            self.push(0, key, min_batch.to_string(), b.to_string(), &c);
        }
    }

    /// Layout remedies: the same model stored or scheduled differently.
    fn layout_remedies(&mut self) {
        let (est, p, min_batch, ct, cd) = (self.est, self.est.p, self.min_batch, self.ct, self.cd);
        if p.config.model.layout != Layout::Sparse {
            return;
        }
        for (key, from, to, changed) in remedies(est, min_batch, (ct, cd)) {
            let bands = bands_of(&changed, p.bands);
            let variant = Variant {
                config: &changed,
                bands: &bands,
            };
            let c = est.candidate_with(variant, min_batch, ct, cd);
            self.push(0, key, from, to, &c);
        }
    }

    /// The sparse layout, with the most capable table optimizer that fits (same bands).
    fn sparse_layout(&mut self) {
        let (est, p, min_batch, ct, cd) = (self.est, self.est.p, self.min_batch, self.ct, self.cd);
        if p.config.model.layout != Layout::Dense {
            return;
        }
        let mut sparse = p.config.clone();
        sparse.model.layout = Layout::Sparse;
        let variant = Variant {
            config: &sparse,
            bands: p.bands,
        };
        let tables: &[TableOptim] = if p.pins.table {
            &[ct]
        } else {
            &[
                TableOptim::Adam,
                TableOptim::RowwiseAdagrad,
                TableOptim::Momentum,
                TableOptim::Sgd,
            ]
        };
        for &t in tables {
            let c = est.candidate_with(variant, min_batch, t, cd);
            let to = format!("sparse (table {})", t.name());
            if self.push(1, "model.layout", "dense".into(), to, &c) {
                break;
            }
        }
    }

    /// Both optimizers to SGD, when both are pinned and neither alone is enough.
    fn both_optimizers(&mut self, single_optimizer: bool) {
        let (est, p, min_batch, ct, cd) = (self.est, self.est.p, self.min_batch, self.ct, self.cd);
        if p.pins.table
            && p.pins.dense
            && !single_optimizer
            && p.config.model.layout == Layout::Sparse
            && (ct, cd) != (TableOptim::Sgd, DenseOptim::Sgd)
        {
            let c = est.candidate(min_batch, TableOptim::Sgd, DenseOptim::Sgd);
            self.push(
                2,
                "optim",
                format!("{}/{}", ct.name(), cd.name()),
                "sgd/sgd".into(),
                &c,
            );
        }
    }

    /// A narrower embedding: the widest `model.dim` below the configured one that fits.
    fn narrower_embedding(&mut self) {
        let (est, p, min_batch, ct, cd) = (self.est, self.est.p, self.min_batch, self.ct, self.cd);
        let config = p.config;
        if config.model.dim <= 1 {
            return;
        }
        let narrower = |dim: usize| {
            let mut c = config.clone();
            c.model.dim = dim;
            let bands = at_dim(p.bands, &c);
            (c, bands)
        };
        let fits_dim = |dim: usize| {
            let (c, bands) = narrower(dim);
            let variant = Variant {
                config: &c,
                bands: &bands,
            };
            est.fits_with(variant, min_batch, ct, cd)
        };
        if let Some(dim) = largest_batch(1, config.model.dim - 1, fits_dim) {
            let (c, bands) = narrower(dim);
            let variant = Variant {
                config: &c,
                bands: &bands,
            };
            let c = est.candidate_with(variant, min_batch, ct, cd);
            self.push(
                3,
                "model.dim",
                config.model.dim.to_string(),
                dim.to_string(),
                &c,
            );
        }
    }

    /// The changes by tier, each tier by the bytes it frees (the smallest sufficient first).
    fn ranked(mut self) -> Vec<Suggestion> {
        self.tiered.sort_by(|(ta, a), (tb, b)| {
            ta.cmp(tb)
                .then(a.frees_bytes.cmp(&b.frees_bytes))
                .then(a.key.cmp(&b.key))
        });
        self.tiered.into_iter().map(|(_, s)| s).collect()
    }
}

/// A larger budget, when buffers allow: the smallest whole MiB at which `base` fits.
fn larger_budget(p: &Problem, base: &Candidate) -> Option<Suggestion> {
    if base.largest_allocation_bytes > p.device.max_buffer_bytes {
        return None;
    }
    let budget = round_up_mib(needed_budget(base.predicted_peak_bytes)).max(p.budget_bytes + 1);
    Some(Suggestion {
        key: "budget".into(),
        from: format_bytes(p.budget_bytes),
        to: format_bytes(budget),
        frees_bytes: budget - p.budget_bytes,
        text: format!(
            "budget {} → {} (adds {})",
            format_bytes(p.budget_bytes),
            format_bytes(budget),
            format_bytes(budget - p.budget_bytes)
        ),
    })
}

/// The sparse layout's remedies, each alone, as `(key, from, to, changed config)`: the widest
/// class chunk that fits (time: more, smaller output passes; at most [`MAX_CHUNKS`] of them), every input band's table and state
/// on the host tier (time: rows cross to the device each step), f16 tables (precision: updates
/// rounded stochastically), and bf16 moments on a device that has bf16 (flex, most GPUs; not
/// lavapipe). Remedies already in the config are skipped.
fn remedies(
    est: &Estimator,
    min_batch: usize,
    (ct, cd): (TableOptim, DenseOptim),
) -> Vec<(&'static str, String, String, Config)> {
    let p = est.p;
    let config = p.config;
    let m = &config.model;
    let mut out = Vec::new();
    if m.output_bands.cutoffs.ids().is_empty() {
        let with_chunk = |chunk: usize| {
            let mut c = config.clone();
            c.model.class_chunk = chunk;
            c
        };
        let fits_chunk = |chunk: usize| {
            let c = with_chunk(chunk);
            let variant = Variant {
                config: &c,
                bands: p.bands,
            };
            est.fits_with(variant, min_batch, ct, cd)
        };
        let current = match m.class_chunk {
            0 => config.data.n_classes(),
            c => c,
        };
        // At most MAX_CHUNKS chunks: each is a pass over the output layer (and a ledger entry).
        let narrowest = config.data.n_classes().div_ceil(MAX_CHUNKS).max(1);
        if current > narrowest
            && let Some(chunk) = largest_batch(narrowest, current - 1, fits_chunk)
        {
            let from = match m.class_chunk {
                0 => "0 (largest)".to_string(),
                c => c.to_string(),
            };
            out.push((
                "model.class_chunk",
                from,
                chunk.to_string(),
                with_chunk(chunk),
            ));
        }
    }
    let n_bands = p.bands.input.len().max(1);
    let placements: Vec<BandPlacement> = (0..n_bands)
        .map(|k| m.input_bands.placement_of(k))
        .collect();
    if placements.contains(&BandPlacement::Device) && !p.device.host_memory {
        let mut c = config.clone();
        // Tails to the host first; the head too when the table is one band.
        c.model.input_bands.placement = if n_bands > 1 {
            vec![BandPlacement::Device, BandPlacement::Host]
        } else {
            vec![BandPlacement::Host]
        };
        let to = format!("{:?}", names(&c.model.input_bands.placement));
        out.push((
            "model.input_bands.placement",
            format!("{:?}", names(&m.input_bands.placement)),
            to,
            c,
        ));
    }
    let dtypes: Vec<Precision> = (0..n_bands).map(|k| m.input_bands.dtype_of(k)).collect();
    if dtypes.contains(&Precision::F32) {
        let mut c = config.clone();
        c.model.input_bands.dtype = vec![Precision::F16];
        let from: Vec<&str> = m.input_bands.dtype.iter().map(|d| d.name()).collect();
        out.push((
            "model.input_bands.dtype",
            format!("{from:?}"),
            "[\"f16\"]".into(),
            c,
        ));
    }
    let has_moments = matches!(
        ct,
        TableOptim::Momentum | TableOptim::Adam | TableOptim::AdamW
    );
    if has_moments && config.optim.state_dtype == Precision::F32 && p.device.bf16 {
        let mut c = config.clone();
        c.optim.state_dtype = Precision::Bf16;
        out.push(("optim.state_dtype", "f32".into(), "bf16".into(), c));
    }
    // Checkpointing, and each side cut into bands at its default side budget.
    for r in [
        Remedy::Checkpointing,
        Remedy::HeadTailInput,
        Remedy::AdaptiveOutput,
        Remedy::SampledOutput,
    ] {
        if r.costs_accuracy() && config.plan.keep_accuracy {
            continue;
        }
        if let Some(c) = r.applied(config, n_bands, p.device.bf16) {
            let (from, to) = (r.value(config, n_bands), r.value(&c, n_bands));
            out.push((r.key(), from, to, c));
        }
    }
    out
}

/// The most class chunks a suggested `model.class_chunk` makes.
const MAX_CHUNKS: usize = 256;

fn names(placements: &[BandPlacement]) -> Vec<&'static str> {
    placements.iter().map(|p| p.name()).collect()
}

/// The bands of `config` (a copy with a narrower `model.dim`) from the problem's `bands`: the
/// same cutoffs, each band's width recomputed from the new dim (input) and last hidden size
/// (output), as run preparation would resolve them.
fn at_dim(bands: &ModelBands, config: &Config) -> ModelBands {
    let m = &config.model;
    let redim = |side: &[Band], dim: usize, factor: usize| -> Vec<Band> {
        side.iter()
            .enumerate()
            .map(|(k, b)| Band {
                dim: band_dim(dim, factor, k),
                ..*b
            })
            .collect()
    };
    ModelBands {
        input: redim(&bands.input, m.dim, m.input_bands.factor),
        output: redim(&bands.output, m.last_hidden(), m.output_bands.factor),
        class_counts: bands.class_counts.clone(),
    }
}

/// The smallest budget `b` with `peak + slack_bytes(b) ≤ b`.
fn needed_budget(peak: u64) -> u64 {
    // b − b/100 ≥ peak + 16 KiB  ⇐  b ≥ (peak + 16 KiB) · 100/99, plus one for rounding.
    ((peak + (16 << 10)) as u128 * 100 / 99 + 1) as u64
}

fn round_up_mib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20) << 20
}
