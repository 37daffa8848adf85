//! The layout remedies the solver may take when the configured layout does not reach the best
//! plan, in their documented order: first those that cost time and keep the numbers (the logits
//! recomputed where the config keeps them, a narrower class chunk, checkpointing the MLP, then
//! the host tier), then those that cost precision (half
//! tables, then half moments), then those that cost accuracy: head/tail input bands (narrower
//! rows for the rarer ids), then the sampled softmax (a step scores the batch's targets and
//! drawn negatives, not every class), then the adaptive softmax (a head of the most frequent
//! classes and narrower tail clusters, in place of the sampled softmax), each side cut by its
//! byte budget as `"auto"` cuts it, where run preparation knows the data's frequencies. Each is a change of
//! config keys; a pinned key is never changed, and a remedy the config already has is skipped.

use serde::Serialize;
use widebag_config::bands::{self, ModelBands};
use widebag_config::{
    BandPlacement, Checkpointing, Config, Cutoffs, Layout, Logits, OutputKind, Precision,
    TableOptim, units,
};

use crate::problem::Pins;

/// Negatives the sampled softmax rung draws a step (`model.sampling.negatives`).
pub const SAMPLED_NEGATIVES: usize = 1024;

/// One layout remedy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
    /// The full softmax's logits (the adaptive softmax's head's) made again in backward
    /// (`model.logits = "recompute"`) where the config keeps them (`"keep"`, flex's host
    /// softmax): one output matmul more per step, no `[batch, classes]` buffer. Costs time; the
    /// numbers are unchanged.
    RecomputeLogits,
    /// A narrower class chunk of the full softmax (`model.class_chunk`): smaller logits, more
    /// passes over the output layer. Costs time; the numbers are unchanged. The ladder tries the
    /// narrowest (at most [`MAX_CHUNKS`] chunks); the solver then widens it as far as the plan
    /// allows.
    NarrowChunk,
    /// The MLP recomputed in backward (`model.checkpointing = "mlp"`): only its block input and
    /// output are kept through the output layer. Costs one more trunk forward; the numbers are
    /// unchanged.
    Checkpointing,
    /// Every tail band in host memory, or the whole table when it is one band
    /// (`model.input_bands.placement`). Costs time: a batch's rows and their state cross to the
    /// device and their updates back each step. The numbers are unchanged.
    HostTier,
    /// f16 table rows with stochastic rounding (`model.input_bands.dtype`). Costs precision:
    /// within 0.2 % of f32's validation loss on GCIDE and Zipf (docs/memory.md, `benches/precision.sh`).
    HalfTables,
    /// bf16 moments of the table optimizer (`optim.state_dtype`), where they are stored as bf16:
    /// a device that has bf16 (flex, most GPUs; not lavapipe), or every band on the host tier. Costs precision: within 0.41 % on GCIDE and Zipf.
    HalfMoments,
    /// Head/tail input bands over frequency-sorted ids (`model.input_bands.cutoffs`), cut by a
    /// side budget as `"auto"` cuts them: tail bands a quarter as wide per band, projected up.
    /// Costs accuracy. Tried at the default budget (a fifth of the unsplit table's bytes); the
    /// solver then raises it as far as the plan allows.
    HeadTailInput,
    /// The adaptive softmax over frequency-sorted classes (`model.output_bands`), cut by a side
    /// budget as `"auto"` cuts it: the output layer and its dense state shrink to the budget.
    /// Costs accuracy. The ladder tries the default budget (a fifth of the full layer's); the
    /// solver then raises it (a larger head) as far as the plan allows.
    AdaptiveOutput,
    /// The sampled softmax (`model.output = "sampled_softmax"`, [`SAMPLED_NEGATIVES`] drawn
    /// negatives with log-Q correction): a step's logits and the output layer's gradient are
    /// the batch's targets and the drawn classes' (`[rows, candidates]`, `[last, candidates]`)
    /// instead of every class's; the parameters and their state stay whole. Costs accuracy.
    /// Offered where the classes outnumber the negatives four times over; after the adaptive
    /// softmax, which it replaces (GCIDE's frontier: perplexity 5,034 against the adaptive
    /// softmax's 2,198 and the whole model's 2,813, docs/remedies.md).
    SampledOutput,
}

