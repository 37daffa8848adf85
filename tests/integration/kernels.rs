//! flex's host kernels (`train.cpu_kernels = "host"`, the default) against flex's tensor path
//! (`"tensor"`, burn's operations as on wgpu): the same losses and the same weights after
//! several training steps, for the sparse layout with every table and dense optimizer, the
//! adaptive softmax over head/tail bands (one of them on the host tier), bag targets with the
//! multinomial output, and the dense layout. And widebag's CubeCL softmax kernels on wgpu
//! (`train.gpu_kernels = "cubecl"`) against the host kernels.

use crate::common;

use common::{assert_close, batch, flex, wgpu_or_skip, wide};
use widebag_config::bands::ModelBands;
use widebag_config::{
    BandPlacement, Config, CpuKernels, Cutoffs, DenseOptim, GpuKernels, Layout, OutputKind,
    TableOptim, TargetKind,
};
use widebag_ledger::step::OutputLayerKind;
use widebag_model::layout::dense::DenseModel;
use widebag_model::output::softmax::SoftmaxKernels;
use widebag_model::params::init::Init;
use widebag_model::tensors::to_vec;
use widebag_model::{Compute, SparseModel, StepProbe};

fn config(target: TargetKind, output: OutputKind, table: TableOptim, dense: DenseOptim) -> Config {
    let mut c = Config::default();
    c.data.width = 300;
    c.data.n_classes = Some(2_000);
    c.data.nnz = 8.0;
    c.data.nnz_spread = 4.0;
    c.data.zipf_exponent = 0.8;
    c.data.target = target;
    c.model.dim = 8;
    c.model.hidden = vec![12];
    c.model.output = output;
    if output == OutputKind::Adaptive {
        c.model.input_bands.cutoffs = Cutoffs::Ids(vec![40, 120]);
        c.model.input_bands.factor = 2;
        c.model.input_bands.placement = vec![BandPlacement::Device, BandPlacement::Host];
        c.model.output_bands.cutoffs = Cutoffs::Ids(vec![300, 900]);
        c.model.output_bands.factor = 2;
    }
    c.optim.table = table;
    c.optim.dense = dense;
    c.optim.lr = 0.05;
    c.train.batch_size = 24;
    c.train.seed = 11;
    c
}

/// Losses of `steps` training steps and every weight after them (tables, then dense).
fn train_sparse(config: &Config, kernels: CpuKernels, steps: u64) -> (Vec<f32>, Vec<f32>) {
    let mut config = config.clone();
    config.train.cpu_kernels = kernels;
    train_sparse_on(&config, &flex(), steps)
}

/// [`train_sparse`] on `compute`, with `config`'s kernels.
fn train_sparse_on(config: &Config, compute: &Compute, steps: u64) -> (Vec<f32>, Vec<f32>) {
    let mut model: SparseModel = wide(config, compute);
    let mut probe = StepProbe::new(model.device());
    let losses = (0..steps)
        .map(|s| {
            let b = batch(config, s * config.train.batch_size as u64);
            model.train_step(&b, &mut probe).unwrap().loss
        })
        .collect();
    model.flush_deferred().unwrap();
    let mut weights = Vec::new();
    for band in model.bands() {
        weights.extend(band.table.to_vec().unwrap());
    }
    for p in model.dense_params().into_iter() {
        weights.extend(to_vec(p.value.clone()).unwrap());
    }
    (losses, weights)
}

