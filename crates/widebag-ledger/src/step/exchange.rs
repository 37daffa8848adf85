//! One rank's step of a multi-process run (`train_step_part` and its `step::exchange` in
//! widebag-model): the sparse
//! layout's ledger of the rank's own part — its block of each table's rows with their optimizer
//! state, its class block of the full softmax (which scores the global batch's rows), its rows
//! of the batch — and the buffers of the exchanges between ranks (`Category::Communication`): the ids asked of the owners, the rows served, the row gradients sent, received
//! and summed, the gathered hidden states, and the reductions' receive buffers (a reduction is a
//! reduce-scatter then an all-gather: every rank's copy of this rank's block, then the reduced
//! buffer). They are host vectors,
//! so on flex (whose device memory is the host's) they count toward the device's peak. A buffer
//! freed between two sample points is priced at the next one (conservative).
//!
//! [`traffic`]: the bytes the rank sends per step, by collective, named as the trainer counts
//! them.

use serde::Serialize;
use widebag_collective::partition::BlockSharding;
use widebag_collective::partition::{all_reduce_received, all_reduce_sent, class_block};
use widebag_config::bands::Band;

use super::sparse;
use super::spec::{RankFacts, StepSpec};
use crate::shapes::{F32_BYTES, I32_BYTES};
use crate::{Category, Entry, Ledger, Lifetime, Placement, Point, Pool};

/// The collectives of a step across ranks, as the trainer names them in its byte counts.
pub mod names {
    pub const IDS: &str = "ids (all-to-all)";
    pub const TARGETS: &str = "targets (all-gather)";
    pub const ROWS: &str = "rows (all-to-all)";
    pub const ROW_GRADS: &str = "row gradients (all-to-all)";
    pub const HIDDEN: &str = "hidden states (all-gather)";
    pub const LSE: &str = "log-sum-exp max and sum, loss (all-reduce)";
    pub const DH: &str = "dL/dh (all-reduce)";
    pub const LOSS: &str = "loss (all-reduce)";
    pub const DENSE: &str = "dense gradients (fused all-reduce)";
    pub const TAIL_ROWS: &str = "tail rows and targets to their cluster's owner (all-to-all)";
    pub const TAIL_DH: &str = "tail dL/dh back to the rows' ranks (all-to-all)";
}

/// Bytes one rank sends to the other ranks per step through one collective.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Traffic {
    pub collective: &'static str,
    pub bytes: u64,
    /// `true`: fixed by the shapes; `false`: an upper bound from the sampled batches (which ids a
    /// rank asks of which owner depends on the data).
    pub exact: bool,
}

