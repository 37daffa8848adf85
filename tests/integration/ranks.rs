//! Training across ranks against the single process (issue 18's correctness bar): N = 2 and 3
//! ranks as threads (`widebag_collective::threads::ThreadGroup`) on flex, each with its block of
//! every table, its rows of each global batch and (full softmax) its block of classes, give the
//! single process's losses, held-out loss and final weights within 1e-5 — every table optimizer (lazy AdamW's
//! catch-up included), the class-split full softmax and the adaptive softmax (replicated head, owned tails),
//! head/tail bands with a host tail; and the held-out task metrics (Recall@K and NDCG with seen
//! items masked, accuracy, perplexity) equal the single process's.

use std::time::Duration;

use crate::common;

use common::{batch, flex, wide};
use widebag_collective::Collective;
use widebag_collective::threads::ThreadGroup;
use widebag_config::bands::ModelBands;
use widebag_config::{
    BandPlacement, Config, Cutoffs, DenseOptim, OutputKind, TableOptim, TargetKind,
};
use widebag_eval::{EvalReport, RecallConvention, Task};
use widebag_model::eval::{EvalSet, EvalSpec, evaluate, evaluate_part};
use widebag_model::params::init::Init;
use widebag_model::probe::StepProbe;
use widebag_model::table::ids::SortedIdBuf;
use widebag_model::tensors::to_vec;
use widebag_model::{BackendKind, Ranks, SparseModel, Trainable};

const STEPS: u64 = 4;

fn base() -> Config {
    let mut c = Config::default();
    c.data.width = 90;
    c.data.n_classes = Some(17);
    c.data.nnz = 6.0;
    c.data.target = TargetKind::Bag;
    c.model.dim = 8;
    c.model.hidden = vec![6];
    c.train.batch_size = 12;
    c.optim.dense = DenseOptim::Adam;
    c.optim.lr = 0.05;
    c
}

/// Every table row of `model` (its block, in order) and every dense value.
fn weights(model: &SparseModel) -> (Vec<Vec<f32>>, Vec<f32>) {
    let tables = model
        .bands()
        .iter()
        .map(|b| {
            let n = b.table.n_rows() as u32;
            let all = SortedIdBuf::from_unsorted((0..n).collect());
            to_vec(b.table.gather(all.ids()).unwrap()).unwrap()
        })
        .collect();
    let dense = model
        .dense_params()
        .into_iter()
        .flat_map(|p| to_vec(p.value.clone()).unwrap())
        .collect();
    (tables, dense)
}

/// The single process's dense values as rank `rank` holds them: every trunk parameter, and of
/// a full softmax's `[last, classes]` weight and `[1, classes]` bias only its class block.
fn dense_of(config: &Config, dense: &[f32], rank: usize, size: usize) -> Vec<f32> {
    if config.model.output != OutputKind::Full {
        return dense.to_vec();
    }
    let (last, n) = (config.model.last_hidden(), config.data.n_classes());
    let block = Ranks { rank, size }.class_block(n);
    let output = (last + 1) * n;
    let (trunk, out) = dense.split_at(dense.len() - output);
    let mut v = trunk.to_vec();
    for r in 0..=last {
        v.extend_from_slice(&out[r * n + block.start..r * n + block.end]);
    }
    v
}

fn close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "{what}[{i}]: {a} against {b}"
        );
    }
}

/// The tasks whose metrics are compared: ranking (with seen items masked), accuracy, perplexity.
const SPECS: [Task; 3] = [
    Task::Recommendation,
    Task::Classification,
    Task::LanguageModel,
];

fn spec(task: Task) -> EvalSpec {
    EvalSpec {
        task,
        ks: vec![3, 5],
        recall: RecallConvention::LightGcn,
        screening: widebag_config::Screening::Bf16,
    }
}

/// The held-out batches, each row masking a few classes (as a user's training items).
fn held_out_set(config: &Config, held_out: &[widebag_csr::CsrBatch]) -> EvalSet {
    let n = config.data.n_classes() as u32;
    EvalSet {
        batches: held_out.to_vec(),
        seen: held_out
            .iter()
            .map(|b| {
                (0..b.n_rows() as u32)
                    .map(|r| {
                        let mut v = vec![r % n, (r * 7 + 3) % n];
                        v.sort_unstable();
                        v.dedup();
                        v
                    })
                    .collect()
            })
            .collect(),
    }
}