#[test]
fn host_kernels_train_the_sparse_layout_like_the_tensor_path() {
    let mut cases = Vec::new();
    for table in TableOptim::ALL {
        cases.push((
            TargetKind::NextId,
            OutputKind::Full,
            table,
            DenseOptim::Adam,
        ));
    }
    for dense in DenseOptim::ALL {
        cases.push((
            TargetKind::NextId,
            OutputKind::Full,
            TableOptim::Adam,
            dense,
        ));
    }
    cases.push((
        TargetKind::Bag,
        OutputKind::Multinomial,
        TableOptim::Adam,
        DenseOptim::Adam,
    ));
    cases.push((
        TargetKind::NextId,
        OutputKind::Adaptive,
        TableOptim::AdamW,
        DenseOptim::AdamW,
    ));
    cases.push((
        TargetKind::Bag,
        OutputKind::Adaptive,
        TableOptim::RowwiseAdagrad,
        DenseOptim::Momentum,
    ));
    for (target, output, table, dense) in cases {
        let c = config(target, output, table, dense);
        let what = format!("{target:?}/{}/{table:?}/{dense:?}", output.name());
        let (host_loss, host_w) = train_sparse(&c, CpuKernels::Host, 4);
        let (tensor_loss, tensor_w) = train_sparse(&c, CpuKernels::Tensor, 4);
        assert_close(
            &format!("{what} losses"),
            &host_loss,
            &tensor_loss,
            1e-5,
            1e-5,
        );
        // Adam's step is about ±lr whatever the gradient's size, so for a weight whose gradient
        // is near ε, rounding in the gradient (blocks vs whole-chunk matmuls) moves it by a
        // small fraction of lr: 1e-4 is 0.2 % of this lr.
        assert_close(&format!("{what} weights"), &host_w, &tensor_w, 1e-4, 1e-4);
        assert!(host_loss[3] < host_loss[0] + 1.0, "{what}: {host_loss:?}");
    }
}

#[test]
fn host_kernels_train_the_dense_layout_like_the_tensor_path() {
    let run = |kernels| {
        let mut c = config(
            TargetKind::NextId,
            OutputKind::Full,
            TableOptim::Adam,
            DenseOptim::Adam,
        );
        c.model.layout = Layout::Dense;
        c.train.cpu_kernels = kernels;
        train_dense_on(&c, &flex())
    };
    let (host_loss, host_w) = run(CpuKernels::Host);
    let (tensor_loss, tensor_w) = run(CpuKernels::Tensor);
    assert_close("dense losses", &host_loss, &tensor_loss, 1e-5, 1e-5);
    assert_close("dense weights", &host_w, &tensor_w, 1e-4, 1e-4);
}

/// The dense layout's losses and weights after 4 steps on `compute`, with `c`'s kernels.
fn train_dense_on(c: &Config, compute: &Compute) -> (Vec<f32>, Vec<f32>) {
    let bands = ModelBands::resolve(c).unwrap();
    let mut model = DenseModel::new(c, &bands, compute, Init::Seeded).unwrap();
    let mut probe = StepProbe::new(model.device());
    let losses: Vec<f32> = (0..4)
        .map(|s| {
            model
                .train_step(&batch(c, s * 24), &mut probe)
                .unwrap()
                .loss
        })
        .collect();
    let mut w = to_vec(model.input_weight.value.clone()).unwrap();
    for p in model.params.iter() {
        w.extend(to_vec(p.value.clone()).unwrap());
    }
    (losses, w)
}