/// The ledger of rank `spec.ranks`'s step.
pub(super) fn ledger(spec: &StepSpec) -> Ledger {
    let r = spec.ranks.expect("a rank's step");
    let local = local_spec(spec, r);
    let mut ledger = sparse::ledger(&local);
    // The adaptive softmax's tail clusters other ranks own are a 1 × 1 placeholder here.
    ledger.entries.retain(|e| owns_layer(&e.layer, r));
    let parts = Parts::of(spec, &local, r);
    // The exchanges' buffers are host vectors: the device's own memory on flex (host kernels).
    let placement = match spec.host_kernels() {
        true => Placement::Device,
        false => Placement::Host,
    };
    let mut add = |name: &str, layer: &str, shape: &[u64], element_bytes, life| {
        ledger.push(Entry {
            name: name.into(),
            layer: layer.into(),
            shape: shape.to_vec(),
            element_bytes,
            count: 1,
            category: Category::Communication,
            placement,
            pool: Pool::Dynamic,
            lifetime: life,
        });
    };
    use Point::*;
    for band in &parts.bands {
        let (layer, dim) = (band.layer.as_str(), band.dim);
        add(
            "ids asked of the owners and asked of this rank (u32)",
            layer,
            &[band.unique + band.served],
            I32_BYTES,
            Lifetime::span(ForwardLogits, TableUpdate),
        );
        add(
            "rows served to the ranks (freed before the forward pass)",
            layer,
            &[band.served, dim],
            F32_BYTES,
            Lifetime::at(ForwardLogits),
        );
        for (name, rows) in [
            ("row gradients sent to the owners", band.unique),
            ("row gradients received from the ranks", band.served),
            (
                "row gradients summed over the rows this rank owns",
                band.union,
            ),
        ] {
            add(
                name,
                layer,
                &[rows, dim],
                F32_BYTES,
                Lifetime::at(TableUpdate),
            );
        }
    }
    let (size, n, last) = (r.size, r.global.n_rows, spec.last_hidden());
    let received = |len: u64| all_reduce_received(len as usize, r.rank as usize, size as usize);
    if !spec.adaptive() {
        add(
            "hidden states of every rank, before their concatenation",
            "output",
            &[n, last],
            F32_BYTES,
            Lifetime::at(ForwardLogits),
        );
        add(
            "dL/dh all-reduce: the blocks received and the reduced buffer",
            "output",
            &[received(n * last)],
            F32_BYTES,
            Lifetime::at(BackwardLogits),
        );
    }
    add(
        "dense gradients fused for the all-reduce",
        "dense",
        &[parts.replicated],
        F32_BYTES,
        Lifetime::at(DenseUpdate),
    );
    // The sums unpacked after the all-reduce: as much as it holds inside (every rank's copy of
    // this rank's block, then the gathered sums), to within a block.
    add(
        "dense all-reduce: the sums unpacked",
        "dense",
        &[parts.replicated],
        F32_BYTES,
        Lifetime::at(DenseUpdate),
    );
    ledger
}

/// Bytes rank `spec.ranks` sends per step, by collective, in the trainer's order (empty for one
/// process).
pub fn traffic(spec: &StepSpec) -> Vec<Traffic> {
    let Some(r) = spec.ranks else {
        return Vec::new();
    };
    let local = local_spec(spec, r);
    let parts = Parts::of(spec, &local, r);
    let others = r.size - 1;
    let (n, last) = (r.global.n_rows, spec.last_hidden());
    let reduced =
        |len: u64| all_reduce_sent(len as usize, r.rank as usize, r.size as usize) * F32_BYTES;
    let sum = |f: &dyn Fn(&BandPart) -> u64| parts.bands.iter().map(f).sum::<u64>();
    let mut out = vec![
        (names::IDS, sum(&|b| b.unique * I32_BYTES), false),
        (
            names::ROWS,
            sum(&|b| (b.served.saturating_sub(b.own)).min(b.unique * others) * b.dim * F32_BYTES),
            false,
        ),
    ];
    if spec.adaptive() {
        // Each tail's rows (and their targets) to its owner: at most every row of this rank with
        // a target in a cluster, for each cluster (sampled).
        let rows: u64 = (1..spec.output_bands.len())
            .map(|k| super::adaptive::cluster_rows(spec, k))
            .sum();
        let bytes = rows * last * F32_BYTES;
        out.push((
            names::TAIL_ROWS,
            bytes + (3 * rows + 3 * spec.batch.n_targets) * I32_BYTES,
            false,
        ));
        // As an owner: the dL/dh of the other ranks' rows of its clusters (each rank's rows
        // bounded as this one's).
        out.push((names::TAIL_DH, bytes * others, false));
        out.push((names::LOSS, reduced(1), true));
    } else {
        // Each row's target count, classes and weights (bounded by the sampled targets).
        let b = spec.batch;
        let targets = (1 + b.n_rows + 2 * b.n_targets) * I32_BYTES * others;
        out.push((names::TARGETS, targets, false));
        out.extend([
            (
                names::HIDDEN,
                spec.batch.n_rows * last * F32_BYTES * others,
                true,
            ),
            (names::LSE, 2 * reduced(n) + reduced(1), true),
            (names::DH, reduced(n * last), true),
        ]);
    }
    out.extend([
        (
            names::ROW_GRADS,
            sum(&|b| b.unique * b.dim * F32_BYTES),
            false,
        ),
        (names::DENSE, reduced(parts.replicated), true),
    ]);
    out.into_iter()
        .map(|(collective, bytes, exact)| Traffic {
            collective,
            bytes,
            exact,
        })
        .collect()
}

