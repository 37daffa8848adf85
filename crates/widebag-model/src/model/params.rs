//! The dense parameters of a model by name: the bag bias, each tail band's projection, each
//! hidden layer's weight and bias, and the output layer (class chunks of the full softmax, or the
//! adaptive softmax's head and tail clusters). One shape holds the parameters with their
//! optimizer state, their gradient leaves and their gradients; [`DenseParams::iter`] walks them
//! all in one fixed order for the optimizer.

use burn::tensor::Tensor;
use widebag_config::OptimConfig;

use crate::model::dense_optim::DenseParam;

/// `x W + b`.
#[derive(Clone, Debug)]
pub struct Linear<T> {
    pub weight: T,
    pub bias: T,
}

/// One tail cluster of the adaptive softmax: `(h proj) weight + bias`.
#[derive(Clone, Debug)]
pub struct Cluster<T> {
    pub proj: T,
    pub weight: T,
    pub bias: T,
}

/// The output layer.
#[derive(Clone, Debug)]
pub enum OutputParams<T> {
    /// The full softmax, its weight and bias cut into class chunks.
    Full { chunks: Vec<Linear<T>> },
    /// The adaptive softmax: the head (its classes, then one token per tail cluster) and the
    /// tail clusters.
    Adaptive {
        head: Linear<T>,
        clusters: Vec<Cluster<T>>,
    },
}

/// Every dense parameter of a model.
#[derive(Clone, Debug)]
pub struct DenseParams<T = DenseParam> {
    /// Added to the bag before the first ReLU (`[1, dim]`).
    pub bag_bias: T,
    /// One `[band dim, dim]` projection per tail input band.
    pub projections: Vec<T>,
    pub hidden: Vec<Linear<T>>,
    pub output: OutputParams<T>,
}

impl<T> Linear<T> {
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> Linear<U> {
        Linear {
            weight: f(&self.weight),
            bias: f(&self.bias),
        }
    }
}

impl<T> Cluster<T> {
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> Cluster<U> {
        Cluster {
            proj: f(&self.proj),
            weight: f(&self.weight),
            bias: f(&self.bias),
        }
    }
}

impl<T> OutputParams<T> {
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> OutputParams<U> {
        match self {
            OutputParams::Full { chunks } => OutputParams::Full {
                chunks: chunks.iter().map(|l| l.map(&mut f)).collect(),
            },
            OutputParams::Adaptive { head, clusters } => OutputParams::Adaptive {
                head: head.map(&mut f),
                clusters: clusters.iter().map(|c| c.map(&mut f)).collect(),
            },
        }
    }

    /// Every output parameter, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let mut all = Vec::new();
        match self {
            OutputParams::Full { chunks } => {
                for l in chunks {
                    all.extend([&l.weight, &l.bias]);
                }
            }
            OutputParams::Adaptive { head, clusters } => {
                all.extend([&head.weight, &head.bias]);
                for c in clusters {
                    all.extend([&c.proj, &c.weight, &c.bias]);
                }
            }
        }
        all.into_iter()
    }

    fn iter_mut(&mut self) -> Vec<&mut T> {
        let mut all = Vec::new();
        match self {
            OutputParams::Full { chunks } => {
                for l in chunks {
                    all.extend([&mut l.weight, &mut l.bias]);
                }
            }
            OutputParams::Adaptive { head, clusters } => {
                all.extend([&mut head.weight, &mut head.bias]);
                for c in clusters {
                    all.extend([&mut c.proj, &mut c.weight, &mut c.bias]);
                }
            }
        }
        all
    }

    fn into_vec(self) -> Vec<T> {
        let mut all = Vec::new();
        match self {
            OutputParams::Full { chunks } => {
                for l in chunks {
                    all.extend([l.weight, l.bias]);
                }
            }
            OutputParams::Adaptive { head, clusters } => {
                all.extend([head.weight, head.bias]);
                for c in clusters {
                    all.extend([c.proj, c.weight, c.bias]);
                }
            }
        }
        all
    }
}

