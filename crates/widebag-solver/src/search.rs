//! The search: the largest batch a pair fits at (bisection on the ledger's peak, which grows
//! with the batch), and per objective the chosen candidate and the runner-ups.

use widebag_config::units::format_bytes;
use widebag_config::{DenseOptim, Objective, TableOptim};

use crate::enumerate::{capability, pair_name};
use crate::estimate::Estimator;
use crate::problem::slack_bytes;
use crate::report::{Candidate, over_budget};

/// The largest value in `[lo, hi]` at which `fits` holds, by bisection (`fits` holds up to some
/// value and not beyond); `None` when `lo` does not fit.
pub(crate) fn largest_batch(
    lo: usize,
    hi: usize,
    mut fits: impl FnMut(usize) -> bool,
) -> Option<usize> {
    if !fits(lo) {
        return None;
    }
    if fits(hi) {
        return Some(hi);
    }
    let (mut good, mut bad) = (lo, hi);
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if fits(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

/// Where the search runs: the pairs (most capable first), the cheapest of them, the batch range
/// and the cheapest pair's largest batch (`None`: nothing fits).
pub(crate) struct Search<'s> {
    pub(crate) pairs: &'s [(TableOptim, DenseOptim)],
    pub(crate) cheapest: (TableOptim, DenseOptim),
    pub(crate) min_batch: usize,
    pub(crate) max_batch: usize,
    pub(crate) best_batch: Option<usize>,
}

/// The chosen candidate and the runner-ups for the problem's objective.
pub(crate) fn choose(est: &Estimator, s: &Search) -> (Candidate, Vec<Candidate>) {
    match (s.best_batch, est.p.config.plan.objective) {
        (None, _) => (nothing_fits(est, s), Vec::new()),
        (Some(batch), Objective::Batch) => largest_batch_first(est, s, batch),
        (Some(_), Objective::Throughput) => fastest(est, s),
    }
}

/// Nothing fits: the cheapest pair at the smallest batch, and why.
fn nothing_fits(est: &Estimator, s: &Search) -> Candidate {
    let p = est.p;
    let (ct, cd) = s.cheapest;
    let min_batch = s.min_batch;
    let mut c = est.candidate(min_batch, ct, cd);
    c.verdict = format!(
        "nothing fits: even {} at batch {min_batch} needs {} (+ {} slack) of {}",
        pair_name(p.config.model.layout, ct, cd),
        format_bytes(c.predicted_peak_bytes),
        format_bytes(slack_bytes(p.budget_bytes)),
        format_bytes(p.budget_bytes)
    );
    if c.largest_allocation_bytes > p.device.max_buffer_bytes {
        c.verdict = format!(
            "nothing fits: one tensor needs a {} buffer, over the device's largest buffer of {}",
            format_bytes(c.largest_allocation_bytes),
            format_bytes(p.device.max_buffer_bytes)
        );
    }
    c
}

/// Objective `batch`: the largest batch, then the most capable pair that fits at it.
fn largest_batch_first(est: &Estimator, s: &Search, batch: usize) -> (Candidate, Vec<Candidate>) {
    let p = est.p;
    let layout = p.config.model.layout;
    let mut all: Vec<Candidate> = s
        .pairs
        .iter()
        .map(|&(t, d)| est.candidate(batch, t, d))
        .collect();
    let pick = all.iter().position(|c| c.fits).expect("the cheapest fits");
    let mut chosen = all.remove(pick);
    chosen.verdict = format!(
        "{}; the most capable optimizers that fit at it",
        batch_limit(est, batch, s.max_batch, s.cheapest)
    );
    for c in all.iter_mut() {
        c.verdict = if c.fits {
            "fits, less capable than the chosen optimizers".to_string()
        } else {
            over_budget(c, p)
        };
        if !c.fits
            && capability(layout, c.table, c.dense) > capability(layout, chosen.table, chosen.dense)
        {
            c.max_batch_size = largest_batch(s.min_batch, batch, |b| est.fits(b, c.table, c.dense));
            if let Some(m) = c.max_batch_size {
                c.verdict.push_str(&format!("; fits up to batch {m}"));
            }
        }
    }
    (chosen, all)
}

/// Objective `throughput`: each pair at its own largest batch; the highest predicted
/// examples/s wins.
fn fastest(est: &Estimator, s: &Search) -> (Candidate, Vec<Candidate>) {
    let p = est.p;
    let mut all: Vec<Candidate> = s
        .pairs
        .iter()
        .filter_map(|&(t, d)| {
            let b = largest_batch(s.min_batch, s.max_batch, |b| est.fits(b, t, d))?;
            let mut c = est.candidate(b, t, d);
            c.max_batch_size = Some(b);
            Some(c)
        })
        .collect();
    let pick = (0..all.len())
        .max_by(|&i, &j| {
            all[i]
                .predicted_examples_per_s
                .total_cmp(&all[j].predicted_examples_per_s)
                .then(j.cmp(&i))
        })
        .expect("the cheapest fits");
    let mut chosen = all.remove(pick);
    chosen.verdict = format!(
        "the highest predicted throughput ({:.1} examples/s) at this pair's largest batch",
        chosen.predicted_examples_per_s
    );
    for c in all.iter_mut() {
        c.verdict = format!(
            "{:.1} examples/s predicted at its largest batch",
            c.predicted_examples_per_s
        );
    }
    let mut rejected: Vec<Candidate> = s
        .pairs
        .iter()
        .filter(|&&(t, d)| {
            !all.iter().any(|c| (c.table, c.dense) == (t, d))
                && (t, d) != (chosen.table, chosen.dense)
        })
        .map(|&(t, d)| {
            let mut c = est.candidate(s.min_batch, t, d);
            c.verdict = over_budget(&c, p);
            c
        })
        .collect();
    all.append(&mut rejected);
    (chosen, all)
}

/// What stops the batch at `batch`: the pin, `plan.max_batch`, the budget or the buffer limit.
fn batch_limit(
    est: &Estimator,
    batch: usize,
    max_batch: usize,
    (ct, cd): (TableOptim, DenseOptim),
) -> String {
    let p = est.p;
    if p.pins.batch_size {
        return "the pinned batch".to_string();
    }
    if batch == max_batch {
        return format!("the largest batch allowed (plan.max_batch = {max_batch})");
    }
    let layout = p.config.model.layout;
    let limit = est.limit(batch + 1, ct, cd);
    match limit.largest {
        Some((name, bytes)) if bytes > p.device.max_buffer_bytes => format!(
            "the largest batch whose tensors fit the device's largest buffer (at batch {}, `{name}` \
             needs {bytes} B > {} B)",
            batch + 1,
            p.device.max_buffer_bytes
        ),
        _ => format!(
            "the largest batch within the budget (batch {} needs {} with {}, the least memory)",
            batch + 1,
            format_bytes(limit.peak_bytes + slack_bytes(p.budget_bytes)),
            pair_name(layout, ct, cd)
        ),
    }
}