/// Whether rank `r` holds ledger layer `layer`: every one but the adaptive softmax's tail
/// clusters (`output.tail.{band}`, cluster `band - 1`) that other ranks own.
fn owns_layer(layer: &str, r: RankFacts) -> bool {
    let Some(band) = layer.strip_prefix("output.tail.") else {
        return true;
    };
    let band: u64 = band
        .split('.')
        .next()
        .and_then(|b| b.parse().ok())
        .unwrap_or(1);
    (band.max(1) - 1) % r.size == r.rank
}

/// Band `band`'s rows that rank `r` owns (the block rule), keeping the band's global ids.
fn block(band: Band, r: RankFacts) -> Band {
    let rows = BlockSharding::new(band.n_rows(), r.size as usize).rows_of(r.rank as usize);
    Band {
        start: band.start + rows.start,
        end: band.start + rows.end,
        dim: band.dim,
    }
}

/// The rank's own step: its block of each band's table, its class block of the full softmax
/// and its rows of the batch (the spec's batch), each band's distinct ids bounded by its rows'.
fn local_spec(spec: &StepSpec, r: RankFacts) -> StepSpec {
    let mut local = spec.clone();
    local.band_unique = spec
        .unique_per_band()
        .into_iter()
        .map(|u| u.min(spec.batch.n_unique))
        .collect();
    local.input_bands = spec
        .bands()
        .into_iter()
        .map(|(band, placement)| (block(band, r), placement))
        .collect();
    if !spec.adaptive() {
        let classes = class_block(spec.n_classes as usize, r.rank as usize, r.size as usize);
        local.n_classes = classes.len() as u64;
    }
    local
}

/// What one band's exchanges carry, in rows.
struct BandPart {
    layer: String,
    dim: u64,
    /// This rank's distinct ids of the band (asked of their owners).
    unique: u64,
    /// Rows asked of this rank by every rank, itself included: at most each rank's distinct ids
    /// within the block, and the global batch's entries.
    served: u64,
    /// Of those, the ones this rank asks of itself (at most its distinct ids and the block).
    own: u64,
    /// The distinct rows asked of this rank: at most the global batch's distinct ids and the
    /// block.
    union: u64,
}

/// The exchanges' sizes: per band, and the replicated dense parameters the fused all-reduce
/// carries (every dense parameter but a class-split output layer).
struct Parts {
    bands: Vec<BandPart>,
    replicated: u64,
}

impl Parts {
    fn of(spec: &StepSpec, local: &StepSpec, r: RankFacts) -> Self {
        let global_unique = spec
            .bands()
            .into_iter()
            .map(|(band, _)| r.global.n_unique.min(band.n_rows() as u64));
        let n_bands = local.input_bands.len();
        let bands = local
            .input_bands
            .iter()
            .zip(local.unique_per_band())
            .zip(global_unique)
            .enumerate()
            .map(|(k, (((band, _), unique), global))| {
                let owned = band.n_rows() as u64;
                let own = unique.min(owned);
                BandPart {
                    layer: match n_bands {
                        1 => "table".to_string(),
                        _ => format!("table.band{k}"),
                    },
                    dim: band.dim as u64,
                    unique,
                    served: (own * r.size).min(r.global.nnz),
                    own,
                    union: global.min(owned),
                }
            })
            .collect();
        // Not reduced: a class-split output layer, or the adaptive softmax's owned tails.
        let own = |layer: &str| match spec.adaptive() {
            true => layer.starts_with("output.tail"),
            false => layer.starts_with("output"),
        };
        let replicated = sparse::ledger(local)
            .entries
            .iter()
            .filter(|e| e.category == Category::Parameters)
            .filter(|e| !e.layer.starts_with("table"))
            .filter(|e| !own(&e.layer))
            .map(|e| e.shape.iter().product::<u64>() * e.count)
            .sum();
        Self { bands, replicated }
    }
}