/// widebag's CubeCL softmax kernels on wgpu (`train.gpu_kernels = "cubecl"`) against flex's
/// host kernels: the same losses and weights after 4 steps, for the sparse layout over three
/// class chunks (next-id targets, and bags with the multinomial output; the output layer's
/// step fused into its backward pass with every dense optimizer, and over a last hidden layer
/// wider than one of the kernel's 64-unit tiles) and the dense layout; and the model says it
/// ran them.
#[test]
fn cubecl_kernels_on_wgpu_train_like_the_host_kernels() {
    let Some(gpu) = wgpu_or_skip("cubecl_kernels_on_wgpu_train_like_the_host_kernels") else {
        return;
    };
    use widebag_ledger::step::OutputUpdate;
    let cases = [
        (TargetKind::NextId, OutputKind::Full, DenseOptim::Adam, 12),
        (
            TargetKind::Bag,
            OutputKind::Multinomial,
            DenseOptim::Adam,
            12,
        ),
        (TargetKind::NextId, OutputKind::Full, DenseOptim::AdamW, 70),
        (TargetKind::NextId, OutputKind::Full, DenseOptim::Sgd, 12),
        (
            TargetKind::NextId,
            OutputKind::Full,
            DenseOptim::Momentum,
            12,
        ),
        // The adaptive softmax: the head and both tail clusters through the same kernels.
        (
            TargetKind::NextId,
            OutputKind::Adaptive,
            DenseOptim::AdamW,
            12,
        ),
        (
            TargetKind::Bag,
            OutputKind::Adaptive,
            DenseOptim::Momentum,
            70,
        ),
    ];
    for (target, output, dense, last) in cases {
        let mut c = config(target, output, TableOptim::Adam, dense);
        c.model.hidden = vec![last];
        c.optim.momentum = 0.9;
        c.optim.weight_decay = 0.1;
        // Three class chunks: each row's log-sum-exp is folded across launches.
        c.model.class_chunk = 700;
        c.train.gpu_kernels = GpuKernels::Cubecl;
        let what = format!("{target:?}/{}/{dense:?}/{last}", output.name());
        let model: SparseModel = wide(&c, &gpu);
        assert_eq!(model.spec().softmax_kernels, SoftmaxKernels::Cube, "{what}");
        let fused = model.output().update_priced_as();
        assert_eq!(fused, OutputUpdate::InBackward, "{what}");
        if output == OutputKind::Adaptive {
            let kind = model.output().priced_as();
            assert_eq!(kind, OutputLayerKind::CubeAdaptiveSoftmax, "{what}");
        }
        drop(model);
        let (cube_loss, cube_w) = train_sparse_on(&c, &gpu, 4);
        let (host_loss, host_w) = train_sparse(&c, CpuKernels::Host, 4);
        assert_close(
            &format!("{what} losses"),
            &cube_loss,
            &host_loss,
            1e-5,
            1e-5,
        );
        assert_close(&format!("{what} weights"), &cube_w, &host_w, 1e-4, 1e-4);
    }
    let mut c = config(
        TargetKind::NextId,
        OutputKind::Full,
        TableOptim::Adam,
        DenseOptim::Adam,
    );
    c.model.layout = Layout::Dense;
    c.train.gpu_kernels = GpuKernels::Cubecl;
    let (cube_loss, cube_w) = train_dense_on(&c, &gpu);
    let (host_loss, host_w) = train_dense_on(&c, &flex());
    assert_close("dense losses", &cube_loss, &host_loss, 1e-5, 1e-5);
    assert_close("dense weights", &cube_w, &host_w, 1e-4, 1e-4);
}