impl Remedy {
    /// The documented order.
    pub const ORDER: [Remedy; 9] = [
        Remedy::RecomputeLogits,
        Remedy::NarrowChunk,
        Remedy::Checkpointing,
        Remedy::HostTier,
        Remedy::HalfTables,
        Remedy::HalfMoments,
        Remedy::HeadTailInput,
        Remedy::AdaptiveOutput,
        Remedy::SampledOutput,
    ];

    /// The config key the remedy changes.
    pub fn key(self) -> &'static str {
        match self {
            Remedy::RecomputeLogits => "model.logits",
            Remedy::NarrowChunk => "model.class_chunk",
            Remedy::Checkpointing => "model.checkpointing",
            Remedy::HostTier => "model.input_bands.placement",
            Remedy::HalfTables => "model.input_bands.dtype",
            Remedy::HalfMoments => "optim.state_dtype",
            Remedy::HeadTailInput => "model.input_bands.cutoffs",
            Remedy::SampledOutput => "model.output",
            Remedy::AdaptiveOutput => "model.output_bands",
        }
    }

    /// A short name: `host tier`, `f16 tables`, `bf16 moments`.
    pub fn name(self) -> &'static str {
        match self {
            Remedy::RecomputeLogits => "logits recomputed",
            Remedy::NarrowChunk => "narrower chunk",
            Remedy::Checkpointing => "MLP checkpointing",
            Remedy::HostTier => "host tier",
            Remedy::HalfTables => "f16 tables",
            Remedy::HalfMoments => "bf16 moments",
            Remedy::HeadTailInput => "head/tail input",
            Remedy::SampledOutput => "sampled softmax",
            Remedy::AdaptiveOutput => "adaptive softmax",
        }
    }

    /// What it costs: `time` or `precision`.
    pub fn cost(self) -> &'static str {
        match self {
            Remedy::RecomputeLogits
            | Remedy::NarrowChunk
            | Remedy::Checkpointing
            | Remedy::HostTier => "time",
            Remedy::HalfTables | Remedy::HalfMoments => "precision",
            Remedy::HeadTailInput | Remedy::SampledOutput | Remedy::AdaptiveOutput => "accuracy",
        }
    }

    /// Whether it changes what the model can learn (`plan.keep_accuracy` forbids these).
    pub fn costs_accuracy(self) -> bool {
        self.cost() == "accuracy"
    }

    /// Whether the solver may not take it: its key is pinned, or it costs accuracy and the
    /// config keeps accuracy.
    pub(crate) fn barred(self, pins: Pins, config: &Config) -> bool {
        self.pinned(pins) || (config.plan.keep_accuracy && self.costs_accuracy())
    }

    fn pinned(self, pins: Pins) -> bool {
        match self {
            Remedy::RecomputeLogits => pins.logits,
            Remedy::NarrowChunk => pins.class_chunk,
            Remedy::Checkpointing => pins.checkpointing,
            Remedy::HostTier => pins.placement,
            Remedy::HalfTables => pins.table_dtype,
            Remedy::HalfMoments => pins.state_dtype,
            Remedy::HeadTailInput => pins.input_cutoffs,
            Remedy::SampledOutput | Remedy::AdaptiveOutput => pins.output_bands,
        }
    }

    /// The config with the remedy taken (`n_bands` input bands), or `None` when it changes
    /// nothing there: already taken, or not applicable.
    pub fn applied(self, config: &Config, n_bands: usize, device_bf16: bool) -> Option<Config> {
        if config.model.layout != Layout::Sparse {
            return None;
        }
        let ib = &config.model.input_bands;
        let mut c = config.clone();
        match self {
            Remedy::RecomputeLogits => {
                if config.model.logits == Logits::Recompute {
                    return None;
                }
                c.model.logits = Logits::Recompute;
            }
            Remedy::NarrowChunk => {
                if config.model.output_bands.cutoffs.is_split() {
                    return None;
                }
                let n = config.data.n_classes();
                let narrowest = narrowest_chunk(n);
                if effective_chunk(config) <= narrowest {
                    return None;
                }
                c.model.class_chunk = narrowest;
            }
            Remedy::Checkpointing => {
                if config.model.checkpointing == Checkpointing::Mlp {
                    return None;
                }
                c.model.checkpointing = Checkpointing::Mlp;
            }
            Remedy::HostTier => {
                let to = if n_bands > 1 {
                    vec![BandPlacement::Device, BandPlacement::Host]
                } else {
                    vec![BandPlacement::Host]
                };
                let same = (0..n_bands).all(|k| {
                    ib.placement_of(k) == to[k.min(to.len() - 1)]
                        || ib.placement_of(k) == BandPlacement::Host
                });
                if same {
                    return None;
                }
                c.model.input_bands.placement = to;
            }
            Remedy::HalfTables => {
                if (0..n_bands).all(|k| ib.dtype_of(k) != Precision::F32) {
                    return None;
                }
                c.model.input_bands.dtype = (0..n_bands)
                    .map(|k| match ib.dtype_of(k) {
                        Precision::F32 => Precision::F16,
                        other => other,
                    })
                    .collect();
            }
            Remedy::HalfMoments => {
                // Whatever the table optimizer (it may still change): SGD keeps no moments, so
                // the rung costs what the one before did and loses the tie.
                let all_host = (0..n_bands).all(|k| ib.placement_of(k) == BandPlacement::Host);
                if config.optim.state_dtype != Precision::F32 || !(all_host || device_bf16) {
                    return None;
                }
                c.optim.state_dtype = Precision::Bf16;
            }
            Remedy::HeadTailInput => {
                if ib.cutoffs.is_split() {
                    return None;
                }
                let budget = bands::input_side_bytes(config, &[]) / 5;
                return with_input_budget(config, budget);
            }
            Remedy::SampledOutput => {
                let m = &config.model;
                let whole = matches!(m.output, OutputKind::Full | OutputKind::Multinomial);
                let n_classes = config.data.n_classes();
                // Half-precision output products are the full softmax's (config validation).
                let half = !m.output_precision.is_f32();
                if !whole || m.tie_output || m.output_bands.cutoffs.is_split() || half {
                    return None;
                }
                if n_classes < 4 * SAMPLED_NEGATIVES {
                    return None;
                }
                c.model.output = OutputKind::SampledSoftmax;
                c.model.sampling.negatives = SAMPLED_NEGATIVES;
            }
            Remedy::AdaptiveOutput => {
                if config.model.output_bands.cutoffs.is_split()
                    || config.model.output.sampled()
                    || !config.model.output_precision.is_f32()
                {
                    return None;
                }
                let budget = bands::output_side_bytes(config, &[]) / 5;
                return with_output_budget(config, budget);
            }
        }
        Some(c)
    }

    /// The remedied key's value in `config`, as the plan prints it.
    pub fn value(self, config: &Config, n_bands: usize) -> String {
        let ib = &config.model.input_bands;
        match self {
            Remedy::NarrowChunk => match config.model.class_chunk {
                0 => "0 (largest)".to_string(),
                c => c.to_string(),
            },
            Remedy::HostTier => {
                let v: Vec<&str> = (0..n_bands).map(|k| ib.placement_of(k).name()).collect();
                format!("{v:?}")
            }
            Remedy::HalfTables => {
                let v: Vec<&str> = (0..n_bands).map(|k| ib.dtype_of(k).name()).collect();
                format!("{v:?}")
            }
            Remedy::HalfMoments => config.optim.state_dtype.name().to_string(),
            Remedy::Checkpointing => config.model.checkpointing.name().to_string(),
            Remedy::RecomputeLogits => config.model.logits.name().to_string(),
            Remedy::HeadTailInput => side_value(&ib.budget, ib.cutoffs.ids(), "unsplit"),
            Remedy::SampledOutput => match config.model.output.sampled() {
                true => format!(
                    "{} ({} negatives)",
                    config.model.output.name(),
                    config.model.sampling.negatives
                ),
                false => config.model.output.name().to_string(),
            },
            Remedy::AdaptiveOutput => {
                let ob = &config.model.output_bands;
                side_value(&ob.budget, ob.cutoffs.ids(), "full softmax")
            }
        }
    }
}

