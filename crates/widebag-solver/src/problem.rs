//! What the solver is asked: the configured run with its bands, the device, the budget, the
//! pinned knobs and the batch sample ([`Problem`]), and the documented margins it keeps
//! ([`slack_bytes`], [`reserve_bytes`]).

use serde::Serialize;
use widebag_config::Config;
use widebag_config::bands::ModelBands;
use widebag_ledger::step::DeviceFacts;

use crate::sample::RowSample;
use crate::throughput::Calibration;

/// Why planning could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SolverError {
    #[error("plan.min_batch {min_batch} is above plan.max_batch {max_batch}")]
    BatchRange { min_batch: usize, max_batch: usize },
    #[error(
        "the batch sample holds {sampled} rows per batch, fewer than the largest batch planned ({wanted})"
    )]
    SampleTooSmall { sampled: usize, wanted: usize },
    #[error(
        "plan.objective = \"throughput\" needs the device's throughput model, and none is built in \
         for it: measure one with `widebag plan --calibrate --out cal.json` on the device, then \
         plan with `--calibration cal.json`"
    )]
    NoCalibration,
}

/// The part of the budget the solver keeps free: 1 % of the budget plus 16 KiB. The ledger
/// under-predicts by what it does not model (kernel metadata, scalars, the allocator's padding of
/// odd-sized tensors): on the solver's grid with every budget below `plan.max_batch`, up to 25 KiB
/// (0.8 %) at a 3 MiB budget and a batch of 3,016 rows, which 0.25 % + 16 KiB did not cover (the
/// plan ran 896 B over its budget).
pub fn slack_bytes(budget_bytes: u64) -> u64 {
    budget_bytes / 100 + (16 << 10)
}

/// What the default budget leaves to the driver, other processes and the allocator's page
/// rounding: 10 % of the device's memory, at least 512 MiB.
pub fn reserve_bytes(device_memory_bytes: u64) -> u64 {
    (device_memory_bytes / 10).max(512 << 20)
}

/// The budget when none is given: the device's memory minus [`reserve_bytes`], when the device
/// reports its memory.
pub fn default_budget_bytes(device_memory_bytes: Option<u64>) -> Option<u64> {
    device_memory_bytes.map(|m| m.saturating_sub(reserve_bytes(m)))
}

/// Knobs the solver must keep at the config's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pins {
    pub batch_size: bool,
    pub table: bool,
    pub dense: bool,
    /// `model.input_bands.placement`, `model.input_bands.dtype`, `optim.state_dtype` and
    /// `model.class_chunk`: the
    /// layout remedies ([`crate::remedy::Remedy`]) that change them are not taken.
    pub placement: bool,
    pub table_dtype: bool,
    pub state_dtype: bool,
    /// `model.class_chunk`.
    pub class_chunk: bool,
    /// `model.checkpointing`.
    pub checkpointing: bool,
    /// `model.logits`.
    pub logits: bool,
    /// `model.input_bands.cutoffs` (and the side budget that cuts them).
    pub input_cutoffs: bool,
    /// `model.output_bands` (the adaptive softmax's cutoffs and side budget).
    pub output_bands: bool,
}

impl Pins {
    /// Every knob pinned: the configured run, as it is.
    pub const ALL: Pins = Pins {
        batch_size: true,
        table: true,
        dense: true,
        placement: true,
        table_dtype: true,
        state_dtype: true,
        class_chunk: true,
        checkpointing: true,
        logits: true,
        input_cutoffs: true,
        output_bands: true,
    };

    /// Pins from knob keys (`widebag_config::PLAN_KNOBS`); others are ignored.
    pub fn from_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut pins = Self::default();
        for k in keys {
            match k {
                "train.batch_size" => pins.batch_size = true,
                "optim.table" => pins.table = true,
                "optim.dense" => pins.dense = true,
                "model.input_bands.placement" => pins.placement = true,
                "model.input_bands.dtype" => pins.table_dtype = true,
                "optim.state_dtype" => pins.state_dtype = true,
                "model.class_chunk" => pins.class_chunk = true,
                "model.checkpointing" => pins.checkpointing = true,
                "model.logits" => pins.logits = true,
                "model.input_bands.cutoffs" | "model.input_bands.budget" => {
                    pins.input_cutoffs = true
                }
                k if k == "model.output" || k.starts_with("model.output_bands") => {
                    pins.output_bands = true
                }
                _ => {}
            }
        }
        pins
    }

    pub fn keys(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.batch_size {
            out.push("train.batch_size");
        }
        if self.table {
            out.push("optim.table");
        }
        if self.dense {
            out.push("optim.dense");
        }
        for (pinned, key) in [
            (self.placement, "model.input_bands.placement"),
            (self.table_dtype, "model.input_bands.dtype"),
            (self.state_dtype, "optim.state_dtype"),
            (self.class_chunk, "model.class_chunk"),
            (self.checkpointing, "model.checkpointing"),
            (self.logits, "model.logits"),
            (self.input_cutoffs, "model.input_bands.cutoffs"),
            (self.output_bands, "model.output_bands"),
        ] {
            if pinned {
                out.push(key);
            }
        }
        out
    }
}

/// Everything the solver reads.
pub struct Problem<'a> {
    /// The configured run: model, layout, the optimizers' and batch size's pinned values, and
    /// `[plan]` (objective, min and max batch).
    pub config: &'a Config,
    /// The run's bands, resolved once by run preparation (`Prepared::model_bands`). The batch
    /// size and the optimizers the solver varies do not change them.
    pub bands: &'a ModelBands,
    pub device: DeviceFacts,
    pub budget_bytes: u64,
    pub sample: &'a RowSample,
    pub pins: Pins,
    /// The device's throughput model (`None`: none measured for it; no step time predicted).
    pub calibration: Option<&'a Calibration>,
    /// Ranks of a multi-process run (1: one process). Above 1 every candidate is costed as rank
    /// 0's step (the largest block of every table and class block, and the most rows of the
    /// batch), so the budget is per rank; the batch is the global one.
    pub ranks: usize,
}

impl Problem<'_> {
    /// The batch range searched, `(min, max)`: the pinned batch, or `[plan]`'s range; an error
    /// when the range is empty or the sample cannot answer for its largest batch.
    pub(crate) fn batch_range(&self) -> Result<(usize, usize), SolverError> {
        let config = self.config;
        let (min_batch, max_batch) = if self.pins.batch_size {
            (config.train.batch_size, config.train.batch_size)
        } else {
            (config.plan.min_batch, config.plan.max_batch)
        };
        if min_batch > max_batch {
            return Err(SolverError::BatchRange {
                min_batch,
                max_batch,
            });
        }
        if self.sample.max_batch() < max_batch {
            return Err(SolverError::SampleTooSmall {
                sampled: self.sample.max_batch(),
                wanted: max_batch,
            });
        }
        Ok((min_batch, max_batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_budget_keeps_the_reserve() {
        assert_eq!(default_budget_bytes(None), None);
        assert_eq!(default_budget_bytes(Some(80 << 30)), Some(72 << 30));
        assert_eq!(default_budget_bytes(Some(2 << 30)), Some(1536 << 20));
    }
}
