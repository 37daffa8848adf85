//! The ledger of the dense baseline: a fully connected ReLU MLP `width → hidden… → classes`
//! written the way a PyTorch user writes it (dense `[batch, width]` input, dense weights, full
//! `[batch, classes]` logits, `cross_entropy`, `optimizer.zero_grad(set_to_none=True)`).
//!
//! Lifetimes follow PyTorch's autograd: `Linear` saves its input, `ReLU` its output,
//! `log_softmax` its output; gradients exist from backward until the next `zero_grad`; optimizer
//! state is persistent after the first step; Adam's step counters are host scalars. Backward is
//! one phase here, so the `[batch, classes]` gradient and every weight gradient are counted as
//! coexisting: an upper bound on PyTorch's backward, where the logits' gradient is freed before
//! the first layer's weight gradient is allocated.

use serde::{Deserialize, Serialize};

use crate::{Category, Entry, Ledger, Lifetime, Phase, Placement};

/// Dense-layer optimizers and the state each keeps per weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenseOptimizer {
    /// No state.
    Sgd,
    /// One momentum buffer per weight.
    Momentum,
    /// Two moments per weight and a step counter per parameter tensor.
    Adam,
    /// As Adam (decoupled weight decay needs no extra state).
    AdamW,
}

impl DenseOptimizer {
    /// State tensors kept per parameter tensor, each of its shape.
    pub fn state_per_weight(self) -> u64 {
        match self {
            DenseOptimizer::Sgd => 0,
            DenseOptimizer::Momentum => 1,
            DenseOptimizer::Adam | DenseOptimizer::AdamW => 2,
        }
    }

    fn has_step_counter(self) -> bool {
        matches!(self, DenseOptimizer::Adam | DenseOptimizer::AdamW)
    }
}

/// The dense model and step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DenseSpec {
    pub width: u64,
    pub hidden: Vec<u64>,
    pub n_classes: u64,
    pub batch_size: u64,
    pub optimizer: DenseOptimizer,
    /// Bytes per element of parameters, activations and gradients (4 for f32).
    pub element_bytes: u64,
}