fn check(name: &str, config: &Config, size: usize) {
    let bands = ModelBands::resolve(config).unwrap();
    let b = config.train.batch_size;
    // The single process.
    let mut one = wide(config, &flex());
    let mut losses = Vec::new();
    let mut probe = StepProbe::new(one.device());
    for s in 0..STEPS {
        losses.push(
            one.train_step(&batch(config, s * b as u64), &mut probe)
                .unwrap()
                .loss,
        );
    }
    // Held-out rows: three batches after the training rows.
    let held_out: Vec<_> = (0..3)
        .map(|k| batch(config, 1_000 + k * b as u64))
        .collect();
    let eval = one.eval_loss(&held_out).unwrap().unwrap();
    let set = held_out_set(config, &held_out);
    let reports: Vec<EvalReport> = SPECS
        .iter()
        .map(|&task| evaluate(&mut one, &set, &spec(task), BackendKind::Flex).unwrap())
        .collect();
    let (tables, dense) = weights(&one);
    // N ranks, each with its rows of the same global batches.
    let out = ThreadGroup::run(size, Duration::from_secs(120), |c| {
        let ranks = Ranks {
            rank: c.rank(),
            size: c.size(),
        };
        let mut m = SparseModel::new_rank(config, &bands, &flex(), ranks, Init::Seeded).unwrap();
        let mut probe = StepProbe::new(m.device());
        let mut losses = Vec::new();
        for s in 0..STEPS {
            let global = batch(config, s * b as u64);
            let mine =
                widebag_collective::partition::local_rows(global.n_rows(), c.rank(), c.size());
            let part = global.row_range(mine);
            let stats = m
                .train_step_on_rank(&part, global.n_rows(), &c, &mut probe)
                .unwrap();
            losses.push(stats.loss);
        }
        let eval = m.held_out_loss(&held_out, &c).unwrap().unwrap();
        let reports: Vec<Option<EvalReport>> = SPECS
            .iter()
            .map(|&task| evaluate_part(&mut m, &set, &spec(task), BackendKind::Flex, &c).unwrap())
            .collect();
        // The tail clusters of the adaptive softmax from their owners, as evaluation sees them.
        m.begin_split_scoring(&c).unwrap();
        (losses, eval, weights(&m), reports)
    });
    for (rank, r) in out.into_iter().enumerate() {
        let (got, got_eval, (blocks, got_dense), got_reports) = r.unwrap();
        let what = format!("{name}, rank {rank} of {size}");
        assert_eq!(reports.len(), got_reports.len(), "{what}");
        for (want, got) in reports.iter().zip(&got_reports) {
            match (rank, got) {
                (0, Some(got)) => {
                    assert_eq!(got.n_rows, want.n_rows, "{what}: {:?}", want.task);
                    for m in &want.metrics {
                        let g = got.get(&m.name).unwrap();
                        assert!(
                            (g - m.value).abs() <= 1e-5 * (1.0 + m.value.abs()),
                            "{what}: {:?} {}: {g} against {}",
                            want.task,
                            m.name,
                            m.value
                        );
                    }
                }
                (0, None) => panic!("{what}: rank 0 has no report"),
                (_, got) => assert!(got.is_none(), "{what}: only rank 0 reports"),
            }
        }
        close(&format!("{what}: losses"), &got, &losses);
        close(
            &format!("{what}: held-out loss"),
            &[got_eval as f32],
            &[eval as f32],
        );
        close(
            &format!("{what}: dense"),
            &got_dense,
            &dense_of(config, &dense, rank, size),
        );
        for (k, block) in blocks.iter().enumerate() {
            let band = bands.input[k];
            let rows = Ranks { rank, size }.sharding(band.n_rows()).rows_of(rank);
            let want = &tables[k][rows.start * band.dim..rows.end * band.dim];
            close(&format!("{what}: band {k}'s rows {rows:?}"), block, want);
        }
    }
}

#[test]
fn every_table_optimizer_trains_across_ranks_as_in_one_process() {
    for table in [
        TableOptim::Sgd,
        TableOptim::Momentum,
        TableOptim::RowwiseAdagrad,
        TableOptim::Adam,
        TableOptim::AdamW,
    ] {
        let mut c = base();
        c.optim.table = table;
        for size in [2, 3] {
            check(&format!("full softmax, table {}", table.name()), &c, size);
        }
    }
}

#[test]
fn the_adaptive_softmax_and_a_host_tail_train_across_ranks_as_in_one_process() {
    let mut c = base();
    c.optim.table = TableOptim::AdamW;
    c.model.output = OutputKind::Adaptive;
    c.model.output_bands.cutoffs = Cutoffs::Ids(vec![5, 11]);
    c.model.input_bands.cutoffs = Cutoffs::Ids(vec![20, 50]);
    c.model.input_bands.placement = vec![BandPlacement::Device, BandPlacement::Host];
    for size in [2, 3] {
        check("adaptive softmax, head/tail bands, host tail", &c, size);
    }
}

#[test]
fn a_rank_on_the_tensor_path_is_refused_not_run() {
    let Some(gpu) = common::wgpu_or_skip("a_rank_on_the_tensor_path_is_refused_not_run") else {
        return;
    };
    let config = base();
    let bands = ModelBands::resolve(&config).unwrap();
    let out = ThreadGroup::run(2, Duration::from_secs(60), |c| {
        let ranks = Ranks {
            rank: c.rank(),
            size: c.size(),
        };
        let mut m = SparseModel::new_rank(&config, &bands, &gpu, ranks, Init::Seeded).unwrap();
        let mut probe = StepProbe::new(m.device());
        let global = batch(&config, 0);
        let part = global.row_range(widebag_collective::partition::local_rows(12, c.rank(), 2));
        let err = m
            .train_step_on_rank(&part, global.n_rows(), &c, &mut probe)
            .unwrap_err();
        err.to_string()
    });
    for r in out {
        let e = r.unwrap();
        assert!(
            e.contains("train.device") && e.contains("CPU backend"),
            "{e}"
        );
    }
}
