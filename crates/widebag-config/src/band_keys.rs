//! The `[model.input_bands]` and `[model.output_bands]` keys: head/tail cutoffs (`"auto"` or
//! explicit ids), the width factor, placement, id order and the byte budgets of `"auto"`.

use serde::{Deserialize, Serialize};

use crate::choices::Precision;

/// Band boundaries over frequency-sorted ids: `"auto"` (chosen from the data's frequencies and
/// a byte budget) or explicit ascending cutoffs (`[20000, 80000]`: ids below 20,000 are the
/// head, 20,000–79,999 the first tail band, the rest the second). Empty: one band.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Cutoffs {
    Auto,
    #[default]
    None,
    Ids(Vec<usize>),
}

impl Cutoffs {
    /// The explicit cutoffs (empty for `None`; `Auto` is resolved by `open_data`).
    pub fn ids(&self) -> &[usize] {
        match self {
            Cutoffs::Ids(v) => v,
            _ => &[],
        }
    }
    pub fn is_split(&self) -> bool {
        !matches!(self, Cutoffs::None)
    }
}

impl Serialize for Cutoffs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Cutoffs::Auto => s.serialize_str("auto"),
            Cutoffs::None => Vec::<usize>::new().serialize(s),
            Cutoffs::Ids(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Cutoffs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Cutoffs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "\"auto\" or a list of ascending ids")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Cutoffs, E> {
                if v == "auto" {
                    Ok(Cutoffs::Auto)
                } else {
                    Err(E::custom(format!(
                        "expected \"auto\" or a list of ascending ids, found \"{v}\""
                    )))
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Cutoffs, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = a.next_element::<usize>()? {
                    out.push(x);
                }
                Ok(if out.is_empty() {
                    Cutoffs::None
                } else {
                    Cutoffs::Ids(out)
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `[model.input_bands]`: adaptive input. Band 0 (the head) has `model.dim`-wide rows; tail band
/// `k` has `dim / factor^k`-wide rows (at least 1) and a learned `[dim_k, dim]` projection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputBands {
    pub cutoffs: Cutoffs,
    pub factor: usize,
    /// Placement of band k: `placement[min(k, len - 1)]`, so `["device", "host"]` keeps the
    /// head on the device and every tail band in host memory.
    pub placement: Vec<BandPlacement>,
    /// Storage of band k's table rows: `dtype[min(k, len - 1)]` (`"f32"`, `"f16"`, `"bf16"`), so
    /// `["f32", "f16"]` keeps the head in f32 and every tail band in f16.
    pub dtype: Vec<Precision>,
    /// `"frequency"` renumbers the ids by their frequency in the data before the cut.
    pub order: IdOrder,
    /// `cutoffs = "auto"`: bytes the bands' tables, projections and table-optimizer state may
    /// take (units as `plan.budget`); unset: a fifth of the unsplit table's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

impl Default for InputBands {
    fn default() -> Self {
        Self {
            cutoffs: Cutoffs::None,
            factor: 4,
            placement: vec![BandPlacement::Device],
            dtype: vec![Precision::F32],
            order: IdOrder::Frequency,
            budget: None,
        }
    }
}

impl InputBands {
    pub fn placement_of(&self, band: usize) -> BandPlacement {
        self.placement
            .get(band.min(self.placement.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    }

    pub fn dtype_of(&self, band: usize) -> Precision {
        self.dtype
            .get(band.min(self.dtype.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    }
}

/// `[model.output_bands]`: adaptive softmax. The head holds classes below the first cutoff plus
/// one token per tail cluster, on the last hidden size `h`; tail cluster `k` projects `h` to
/// `h / factor^k` (at least 1) and has its own softmax over its classes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputBands {
    pub cutoffs: Cutoffs,
    pub factor: usize,
    /// `"frequency"` renumbers the classes by their frequency in the data before the cut.
    pub order: IdOrder,
    /// `cutoffs = "auto"`: bytes the output layer's parameters and dense-optimizer state may take;
    /// unset: a fifth of the full output layer's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

impl Default for OutputBands {
    fn default() -> Self {
        Self {
            cutoffs: Cutoffs::None,
            factor: 4,
            order: IdOrder::Frequency,
            budget: None,
        }
    }
}

/// Where a band's table and its optimizer state live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BandPlacement {
    #[default]
    Device,
    /// Host memory: the device gets only a batch's unique rows (and their state) each step and
    /// sends back only the updates.
    Host,
}

/// How ids are numbered before they are cut into bands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdOrder {
    /// Renumbered by their frequency in the data (most frequent first), so the head band holds
    /// the most frequent ids whatever the data's own numbering (hashed ids, item ids).
    #[default]
    Frequency,
    /// The data's own numbering (already frequency-sorted, e.g. a text reader's vocabulary).
    Data,
}

impl BandPlacement {
    pub fn name(self) -> &'static str {
        match self {
            BandPlacement::Device => "device",
            BandPlacement::Host => "host",
        }
    }
}