/// A side's budget and cutoffs as the plan prints them.
fn side_value(budget: &Option<String>, cuts: &[usize], unsplit: &str) -> String {
    match (budget, cuts) {
        (Some(b), cuts) if !cuts.is_empty() => {
            let b = units::parse_bytes(b).map_or(b.clone(), units::format_bytes);
            format!("{b} (cutoffs {cuts:?})")
        }
        _ => format!("none ({unsplit})"),
    }
}

/// `config` with its input cut into head and tail bands as `"auto"` cuts it within
/// `budget_bytes` (cutoffs explicit, the budget recorded); `None` when nothing would be cut.
pub(crate) fn with_input_budget(config: &Config, budget_bytes: u64) -> Option<Config> {
    if config.model.layout != Layout::Sparse {
        return None;
    }
    let cuts = bands::auto_input_cutoffs(config, budget_bytes)?;
    if cuts.is_empty() {
        return None;
    }
    let mut c = config.clone();
    c.model.input_bands.cutoffs = Cutoffs::Ids(cuts);
    c.model.input_bands.budget = Some(format!("{budget_bytes}B"));
    Some(c)
}

/// `config` with its output cut as `"auto"` cuts it within `budget_bytes` (the cutoffs kept
/// explicit, so the plan's optimizers cannot move them; the budget recorded beside them): the
/// full softmax becomes the adaptive one, a multinomial output its adaptive form. `None` when
/// nothing would be cut.
pub(crate) fn with_output_budget(config: &Config, budget_bytes: u64) -> Option<Config> {
    if config.model.layout != Layout::Sparse {
        return None;
    }
    let cuts = bands::auto_output_cutoffs(config, budget_bytes)?;
    if cuts.is_empty() {
        return None;
    }
    let mut c = config.clone();
    if c.model.output == OutputKind::Full {
        c.model.output = OutputKind::Adaptive;
    }
    c.model.output_bands.cutoffs = Cutoffs::Ids(cuts);
    c.model.output_bands.budget = Some(format!("{budget_bytes}B"));
    Some(c)
}

