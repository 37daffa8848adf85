//! Head/tail bands chosen for a run: ids and classes renumbered by frequency, `"auto"` cutoffs
//! resolved against byte budgets, and a `BandReport` of what each split side covers.

use serde::Serialize;
use widebag_config::bands::{self, Band};
use widebag_config::{Config, Cutoffs, IdOrder, units};
use widebag_data::{Relabel, Renumbering};

use crate::error::PrepareError;

pub use widebag_config::bands::AUTO_BANDS;

/// The bands of one side of the model, as chosen (by hand or `"auto"`), with what they cover.
#[derive(Clone, Debug, Serialize)]
pub struct BandReport {
    /// `input` or `output`.
    pub side: &'static str,
    pub auto: bool,
    /// Whether the ids (classes) were renumbered by frequency before the cut.
    pub renumbered: bool,
    pub cutoffs: Vec<usize>,
    pub bands: Vec<Band>,
    /// Per band, the share of the data's entries (input ids or target weight) it holds.
    pub coverage: Vec<f64>,
    /// Parameters of this side with the bands, and unsplit.
    pub parameters: u64,
    pub unsplit_parameters: u64,
    /// `"auto"`: the byte budget the choice had.
    pub budget_bytes: Option<u64>,
}

impl BandReport {
    /// One line for the run's header.
    pub fn line(&self) -> String {
        let dims: Vec<String> = self.bands.iter().map(|b| b.dim.to_string()).collect();
        let cov: Vec<String> = self
            .coverage
            .iter()
            .map(|c| format!("{:.1}%", 100.0 * c))
            .collect();
        format!(
            "{} bands{}{}: cutoffs {:?}, dims [{}], coverage [{}] (head {:.1}%), {} parameters \
             ({:.1}× fewer than unsplit)",
            self.side,
            if self.auto { " (auto)" } else { "" },
            if self.renumbered {
                " (renumbered by frequency)"
            } else {
                ""
            },
            self.cutoffs,
            dims.join(", "),
            cov.join(", "),
            100.0 * self.coverage.first().copied().unwrap_or(0.0),
            self.parameters,
            self.unsplit_parameters as f64 / self.parameters.max(1) as f64,
        )
    }
}

/// Entries per id (`input`) and target weight per class (`output`): counted over a data file,
/// the generator's expected figures for synthetic data.
pub(crate) struct Frequencies {
    pub(crate) ids: Vec<f64>,
    pub(crate) classes: Vec<f64>,
}

impl Frequencies {
    /// Renumbers each split side whose `order` is `frequency` (most frequent first), moves the
    /// counts to the new numbering, and returns the renumbering (empty where nothing moves).
    pub(crate) fn renumber(&mut self, config: &Config) -> Relabel {
        let m = &config.model;
        let side = |split: bool, order: IdOrder, counts: &mut Vec<f64>| {
            if !split || order != IdOrder::Frequency {
                return None;
            }
            let r = Renumbering::by_frequency(counts);
            if r.is_identity() {
                return None;
            }
            *counts = r.permute(counts);
            Some(r)
        };
        Relabel {
            ids: side(
                m.input_bands.cutoffs.is_split(),
                m.input_bands.order,
                &mut self.ids,
            ),
            classes: side(
                m.output_bands.cutoffs.is_split(),
                m.output_bands.order,
                &mut self.classes,
            ),
        }
    }

    /// Share of `counts` held by each band.
    fn coverage(counts: &[f64], bands: &[Band]) -> Vec<f64> {
        let total: f64 = counts.iter().sum::<f64>().max(f64::MIN_POSITIVE);
        bands
            .iter()
            .map(|b| counts[b.start..b.end].iter().sum::<f64>() / total)
            .collect()
    }
}

