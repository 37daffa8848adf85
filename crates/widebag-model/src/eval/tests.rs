//! The host's block path (flex's full softmax scored by class block, blocks in parallel) against
//! the chunk path (each class chunk's scores as a tensor), on the same model and batch.

use widebag_config::bands::ModelBands;
use widebag_config::{Config, TargetKind};
use widebag_data::SyntheticStream;
use widebag_prepare::synthetic_spec;

use super::{Accumulator, RowScores, ScoreNeed, ScoreOptions, score_rows};
use crate::device::BackendKind;
use crate::device::Compute;
use crate::model::SparseModel;

/// Several class chunks (5,000 and 4,000 classes), the first cut into two blocks at 64 rows.
fn model_and_batch() -> (SparseModel, widebag_csr::CsrBatch) {
    let mut c = Config::default();
    c.data.width = 300;
    c.data.n_classes = Some(9000);
    c.data.nnz = 5.0;
    c.data.nnz_spread = 2.0;
    c.data.target = TargetKind::NextId;
    c.model.dim = 6;
    c.model.hidden = vec![5];
    c.model.class_chunk = 5000;
    c.train.batch_size = 64;
    c.train.seed = 5;
    let bands = ModelBands::resolve(&c).unwrap();
    let model = SparseModel::new(&c, &bands, &Compute::flex()).unwrap();
    assert_eq!(model.output.class_chunks().len(), 2, "two class chunks");
    let batch = SyntheticStream::new(synthetic_spec(&c))
        .unwrap()
        .batch_at(7, 64)
        .unwrap();
    (model, batch)
}

fn by_chunks(
    model: &mut SparseModel,
    batch: &widebag_csr::CsrBatch,
    o: ScoreOptions,
) -> Vec<RowScores> {
    let mut acc = Accumulator::new(batch, o);
    let kind = model
        .score_chunks(batch, &mut |start, scores| acc.add(start, scores))
        .unwrap();
    acc.finish(kind)
}

#[test]
fn blocks_score_as_the_chunks_do_with_masks_targets_and_log_sum_exp() {
    let (mut model, batch) = model_and_batch();
    // Each row leaves out a few classes on both sides of the chunk and block boundaries.
    let seen: Vec<Vec<u32>> = (0..batch.n_rows() as u32)
        .map(|r| vec![r, 4095 + r % 3, 4999, 5000 + r, 8999])
        .collect();
    for need in [ScoreNeed::LogProbs, ScoreNeed::Ranking] {
        let o = ScoreOptions {
            k: 12,
            seen: &seen,
            backend: BackendKind::Flex,
            need,
            screen: None,
        };
        let blocks = score_rows(&mut model, &batch, o).unwrap();
        // The blocks' sums go in block order: the same numbers whichever thread ran which.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let again = pool.install(|| score_rows(&mut model, &batch, o).unwrap());
        assert_eq!(blocks, again, "the same scores on 3 threads ({need:?})");
        let chunks = by_chunks(&mut model, &batch, o);
        assert_eq!(
            (blocks.len(), chunks.len()),
            (batch.n_rows(), batch.n_rows())
        );
        for (r, (a, b)) in blocks.iter().zip(&chunks).enumerate() {
            let classes = |s: &RowScores| s.top.iter().map(|t| t.0).collect::<Vec<_>>();
            assert_eq!(classes(a), classes(b), "row {r}'s top-K ({need:?})");
            assert!(
                classes(a).iter().all(|c| !seen[r].contains(c)),
                "row {r} masked"
            );
            for (x, y) in a.top.iter().zip(&b.top) {
                assert!(
                    (x.1 - y.1).abs() <= 1e-4 * (1.0 + y.1.abs()),
                    "row {r}: {x:?} {y:?}"
                );
            }
            let (x, y) = (a.target_log_prob, b.target_log_prob);
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "row {r} target: {x} {y}"
            );
            if need == ScoreNeed::LogProbs {
                assert!(x < 0.0, "row {r}: a log-probability ({x})");
            }
        }
    }
}