impl<T> DenseParams<T> {
    /// The same parameters through `f`, with the same names and shape.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> DenseParams<U> {
        DenseParams {
            bag_bias: f(&self.bag_bias),
            projections: self.projections.iter().map(&mut f).collect(),
            hidden: self.hidden.iter().map(|l| l.map(&mut f)).collect(),
            output: self.output.map(&mut f),
        }
    }

    /// Like [`Self::map`], the layers before the output through `trunk` and the output layer
    /// through `output` (the full softmax's output layer stays off autodiff).
    pub fn map_split<U>(
        &self,
        mut trunk: impl FnMut(&T) -> U,
        output: impl FnMut(&T) -> U,
    ) -> DenseParams<U> {
        DenseParams {
            bag_bias: trunk(&self.bag_bias),
            projections: self.projections.iter().map(&mut trunk).collect(),
            hidden: self.hidden.iter().map(|l| l.map(&mut trunk)).collect(),
            output: self.output.map(output),
        }
    }

    /// Every parameter, in one fixed order: the bag bias, the projections, each hidden layer's
    /// weight and bias, then the output layer's parameters.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let mut all = vec![&self.bag_bias];
        all.extend(&self.projections);
        for l in &self.hidden {
            all.extend([&l.weight, &l.bias]);
        }
        all.into_iter().chain(self.output.iter())
    }

    /// [`Self::iter`] by mutable reference.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let mut all = vec![&mut self.bag_bias];
        all.extend(&mut self.projections);
        for l in &mut self.hidden {
            all.extend([&mut l.weight, &mut l.bias]);
        }
        all.extend(self.output.iter_mut());
        all.into_iter()
    }

    /// The parameters by value, in [`Self::iter`] order.
    pub fn into_vec(self) -> Vec<T> {
        let mut all = vec![self.bag_bias];
        all.extend(self.projections);
        for l in self.hidden {
            all.extend([l.weight, l.bias]);
        }
        all.extend(self.output.into_vec());
        all
    }
}

impl DenseParams {
    /// One optimizer step of every parameter with its gradient, each buffer updated in place.
    pub fn update(
        &mut self,
        grads: DenseParams<Tensor<2>>,
        config: &OptimConfig,
        step: u64,
        kernels: crate::cpu::Kernels,
    ) -> Result<(), crate::ModelError> {
        for (p, g) in self.iter_mut().zip(grads.into_vec()) {
            update_param(p, g, config, step, kernels)?;
        }
        Ok(())
    }

    /// The parameter called `name`.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut DenseParam> {
        self.iter_mut().find(|p| p.name == name)
    }
}

/// f32 values of `params`.
pub fn n_values<'a>(params: impl IntoIterator<Item = &'a DenseParam>) -> u64 {
    params
        .into_iter()
        .map(|p| p.value.shape().num_elements() as u64)
        .sum()
}

impl DenseParams<Tensor<2>> {
    /// The output layer's chunks as `(weight, bias)` pairs (the chunked full softmax's layer).
    /// Empty for the adaptive softmax.
    pub fn full_chunks(&self) -> Vec<(&Tensor<2>, &Tensor<2>)> {
        match &self.output {
            OutputParams::Full { chunks } => chunks.iter().map(|l| (&l.weight, &l.bias)).collect(),
            OutputParams::Adaptive { .. } => Vec::new(),
        }
    }
}

/// One optimizer step of `p` with `grad`, in place: with host kernels one host pass over the
/// buffers ([`crate::cpu::dense_update`]), elsewhere on tensors ([`DenseParam::update`]).
pub fn update_param(
    p: &mut DenseParam,
    grad: Tensor<2>,
    config: &OptimConfig,
    step: u64,
    kernels: crate::cpu::Kernels,
) -> Result<(), crate::ModelError> {
    if kernels == crate::cpu::Kernels::Host {
        return crate::cpu::dense_update::update(p, grad, config, step);
    }
    p.update(grad, config, step);
    Ok(())
}
