//! A dense parameter's update on some of its columns only (a sampled output layer's classes):
//! the columns and their optimizer state gathered, one step of the parameter's own rule on them,
//! and the change added back. Columns a step does not touch keep their values and state (lazy,
//! as PyTorch's `SparseAdam`: bias correction by the global step).

use burn::tensor::{IndexingUpdateOp, Int, Tensor};
use widebag_config::OptimConfig;

use crate::optim::dense::{DenseParam, DenseState, Moments};

/// One optimizer step of `param`'s columns `cols` (distinct) with their gradient `grad`
/// (`[rows, cols.len()]`); `peak` is called where the columns and their state are alive both
/// before and after the step (the update's most memory).
pub fn update_columns(
    param: &mut DenseParam,
    cols: &Tensor<1, Int>,
    grad: Tensor<2>,
    (config, step): (&OptimConfig, u64),
    peak: &mut dyn FnMut(),
) {
    let pick = |t: &Tensor<2>| t.clone().select(1, cols.clone());
    let gathered = DenseParam {
        name: String::new(),
        value: pick(&param.value),
        state: match &param.state {
            DenseState::Sgd => DenseState::Sgd,
            DenseState::Momentum(b) => DenseState::Momentum(Box::new(pick(b))),
            DenseState::Adam {
                moments,
                decoupled_decay,
            } => DenseState::Adam {
                moments: Box::new(Moments {
                    m: pick(&moments.m),
                    v: pick(&moments.v),
                }),
                decoupled_decay: *decoupled_decay,
            },
        },
    };
    let before = gathered.clone();
    let after = gathered.step(grad, config, step);
    peak();
    // The parameter is moved out of its slot (a 1 × 1 placeholder stands in) so that its
    // handle is the only one: the backends add into it in place instead of copying all of it.
    let add = |into: &mut Tensor<2>, new: Tensor<2>, old: Tensor<2>| {
        let t = std::mem::replace(into, Tensor::empty([1, 1], &into.device()));
        *into = t.select_assign(1, cols.clone(), new - old, IndexingUpdateOp::Add);
    };
    add(&mut param.value, after.value, before.value);
    match (&mut param.state, after.state, before.state) {
        (DenseState::Momentum(b), DenseState::Momentum(new), DenseState::Momentum(old)) => {
            add(b, *new, *old)
        }
        (
            DenseState::Adam { moments, .. },
            DenseState::Adam { moments: new, .. },
            DenseState::Adam { moments: old, .. },
        ) => {
            let (new, old) = (*new, *old);
            add(&mut moments.m, new.m, old.m);
            add(&mut moments.v, new.v, old.v);
        }
        _ => {}
    }
}
