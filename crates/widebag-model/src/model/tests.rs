//! Unit tests of the sparse layout against the dense layout on flex: shared initial numbers,
//! lazy AdamW's flushed weights against dense AdamW, named parameters, and the step's band
//! segments reaching the row updates.

use burn::tensor::Device;
use widebag_config::bands::ModelBands;
use widebag_config::{Config, DenseOptim, TableOptim, TargetKind};
use widebag_csr::CsrBatch;
use widebag_data::SyntheticStream;
use widebag_prepare::synthetic_spec;

use crate::device::Compute;
use crate::layout::Trainable;
use crate::layout::dense::DenseModel;
use crate::model::SparseModel;
use crate::params::init::Init;
use crate::probe::StepProbe;
use crate::tensors::to_vec;

fn small_config() -> Config {
    let mut c = Config::default();
    c.data.width = 40;
    c.data.n_classes = Some(7);
    c.data.nnz = 3.0;
    c.data.nnz_spread = 1.0;
    c.data.target = TargetKind::NextId;
    c.model.dim = 4;
    c.model.hidden = vec![5];
    c.train.batch_size = 4;
    c.train.seed = 3;
    c
}

fn bands(config: &Config) -> ModelBands {
    ModelBands::resolve(config).unwrap()
}

fn batch(config: &Config, first_row: u64) -> CsrBatch {
    SyntheticStream::new(synthetic_spec(config))
        .unwrap()
        .batch_at(first_row, config.train.batch_size)
        .unwrap()
}

fn close(what: &str, a: f64, b: f64, tol: f64) {
    assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}: {a} vs {b}");
}

#[test]
fn the_dense_layout_starts_from_the_sparse_layouts_numbers_without_building_it() {
    let mut config = small_config();
    config.model.class_chunk = 3;
    let compute = Compute::flex();
    let mut sparse = SparseModel::new(&config, &bands(&config), &compute).unwrap();
    let dense = DenseModel::new(&config, &bands(&config), &compute, Init::Seeded).unwrap();
    let table = sparse.bands[0].table.to_vec().unwrap();
    assert_eq!(to_vec(dense.input_weight.value.clone()).unwrap(), table);
    assert!(
        sparse.output.class_chunks().len() > 1,
        "several output chunks"
    );
    let b = batch(&config, 11);
    close(
        "loss",
        dense.gradients(&b).unwrap().loss as f64,
        sparse.loss(&b).unwrap() as f64,
        1e-6,
    );
}

#[test]
fn dense_parameters_are_named_and_walked_in_one_order() {
    let mut config = small_config();
    config.model.hidden = vec![5, 6];
    let model = SparseModel::new(&config, &bands(&config), &Compute::flex()).unwrap();
    let names: Vec<&str> = model
        .dense_params()
        .into_iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "bag.bias",
            "hidden.0.weight",
            "hidden.0.bias",
            "hidden.1.weight",
            "hidden.1.bias",
            "output.0.weight",
            "output.0.bias"
        ]
    );
    assert_eq!(model.trunk.hidden[1].weight.value.dims(), [5, 6]);
}

#[test]
fn the_row_gradients_carry_the_band_ids_the_update_writes() {
    let config = small_config();
    let compute = Compute::flex().with_buffer_cap(128);
    let mut model = SparseModel::new(&config, &bands(&config), &compute).unwrap();
    let b = batch(&config, 5);
    let grads = model.gradients(&b).unwrap();
    assert!(grads.rows.len() > 1, "several segments");
    let mut seen = Vec::new();
    for (s, g) in &grads.rows {
        let ids = grads.ids.of(s);
        assert_eq!(ids.as_slice(), &b.unique_ids()[s.global()]);
        assert_eq!(g.dims()[0], ids.len());
        seen.extend_from_slice(ids.as_slice());
    }
    assert_eq!(seen, b.unique_ids());
}