/// The model bands of a rung: the problem's, each side cut as the rung cut it.
pub(crate) fn bands_of(config: &Config, base: &ModelBands) -> ModelBands {
    let m = &config.model;
    ModelBands {
        input: match m.input_bands.cutoffs.is_split() {
            true => bands::input_bands(config).unwrap_or_else(|_| base.input.clone()),
            false => base.input.clone(),
        },
        output: match m.output_bands.cutoffs.is_split() {
            true => bands::output_bands(config).unwrap_or_else(|_| base.output.clone()),
            false => base.output.clone(),
        },
        class_counts: base.class_counts.clone(),
    }
}

/// The most class chunks the narrower-chunk remedy makes: each is a pass over the output layer.
pub const MAX_CHUNKS: usize = 64;

/// The narrowest chunk of `n_classes` the remedy tries.
pub(crate) fn narrowest_chunk(n_classes: usize) -> usize {
    n_classes.div_ceil(MAX_CHUNKS).max(1)
}

/// The configured chunk, `0` read as every class (the buffer limit caps it further).
pub(crate) fn effective_chunk(config: &Config) -> usize {
    match config.model.class_chunk {
        0 => config.data.n_classes(),
        c => c,
    }
}

/// `remedies` taken on `config` in order, each applied as the ladder applies it; `None` when
/// one of them does not apply there (e.g. bf16 moments on a device without bf16 and no host
/// tier).
pub(crate) fn with_remedies(
    config: &Config,
    remedies: &[Remedy],
    n_bands: usize,
    device_bf16: bool,
) -> Option<Config> {
    let mut c = config.clone();
    for r in remedies {
        c = r.applied(&c, n_bands, device_bf16)?;
    }
    Some(c)
}

