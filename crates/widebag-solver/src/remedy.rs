//! The layout remedies the solver may take when the configured layout does not reach the best
//! plan, in their documented order: first those that cost time and keep the numbers (a narrower
//! class chunk, checkpointing the MLP, then the host tier), then those that cost precision (half
//! tables, then half moments). Each is a change of
//! config keys; a pinned key is never changed, and a remedy the config already has is skipped.

use serde::Serialize;
use widebag_config::{BandPlacement, Checkpointing, Config, Layout, Precision, TableOptim};

use crate::Pins;

/// One layout remedy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
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
    /// within 0.2 % of f32's validation loss on GCIDE and Zipf (README, `benches/precision.sh`).
    HalfTables,
    /// bf16 moments of the table optimizer (`optim.state_dtype`), where they are stored as bf16:
    /// a device that has bf16 (flex, most GPUs; not lavapipe), or every band on the host tier. Costs precision: within 0.41 % on GCIDE and Zipf.
    HalfMoments,
}

impl Remedy {
    /// The documented order.
    pub const ORDER: [Remedy; 5] = [
        Remedy::NarrowChunk,
        Remedy::Checkpointing,
        Remedy::HostTier,
        Remedy::HalfTables,
        Remedy::HalfMoments,
    ];

    /// The config key the remedy changes.
    pub fn key(self) -> &'static str {
        match self {
            Remedy::NarrowChunk => "model.class_chunk",
            Remedy::Checkpointing => "model.checkpointing",
            Remedy::HostTier => "model.input_bands.placement",
            Remedy::HalfTables => "model.input_bands.dtype",
            Remedy::HalfMoments => "optim.state_dtype",
        }
    }

    /// A short name: `host tier`, `f16 tables`, `bf16 moments`.
    pub fn name(self) -> &'static str {
        match self {
            Remedy::NarrowChunk => "narrower chunk",
            Remedy::Checkpointing => "MLP checkpointing",
            Remedy::HostTier => "host tier",
            Remedy::HalfTables => "f16 tables",
            Remedy::HalfMoments => "bf16 moments",
        }
    }

    /// What it costs: `time` or `precision`.
    pub fn cost(self) -> &'static str {
        match self {
            Remedy::NarrowChunk | Remedy::Checkpointing | Remedy::HostTier => "time",
            Remedy::HalfTables | Remedy::HalfMoments => "precision",
        }
    }

    fn pinned(self, pins: Pins) -> bool {
        match self {
            Remedy::NarrowChunk => pins.class_chunk,
            Remedy::Checkpointing => pins.checkpointing,
            Remedy::HostTier => pins.placement,
            Remedy::HalfTables => pins.table_dtype,
            Remedy::HalfMoments => pins.state_dtype,
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
        }
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
    let mut out = vec![(Vec::new(), config.clone())];
    for r in Remedy::ORDER {
        if r.pinned(pins) {
            continue;
        }
        let (taken, last) = out.last().expect("the configured rung");
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
        }
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
    pub verdict: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_adds_remedies_in_order_skipping_pins_and_what_is_taken() {
        let c = Config::default();
        let rungs = ladder(&c, 1, Pins::default(), false);
        let taken: Vec<Vec<Remedy>> = rungs.iter().map(|(r, _)| r.clone()).collect();
        // One band on a device without bf16: the narrowest chunk, the host tier, then f16
        // tables; the moments then live on the host, so bf16 moments follow.
        let [chunk, ckpt, host, half, moments] = Remedy::ORDER;
        assert_eq!(
            taken,
            vec![
                vec![],
                vec![chunk],
                vec![chunk, ckpt],
                vec![chunk, ckpt, host],
                vec![chunk, ckpt, host, half],
                vec![chunk, ckpt, host, half, moments],
            ]
        );
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
}