/// The adaptive softmax on widebag's CubeCL kernels, its gradients without a step
/// (`SparseModel::gradients`: finite differences, parity, the held-out loss) against the
/// autodiff layer's on wgpu: the loss, the row gradients and every dense gradient in the same
/// order, zeros for a tail cluster no target of the batch reached.
#[test]
fn cubecl_adaptive_softmax_gradients_match_autodiff_on_wgpu() {
    let Some(gpu) = wgpu_or_skip("cubecl_adaptive_softmax_gradients_match_autodiff_on_wgpu") else {
        return;
    };
    for target in [TargetKind::NextId, TargetKind::Bag] {
        let mut c = config(
            target,
            OutputKind::Adaptive,
            TableOptim::Adam,
            DenseOptim::Adam,
        );
        // A third tail past every class the batch draws: its gradients are zeros.
        c.model.output_bands.cutoffs = Cutoffs::Ids(vec![300, 900, 1_990]);
        let run = |kernels: GpuKernels| {
            let mut c = c.clone();
            c.train.gpu_kernels = kernels;
            let mut model: SparseModel = wide(&c, &gpu);
            let grads = model.gradients(&batch(&c, 0)).unwrap();
            let dense: Vec<Vec<f32>> = grads
                .dense()
                .into_iter()
                .map(|g| to_vec(g.clone()).unwrap())
                .collect();
            let names: Vec<String> = model
                .dense_params()
                .iter()
                .map(|p| p.name.clone())
                .collect();
            (
                grads.loss,
                grads.rows_to_vec().unwrap(),
                dense,
                names,
                model.output().priced_as(),
            )
        };
        let (cube_loss, cube_rows, cube, names, kind) = run(GpuKernels::Cubecl);
        assert_eq!(kind, OutputLayerKind::CubeAdaptiveSoftmax);
        let (ad_loss, ad_rows, ad, ad_names, ad_kind) = run(GpuKernels::Tensor);
        assert_eq!(ad_kind, OutputLayerKind::AdaptiveSoftmax);
        assert_eq!(names, ad_names);
        let what = format!("{target:?}");
        assert_close(
            &format!("{what} loss"),
            &[cube_loss],
            &[ad_loss],
            1e-5,
            1e-5,
        );
        assert_close(&format!("{what} rows"), &cube_rows, &ad_rows, 1e-5, 1e-4);
        assert_eq!(cube.len(), ad.len(), "{what}");
        for ((g, r), name) in cube.iter().zip(&ad).zip(&names) {
            assert_close(&format!("{what} {name}"), g, r, 1e-5, 1e-4);
        }
        let reached = batch(&c, 0).targets().classes.iter().any(|&x| x >= 1_990);
        let last_tail = &cube[cube.len() - 3..];
        let zeros = last_tail.iter().flatten().all(|&x| x == 0.0);
        assert_eq!(zeros, !reached, "{what}: the last tail, reached {reached}");
    }
}

/// The row log-sum-exp's two merges of a cube's pairs: in shared memory alone (the fallback,
/// and what a CPU adapter such as lavapipe gets: cubecl gives it no plane operations) and by
/// plane operations first where asked and the adapter's plane size allows; both against a
/// reference in f64 over two chunks of uneven width.
#[test]
fn row_lse_merges_in_shared_memory_without_plane_operations() {
    use widebag_model::cube::row_lse::{Merge, RowLse};
    let Some(gpu) = wgpu_or_skip("row_lse_merges_in_shared_memory_without_plane_operations") else {
        return;
    };
    let merge = Merge::on(&gpu.device).expect("a cubecl device");
    if gpu.adapter.contains("Cpu") {
        assert_eq!(merge, Merge::Shared, "{}", gpu.adapter);
    }
    let (rows, widths) = (5usize, [1_000usize, 2_999]);
    let mut rng = 7u64;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 40.0
    };
    let chunks: Vec<Vec<f32>> = widths
        .iter()
        .map(|&w| (0..rows * w).map(|_| next()).collect())
        .collect();
    let reference: Vec<f32> = (0..rows)
        .map(|r| {
            let row: Vec<f64> = chunks
                .iter()
                .zip(widths)
                .flat_map(|(c, w)| c[r * w..(r + 1) * w].iter().map(|&x| x as f64))
                .collect();
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            (m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln()) as f32
        })
        .collect();
    for asked in [Merge::Shared, Merge::Planes] {
        let mut lse = RowLse::with_merge(asked);
        for (c, &w) in chunks.iter().zip(&widths) {
            let z = widebag_model::tensors::floats(c.clone(), [rows, w], &gpu.device);
            assert!(lse.add(z));
        }
        let ran = lse.merged_by().unwrap();
        // lavapipe (Mesa 22.3.6) runs plane operations at one fixed size when asked: both
        // merges run there, so neither passes by falling back.
        if asked == Merge::Shared || gpu.adapter.contains("llvmpipe") {
            assert_eq!(ran, asked, "{}", gpu.adapter);
        }
        eprintln!("asked {asked:?}, ran {ran:?} on {}", gpu.adapter);
        let got = to_vec(lse.finish().unwrap()).unwrap();
        assert_close(&format!("{asked:?}/{ran:?}"), &got, &reference, 1e-5, 1e-6);
    }
}

