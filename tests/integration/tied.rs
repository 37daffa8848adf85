//! The input table tied to the output layer (`model.tie_output`) on flex: the one gradient of
//! each tied vector against the dense formulation's two uses summed and against finite
//! differences of the vector moved on both sides at once, and steps that keep the table equal to
//! the output weight's transpose while applying exactly the dense optimizer's update.

use crate::common;

use common::{assert_close, assert_fd, batch, flex, wide};
use widebag_config::{Activation, Config, DenseOptim, TargetKind};
use widebag_csr::CsrBatch;
use widebag_model::SparseModel;
use widebag_model::layout::reference::dense_reference;
use widebag_model::tensors::to_vec;

const WIDTH: usize = 12;
const DIM: usize = 4;
fn tied_config(target: TargetKind) -> Config {
    let mut c = Config::default();
    c.data.width = WIDTH;
    c.data.n_classes = Some(WIDTH);
    c.data.nnz = 4.0;
    c.data.nnz_spread = 2.0;
    c.data.target = target;
    c.model.dim = DIM;
    c.model.hidden = vec![];
    c.model.last_activation = Some(Activation::Linear);
    c.model.tie_output = true;
    c.train.batch_size = 6;
    c.train.seed = 3;
    c
}

/// Where id `id`'s column lives: its class chunk's weight, and the index of `(col, id)` in it.
fn weight_entry(model: &SparseModel, id: u32, col: usize) -> (String, usize) {
    let (k, c) = model
        .output()
        .class_chunks()
        .iter()
        .enumerate()
        .find(|(_, c)| (c.offset..c.offset + c.n).contains(&(id as usize)))
        .unwrap();
    (
        format!("output.{k}.weight"),
        col * c.n + id as usize - c.offset,
    )
}

/// Every chunk's `[dim, n]` values of `values` (one vector per dense parameter) read out as
/// table rows `[width, dim]`.
fn as_rows(model: &SparseModel, values: &[Vec<f32>]) -> Vec<f32> {
    let names: Vec<String> = model
        .dense_params()
        .into_iter()
        .map(|p| p.name.clone())
        .collect();
    (0..WIDTH * DIM)
        .map(|k| {
            let (name, index) = weight_entry(model, (k / DIM) as u32, k % DIM);
            values[names.iter().position(|n| *n == name).unwrap()][index]
        })
        .collect()
}

/// The output weight's chunks as table rows.
fn weight_rows(model: &SparseModel) -> Vec<f32> {
    let values: Vec<Vec<f32>> = model
        .dense_params()
        .into_iter()
        .map(|p| to_vec(p.value.clone()).unwrap())
        .collect();
    as_rows(model, &values)
}

/// Central finite difference of the loss in tied value `(id, col)`: the table's entry and the
/// weight's entry moved together, then restored.
fn fd_tied(model: &mut SparseModel, b: &CsrBatch, (id, col): (u32, usize), eps: f32) -> f32 {
    let (name, index) = weight_entry(model, id, col);
    let at = |model: &mut SparseModel, delta: f32| {
        model.perturb_table(id, col, delta).unwrap();
        model.perturb_dense(&name, index, delta).unwrap();
    };
    at(model, eps);
    let up = model.loss(b).unwrap();
    at(model, -2.0 * eps);
    let down = model.loss(b).unwrap();
    at(model, eps);
    (up - down) / (2.0 * eps)
}