/// Every tensor of one dense training step.
pub fn dense_ledger(spec: &DenseSpec) -> Ledger {
    let eb = spec.element_bytes;
    let b = spec.batch_size;
    let mut ledger = Ledger::default();
    let mut add = |name: String,
                   layer: &str,
                   shape: Vec<u64>,
                   element_bytes: u64,
                   category: Category,
                   placement: Placement,
                   lifetime: Lifetime| {
        ledger.push(Entry {
            name,
            layer: layer.to_string(),
            shape,
            element_bytes,
            category,
            placement,
            lifetime,
        })
    };
    let fwd_to_bwd = Lifetime::Span {
        from: Phase::Forward,
        to: Phase::Backward,
    };
    let grads = Lifetime::Span {
        from: Phase::Backward,
        to: Phase::DenseUpdate,
    };
    add(
        "x (dense multi-hot batch)".into(),
        "batch",
        vec![b, spec.width],
        eb,
        Category::BatchBuffers,
        Placement::Device,
        fwd_to_bwd,
    );
    add(
        "targets (int64)".into(),
        "batch",
        vec![b],
        8,
        Category::BatchBuffers,
        Placement::Device,
        fwd_to_bwd,
    );
    let mut sizes = vec![spec.width];
    sizes.extend(&spec.hidden);
    sizes.push(spec.n_classes);
    let n_layers = sizes.len() - 1;
    for l in 0..n_layers {
        let (fan_in, fan_out) = (sizes[l], sizes[l + 1]);
        let layer = if l + 1 == n_layers {
            "output".to_string()
        } else {
            format!("linear.{l}")
        };
        for (what, shape) in [("weight", vec![fan_in, fan_out]), ("bias", vec![fan_out])] {
            add(
                format!("{layer}.{what}"),
                &layer,
                shape.clone(),
                eb,
                Category::Parameters,
                Placement::Device,
                Lifetime::Persistent,
            );
            add(
                format!("{layer}.{what}.grad"),
                &layer,
                shape.clone(),
                eb,
                Category::DenseGradients,
                Placement::Device,
                grads,
            );
            for k in 0..spec.optimizer.state_per_weight() {
                add(
                    format!("{layer}.{what}.state{k}"),
                    &layer,
                    shape.clone(),
                    eb,
                    Category::OptimizerState,
                    Placement::Device,
                    Lifetime::Persistent,
                );
            }
            if spec.optimizer.has_step_counter() {
                add(
                    format!("{layer}.{what}.step"),
                    &layer,
                    vec![1],
                    4,
                    Category::OptimizerState,
                    Placement::Host,
                    Lifetime::Persistent,
                );
            }
        }
        if l + 1 < n_layers {
            // ReLU saves its output, which is also the next Linear's saved input.
            add(
                format!("{layer}.relu_out"),
                &layer,
                vec![b, fan_out],
                eb,
                Category::Activations,
                Placement::Device,
                fwd_to_bwd,
            );
            add(
                format!("{layer}.relu_out.grad"),
                &layer,
                vec![b, fan_out],
                eb,
                Category::Temporaries,
                Placement::Device,
                Lifetime::during(Phase::Backward),
            );
        }
    }
    for (name, category, lifetime) in [
        ("logits", Category::Logits, fwd_to_bwd),
        ("log_softmax(logits), saved", Category::Logits, fwd_to_bwd),
        (
            "grad of log_softmax output",
            Category::Logits,
            Lifetime::during(Phase::Backward),
        ),
        (
            "grad of logits",
            Category::Logits,
            Lifetime::during(Phase::Backward),
        ),
    ] {
        add(
            name.into(),
            "output",
            vec![b, spec.n_classes],
            eb,
            category,
            Placement::Device,
            lifetime,
        );
    }
    ledger
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    fn seed(optimizer: DenseOptimizer) -> Ledger {
        dense_ledger(&DenseSpec {
            width: 240_000,
            hidden: vec![1024, 512],
            n_classes: 240_000,
            batch_size: 128,
            optimizer,
            element_bytes: 4,
        })
    }

    #[test]
    fn seed_case_breaks_down_the_six_gigabytes() {
        let l = seed(DenseOptimizer::Adam);
        let c = l.categories_at(Placement::Device, Phase::DenseUpdate);
        // 240,000·1024 + 1024 + 1024·512 + 512 + 512·240,000 + 240,000 parameters.
        let params = 369_405_824u64 * 4;
        assert_eq!(c[&Category::Parameters], params);
        assert!((params as f64 / GIB - 1.376).abs() < 0.001);
        assert_eq!(c[&Category::DenseGradients], params);
        assert_eq!(c[&Category::OptimizerState], 2 * params);
        // Each [128, 240,000] f32 tensor is 117.2 MiB.
        let wide = 128 * 240_000 * 4;
        let bwd = l.categories_at(Placement::Device, Phase::Backward);
        assert_eq!(bwd[&Category::Logits], 4 * wide);
        let peak = l.peak(Placement::Device);
        assert_eq!(peak.phase, Phase::Backward);
        let gib = peak.bytes as f64 / GIB;
        assert!((5.9..6.2).contains(&gib), "{gib} GiB");
        // The naive estimate, weights alone, is under a quarter of it.
        assert!((params as f64) < 0.25 * peak.bytes as f64);
    }

    #[test]
    fn optimizer_state_multipliers() {
        let params = 369_405_824u64 * 4;
        for (opt, k) in [
            (DenseOptimizer::Sgd, 0),
            (DenseOptimizer::Momentum, 1),
            (DenseOptimizer::Adam, 2),
            (DenseOptimizer::AdamW, 2),
        ] {
            let c = seed(opt).categories_at(Placement::Device, Phase::DenseUpdate);
            assert_eq!(
                c.get(&Category::OptimizerState).copied().unwrap_or(0),
                k * params
            );
        }
        let host = seed(DenseOptimizer::Adam).live_bytes(Placement::Host, Phase::Forward);
        assert_eq!(host, 6 * 4, "one step counter per parameter tensor");
    }
}
