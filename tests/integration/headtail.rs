//! Head/tail layouts on flex and on wgpu: the adaptive softmax's probabilities over 240,000
//! classes, finite-difference gradients of adaptive input and adaptive softmax, the training
//! loss against the model's own log-probabilities (full, adaptive, multinomial), and host-placed
//! bands against device-placed ones.

use crate::common;

use common::{assert_fd, batch, fd_dense, fd_table, flex, wgpu_or_skip, wide};
use widebag_config::{BandPlacement, Config, Cutoffs, OutputKind, TableOptim, TargetKind};
use widebag_csr::CsrBatch;
use widebag_model::tensors::to_vec;
use widebag_model::{Compute, SparseModel};

fn headtail_config(target: TargetKind, output: OutputKind) -> Config {
    let mut c = Config::default();
    c.data.width = 60;
    c.data.n_classes = Some(30);
    c.data.nnz = 6.0;
    c.data.nnz_spread = 3.0;
    c.data.zipf_exponent = 0.6;
    c.data.target = target;
    c.model.dim = 8;
    c.model.hidden = vec![6];
    c.model.input_bands.cutoffs = Cutoffs::Ids(vec![10, 30]);
    c.model.input_bands.factor = 2;
    c.model.output = output;
    if output != OutputKind::Full {
        c.model.output_bands.cutoffs = Cutoffs::Ids(vec![8, 18]);
        c.model.output_bands.factor = 2;
    }
    c.train.batch_size = 6;
    c.train.seed = 5;
    c
}

/// `-(1/B) sum_r sum_j y_rj log p_rj` from the model's full log-probabilities, with `y` the
/// objective's targets (normalised per row unless multinomial).
fn loss_from_log_probs(model: &mut SparseModel, b: &CsrBatch, output: OutputKind) -> f32 {
    let logp = to_vec(model.log_probs(b).unwrap()).unwrap();
    let n = model.spec().n_classes;
    let t = match output {
        OutputKind::Multinomial => b.targets().clone(),
        _ => b.targets().normalised(),
    };
    let mut sum = 0.0f64;
    for r in 0..b.n_rows() {
        for k in t.row_ptr[r]..t.row_ptr[r + 1] {
            sum += t.weights[k] as f64 * logp[r * n + t.classes[k] as usize] as f64;
        }
    }
    (-sum / b.n_rows() as f64) as f32
}

const ALL_CASES: [(TargetKind, OutputKind); 4] = [
    (TargetKind::NextId, OutputKind::Adaptive),
    (TargetKind::Bag, OutputKind::Multinomial),
    (TargetKind::Bag, OutputKind::Adaptive),
    (TargetKind::NextId, OutputKind::Full),
];

fn check_headtail_gradients(compute: Compute, label: &str, cases: &[(TargetKind, OutputKind)]) {
    for &(target, output) in cases {
        let config = headtail_config(target, output);
        // A 256-byte buffer cap: several shards per band, bag pieces, and tail clusters
        // evaluated in row pieces.
        let compute = compute.clone().with_buffer_cap(256);
        let mut model = wide(&config, &compute);
        let what = format!("{label}/{target:?}/{}", output.name());
        assert_eq!(model.bands().len(), 3, "{what}");
        assert_eq!(
            model.spec().bands.output_split(),
            output != OutputKind::Full,
            "{what}"
        );
        let b = batch(&config, 17);
        let grads = model.gradients(&b).unwrap();
        // The training loss is the model's own log-likelihood of the targets.
        let from_logp = loss_from_log_probs(&mut model, &b, output);
        assert!(
            (grads.loss - from_logp).abs() <= 1e-5 * (1.0 + from_logp.abs()),
            "{what}: training loss {} vs log-probs {from_logp}",
            grads.loss
        );
        // Central finite differences on touched rows of every band.
        let eps = 1e-2;
        let uniq = b.unique_ids().to_vec();
        let mut checked = [0usize; 3];
        for (s, g) in &grads.rows {
            let g = to_vec(g.clone()).unwrap();
            let dim = model.bands()[s.band].band.dim;
            for (i, pos) in s.global().enumerate().take(2) {
                let id = uniq[pos];
                let col = (i + pos) % dim;
                let fd = fd_table(&mut model, &b, (id, col), eps);
                let what = format!("{what} band {} id {id} col {col}", s.band);
                assert_fd(&what, fd, g[i * dim + col]);
                checked[s.band] += 1;
            }
        }
        assert!(checked.iter().all(|&n| n > 0), "{what}: {checked:?}");
        // Every dense parameter: projections, hidden layers and the whole output layer.
        let names: Vec<String> = model
            .dense_params()
            .into_iter()
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(
            names.len(),
            grads.dense().len(),
            "{what}: a gradient per parameter"
        );
        for (param, (name, g)) in names.iter().zip(grads.dense()).enumerate() {
            let g = to_vec(g.clone()).unwrap();
            let index = (param * 7) % g.len();
            let fd = fd_dense(&mut model, &b, (name, index), eps);
            assert_fd(&format!("{what} {name}[{index}]"), fd, g[index]);
        }
    }
}

