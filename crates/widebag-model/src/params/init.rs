//! The seeded initial numbers of every parameter, shared by both layouts and every output layer:
//! one hash per element (`uniform_init`), so any sharding, chunking or layout of a tensor starts
//! from the same values. A model about to be loaded from a checkpoint starts from zeros instead
//! ([`Init::Zeros`]): nothing is computed that the checkpoint would overwrite.

use burn::tensor::{Device, Tensor};
use rayon::prelude::*;
use widebag_config::bands::Band;
use widebag_config::{DenseOptim, InputInit};
use widebag_data::rng::{SplitMix64, hash2};

use widebag_ledger::shapes::ClassChunk;

use crate::optim::dense::DenseParam;
use crate::params::{Cluster, Linear, TrunkParams};
use crate::spec::ModelSpec;
use crate::tensors::floats;

/// Where a model's numbers start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Init {
    /// The config's seeded numbers (a fresh run).
    #[default]
    Seeded,
    /// Zeros: the model is about to be read from a checkpoint, which sets every value.
    Zeros,
}

/// Salt of input band `k`'s table.
const TABLE_SALT: u64 = 0x7ab1e;

/// Deterministic uniform init in `[-bound, bound]`, one hash per element so that any sharding or
/// chunking of a tensor gives the same values.
pub fn uniform_init(seed: u64, salt: u64, index: u64, bound: f64) -> f32 {
    let u = (hash2(seed ^ salt, index) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    ((2.0 * u - 1.0) * bound) as f32
}

/// `[rows, cols]` tensor whose element `(i, j)` is `f(i * stride + offset + j)`.
pub fn init_matrix(
    rows: usize,
    cols: usize,
    stride: usize,
    offset: usize,
    device: &Device,
    f: impl Fn(u64) -> f32 + Sync,
) -> Tensor<2> {
    let mut host = vec![0.0f32; rows * cols];
    host.par_chunks_mut(cols.max(1))
        .enumerate()
        .for_each(|(i, row)| {
            for (j, x) in row.iter_mut().enumerate() {
                *x = f((i * stride + offset + j) as u64);
            }
        });
    floats(host, [rows, cols], device)
}

/// Seed of band `k`'s stochastic rounding (its optimizer state's are derived from it).
pub fn rounding_seed(seed: u64, k: usize) -> u64 {
    hash2(seed ^ 0x005e_ed0f_4a1f, k as u64)
}

/// Fills row `r` of input band `k`'s table (`out.len() == band.dim`). The head keeps the unsplit
/// table's numbers: its row `r` is id `band.start + r`, column `j` element `id · dim + j`.
/// With [`Init::Zeros`], zeros.
pub fn table_rows(
    spec: &ModelSpec,
    k: usize,
    band: Band,
    init: Init,
) -> impl Fn(usize, &mut [f32]) + Sync {
    let element = input_element(spec, k, band.dim);
    move |r, out| {
        let row = if k == 0 { band.start + r } else { r };
        for (j, x) in out.iter_mut().enumerate() {
            *x = match init {
                Init::Seeded => element((row * band.dim + j) as u64),
                Init::Zeros => 0.0,
            };
        }
    }
}

/// Element `i` (row-major in its band) of input band `k`, `dim_k` wide, as `model.input_init`
/// says: `uniform` `U(±sqrt(3 / dim_k))`, `normal` `N(0, 1)`, `fan_in` `U(±1/sqrt(width))`.
fn input_element(spec: &ModelSpec, k: usize, dim_k: usize) -> impl Fn(u64) -> f32 + Sync {
    let (seed, salt, init) = (spec.seed, TABLE_SALT + k as u64, spec.input_init);
    let bound = match init {
        InputInit::FanIn => 1.0 / (spec.width as f64).sqrt(),
        _ => (3.0 / dim_k as f64).sqrt(),
    };
    move |i| match init {
        InputInit::Normal => SplitMix64::new(hash2(seed ^ salt, i)).next_normal() as f32,
        InputInit::Uniform | InputInit::FanIn => uniform_init(seed, salt, i, bound),
    }
}

/// The unsplit `[width, dim]` table as one matrix (the dense layout's input weight), with the
/// numbers [`table_rows`] gives the sparse layout's table.
pub fn input_weight(spec: &ModelSpec, init: Init, device: &Device) -> Tensor<2> {
    let dim = spec.dim;
    matrix(
        init,
        [spec.width, dim],
        dim,
        0,
        device,
        input_element(spec, 0, dim),
    )
}

/// [`init_matrix`] under `init`: zeros for [`Init::Zeros`].
fn matrix(
    init: Init,
    [rows, cols]: [usize; 2],
    stride: usize,
    offset: usize,
    device: &Device,
    f: impl Fn(u64) -> f32 + Sync,
) -> Tensor<2> {
    match init {
        Init::Seeded => init_matrix(rows, cols, stride, offset, device, f),
        Init::Zeros => Tensor::zeros([rows, cols], device),
    }
}

/// The trunk's dense parameters of `spec` with `optim` state: the bag bias (zeros), each tail
/// band's projection and each hidden layer.
pub fn trunk_params(
    spec: &ModelSpec,
    optim: DenseOptim,
    init: Init,
    device: &Device,
) -> TrunkParams {
    let (seed, dim) = (spec.seed, spec.dim);
    let param = |name: String, value: Tensor<2>| DenseParam::new(name, value, optim);
    // Tail projections: row variance 1/dim_k times dim_k inputs of variance 1/dim.
    let projections = spec.bands.input[1..]
        .iter()
        .enumerate()
        .map(|(i, band)| {
            let k = i + 1;
            let bound = (3.0 / dim as f64).sqrt() / (band.dim as f64).sqrt();
            let p = matrix(init, [band.dim, dim], dim, 0, device, |i| {
                uniform_init(seed, 0x9000 + k as u64, i, bound * (band.dim as f64).sqrt())
            });
            param(format!("input_band.{k}.projection"), p)
        })
        .collect();
    let sizes = spec.layer_sizes();
    let hidden = sizes
        .windows(2)
        .enumerate()
        .map(|(i, pair)| {
            let (fan_in, fan_out) = (pair[0], pair[1]);
            let bound = 1.0 / (fan_in as f64).sqrt();
            let salt = 0x1000 + 2 * i as u64;
            let w = matrix(init, [fan_in, fan_out], fan_out, 0, device, |k| {
                uniform_init(seed, salt, k, bound)
            });
            let b = matrix(init, [1, fan_out], fan_out, 0, device, |k| {
                uniform_init(seed, salt + 1, k, bound)
            });
            Linear {
                weight: param(format!("hidden.{i}.weight"), w),
                bias: param(format!("hidden.{i}.bias"), b),
            }
        })
        .collect();
    TrunkParams {
        bag_bias: param("bag.bias".into(), Tensor::zeros([1, dim], device)),
        projections,
        hidden,
    }
}

/// The full softmax's weight and bias of `spec` with `optim` state, cut into `chunks` of
/// classes (any cut gives the same numbers).
pub fn full_output(
    spec: &ModelSpec,
    chunks: &[ClassChunk],
    optim: DenseOptim,
    init: Init,
    device: &Device,
) -> Vec<Linear<DenseParam>> {
    let param = |name: String, value: Tensor<2>| DenseParam::new(name, value, optim);
    let (seed, last, n_classes) = (spec.seed, spec.last_hidden(), spec.n_classes);
    let bound = 1.0 / (last as f64).sqrt();
    chunks
        .iter()
        .enumerate()
        .map(|(c, chunk)| {
            let w = matrix(
                init,
                [last, chunk.n],
                n_classes,
                chunk.offset,
                device,
                |k| uniform_init(seed, 0x0a7, k, bound),
            );
            let b = matrix(init, [1, chunk.n], n_classes, chunk.offset, device, |k| {
                uniform_init(seed, 0x0a8, k, bound)
            });
            Linear {
                weight: param(format!("output.{c}.weight"), w),
                bias: param(format!("output.{c}.bias"), b),
            }
        })
        .collect()
}

/// The adaptive softmax's head (its classes and one token per tail cluster) and tail clusters
/// of `spec`, with `optim` state.
pub fn adaptive_output(
    spec: &ModelSpec,
    optim: DenseOptim,
    init: Init,
    device: &Device,
) -> (Linear<DenseParam>, Vec<Cluster<DenseParam>>) {
    let param = |name: String, value: Tensor<2>| DenseParam::new(name, value, optim);
    let (seed, last) = (spec.seed, spec.last_hidden());
    let bound = 1.0 / (last as f64).sqrt();
    let bands = &spec.bands.output;
    let values = |rows: usize, cols: usize, salt: u64, bound: f64| {
        matrix(init, [rows, cols], cols, 0, device, |k| {
            uniform_init(seed, salt, k, bound)
        })
    };
    let head_n = spec.head_classes();
    let head = Linear {
        weight: param(
            "output.head.weight".into(),
            values(last, head_n, 0x0b0, bound),
        ),
        bias: param("output.head.bias".into(), values(1, head_n, 0x0b1, bound)),
    };
    let clusters = bands
        .iter()
        .enumerate()
        .skip(1)
        .map(|(k, c)| {
            let salt = 0x0c0 + 4 * k as u64;
            let tail_bound = 1.0 / (c.dim as f64).sqrt();
            Cluster {
                proj: param(
                    format!("output.tail.{k}.projection"),
                    values(last, c.dim, salt, bound),
                ),
                weight: param(
                    format!("output.tail.{k}.weight"),
                    values(c.dim, c.n_rows(), salt + 1, tail_bound),
                ),
                bias: param(
                    format!("output.tail.{k}.bias"),
                    values(1, c.n_rows(), salt + 2, tail_bound),
                ),
            }
        })
        .collect();
    (head, clusters)
}