#[cfg(test)]
mod tests {
    use widebag_config::{DenseOptim, Layout};

    use super::super::ledger;
    use super::super::spec::{BatchFacts, seed_spec};
    use super::*;

    fn seed_on(rank: u64, size: u64) -> StepSpec {
        let spec = seed_spec(Layout::Sparse, DenseOptim::Adam);
        let local = BatchFacts {
            n_rows: 128 / size,
            nnz: 2_560 / size,
            n_unique: 1_400 / size + 100,
            n_targets: 128 / size,
        };
        spec.on_rank(rank, size, local)
    }

    fn bytes_of(l: &Ledger, category: Category) -> u64 {
        l.entries
            .iter()
            .filter(|e| e.category == category)
            .map(Entry::bytes)
            .sum()
    }

    #[test]
    fn a_rank_holds_its_blocks_of_the_tables_and_the_output() {
        let whole = ledger(&seed_spec(Layout::Sparse, DenseOptim::Adam));
        for size in [2u64, 3, 4] {
            let mut tables = 0;
            for rank in 0..size {
                let l = ledger(&seed_on(rank, size));
                let held: u64 = l
                    .entries
                    .iter()
                    .filter(|e| e.layer == "table" && e.lifetime == Lifetime::Persistent)
                    .map(Entry::bytes)
                    .sum();
                tables += held;
                // The output slice: this rank's classes of the weight, its bias and their state.
                let block = class_block(240_000, rank as usize, size as usize).len() as u64;
                let output: u64 = l
                    .entries
                    .iter()
                    .filter(|e| {
                        e.layer.starts_with("output.") && e.category == Category::Parameters
                    })
                    .map(Entry::bytes)
                    .sum();
                assert_eq!(output, 4 * block * (512 + 1));
                assert!(bytes_of(&l, Category::Communication) > 0);
                assert!(
                    l.peak(Placement::Device).bytes < whole.peak(Placement::Device).bytes,
                    "rank {rank} of {size}"
                );
            }
            // The blocks are the whole table and its two moments, once.
            assert_eq!(tables, 3 * 4 * 240_000 * 1024, "{size} ranks");
        }
    }

    #[test]
    fn the_traffic_follows_the_shapes() {
        let spec = seed_on(0, 2);
        let t = traffic(&spec);
        let bytes = |name: &str| t.iter().find(|x| x.collective == name).unwrap().bytes;
        // 64 rows of 512 floats to one other rank; the global batch's 128 rows for dL/dh.
        assert_eq!(bytes(names::HIDDEN), 64 * 512 * 4);
        // Two ranks: a reduction sends the other's half (with a 2-value tag) and its own half.
        let reduced = |len: u64| (len.div_ceil(2) + 2 + len / 2) * 4;
        assert_eq!(bytes(names::DH), reduced(128 * 512));
        assert_eq!(bytes(names::LSE), 2 * reduced(128) + (1 + 2) * 4);
        // Replicated: the bag bias and the hidden layer (the output layer is split).
        assert_eq!(bytes(names::DENSE), reduced(1024 + 1024 * 512 + 512));
        assert!(traffic(&seed_spec(Layout::Sparse, DenseOptim::Adam)).is_empty());
        // More ranks: each sends less of its own hidden states but to more ranks.
        let four = traffic(&seed_on(0, 4));
        let h4 = four.iter().find(|x| x.collective == names::HIDDEN).unwrap();
        assert_eq!(h4.bytes, 32 * 512 * 4 * 3);
    }
}