/// Resolves `"auto"` cutoffs against the byte budgets and reports both sides' bands.
pub(crate) fn resolve_bands(
    config: &mut Config,
    freq: &Frequencies,
    relabel: &Relabel,
) -> Result<Vec<BandReport>, PrepareError> {
    let mut reports = Vec::new();
    // Input side.
    let ib = config.model.input_bands.clone();
    let (width, dim) = (config.data.width, config.model.dim);
    let unsplit = bands::bands(width, dim, ib.factor, &[]).expect("one band");
    let input_bytes = |cuts: &[usize]| bands::input_side_bytes(config, cuts);
    let mut budget_bytes = None;
    if ib.cutoffs == Cutoffs::Auto {
        let budget = match &ib.budget {
            Some(b) => units::parse_bytes(b)
                .map_err(|e| PrepareError::setting("model.input_bands.budget", e))?,
            None => input_bytes(&[]) / 5,
        };
        budget_bytes = Some(budget);
        let cuts = bands::auto_input_cutoffs(config, budget).ok_or_else(|| {
            PrepareError::setting(
                "model.input_bands.budget",
                format!(
                    "{} is below the smallest band layout ({})",
                    units::format_bytes(budget),
                    units::format_bytes(input_bytes(&[1, ib.factor.max(2)]))
                ),
            )
        })?;
        config.model.input_bands.cutoffs = if cuts.is_empty() {
            Cutoffs::None
        } else {
            Cutoffs::Ids(cuts)
        };
    }
    if config.model.input_bands.cutoffs.is_split() {
        let b = bands::input_bands(config)
            .map_err(|e| PrepareError::setting("model.input_bands.cutoffs", e))?;
        reports.push(BandReport {
            side: "input",
            auto: ib.cutoffs == Cutoffs::Auto,
            renumbered: relabel.ids.is_some(),
            cutoffs: config.model.input_bands.cutoffs.ids().to_vec(),
            coverage: Frequencies::coverage(&freq.ids, &b),
            parameters: bands::input_parameters(&b, dim),
            unsplit_parameters: bands::input_parameters(&unsplit, dim),
            bands: b,
            budget_bytes,
        });
    }
    // Output side.
    let ob = config.model.output_bands.clone();
    let n = config.data.n_classes();
    let last = config.model.last_hidden();
    let output_bytes = |cuts: &[usize]| bands::output_side_bytes(config, cuts);
    let mut budget_bytes = None;
    if ob.cutoffs == Cutoffs::Auto {
        let budget = match &ob.budget {
            Some(b) => units::parse_bytes(b)
                .map_err(|e| PrepareError::setting("model.output_bands.budget", e))?,
            None => output_bytes(&[]) / 5,
        };
        budget_bytes = Some(budget);
        let cuts = bands::auto_output_cutoffs(config, budget).ok_or_else(|| {
            PrepareError::setting(
                "model.output_bands.budget",
                format!(
                    "{} is below the smallest cluster layout ({})",
                    units::format_bytes(budget),
                    units::format_bytes(output_bytes(&[1, ob.factor.max(2)]))
                ),
            )
        })?;
        config.model.output_bands.cutoffs = if cuts.is_empty() {
            Cutoffs::None
        } else {
            Cutoffs::Ids(cuts)
        };
    }
    if config.model.output_bands.cutoffs.is_split() {
        let b = bands::output_bands(config)
            .map_err(|e| PrepareError::setting("model.output_bands.cutoffs", e))?;
        let unsplit = bands::bands(n, last, ob.factor, &[]).expect("one band");
        reports.push(BandReport {
            side: "output",
            auto: ob.cutoffs == Cutoffs::Auto,
            renumbered: relabel.classes.is_some(),
            cutoffs: config.model.output_bands.cutoffs.ids().to_vec(),
            coverage: Frequencies::coverage(&freq.classes, &b),
            parameters: bands::output_parameters(&b, last),
            unsplit_parameters: bands::output_parameters(&unsplit, last),
            bands: b,
            budget_bytes,
        });
    }
    Ok(reports)
}

/// Whether either side is split or the model reads class counts, so id and class frequencies
/// are needed.
pub(crate) fn wants_frequencies(config: &Config) -> bool {
    config.model.input_bands.cutoffs.is_split()
        || config.model.output_bands.cutoffs.is_split()
        || wants_class_counts(config)
}

/// Whether the model reads the class counts (a sampled loss's unigram proposal).
pub(crate) fn wants_class_counts(config: &Config) -> bool {
    config.model.output.sampled()
        && config.model.sampling.proposal == widebag_config::Proposal::Unigram
}
