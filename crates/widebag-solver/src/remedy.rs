//! The layout remedies the solver may take when the configured layout does not reach the best
//! plan, in their documented order: first those that cost time and keep the numbers (the host
//! tier), then those that cost precision (half tables, then half moments). Each is a change of
//! config keys; a pinned key is never changed, and a remedy the config already has is skipped.

use serde::Serialize;
use widebag_config::{BandPlacement, Config, Layout, Precision, TableOptim};

use crate::Pins;

/// One layout remedy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
    /// Every tail band in host memory, or the whole table when it is one band
    /// (`model.input_bands.placement`). Costs time: a batch's rows and their state cross to the
    /// device and their updates back each step. The numbers are unchanged.
    HostTier,
    /// f16 table rows with stochastic rounding (`model.input_bands.dtype`). Costs precision:
    /// within 0.2 % of f32's validation loss on GCIDE and Zipf (README, `benches/precision.sh`).
    HalfTables,
    /// bf16 moments of the table optimizer (`optim.state_dtype`), where the device stores bf16
    /// (flex, or every band on the host tier). Costs precision: within 0.41 % on GCIDE and Zipf.
    HalfMoments,
}

impl Remedy {
    /// The documented order.
    pub const ORDER: [Remedy; 3] = [Remedy::HostTier, Remedy::HalfTables, Remedy::HalfMoments];

    /// The config key the remedy changes.
    pub fn key(self) -> &'static str {
        match self {
            Remedy::HostTier => "model.input_bands.placement",
            Remedy::HalfTables => "model.input_bands.dtype",
            Remedy::HalfMoments => "optim.state_dtype",
        }
    }

    /// A short name: `host tier`, `f16 tables`, `bf16 moments`.
    pub fn name(self) -> &'static str {
        match self {
            Remedy::HostTier => "host tier",
            Remedy::HalfTables => "f16 tables",
            Remedy::HalfMoments => "bf16 moments",
        }
    }

    /// What it costs: `time` or `precision`.
    pub fn cost(self) -> &'static str {
        match self {
            Remedy::HostTier => "time",
            Remedy::HalfTables | Remedy::HalfMoments => "precision",
        }
    }

    fn pinned(self, pins: Pins) -> bool {
        match self {
            Remedy::HostTier => pins.placement,
            Remedy::HalfTables => pins.table_dtype,
            Remedy::HalfMoments => pins.state_dtype,
        }
    }

    /// The config with the remedy taken (`n_bands` input bands), or `None` when it changes
    /// nothing there: already taken, or not applicable.
    pub fn applied(self, config: &Config, n_bands: usize, host_threads: u64) -> Option<Config> {
        if config.model.layout != Layout::Sparse {
            return None;
        }
        let ib = &config.model.input_bands;
        let mut c = config.clone();
        match self {
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
                if config.optim.state_dtype != Precision::F32 || !(all_host || host_threads > 0) {
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
            Remedy::HostTier => {
                let v: Vec<&str> = (0..n_bands).map(|k| ib.placement_of(k).name()).collect();
                format!("{v:?}")
            }
            Remedy::HalfTables => {
                let v: Vec<&str> = (0..n_bands).map(|k| ib.dtype_of(k).name()).collect();
                format!("{v:?}")
            }
            Remedy::HalfMoments => config.optim.state_dtype.name().to_string(),
        }
    }
}

/// The rungs the solver compares: the configured layout, then each remedy not pinned and not
/// already taken added in [`Remedy::ORDER`], cumulatively: `(remedies so far, config)`.
pub(crate) fn ladder(
    config: &Config,
    n_bands: usize,
    pins: Pins,
    host_threads: u64,
) -> Vec<(Vec<Remedy>, Config)> {
    let mut out = vec![(Vec::new(), config.clone())];
    for r in Remedy::ORDER {
        if r.pinned(pins) {
            continue;
        }
        let (taken, last) = out.last().expect("the configured rung");
        if let Some(next) = r.applied(last, n_bands, host_threads) {
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
    Placement(Vec<BandPlacement>),
    TableDtype(Vec<Precision>),
    StateDtype(Precision),
}

impl Change {
    /// `remedy`'s key as `config` (the rung that took it) holds it.
    pub(crate) fn of(remedy: Remedy, config: &Config) -> Self {
        let ib = &config.model.input_bands;
        match remedy {
            Remedy::HostTier => Change::Placement(ib.placement.clone()),
            Remedy::HalfTables => Change::TableDtype(ib.dtype.clone()),
            Remedy::HalfMoments => Change::StateDtype(config.optim.state_dtype),
        }
    }
}

impl RemedyTaken {
    /// Sets the remedy's key in `config`.
    pub fn apply(&self, config: &mut Config) {
        match &self.change {
            Change::Placement(p) => config.model.input_bands.placement = p.clone(),
            Change::TableDtype(d) => config.model.input_bands.dtype = d.clone(),
            Change::StateDtype(d) => config.optim.state_dtype = *d,
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
        let rungs = ladder(&c, 1, Pins::default(), 0);
        let taken: Vec<Vec<Remedy>> = rungs.iter().map(|(r, _)| r.clone()).collect();
        // One band on a device without bf16: host tier, then f16 tables; the moments then live
        // on the host, so bf16 moments follow.
        assert_eq!(
            taken,
            vec![
                vec![],
                vec![Remedy::HostTier],
                vec![Remedy::HostTier, Remedy::HalfTables],
                vec![Remedy::HostTier, Remedy::HalfTables, Remedy::HalfMoments],
            ]
        );
        let last = &rungs[3].1;
        assert_eq!(last.model.input_bands.placement, vec![BandPlacement::Host]);
        assert_eq!(last.model.input_bands.dtype, vec![Precision::F16]);
        assert_eq!(last.optim.state_dtype, Precision::Bf16);
        let pins = Pins {
            placement: true,
            ..Pins::default()
        };
        // Pinned on the device (no bf16 there): only f16 tables.
        let rungs = ladder(&c, 1, pins, 0);
        assert_eq!(rungs.len(), 2);
        assert_eq!(rungs[1].0, vec![Remedy::HalfTables]);
        // On flex bf16 moments need no host tier.
        assert_eq!(ladder(&c, 1, pins, 2).len(), 3);
        let mut dense = c.clone();
        dense.model.layout = Layout::Dense;
        assert_eq!(ladder(&dense, 1, Pins::default(), 0).len(), 1);
    }
}
