//! Scoring held-out rows with the model split across ranks (a single process scores whole,
//! through its layout's chunks: `eval::score_rows`); `eval::evaluate_part` folds either into the
//! metrics. The metrics (Recall@K and NDCG, accuracy,
//! perplexity) equal the single process's: every rank scores the held-out global batches with its part of the model and rank
//! 0 folds the metrics in the rows' order. The full softmax is split by classes: the ranks'
//! hidden states are all-gathered, each rank keeps every row's top-K of its classes (seen items
//! masked), its running log-sum-exp and its targets' scores, and rank 0 merges them (the top-K
//! order is total, so the merge is the single process's selection). With the adaptive softmax
//! every rank first refreshes its copies of the tail clusters from their owners, then scores its
//! own rows whole and sends them to rank 0.

use widebag_collective::Collective;
use widebag_collective::partition::local_rows;
use widebag_csr::CsrBatch;
use widebag_eval::RowTopK;

use crate::device::BackendKind;
use crate::error::ModelError;
use crate::eval::{Accumulator, RowScores, ScoreNeed, ScoreOptions};
use crate::model::SparseModel;
use crate::optim::dense::DenseParam;
use crate::tensors::{floats, to_vec};

/// One row's part as a rank sends it to rank 0: its running log-sum-exp `(max, Σ exp(s − max))`
/// over the rank's classes (`(0, 0)` when the scores are log-probabilities), its targets'
/// `Σ w · score`, and its top-K `(class, score)`.
struct RowPart {
    lse: (f64, f64),
    target: f64,
    top: Vec<(u32, f32)>,
}

fn put_f64(out: &mut Vec<u32>, x: f64) {
    let b = x.to_bits();
    out.extend([b as u32, (b >> 32) as u32]);
}

fn encode(rows: &[RowPart]) -> Vec<u32> {
    let mut out = Vec::new();
    for r in rows {
        put_f64(&mut out, r.lse.0);
        put_f64(&mut out, r.lse.1);
        put_f64(&mut out, r.target);
        out.push(r.top.len() as u32);
        for &(c, s) in &r.top {
            out.extend([c, s.to_bits()]);
        }
    }
    out
}

fn decode(v: &[u32]) -> Result<Vec<RowPart>, ModelError> {
    let bad = || ModelError::Execution("a rank sent malformed held-out scores".into());
    let mut at = 0;
    let f64_at = |at: &mut usize| -> Result<f64, ModelError> {
        let (lo, hi) = (
            *v.get(*at).ok_or_else(bad)?,
            *v.get(*at + 1).ok_or_else(bad)?,
        );
        *at += 2;
        Ok(f64::from_bits(u64::from(hi) << 32 | u64::from(lo)))
    };
    let mut rows = Vec::new();
    while at < v.len() {
        let lse = (f64_at(&mut at)?, f64_at(&mut at)?);
        let target = f64_at(&mut at)?;
        let n = *v.get(at).ok_or_else(bad)? as usize;
        let pairs = v.get(at + 1..at + 1 + 2 * n).ok_or_else(bad)?;
        at += 1 + 2 * n;
        let top = pairs
            .chunks_exact(2)
            .map(|p| (p[0], f32::from_bits(p[1])))
            .collect();
        rows.push(RowPart { lse, target, top });
    }
    Ok(rows)
}

impl SparseModel {
    /// Readies this rank's part of the model for scoring held-out rows: its deferred row updates
    /// applied and (adaptive softmax) every tail cluster fetched from its owner, until
    /// [`Self::end_split_scoring`].
    pub fn begin_split_scoring(&mut self, comm: &dyn Collective) -> Result<(), ModelError> {
        self.check_rank_kernels("this device")?;
        self.flush_deferred()?;
        self.output.begin_scoring(comm)
    }

    /// Drops what [`Self::begin_split_scoring`] fetched.
    pub(crate) fn end_split_scoring(&mut self) {
        self.output.end_scoring();
    }