#[test]
fn adaptive_input_and_softmax_match_finite_differences_on_flex() {
    check_headtail_gradients(flex(), "flex", &ALL_CASES);
}

#[test]
fn adaptive_input_and_softmax_match_finite_differences_on_wgpu() {
    if let Some(c) = wgpu_or_skip("adaptive_fd_on_wgpu") {
        // Two cases on lavapipe (each new shape compiles kernels): adaptive and multinomial.
        check_headtail_gradients(c, "wgpu", &ALL_CASES[..2]);
    }
}

fn check_probabilities_sum_to_one(compute: Compute, label: &str) {
    let mut config = headtail_config(TargetKind::NextId, OutputKind::Adaptive);
    config.data.width = 1_000;
    config.data.n_classes = Some(240_000);
    config.model.output_bands.cutoffs = Cutoffs::Ids(vec![2_000, 20_000, 100_000]);
    config.model.output_bands.factor = 2;
    config.model.input_bands.cutoffs = Cutoffs::Ids(vec![100, 400]);
    config.train.batch_size = 4;
    let mut model = wide(&config, &compute);
    let b = batch(&config, 3);
    let logp = to_vec(model.log_probs(&b).unwrap()).unwrap();
    assert_eq!(logp.len(), 4 * 240_000);
    for (r, row) in logp.chunks(240_000).enumerate() {
        let total: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
        assert!(
            (total - 1.0).abs() <= 1e-4,
            "{label} row {r}: probabilities sum to {total}"
        );
    }
}

#[test]
fn adaptive_softmax_probabilities_sum_to_one_over_240k_classes_on_flex() {
    check_probabilities_sum_to_one(flex(), "flex");
}

#[test]
fn adaptive_softmax_probabilities_sum_to_one_over_240k_classes_on_wgpu() {
    if let Some(c) = wgpu_or_skip("adaptive_sum_on_wgpu") {
        check_probabilities_sum_to_one(c, "wgpu");
    }
}

/// Losses of `steps` training steps with the tail bands (or every band) placed on the host.
fn trajectory(config: &Config, placement: &[BandPlacement], steps: u64) -> Vec<f32> {
    let mut config = config.clone();
    config.model.input_bands.placement = placement.to_vec();
    let compute = flex().with_buffer_cap(256);
    let mut model = wide(&config, &compute);
    let mut probe = widebag_model::StepProbe::new(model.device());
    let losses = (0..steps)
        .map(|s| {
            model
                .train_step(&batch(&config, s * 6), &mut probe)
                .unwrap()
                .loss
        })
        .collect();
    if placement.contains(&BandPlacement::Host) {
        let (up, down) = model.host_traffic();
        assert!(up > 0 && down > 0, "a host band moves rows");
        assert!(model.host_bytes() > 0);
    }
    losses
}

#[test]
fn host_placed_bands_train_like_device_placed_bands_on_cpu() {
    use BandPlacement::{Device, Host};
    for optim in TableOptim::ALL {
        let mut config = headtail_config(TargetKind::NextId, OutputKind::Adaptive);
        config.optim.table = optim;
        config.optim.lr = 0.05;
        let device = trajectory(&config, &[Device], 12);
        for placement in [&[Device, Host][..], &[Host][..]] {
            let host = trajectory(&config, placement, 12);
            assert_eq!((device.len(), host.len()), (12, 12), "{placement:?}");
            for (s, (a, b)) in device.iter().zip(&host).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5,
                    "{} {placement:?} step {}: device {a}, host {b}",
                    optim.name(),
                    s + 1
                );
            }
        }
        assert!(
            device.last() < device.first(),
            "{}: {device:?}",
            optim.name()
        );
    }
}
