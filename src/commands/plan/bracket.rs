//! The search's bracket: the largest batch a monotone test accepts, found from a starting guess
//! (the plan's batch) by galloping away from it and bisecting, so a good guess costs two or three
//! real runs instead of a doubling from the smallest batch.

/// The batches a search may try, and where it starts.
#[derive(Clone, Copy, Debug)]
pub struct BatchRange {
    pub min_batch: usize,
    pub max_batch: usize,
    /// The first batch tried (clamped into the range): the plan's batch when the plan fits.
    pub start_batch: usize,
}

/// The bracket found: the largest batch accepted and the smallest refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bracket {
    /// `None`: not even `min_batch` was accepted.
    pub good: Option<usize>,
    /// `None`: `max_batch` was accepted.
    pub bad: Option<usize>,
}

/// Brackets the largest batch in the range that `runs_under` accepts, assuming it accepts every
/// batch below one it accepts (a measured peak grows with the batch). From the start it steps by
/// `tolerance_pct` of the batch (one row at least), doubling the step while the answer stays the
/// same, then bisects until the bracket is within `tolerance_pct` of its good end (one row when
/// 0). A start within the tolerance of the answer costs two runs, and three when the step
/// overshoots.
pub fn bracket(
    range: BatchRange,
    tolerance_pct: f64,
    mut runs_under: impl FnMut(usize) -> anyhow::Result<bool>,
) -> anyhow::Result<Bracket> {
    let (lo, hi) = (
        range.min_batch.max(1),
        range.max_batch.max(range.min_batch.max(1)),
    );
    let tolerance = tolerance_pct.max(0.0) / 100.0;
    let first_step = |b: usize| ((b as f64 * tolerance).floor() as usize).max(1);
    let start = range.start_batch.clamp(lo, hi);
    let (mut good, mut bad) = (None, None);
    if runs_under(start)? {
        good = Some(start);
        let (mut g, mut step) = (start, first_step(start));
        while g < hi {
            let b = (g + step).min(hi);
            if runs_under(b)? {
                (g, step) = (b, step * 2);
                good = Some(b);
            } else {
                bad = Some(b);
                break;
            }
        }
    } else {
        bad = Some(start);
        let (mut x, mut step) = (start, first_step(start));
        while x > lo {
            let b = x.saturating_sub(step).max(lo);
            if runs_under(b)? {
                good = Some(b);
                break;
            }
            (x, step) = (b, step * 2);
            bad = Some(b);
        }
    }
    if let (Some(mut g), Some(mut x)) = (good, bad) {
        while x - g > 1 && (x - g) as f64 > g as f64 * tolerance {
            let mid = g + (x - g) / 2;
            if runs_under(mid)? {
                g = mid;
            } else {
                x = mid;
            }
        }
        (good, bad) = (Some(g), Some(x));
    }
    Ok(Bracket { good, bad })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brackets `limit` (the largest accepted batch) and counts the runs it took.
    fn find(lo: usize, hi: usize, start: usize, limit: usize, tol: f64) -> (Bracket, usize) {
        let mut runs = 0;
        let range = BatchRange {
            min_batch: lo,
            max_batch: hi,
            start_batch: start,
        };
        let found = bracket(range, tol, |b| {
            assert!((lo..=hi).contains(&b), "{b} outside {lo}..={hi}");
            runs += 1;
            Ok(b <= limit)
        })
        .unwrap();
        (found, runs)
    }

    #[test]
    fn every_start_brackets_the_answer_within_the_tolerance() {
        for (lo, hi) in [(1, 1), (16, 1024), (1, 300), (7, 7), (5, 4096)] {
            for limit in [0, 1, 3, 16, 17, 226, 299, 604, 1023, 1024, 5000] {
                for start in [0, 1, lo, 17, 196, 313, 548, 783, 1024, hi, 9999] {
                    for tol in [0.0, 1.0, 3.0] {
                        let (b, _) = find(lo, hi, start, limit, tol);
                        let case = format!("lo {lo} hi {hi} start {start} limit {limit} tol {tol}");
                        if limit < lo {
                            assert_eq!(
                                b,
                                Bracket {
                                    good: None,
                                    bad: Some(lo)
                                },
                                "{case}"
                            );
                            continue;
                        }
                        let g = b.good.expect(&case);
                        assert!(g <= limit, "{case}: {b:?}");
                        match b.bad {
                            None => assert!(g == hi && limit >= hi, "{case}: {b:?}"),
                            Some(x) => {
                                assert!(x > limit && x > g, "{case}: {b:?}");
                                let width = (x - g) as f64;
                                assert!(x - g == 1 || width <= g as f64 * tol / 100.0, "{case}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_start_near_the_answer_takes_two_or_three_runs() {
        // The plan grid's dense rows at 1 % on lavapipe: the plan at 98.7–100 % of the answer.
        assert_eq!(find(16, 1024, 604, 604, 1.0).1, 2);
        assert_eq!(find(16, 1024, 1024, 5000, 1.0).1, 1);
        assert!(find(16, 1024, 600, 604, 1.0).1 <= 3);
        assert!(find(16, 1024, 610, 604, 1.0).1 <= 3);
        // From the smallest batch (a plan that does not fit) it still finds the answer.
        let from_smallest = find(16, 1024, 16, 226, 1.0).0.good.unwrap();
        assert!((224..=226).contains(&from_smallest), "{from_smallest}");
        assert_eq!(find(16, 1024, 16, 226, 0.0).0.good, Some(226));
    }
}
