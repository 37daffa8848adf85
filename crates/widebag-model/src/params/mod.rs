//! The dense parameters of the trunk by name — the bag bias, each tail band's projection, each
//! hidden layer's weight and bias — and the shapes the output layers hold theirs in (`Linear`,
//! `Cluster`). One shape holds the parameters with their optimizer state, their gradient leaves
//! and their gradients; [`TrunkParams::iter`] walks them in one fixed order. Their seeded
//! initial numbers are [`init`]; one optimizer step of a parameter is [`update`].

pub mod init;
pub mod update;

use crate::optim::dense::DenseParam;

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

/// Every dense parameter of the trunk (the layers before the output layer).
#[derive(Clone, Debug)]
pub struct TrunkParams<T = DenseParam> {
    /// Added to the bag before the first activation (`[1, dim]`).
    pub bag_bias: T,
    /// One `[band dim, dim]` projection per tail input band.
    pub projections: Vec<T>,
    pub hidden: Vec<Linear<T>>,
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

impl<T> TrunkParams<T> {
    /// The same parameters through `f`, with the same names and shape.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> TrunkParams<U> {
        TrunkParams {
            bag_bias: f(&self.bag_bias),
            projections: self.projections.iter().map(&mut f).collect(),
            hidden: self.hidden.iter().map(|l| l.map(&mut f)).collect(),
        }
    }

    /// Every parameter, in one fixed order: the bag bias, the projections, each hidden layer's
    /// weight and bias.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let mut all = vec![&self.bag_bias];
        all.extend(&self.projections);
        for l in &self.hidden {
            all.extend([&l.weight, &l.bias]);
        }
        all.into_iter()
    }

    /// [`Self::iter`] by mutable reference.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let mut all = vec![&mut self.bag_bias];
        all.extend(&mut self.projections);
        for l in &mut self.hidden {
            all.extend([&mut l.weight, &mut l.bias]);
        }
        all.into_iter()
    }

    /// The parameters by value, in [`Self::iter`] order.
    pub fn into_vec(self) -> Vec<T> {
        let mut all = vec![self.bag_bias];
        all.extend(self.projections);
        for l in self.hidden {
            all.extend([l.weight, l.bias]);
        }
        all
    }
}

/// f32 values of `params`.
pub fn n_values<'a>(params: impl IntoIterator<Item = &'a DenseParam>) -> u64 {
    params
        .into_iter()
        .map(|p| p.value.shape().num_elements() as u64)
        .sum()
}