#[test]
fn a_tied_vector_takes_both_uses_gradients_as_the_dense_formulation_and_finite_differences() {
    for target in [TargetKind::NextId, TargetKind::Bag] {
        let config = tied_config(target);
        // A 128-byte buffer cap: 8-row table shards and several class chunks.
        let mut model = wide(&config, &flex().with_buffer_cap(128));
        assert!(
            model.tied()
                && model.bands()[0].table.n_shards() > 1
                && model.output().class_chunks().len() > 1
        );
        assert_eq!(
            weight_rows(&model),
            model.bands()[0].table.to_vec().unwrap(),
            "the table starts as the weight's transpose"
        );
        let b = batch(&config, 11);
        let reference = dense_reference(&model, &b).unwrap();
        let mut grads = model.gradients(&b).unwrap();
        model.tie_gradients(&mut grads).unwrap();
        assert!(grads.rows.is_empty(), "no row is left for the row updates");
        let tied: Vec<Vec<f32>> = grads
            .dense()
            .into_iter()
            .map(|g| to_vec(g.clone()).unwrap())
            .collect();
        let tied = as_rows(&model, &tied);
        // The dense formulation's two gradients of the same values, summed.
        let output = as_rows(&model, &reference.dense_grads);
        assert_eq!(output.len(), reference.table_grad.len());
        let want: Vec<f32> = output
            .iter()
            .zip(&reference.table_grad)
            .map(|(a, b)| a + b)
            .collect();
        let what = format!("{target:?}");
        assert_close(&format!("{what} tied gradient"), &tied, &want, 1e-5, 1e-4);
        // Ids the batch reads (both uses) and ids it does not (the output's use alone).
        let read: Vec<u32> = b.unique_ids().to_vec();
        let unread = (0..WIDTH as u32).find(|id| !read.contains(id));
        for id in read.iter().copied().step_by(2).take(4).chain(unread) {
            let col = id as usize % DIM;
            let fd = fd_tied(&mut model, &b, (id, col), 1e-2);
            let grad = tied[id as usize * DIM + col];
            assert_fd(&format!("{what} tied[{id},{col}]"), fd, grad);
        }
    }
}

#[test]
fn a_tied_step_applies_the_dense_update_and_keeps_the_table_the_weights_transpose() {
    let mut config = tied_config(TargetKind::Bag);
    config.optim.dense = DenseOptim::Sgd;
    config.optim.lr = 0.1;
    let mut model = wide(&config, &flex());
    let mut probe = widebag_model::StepProbe::new(model.device());
    let b = batch(&config, 5);
    let mut grads = model.gradients(&b).unwrap();
    model.tie_gradients(&mut grads).unwrap();
    let g: Vec<Vec<f32>> = grads
        .dense()
        .into_iter()
        .map(|g| to_vec(g.clone()).unwrap())
        .collect();
    assert_eq!(weight_rows(&model).len(), as_rows(&model, &g).len());
    let want: Vec<f32> = weight_rows(&model)
        .iter()
        .zip(as_rows(&model, &g))
        .map(|(x, g)| x - 0.1 * g)
        .collect();
    model.train_step(&b, &mut probe).unwrap();
    let got = weight_rows(&model);
    assert_close("SGD on the tied weight", &got, &want, 1e-6, 1e-5);
    assert_eq!(model.bands()[0].table.to_vec().unwrap(), got);
    // Adam too: after every step the table holds exactly the weight's columns.
    config.optim.dense = DenseOptim::Adam;
    let mut model = wide(&config, &flex());
    let first = model.loss(&b).unwrap();
    for step in 0..20 {
        model.train_step(&b, &mut probe).unwrap();
        let table = model.bands()[0].table.to_vec().unwrap();
        assert_eq!(table, weight_rows(&model), "step {step}");
    }
    let last = model.loss(&b).unwrap();
    assert!(
        last < first,
        "20 Adam steps on one batch lower its loss: {first} → {last}"
    );
}

/// A tied run resumed from its middle checkpoint ends with the uninterrupted run's weights and
/// optimizer state, bit for bit (the table is written from the weight after the load, as after
/// every step).
#[test]
fn a_tied_run_resumes_bit_for_bit() {
    let dir = std::env::temp_dir().join(format!("widebag-tied-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (whole, cut) = (dir.join("whole"), dir.join("cut"));
    let o = common::widebag(&[
        "train",
        "--device=cpu",
        "--set=model.tie_output=true",
        "--set=model.hidden=[]",
        "--set=data.width=3000",
        "--set=data.n_classes=3000",
        "--set=model.input_dropout=0.3",
        "--set=train.steps=40",
        "--set=train.checkpoint_every=20",
        "--out",
        whole.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let copied = std::process::Command::new("cp")
        .args(["-r", whole.to_str().unwrap(), cut.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copied.success());
    let last = |run: &std::path::Path| run.join("checkpoints/step-00000040");
    std::fs::remove_dir_all(last(&cut)).unwrap();
    let o = common::widebag(&["train", "--resume", cut.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["weights.safetensors", "optimizer.safetensors"] {
        let read = |run: &std::path::Path| std::fs::read(last(run).join(f)).unwrap();
        assert!(read(&whole) == read(&cut), "{f} differs after the resume");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
