//! The candidates: the optimizer pairs the solver may choose, ranked by [`capability`], and the
//! pair with the least memory.

use widebag_config::{Config, DenseOptim, Layout, TableOptim};

use crate::problem::Pins;

/// Capability rank of an optimizer pair (higher is more capable): the table's rank plus the
/// dense part's, ties to the table. Table: SGD 0 < momentum 1 < row-wise Adagrad 2 < Adam 3
/// (per-row adaptive steps are what sparse rows need; Adagrad's one value per row is TorchRec's
/// default); dense: SGD 0 < momentum 1 < Adam/AdamW 2.
pub fn capability(layout: Layout, table: TableOptim, dense: DenseOptim) -> (u32, u32) {
    let t = match (layout, table) {
        (Layout::Dense, _) => 0,
        (_, TableOptim::Sgd) => 0,
        (_, TableOptim::Momentum) => 1,
        (_, TableOptim::RowwiseAdagrad) => 2,
        (_, TableOptim::Adam | TableOptim::AdamW) => 3,
    };
    let d = match dense {
        DenseOptim::Sgd => 0,
        DenseOptim::Momentum => 1,
        DenseOptim::Adam | DenseOptim::AdamW => 2,
    };
    (t + d, t)
}

/// The optimizer pairs the solver may choose, most capable first.
pub(crate) fn pairs(config: &Config, pins: Pins) -> Vec<(TableOptim, DenseOptim)> {
    let fixed = pins.table || config.model.layout == Layout::Dense || config.model.tie_output;
    let tables: Vec<TableOptim> = if fixed {
        // A tied table has no optimizer of its own (`Config::table_optim`): none to choose.
        vec![config.table_optim()]
    } else {
        // The Adam tier: lazy AdamW when the config asks for it, else lazy Adam.
        let adam = match config.optim.table {
            TableOptim::AdamW => TableOptim::AdamW,
            _ => TableOptim::Adam,
        };
        vec![
            TableOptim::Sgd,
            TableOptim::Momentum,
            TableOptim::RowwiseAdagrad,
            adam,
        ]
    };
    let adam = match config.optim.dense {
        DenseOptim::AdamW => DenseOptim::AdamW,
        _ => DenseOptim::Adam,
    };
    let denses: Vec<DenseOptim> = if pins.dense {
        vec![config.optim.dense]
    } else {
        vec![DenseOptim::Sgd, DenseOptim::Momentum, adam]
    };
    let layout = config.model.layout;
    let mut out: Vec<(TableOptim, DenseOptim)> = tables
        .iter()
        .flat_map(|&t| denses.iter().map(move |&d| (t, d)))
        .collect();
    out.sort_by_key(|&(t, d)| std::cmp::Reverse(capability(layout, t, d)));
    out
}

/// The pair with the least memory: SGD keeps no state, momentum one copy, Adam two.
pub(crate) fn cheapest(pairs: &[(TableOptim, DenseOptim)]) -> (TableOptim, DenseOptim) {
    let cost = |t: TableOptim, d: DenseOptim| {
        let t = match t {
            TableOptim::Sgd => 0,
            TableOptim::RowwiseAdagrad => 1,
            TableOptim::Momentum => 2,
            TableOptim::Adam | TableOptim::AdamW => 3,
        };
        (t, d.state_per_weight())
    };
    *pairs
        .iter()
        .min_by_key(|&&(t, d)| cost(t, d))
        .expect("at least one pair")
}

/// A pair in words: `table adam + dense sgd`, or `dense sgd` for the dense layout.
pub(crate) fn pair_name(layout: Layout, t: TableOptim, d: DenseOptim) -> String {
    match layout {
        Layout::Sparse => format!("table {} + dense {}", t.name(), d.name()),
        Layout::Dense => format!("dense {}", d.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tied_table_leaves_only_the_dense_optimizer_to_choose() {
        let mut c = Config::default();
        c.model.hidden = vec![];
        c.data.n_classes = Some(c.data.width);
        assert_eq!(pairs(&c, Pins::default()).len(), 12);
        c.model.tie_output = true;
        let tied = pairs(&c, Pins::default());
        assert_eq!(tied.len(), 3, "{tied:?}");
        assert!(tied.iter().all(|&(t, _)| t == TableOptim::Sgd), "{tied:?}");
    }
}
