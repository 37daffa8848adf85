//! How ledger entries are written: a [`Builder`] with the defaults both layouts share (f32
//! tensors in the dynamic pools, a dense parameter with its optimizer state and gradient, the
//! layers' saved activations).

use widebag_config::DenseOptim;

use super::spec::StepSpec;
use crate::shapes::F32_BYTES;
use crate::{Category, Entry, Ledger, Lifetime, Placement, Point, Pool};

/// Adds entries with shared defaults.
pub(super) struct Builder {
    pub(super) ledger: Ledger,
}

impl Builder {
    /// A builder for a layout observed at `points`, `unsampled` of them predicted only.
    pub(super) fn new(spec: &StepSpec, points: Vec<Point>, unsampled: Vec<Point>) -> Self {
        Self {
            ledger: Ledger {
                points,
                unsampled,
                alignment_bytes: spec.device.alignment_bytes,
                entries: Vec::new(),
            },
        }
    }

    /// A device entry.
    #[allow(
        clippy::too_many_arguments,
        reason = "an entry has this many fields; the named helpers below fill most of them"
    )]
    pub(super) fn add(
        &mut self,
        name: impl Into<String>,
        layer: &str,
        shape: &[u64],
        element_bytes: u64,
        count: u64,
        category: Category,
        pool: Pool,
        lifetime: Lifetime,
    ) {
        self.ledger.push(Entry {
            name: name.into(),
            layer: layer.to_string(),
            shape: shape.to_vec(),
            element_bytes,
            count,
            category,
            placement: Placement::Device,
            pool,
            lifetime,
        });
    }

    /// An f32 tensor in the dynamic pools.
    pub(super) fn f32(
        &mut self,
        name: &str,
        layer: &str,
        shape: &[u64],
        category: Category,
        life: Lifetime,
    ) {
        self.add(
            name,
            layer,
            shape,
            F32_BYTES,
            1,
            category,
            Pool::Dynamic,
            life,
        );
    }

    /// Under half-precision output products (`model.output_precision`), `h`'s copy in their
    /// dtype: made with the first chunk's logits, kept to the output layer's last gradient (the
    /// weights' and the logit gradients' half copies live within one product, between points).
    pub(super) fn half_hidden(&mut self, spec: &StepSpec) {
        let p = spec.output_precision;
        if p.is_f32() {
            return;
        }
        self.add(
            format!(
                "output layer input h in {} (the products' operand)",
                p.name()
            ),
            "output",
            &[spec.batch.n_rows, spec.last_hidden()],
            p.bytes(),
            1,
            Category::Activations,
            Pool::Dynamic,
            Lifetime::span(Point::ForwardLogits, Point::BackwardLogits),
        );
    }

    /// A dense parameter, its optimizer state and its gradient (alive over `grad`).
    pub(super) fn dense_param(
        &mut self,
        name: &str,
        layer: &str,
        shape: &[u64],
        optim: DenseOptim,
        grad: Lifetime,
    ) {
        self.param_with_state(name, layer, shape, optim);
        self.f32(
            &format!("{name}.grad"),
            layer,
            shape,
            Category::DenseGradients,
            grad,
        );
    }

    /// A dense parameter and its optimizer state, without a whole gradient (a sampled output
    /// layer's: its gradient is the sampled columns', priced apart).
    pub(super) fn param_with_state(
        &mut self,
        name: &str,
        layer: &str,
        shape: &[u64],
        optim: DenseOptim,
    ) {
        self.f32(
            name,
            layer,
            shape,
            Category::Parameters,
            Lifetime::Persistent,
        );
        let states: &[&str] = match optim {
            DenseOptim::Sgd => &[],
            DenseOptim::Momentum => &["momentum"],
            DenseOptim::Adam | DenseOptim::AdamW => &["adam.m", "adam.v"],
        };
        for s in states {
            self.f32(
                &format!("{name}.{s}"),
                layer,
                shape,
                Category::OptimizerState,
                Lifetime::Persistent,
            );
        }
    }

    /// The hidden layers' weights and biases, each with its state and gradient.
    pub(super) fn hidden_params(&mut self, spec: &StepSpec, grad: Lifetime) {
        let sizes = spec.layer_sizes();
        for (i, pair) in sizes.windows(2).enumerate() {
            let layer = format!("hidden.{i}");
            self.dense_param(
                &format!("{layer}.weight"),
                &layer,
                &[pair[0], pair[1]],
                spec.dense_optim,
                grad,
            );
            self.dense_param(
                &format!("{layer}.bias"),
                &layer,
                &[1, pair[1]],
                spec.dense_optim,
                grad,
            );
        }
    }

    /// What autodiff keeps of the bag/first layer and each hidden layer: the pre-activation
    /// (saved by `relu`) and the output (saved by the next `matmul`), `[batch, size]` each.
    /// The last output lives on to `last_to` (the trainer holds it).
    pub(super) fn saved_layers(
        &mut self,
        spec: &StepSpec,
        from: Point,
        saved_to: Point,
        last_to: Point,
    ) {
        let b = spec.batch.n_rows;
        let sizes = spec.layer_sizes();
        for (l, &size) in sizes.iter().enumerate() {
            let layer = if l == 0 {
                "input".to_string()
            } else {
                format!("hidden.{}", l - 1)
            };
            let last = l + 1 == sizes.len();
            // A linear layer's output is its pre-activation: one buffer.
            if !spec.linear_layer(l) {
                self.f32(
                    "pre-activation (saved by relu)",
                    &layer,
                    &[b, size],
                    Category::Activations,
                    Lifetime::span(from, saved_to),
                );
            }
            self.f32(
                "output (saved by the next matmul)",
                &layer,
                &[b, size],
                Category::Activations,
                Lifetime::span(from, if last { last_to } else { saved_to }),
            );
        }
    }
}