/// The rungs the solver compares: the configured layout, then each remedy not pinned and not
/// already taken added in [`Remedy::ORDER`], cumulatively: `(remedies so far, config)`.
pub(crate) fn ladder(
    config: &Config,
    n_bands: usize,
    pins: Pins,
    device_bf16: bool,
) -> Vec<(Vec<Remedy>, Config)> {
    let mut out: Vec<(Vec<Remedy>, Config)> = vec![(Vec::new(), config.clone())];
    for r in Remedy::ORDER {
        if r.barred(pins, config) {
            continue;
        }
        // The sampled softmax replaces the adaptive softmax rather than stacking on it: it
        // follows the last rung without it.
        let (taken, last) = match r {
            Remedy::SampledOutput => out
                .iter()
                .rev()
                .find(|(t, _)| !t.contains(&Remedy::AdaptiveOutput))
                .expect("the configured rung"),
            _ => out.last().expect("the configured rung"),
        };
        if let Some(next) = r.applied(last, n_bands, device_bf16) {
            let mut taken = taken.clone();
            taken.push(r);
            out.push((taken, next));
        }
    }
    out
}

/// A remedy the chosen plan takes: the key, its value before and after, what it costs, and the
/// bytes it saves at the chosen batch and optimizers (the peak without it less the peak with
/// it, the earlier remedies taken).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RemedyTaken {
    pub remedy: Remedy,
    pub key: &'static str,
    pub from: String,
    pub to: String,
    pub cost: &'static str,
    pub saves_bytes: i64,
    /// The value set, as the config holds it.
    pub change: Change,
    /// What the remedy cost on the reference datasets ([`Remedy::reference`]).
    pub reference: &'static str,
}

/// A remedy's new value of its key.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    ClassChunk(usize),
    Placement(Vec<BandPlacement>),
    TableDtype(Vec<Precision>),
    StateDtype(Precision),
    Checkpointing(Checkpointing),
    Logits(Logits),
    /// The input cutoffs and the side budget they were cut by.
    InputBands {
        cutoffs: Vec<usize>,
        budget: Option<String>,
    },
    /// The output's loss and its drawn negatives.
    Output {
        output: OutputKind,
        negatives: usize,
    },
    /// The output's objective, cutoffs and the side budget they were cut by.
    OutputBands {
        output: OutputKind,
        cutoffs: Vec<usize>,
        budget: Option<String>,
    },
}

impl Change {
    /// `remedy`'s key as `config` (the rung that took it) holds it.
    pub(crate) fn of(remedy: Remedy, config: &Config) -> Self {
        let ib = &config.model.input_bands;
        match remedy {
            Remedy::NarrowChunk => Change::ClassChunk(config.model.class_chunk),
            Remedy::HostTier => Change::Placement(ib.placement.clone()),
            Remedy::HalfTables => Change::TableDtype(ib.dtype.clone()),
            Remedy::HalfMoments => Change::StateDtype(config.optim.state_dtype),
            Remedy::Checkpointing => Change::Checkpointing(config.model.checkpointing),
            Remedy::RecomputeLogits => Change::Logits(config.model.logits),
            Remedy::HeadTailInput => Change::InputBands {
                cutoffs: ib.cutoffs.ids().to_vec(),
                budget: ib.budget.clone(),
            },
            Remedy::SampledOutput => Change::Output {
                output: config.model.output,
                negatives: config.model.sampling.negatives,
            },
            Remedy::AdaptiveOutput => Change::OutputBands {
                output: config.model.output,
                cutoffs: config.model.output_bands.cutoffs.ids().to_vec(),
                budget: config.model.output_bands.budget.clone(),
            },
        }
    }
}

impl RemedyTaken {
    /// Sets the remedy's key in `config`.
    pub fn apply(&self, config: &mut Config) {
        self.change.apply_to(config);
    }
}

