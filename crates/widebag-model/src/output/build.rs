//! The output layer chosen once, when the model is built: the full softmax or the adaptive
//! softmax (the output bands), on burn's tensors or on flex's host kernels (the compute path),
//! tied to the input table or not (`model.tie_output`), with the objective `model.output` names.

use burn::tensor::Device;
use widebag_config::{DenseOptim, OutputKind, Score};

use crate::device::ComputePath;
use crate::error::ModelError;
use crate::output::adaptive::AdaptiveSoftmax;
use crate::output::adaptive_cube::CubeAdaptiveSoftmax;
use crate::output::adaptive_host::HostAdaptiveSoftmax;
use crate::output::chunked::ChunkedSoftmax;
use crate::output::clusters::AdaptiveParams;
use crate::output::full::FullParams;
use crate::output::host::HostSoftmax;
use crate::output::negatives::NegativeStream;
use crate::output::sampled::{SampledLoss, SampledOutput};
use crate::output::softmax::SoftmaxKernels;
use crate::output::tied::{TiedSoftmax, refuse};
use crate::output::{Objective, OutputLayer};
use crate::params::init::Init;
use crate::products::Operands;
use crate::ranks::Ranks;
use crate::spec::ModelSpec;
use crate::table::bands::InputBand;

/// The output layer of `spec` for rank `ranks.rank` (its block of the full softmax's classes, or
/// the adaptive softmax with the tail clusters it owns), its parameters with `optim` state
/// starting as `init` says; a tied layer makes `bands`' table its weight's transpose.
pub fn build(
    spec: &ModelSpec,
    ranks: Ranks,
    optim: DenseOptim,
    init: Init,
    bands: &mut [InputBand],
    device: &Device,
) -> Result<Box<dyn OutputLayer>, ModelError> {
    let objective = match spec.output {
        OutputKind::Full | OutputKind::Adaptive => Objective::Distribution,
        _ => Objective::Multinomial,
    };
    if let Some(loss) = SampledLoss::of(spec.output, &spec.sampling) {
        if spec.tied {
            return Err(refuse(
                "is the full softmax's; a sampled output has its own item vectors",
            ));
        }
        return sampled(spec, ranks, optim, init, loss, device);
    }
    if spec.score != Score::Dot {
        return Err(ModelError::Unsupported {
            key: "model.score",
            message: "cosine scores are the sampled losses' (model.output = \"sampled_softmax\", \"negative_sampling\" or \"cosine_contrastive\")".into(),
        });
    }
    let host = spec.compute_path == ComputePath::Host;
    let adaptive = spec.bands.output_split();
    if spec.tied {
        if !host {
            return Err(refuse(
                "runs on flex's host kernels only (train.device = \"cpu\")",
            ));
        }
        if ranks.size != 1 {
            return Err(refuse("trains in one process only"));
        }
        if adaptive {
            return Err(refuse("needs one f32 table and the full softmax"));
        }
    }
    if adaptive {
        let params = AdaptiveParams::new(spec, ranks, optim, init, device);
        return Ok(match host {
            true => Box::new(HostAdaptiveSoftmax::new(
                params,
                objective,
                spec.logits,
                device.clone(),
            )),
            // Off autodiff on the CubeCL kernels in one process (the ledger's
            // `OutputLayerKind::CubeAdaptiveSoftmax`), else on autodiff.
            false if spec.softmax_kernels == SoftmaxKernels::Cube && ranks.size == 1 => {
                let logits = spec.logits;
                Box::new(CubeAdaptiveSoftmax::new(
                    params,
                    objective,
                    logits,
                    device.clone(),
                ))
            }
            false if spec.logits == widebag_config::Logits::Tiled => {
                return Err(ModelError::Unsupported {
                    key: "model.logits",
                    message: "\"tiled\": the adaptive softmax across ranks runs on autodiff, \
                              not on the CubeCL kernels' tiles (one process, or \"recompute\")"
                        .into(),
                });
            }
            false => Box::new(AdaptiveSoftmax::new(params, objective)),
        });
    }
    let full = FullParams::new(spec, ranks, optim, init, device);
    if !host {
        // Kept logits in one process only, as the ledger prices them (`keeps_logits`); tiled
        // ones (none kept) in any.
        let logits = match (ranks.size, spec.logits) {
            (1, _) | (_, widebag_config::Logits::Tiled) => spec.logits,
            _ => widebag_config::Logits::Recompute,
        };
        return Ok(Box::new(ChunkedSoftmax::new(
            full,
            objective,
            spec.softmax_kernels,
            (logits, Operands(spec.output_precision)),
            device.clone(),
        )));
    }
    let layer = HostSoftmax::new(
        full,
        objective,
        spec.logits,
        ranks,
        [spec.last_hidden(), spec.n_classes],
        device.clone(),
    );
    Ok(match spec.tied {
        true => Box::new(TiedSoftmax::tie(layer, bands)?),
        false => Box::new(layer),
    })
}

/// A sampled loss's layer: the full softmax's parameters in class chunks, one process.
fn sampled(
    spec: &ModelSpec,
    ranks: Ranks,
    optim: DenseOptim,
    init: Init,
    loss: SampledLoss,
    device: &Device,
) -> Result<Box<dyn OutputLayer>, ModelError> {
    let s = &spec.sampling;
    if ranks.size != 1 {
        return Err(ModelError::Unsupported {
            key: "model.output",
            message: format!("{} trains in one process only", spec.output.name()),
        });
    }
    let stream = NegativeStream::new(
        spec.seed,
        spec.n_classes,
        s.negatives,
        s.proposal,
        s.alpha,
        &spec.class_counts,
    );
    let full = FullParams::new(spec, ranks, optim, init, device);
    Ok(Box::new(SampledOutput::new(
        full,
        loss,
        spec.score,
        spec.temperature,
        s.batch_negatives,
        stream,
        spec.reduce_cols,
        (device.clone(), spec.compute_path == ComputePath::Host),
    )))
}
