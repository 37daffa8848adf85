//! Held-out rows handed over whole (a test file read against the training file, or rows a caller
//! holds in memory, as Python's `Run.evaluate` and `Run.predict` do): renumbered as training
//! renumbered its ids and classes, cut into batches of the run's size, each row with the classes
//! it must not be credited for (a LightGCN user's training items).

use widebag_csr::CsrBatch;
use widebag_data::{HeldOut, UserColumns};

use crate::error::PrepareError;
use crate::prepared::Prepared;

/// Held-out batches, each with its rows' seen classes (sorted; empty without them).
pub(crate) type HeldBatches = (Vec<CsrBatch>, Vec<Vec<Vec<u32>>>);

/// `held` renumbered by `relabel`: its ids and classes, and its seen classes.
pub(crate) fn renumber(relabel: &widebag_data::Relabel, held: &mut HeldOut) {
    relabel.dataset(&mut held.dataset);
    if let (Some(seen), Some(classes)) = (&mut held.seen, &relabel.classes) {
        seen.ids.iter_mut().for_each(|c| *c = classes.map(*c));
    }
}

/// The held-out rows as batches of `bs`, in their order, with each row's seen classes.
pub(crate) fn held_batches(h: &HeldOut, bs: usize) -> Result<HeldBatches, PrepareError> {
    let (mut eval, mut eval_seen) = (Vec::new(), Vec::new());
    let all: Vec<usize> = (0..h.dataset.n_rows()).collect();
    for rows in all.chunks(bs.max(1)) {
        let batch = h.dataset.batch(rows);
        eval.push(batch.map_err(|e| PrepareError::data("data.test_path")(e.into()))?);
        eval_seen.push(match &h.seen {
            Some(seen) => rows
                .iter()
                .map(|&r| {
                    let mut ids = seen.row(r).0.to_vec();
                    ids.sort_unstable();
                    ids
                })
                .collect(),
            None => Vec::new(),
        });
    }
    Ok((eval, eval_seen))
}

/// Held-out `batches` (in order) with each row's user column (`users`: the user of each row;
/// none: rows without users, left as they are but widened).
pub(crate) fn with_users(
    columns: &UserColumns,
    batches: Vec<CsrBatch>,
    users: Option<&[u32]>,
) -> Result<Vec<CsrBatch>, PrepareError> {
    let mut first = 0;
    batches
        .into_iter()
        .map(|b| {
            let n = b.n_rows();
            let rows = first..first + n;
            first += n;
            let user = |r: usize| {
                users
                    .and_then(|u| u.get(r))
                    .map_or(usize::MAX, |&u| u as usize)
            };
            columns
                .add(&b, rows.map(user))
                .map_err(PrepareError::data("data.user_vector"))
        })
        .collect()
}

/// `prepared` evaluated on `held` (rows in the data's own numbering, within its width and
/// classes) instead of its own held-out rows: renumbered as the run renumbered, batched at the
/// run's batch size.
pub fn hold_out(prepared: &mut Prepared, mut held: HeldOut) -> Result<(), PrepareError> {
    let data = &prepared.config.data;
    let (width, n_classes) = (data.width, data.n_classes());
    if held.dataset.width > width || held.dataset.n_classes > n_classes {
        return Err(PrepareError::setting(
            "data",
            format!(
                "held-out rows of width {} and {} classes against a run of width {width} and \
                 {n_classes} classes",
                held.dataset.width, held.dataset.n_classes
            ),
        ));
    }
    held.dataset.width = width;
    held.dataset.n_classes = n_classes;
    renumber(&prepared.relabel, &mut held);
    let (mut eval, seen) = held_batches(&held, prepared.config.train.batch_size)?;
    if let Some(u) = &prepared.user_columns {
        eval = with_users(u, eval, held.users.as_deref())?;
    }
    prepared.eval = eval;
    prepared.eval_seen = seen;
    prepared.eval_users = held.users;
    Ok(())
}