impl Change {
    /// Sets the key in `config`.
    pub fn apply_to(&self, config: &mut Config) {
        match self {
            Change::ClassChunk(c) => config.model.class_chunk = *c,
            Change::Placement(p) => config.model.input_bands.placement = p.clone(),
            Change::TableDtype(d) => config.model.input_bands.dtype = d.clone(),
            Change::StateDtype(d) => config.optim.state_dtype = *d,
            Change::Checkpointing(c) => config.model.checkpointing = *c,
            Change::Logits(l) => config.model.logits = *l,
            Change::InputBands { cutoffs, budget } => {
                config.model.input_bands.cutoffs = cuts_of(cutoffs);
                config.model.input_bands.budget = budget.clone();
            }
            Change::Output { output, negatives } => {
                config.model.output = *output;
                config.model.sampling.negatives = *negatives;
            }
            Change::OutputBands {
                output,
                cutoffs,
                budget,
            } => {
                config.model.output = *output;
                config.model.output_bands.cutoffs = cuts_of(cutoffs);
                config.model.output_bands.budget = budget.clone();
            }
        }
    }
}

/// Explicit cutoffs, none when empty.
fn cuts_of(cutoffs: &[usize]) -> Cutoffs {
    match cutoffs.is_empty() {
        true => Cutoffs::None,
        false => Cutoffs::Ids(cutoffs.to_vec()),
    }
}

/// Another layout the solver compared: its remedies and its best plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayoutOption {
    pub remedies: Vec<Remedy>,
    pub fits: bool,
    pub batch_size: usize,
    pub table: TableOptim,
    pub dense: widebag_config::DenseOptim,
    pub predicted_peak_bytes: u64,
    pub predicted_examples_per_s: f64,
    pub predicted_step_s: f64,
    pub verdict: String,
}

#[cfg(test)]
mod tests {
    //! Tests of the layout remedies: the ladder in its documented order, pins and what is
    //! taken; checkpointing and the adaptive softmax taken by the solver only where they change
    //! the plan.

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
        let [
            _logits,
            chunk,
            ckpt,
            host,
            half,
            moments,
            input,
            adaptive,
            sampled,
        ] = Remedy::ORDER;
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
                vec![chunk, ckpt, host, half, moments, input, sampled],
            ]
        );
        // Half-precision output products (the full softmax's): neither output remedy is
        // offered, so no rung is a config its validation refuses.
        let mut half_products = c.clone();
        half_products.model.output_precision = Precision::F16;
        let half_rungs = ladder(&half_products, 1, Pins::default(), false);
        assert_eq!(half_rungs.len(), rungs.len() - 2);
        for (remedies, config) in &half_rungs {
            assert!(!remedies.contains(&adaptive) && !remedies.contains(&sampled));
            widebag_config::validate(config).unwrap();
        }
        // The sampled softmax: the output's loss, the parameters whole.
        let cut = &rungs[8].1;
        assert_eq!(cut.model.output, OutputKind::SampledSoftmax);
        assert_eq!(cut.model.sampling.negatives, SAMPLED_NEGATIVES);
        assert!(!cut.model.output_bands.cutoffs.is_split());
        // Head/tail inputs at the default side budget: a fifth of the unsplit table's bytes
        // (at the rung's f16 rows and bf16 moments), every band on the host.
        let cut = &rungs[6].1;
        let cuts = cut.model.input_bands.cutoffs.ids();
        assert!(!cuts.is_empty());
        let unsplit = bands::input_side_bytes(&rungs[5].1, &[]);
        assert!(bands::input_side_bytes(cut, cuts) <= unsplit / 5);
        assert!((0..3).all(|k| cut.model.input_bands.placement_of(k) == BandPlacement::Host));
        // The adaptive softmax at the default side budget (a fifth of the full layer's bytes);
        // the sampled softmax in its place on the next rung.
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
        let budget = (mlp + (16 << 10)) * 100 / 99 + 1;
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
                .all(|(r, c)| !r.contains(&Remedy::RecomputeLogits)
                    && c.model.logits == Logits::Keep)
        );
        assert_eq!(Pins::from_keys(["model.logits"]).keys(), ["model.logits"]);
    }
}