/// `model.logits = "tiled"`: the logits formed tile by tile inside widebag's CubeCL kernels,
/// never written whole, against flex's host kernels after 4 steps (next-id targets and bags with
/// the multinomial output and with the adaptive softmax's head and tail clusters; the full
/// softmax in three class chunks each of several 64-class tiles and a ragged last
/// one, a hidden width that is no multiple of the kernels' 16-unit stages), and against the
/// recomputed logits on wgpu at a batch of several 64-row tiles: the gradients without a step,
/// and 4 steps.
#[test]
fn tiled_logits_on_wgpu_train_like_the_host_kernels() {
    let Some(gpu) = wgpu_or_skip("tiled_logits_on_wgpu_train_like_the_host_kernels") else {
        return;
    };
    use widebag_config::Logits;
    for (target, output, last) in [
        (TargetKind::NextId, OutputKind::Full, 70),
        (TargetKind::Bag, OutputKind::Multinomial, 12),
        // The adaptive softmax: the head and both tail clusters through the same tiles.
        (TargetKind::NextId, OutputKind::Adaptive, 12),
        (TargetKind::Bag, OutputKind::Adaptive, 70),
    ] {
        let mut c = config(target, output, TableOptim::Adam, DenseOptim::Adam);
        c.model.hidden = vec![last];
        c.model.class_chunk = 700;
        c.train.batch_size = 150;
        c.train.gpu_kernels = GpuKernels::Cubecl;
        let what = format!("{target:?}/{}/{last}", output.name());
        let gradients = |logits: Logits| {
            let mut c = c.clone();
            c.model.logits = logits;
            let mut model: SparseModel = wide(&c, &gpu);
            let grads = model.gradients(&batch(&c, 0)).unwrap();
            let mut flat = grads.rows_to_vec().unwrap();
            for g in grads.dense() {
                flat.extend(to_vec(g.clone()).unwrap());
            }
            (grads.loss, flat)
        };
        let (tiled_loss, tiled) = gradients(Logits::Tiled);
        let (loss, recomputed) = gradients(Logits::Recompute);
        assert!(recomputed.iter().any(|&g| g != 0.0), "{what}");
        assert_close(&format!("{what} loss"), &[tiled_loss], &[loss], 1e-5, 1e-5);
        assert_close(
            &format!("{what} gradients"),
            &tiled,
            &recomputed,
            1e-5,
            1e-4,
        );
        // 4 steps against the recomputed logits on wgpu (batch 150) and, at the batch of 24 the
        // other kernels' test takes, against flex's host kernels (Adam's first steps on a table
        // row magnify a gradient's rounding: at batch 150 the recomputed logits on wgpu and the
        // host kernels are 3e-4 apart in one table weight).
        let train = |c: &Config, logits: Logits| {
            let mut c = c.clone();
            c.model.logits = logits;
            train_sparse_on(&c, &gpu, 4)
        };
        let (tiled_loss, tiled_w) = train(&c, Logits::Tiled);
        let (loss, w) = train(&c, Logits::Recompute);
        let against = format!("{what} against the recomputed logits");
        assert_close(
            &format!("{against}: losses"),
            &tiled_loss,
            &loss,
            1e-5,
            1e-5,
        );
        assert_close(&format!("{against}: weights"), &tiled_w, &w, 1e-4, 1e-4);
        c.train.batch_size = 24;
        let (cube_loss, cube_w) = train(&c, Logits::Tiled);
        let (host_loss, host_w) = train_sparse(&c, CpuKernels::Host, 4);
        let against = format!("{what} against the host kernels");
        assert_close(
            &format!("{against}: losses"),
            &cube_loss,
            &host_loss,
            1e-5,
            1e-5,
        );
        assert_close(&format!("{against}: weights"), &cube_w, &host_w, 1e-4, 1e-4);
    }
}