/// Trains both layouts `steps` steps with AdamW everywhere (lazy AdamW on the sparse table),
/// returning their eval losses (the eval loss of the sparse layout read without its flush when
/// `flush` is false); some row of the first batch is in no later batch.
fn adamw_eval_losses(flush: bool) -> (f64, f64) {
    let mut config = small_config();
    config.optim.table = TableOptim::AdamW;
    config.optim.dense = DenseOptim::AdamW;
    config.optim.lr = 0.02;
    config.optim.weight_decay = 0.1;
    let compute = Compute::flex();
    let mut sparse = SparseModel::new(&config, &bands(&config), &compute).unwrap();
    let mut dense = DenseModel::new(&config, &bands(&config), &compute, Init::Seeded).unwrap();
    let mut probe = StepProbe::new(&Device::flex());
    let batches: Vec<CsrBatch> = (0..8).map(|s| batch(&config, 4 * s)).collect();
    let idle = |id: &u32| batches[1..].iter().all(|b| !b.unique_ids().contains(id));
    assert!(
        batches[0].unique_ids().iter().any(idle),
        "a row of the first batch is untouched afterwards"
    );
    for b in &batches {
        let (s, d) = (
            sparse.train_step(b, &mut probe).unwrap(),
            dense.train_step(b, &mut probe).unwrap(),
        );
        close("training loss", s.loss as f64, d.loss as f64, 1e-5);
    }
    let eval: Vec<CsrBatch> = (0..3).map(|s| batch(&config, 1000 + 4 * s)).collect();
    let sparse_loss = if flush {
        Trainable::held_out_loss(&mut sparse, &eval, &widebag_collective::local::Local)
            .unwrap()
            .unwrap()
    } else {
        let (mut sum, mut rows) = (0.0, 0);
        for b in &eval {
            sum += sparse.loss(b).unwrap() as f64 * b.n_rows() as f64;
            rows += b.n_rows();
        }
        sum / rows as f64
    };
    let dense_loss = Trainable::held_out_loss(&mut dense, &eval, &widebag_collective::local::Local)
        .unwrap()
        .unwrap();
    (sparse_loss, dense_loss)
}

#[test]
fn lazy_adamw_evaluates_the_weights_dense_adamw_has_after_the_flush() {
    let (sparse, dense) = adamw_eval_losses(true);
    close("eval loss", sparse, dense, 1e-5);
    // Without the flush, rows the last steps did not touch are read stale.
    let (stale, dense) = adamw_eval_losses(false);
    assert!(
        (stale - dense).abs() > 1e-5 * (1.0 + dense.abs()),
        "stale {stale} vs dense {dense}"
    );
}

#[test]
fn the_model_builds_the_output_layer_the_ledger_prices() {
    use widebag_config::{CpuKernels, Cutoffs, OutputKind};
    use widebag_ledger::step::{BatchFacts, DeviceFacts, OutputLayerKind, StepSpec};
    let compute = Compute::flex();
    let mut seen = Vec::new();
    for output in [
        OutputKind::Full,
        OutputKind::Adaptive,
        OutputKind::SampledSoftmax,
    ] {
        for kernels in [CpuKernels::Host, CpuKernels::Tensor] {
            for tied in [false, true] {
                let mut c = small_config();
                c.model.output = output;
                c.train.cpu_kernels = kernels;
                c.model.tie_output = tied;
                c.model.sampling.negatives = 3;
                // On flex the CubeCL kernels fall back: the output layer steps after backward.
                c.train.gpu_kernels = widebag_config::GpuKernels::Cubecl;
                if output == OutputKind::Adaptive {
                    c.model.output_bands.cutoffs = Cutoffs::Ids(vec![3]);
                }
                let bands = ModelBands::resolve(&c).unwrap();
                let built = SparseModel::new(&c, &bands, &compute);
                // Tying is refused off the host kernels and with the adaptive softmax; the
                // sampled softmax has its own item vectors (the config refuses the tie too).
                let refused = tied
                    && (kernels == CpuKernels::Tensor
                        || output == OutputKind::Adaptive
                        || output.sampled());
                assert_eq!(
                    built.is_err(),
                    refused,
                    "{output:?} {kernels:?} tied {tied}"
                );
                let Ok(model) = built else { continue };
                let device = DeviceFacts {
                    max_buffer_bytes: compute.max_buffer_bytes,
                    alignment_bytes: 4,
                    host_threads: crate::device::host_threads(&compute.device),
                    bf16: true,
                    host_memory: true,
                };
                let spec = StepSpec::from_config(&c, &bands, device, BatchFacts::default());
                let kind = model.output().priced_as();
                assert_eq!(
                    kind,
                    spec.output_layer(),
                    "{output:?} {kernels:?} tied {tied}"
                );
                assert_eq!(
                    model.output().update_priced_as(),
                    spec.output_update(),
                    "{output:?} {kernels:?} tied {tied}"
                );
                seen.push(kind);
            }
        }
    }
    for kind in [
        OutputLayerKind::ChunkedSoftmax,
        OutputLayerKind::HostSoftmax,
        OutputLayerKind::AdaptiveSoftmax,
        OutputLayerKind::HostAdaptiveSoftmax,
        OutputLayerKind::Sampled,
    ] {
        assert!(seen.contains(&kind), "{kind:?} never built");
    }
}