    /// Every row's scores of the global held-out batch `global` (each row's seen classes in
    /// `seen`) at rank 0, `None` at the others; every rank calls it.
    pub(crate) fn score_split(
        &mut self,
        global: &CsrBatch,
        seen: &[Vec<u32>],
        k: usize,
        comm: &dyn Collective,
    ) -> Result<Option<Vec<RowScores>>, ModelError> {
        let (rank, size) = (self.ranks.rank, self.ranks.size);
        let mine = local_rows(global.n_rows(), rank, size);
        let batch = global.row_range(mine.clone());
        let ids = self.band_ids_whole(&batch)?;
        let (_, rows) = self.fetch_rows(&ids, comm)?;
        let inputs = self.upload_inputs(&batch, &ids);
        let params = self.trunk.map(|p: &DenseParam| p.value.clone().autodiff());
        let h = self.forward_hidden(&rows, &params, &inputs).inner();
        // Data-parallel: this rank's rows, whole; class split: every row, its classes.
        let by_classes = self.output.splits_classes();
        let (scored, part_seen, rows_of) = match !by_classes {
            true => (h, seen.get(mine.clone()).unwrap_or(&[]), &batch),
            false => {
                let all = comm.all_gather_f32(&to_vec(h)?)?.concat();
                let last = self.spec.last_hidden();
                let n = global.n_rows();
                (floats(all, [n, last], self.device()), seen, global)
            }
        };
        let options = ScoreOptions {
            k,
            seen: part_seen,
            backend: BackendKind::Flex,
            // Each rank's top lists are merged through its log-sum-exp.
            need: ScoreNeed::LogProbs,
            screen: None,
        };
        let mut acc = Accumulator::new(rows_of, options);
        self.output
            .scores(&scored, &mut |start, s| acc.add(start, s))?;
        let parts: Vec<RowPart> = acc
            .top
            .into_iter()
            .zip(acc.host_lse)
            .zip(acc.target)
            .map(|((top, lse), target)| RowPart {
                lse: if by_classes { lse } else { (0.0, 0.0) },
                target,
                top: top.into_sorted(),
            })
            .collect();
        let mut send = vec![Vec::new(); size];
        send[0] = encode(&parts);
        let got = comm.all_to_all_u32(send)?;
        if rank != 0 {
            return Ok(None);
        }
        let from: Vec<Vec<RowPart>> = got.iter().map(|v| decode(v)).collect::<Result<_, _>>()?;
        Ok(Some(match !by_classes {
            true => from
                .into_iter()
                .flatten()
                .map(|p| RowScores {
                    top: p.top,
                    target_log_prob: p.target,
                })
                .collect(),
            false => merge(from, global, k),
        }))
    }
}

/// Every row's scores from the ranks' parts over their class blocks: the log-sum-exp combined
/// from each part's running max and sum, the targets' scores summed in rank order, the top-K
/// merged; log-probabilities relative to the combined log-sum-exp.
fn merge(parts: Vec<Vec<RowPart>>, global: &CsrBatch, k: usize) -> Vec<RowScores> {
    let t = global.targets();
    (0..global.n_rows())
        .map(|r| {
            let row: Vec<&RowPart> = parts.iter().filter_map(|p| p.get(r)).collect();
            let max = row
                .iter()
                .map(|p| p.lse.0)
                .fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row
                .iter()
                .filter(|p| p.lse.0 > f64::NEG_INFINITY)
                .map(|p| p.lse.1 * (p.lse.0 - max).exp())
                .sum();
            let lse = max + sum.ln();
            let mut top = RowTopK::new(k);
            for p in &row {
                for &(c, s) in &p.top {
                    top.offer(c, s);
                }
            }
            let w: f64 = t.weights[t.row_ptr[r]..t.row_ptr[r + 1]]
                .iter()
                .map(|&w| w as f64)
                .sum();
            let target: f64 = row.iter().map(|p| p.target).sum();
            RowScores {
                top: top
                    .into_sorted()
                    .into_iter()
                    .map(|(c, s)| (c, (s as f64 - lse) as f32))
                    .collect(),
                target_log_prob: target - lse * w,
            }
        })
        .collect()
}
