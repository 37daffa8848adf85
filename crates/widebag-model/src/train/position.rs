//! Where a run stands in its data: the training rows drawn before a data position, the epoch
//! after so many rows, and how many steps lie between evaluations.

use widebag_data::DataPosition;
use widebag_prepare::DataSummary;

/// Training rows drawn before `position` (epochs before it times the data's rows, plus its
/// place in the current one; the synthetic stream's row index).
pub(crate) fn rows_before(position: &DataPosition, data: &Option<DataSummary>) -> usize {
    match position {
        DataPosition::Synthetic { next_row } => *next_row as usize,
        DataPosition::Rows { epoch, next } => {
            let rows = data.as_ref().map_or(0, |d| d.train_rows);
            *epoch as usize * rows + next
        }
    }
}

/// Epochs started after `rows_seen` training rows (batches never straddle epochs).
pub(crate) fn epoch_of(data: &Option<DataSummary>, rows_seen: usize) -> Option<u64> {
    data.as_ref()
        .map(|d| (rows_seen as u64).div_ceil(d.train_rows.max(1) as u64))
}

/// Steps between evaluations: `train.eval_every` steps, or epochs when `train.epochs` is set
/// (0: at the end only).
pub(crate) fn eval_interval(config: &widebag_config::Config) -> u64 {
    let every = config.train.eval_every as u64;
    match config.train.epochs {
        Some(e) if e > 0 => every * (config.train.steps as u64 / e as u64),
        _ => every,
    }
}
