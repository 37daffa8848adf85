//! The ledger of one training step: its layout's entries (the sparse layout, one rank's part of
//! it, or the dense layout), then what every layout adds (Adam's step count).

use widebag_config::{DenseOptim, Layout, TableOptim};

use super::spec::StepSpec;
use super::{dense, exchange, sparse};
use crate::{Category, Entry, Ledger, Lifetime, Placement, Pool};

/// The ledger of one training step of `spec`.
pub fn ledger(spec: &StepSpec) -> Ledger {
    let mut ledger = match spec.layout {
        Layout::Sparse if spec.ranks.is_some() => exchange::ledger(spec),
        Layout::Sparse => sparse::ledger(spec),
        Layout::Dense => dense::ledger(spec),
    };
    // Adam's bias correction reads the step count, kept on the host (one u64 per model).
    let adam = matches!(spec.dense_optim, DenseOptim::Adam | DenseOptim::AdamW)
        || (spec.layout == Layout::Sparse
            && matches!(spec.table_optim, TableOptim::Adam | TableOptim::AdamW));
    if adam {
        ledger.push(Entry {
            name: "Adam step count".into(),
            layer: "optimizer".into(),
            shape: vec![1],
            element_bytes: 8,
            count: 1,
            category: Category::OptimizerState,
            placement: Placement::Host,
            pool: Pool::Dynamic,
            lifetime: Lifetime::Persistent,
        });
    }
    ledger
}

#[cfg(test)]
mod tests {
    use widebag_config::BandPlacement;
    use widebag_config::bands::ModelBands;

    use super::*;
    use crate::Point;
    use crate::step::spec::{BatchFacts, DeviceFacts, seed_spec};

    #[test]
    fn head_tail_bands_on_the_host_leave_the_device() {
        let mut c = widebag_config::Config::default();
        c.data.n_classes = Some(240_000);
        c.model.dim = 64;
        c.model.hidden = vec![64];
        c.model.output = widebag_config::OutputKind::Adaptive;
        c.model.input_bands.cutoffs = widebag_config::Cutoffs::Ids(vec![20_000, 80_000]);
        c.model.output_bands.cutoffs = widebag_config::Cutoffs::Ids(vec![20_000, 80_000]);
        let facts = DeviceFacts {
            max_buffer_bytes: 128 << 20,
            alignment_bytes: 32,
            host_threads: 0,
            bf16: false,
            host_memory: false,
        };
        let batch = BatchFacts {
            n_rows: 256,
            nnz: 5_000,
            n_unique: 2_000,
            n_targets: 256,
        };
        let bands = ModelBands::resolve(&c).unwrap();
        let device_spec = StepSpec::from_config(&c, &bands, facts, batch);
        c.model.input_bands.placement = vec![BandPlacement::Device, BandPlacement::Host];
        let host_spec = StepSpec::from_config(&c, &bands, facts, batch);
        let (on_device, on_host) = (ledger(&device_spec), ledger(&host_spec));
        let host_bytes: u64 = on_host
            .entries
            .iter()
            .filter(|e| e.placement == Placement::Host && e.layer.starts_with("table.band"))
            .map(|e| e.bytes())
            .sum();
        // Tail tables: 60,000 rows × 16 and 160,000 × 4, each with two Adam moments.
        assert_eq!(host_bytes, 3 * 4 * (60_000 * 16 + 160_000 * 4));
        assert_eq!(
            on_device.peak(Placement::Device).bytes - on_host.peak(Placement::Device).bytes,
            host_bytes
        );
        assert_eq!(device_spec.host_traffic_bytes(), (0, 0));
        // Unsampled, each tail band may hold all 2,000 unique ids: rows and two moments each.
        let bound = 4 * 2_000 * 3 * (16 + 4);
        assert_eq!(host_spec.host_traffic_bytes(), (bound, bound));
        // Sampled per band: 1,500 head ids on the device, 400 and 100 on the host.
        let mut sampled = host_spec.clone();
        sampled.band_unique = vec![1_500, 400, 100];
        assert_eq!(
            sampled.host_traffic_bytes(),
            (4 * 3 * (400 * 16 + 100 * 4), 4 * 3 * (400 * 16 + 100 * 4))
        );
        // Each band's gathered rows and row gradients at its own width.
        let l = ledger(&sampled);
        for (band, rows, dim) in [("table.band0", 1_500, 64), ("table.band1", 400, 16)] {
            for name in ["gathered unique rows (gradient leaves)", "row gradients"] {
                let e = l
                    .entries
                    .iter()
                    .find(|e| e.layer == band && e.name == name)
                    .unwrap();
                assert_eq!((e.shape.clone(), e.count), (vec![rows, dim], 1));
            }
        }
        // The adaptive head covers 20,000 classes plus 2 cluster tokens; no class chunks.
        assert!(
            on_host
                .entries
                .iter()
                .any(|e| e.name == "output.head.weight" && e.shape == vec![64, 20_002])
        );
        assert!(
            !on_host
                .entries
                .iter()
                .any(|e| e.layer.starts_with("output.0"))
        );
    }

    #[test]
    fn optimizer_state_multipliers() {
        let params = 369_405_824u64 * 4;
        for opt in DenseOptim::ALL {
            let l = ledger(&seed_spec(Layout::Dense, opt));
            let c = l.categories_at(Placement::Device, Point::StepEnd);
            assert_eq!(
                c.get(&Category::OptimizerState).copied().unwrap_or(0),
                opt.state_per_weight() * params,
                "{opt:?}"
            );
        }
        let mut spec = seed_spec(Layout::Sparse, DenseOptim::Sgd);
        for opt in TableOptim::ALL {
            spec.table_optim = opt;
            let l = ledger(&spec);
            let c = l.categories_at(Placement::Device, Point::StepEnd);
            assert_eq!(
                c.get(&Category::OptimizerState).copied().unwrap_or(0),
                opt.state_per_row(1024) * 240_000 * 4,
                "{opt:?}"
            );
        }
    }
}
