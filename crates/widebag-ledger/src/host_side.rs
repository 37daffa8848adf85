//! The host side of a run: what the process holds in its own memory besides the device's
//! tensors, priced as the step's ledger prices the device. Its parts: the process's baseline
//! (its start-up and the backend's context, measured when the device opens), the data's rows
//! resident on the heap (a file read whole; a packed file's pages belong to the file and are
//! not anonymous memory), the evaluation's rows, the epoch's order, the renumbering maps and
//! vocabulary, the batches being assembled (the step's, those queued ahead, the one being
//! built), and the step's own host entries (the host tier's bands, their optimizer state and
//! the rows staged to and from the device each step).
//!
//! On a device that computes in the host's memory (flex) the device's tensors are on the same
//! heap: the process's anonymous memory is then both sides' peaks
//! ([`HostSide::anonymous_peak`]), which is what `explain --measure` reads (`RssAnon`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::step::{BatchFacts, StepSpec};
use crate::{Category, Entry, Ledger, Lifetime, Peak, Placement, Point, Pool};

/// What the host side is told: measured (the baseline) or counted from the prepared run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// Anonymous memory of the process before its data: start-up and the backend's context.
    pub baseline_bytes: u64,
    /// The training rows resident on the heap (none for a packed file: mapped).
    pub rows_bytes: u64,
    /// The evaluation's rows and what each user has seen (kept for the run).
    pub eval_bytes: u64,
    /// The epoch's order: a permutation of the rows, or of the blocks and one window's rows.
    pub order_bytes: u64,
    /// Renumbering maps (head/tail bands), a packed file's block table, vocabulary, labels.
    pub maps_bytes: u64,
    /// Freed memory reading the data left resident (measured once it is ready: pages the
    /// allocator shares with the rows it keeps; none for a packed file).
    pub retained_bytes: u64,
    /// Batches assembled at once: the step's, those queued ahead and the one being built
    /// ([`BATCHES_IN_FLIGHT`]; a measured run reads all of its batches ahead).
    pub batches_in_flight: u64,
}

/// Batches a training run holds on the host at once: the step's, two queued by the reading
/// thread, and the one it is building.
pub const BATCHES_IN_FLIGHT: u64 = 4;

/// Heap bytes of one assembled batch (`widebag_csr::CsrBatch::heap_bytes` of `b`'s size): the
/// matrix (row pointers, ids, values), its copy of the row pointers, the targets (row pointers,
/// classes, weights), the unique ids (with the ids' capacity) and each entry's place among them.
pub fn batch_bytes(b: &BatchFacts) -> u64 {
    let ptrs = 3 * (b.n_rows + 1) * 8;
    ptrs + b.nnz * (4 + 4 + 4 + 4) + b.n_targets * (4 + 4)
}

/// The host side of a step: its entries (all [`Placement::Host`]) over the step's points, and
/// the device's peak when its tensors are on the same heap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostSide {
    pub facts: HostFacts,
    pub ledger: Ledger,
    /// The device computes in the host's memory (flex): its tensors count as the process's too.
    pub device_on_host: bool,
    /// The step's device tensors on the host: their peak, and the heap they keep resident
    /// (`heap::resident_bytes`: freed blocks kept for the next step).
    pub device_peak: Option<Peak>,
    pub device_resident_bytes: u64,
}

/// One host entry, alive the whole run.
fn resident(name: &str, layer: &str, bytes: u64, category: Category) -> Entry {
    Entry {
        name: name.into(),
        layer: layer.into(),
        shape: vec![bytes],
        element_bytes: 1,
        count: 1,
        category,
        placement: Placement::Host,
        pool: Pool::Dynamic,
        lifetime: Lifetime::Persistent,
    }
}

/// The host side of `spec`'s step, whose device ledger is `step`, with `facts`.
pub fn host_side(spec: &StepSpec, step: &Ledger, facts: HostFacts) -> HostSide {
    let mut ledger = Ledger {
        points: step.points.clone(),
        unsampled: step.unsampled.clone(),
        alignment_bytes: 1,
        entries: Vec::new(),
    };
    ledger.push(resident(
        "process baseline",
        "process",
        facts.baseline_bytes,
        Category::Process,
    ));
    ledger.push(resident(
        "training rows",
        "data",
        facts.rows_bytes,
        Category::Data,
    ));
    ledger.push(resident(
        "evaluation rows",
        "data",
        facts.eval_bytes,
        Category::Data,
    ));
    ledger.push(resident(
        "epoch order",
        "data",
        facts.order_bytes,
        Category::Data,
    ));
    ledger.push(resident(
        "maps and vocabulary",
        "data",
        facts.maps_bytes,
        Category::Data,
    ));
    ledger.push(resident(
        "freed by reading, kept",
        "data",
        facts.retained_bytes,
        Category::Process,
    ));
    let mut batches = resident(
        "batches in flight",
        "batch",
        batch_bytes(&spec.batch),
        Category::BatchBuffers,
    );
    batches.count = facts.batches_in_flight;
    ledger.push(batches);
    // The step's own host entries: the host tier's bands and state, the optimizer's counters.
    for e in step
        .entries
        .iter()
        .filter(|e| e.placement == Placement::Host)
    {
        ledger.push(e.clone());
    }
    let (up, down) = spec.host_traffic_bytes();
    ledger.push(Entry {
        name: "host tier rows staged".into(),
        layer: "table".into(),
        shape: vec![up + down],
        element_bytes: 1,
        count: 1,
        category: Category::Temporaries,
        placement: Placement::Host,
        pool: Pool::Dynamic,
        lifetime: Lifetime::span(Point::ForwardLogits, Point::TableUpdate),
    });
    let device_on_host = spec.device.host_memory;
    HostSide {
        facts,
        ledger,
        device_on_host,
        device_peak: device_on_host.then(|| step.peak(Placement::Device)),
        device_resident_bytes: match device_on_host {
            true => crate::heap::resident_bytes(step),
            false => 0,
        },
    }
}

impl HostSide {
    /// The host side's own peak (the device's tensors left out).
    pub fn host_peak_bytes(&self) -> u64 {
        self.ledger.peak(Placement::Host).bytes
    }

    /// The process's predicted anonymous memory at its peak, and where: the host side's peak,
    /// with the heap the step's device tensors keep resident when they are on the same heap
    /// (memory a step frees stays with the process, kept for the next step's allocations, so
    /// the two add up wherever each peak falls).
    pub fn anonymous_peak(&self) -> (u64, Point) {
        let host = self.ledger.peak(Placement::Host);
        match self.device_peak {
            Some(d) => (host.bytes + self.device_resident_bytes, d.point),
            None => (host.bytes, host.point),
        }
    }

    /// Bytes per part at the peak: each host entry by name, and the device's tensors as one
    /// part when on the host. Largest first.
    pub fn parts_at_peak(&self) -> Vec<(String, u64)> {
        let point = self.ledger.peak(Placement::Host).point;
        let mut parts: BTreeMap<String, u64> = BTreeMap::new();
        for e in (self.ledger.entries.iter()).filter(|e| e.lifetime.alive_at(point)) {
            *parts.entry(e.name.clone()).or_default() += e.bytes();
        }
        if self.device_peak.is_some() {
            parts.insert(
                "device tensors (on the heap)".into(),
                self.device_resident_bytes,
            );
        }
        let mut parts: Vec<(String, u64)> = parts.into_iter().filter(|p| p.1 > 0).collect();
        parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        parts
    }
}

#[cfg(test)]
mod tests {
    use widebag_config::BandPlacement;
    use widebag_config::bands::ModelBands;

    use super::*;
    use crate::step::{DeviceFacts, ledger};

    fn facts() -> HostFacts {
        HostFacts {
            baseline_bytes: 3 << 20,
            rows_bytes: 1000,
            eval_bytes: 200,
            order_bytes: 80,
            maps_bytes: 16,
            retained_bytes: 4,
            batches_in_flight: BATCHES_IN_FLIGHT,
        }
    }

    fn spec(host_memory: bool, host_tier: bool) -> StepSpec {
        let mut c = widebag_config::Config::default();
        c.data.width = 10_000;
        c.model.dim = 16;
        c.model.hidden = vec![32];
        if host_tier {
            c.model.input_bands.cutoffs = widebag_config::Cutoffs::Ids(vec![2_000]);
            c.model.input_bands.placement = vec![BandPlacement::Device, BandPlacement::Host];
        }
        let bands = ModelBands::resolve(&c).unwrap();
        let device = DeviceFacts {
            max_buffer_bytes: 1 << 30,
            alignment_bytes: 32,
            host_threads: 0,
            bf16: false,
            host_memory,
        };
        let batch = BatchFacts {
            n_rows: 64,
            nnz: 640,
            n_unique: 300,
            n_targets: 64,
        };
        StepSpec::from_config(&c, &bands, device, batch)
    }

    #[test]
    fn every_part_is_priced_once_and_the_device_counts_only_on_the_host() {
        let s = spec(false, false);
        let step = ledger(&s);
        let h = host_side(&s, &step, facts());
        let batch = 3 * 65 * 8 + 640 * 16 + 64 * 8;
        let step_host = step.peak(Placement::Host).bytes;
        let want = (3 << 20) + 1000 + 200 + 80 + 16 + 4 + 4 * batch + step_host;
        assert_eq!(h.host_peak_bytes(), want);
        assert_eq!(
            h.anonymous_peak().0,
            want,
            "a GPU's tensors are not the process's"
        );
        let on_flex = spec(true, false);
        let step = ledger(&on_flex);
        let h = host_side(&on_flex, &step, facts());
        let (peak, point) = h.anonymous_peak();
        assert_eq!(peak, want + crate::heap::resident_bytes(&step));
        assert!(crate::heap::resident_bytes(&step) >= step.peak(Placement::Device).bytes);
        assert_eq!(point, step.peak(Placement::Device).point);
        let parts = h.parts_at_peak();
        assert!(parts.contains(&("process baseline".to_string(), 3 << 20)));
        assert!(parts.windows(2).all(|w| w[0].1 >= w[1].1), "largest first");
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), peak);
    }

    #[test]
    fn the_host_tier_is_priced_with_its_staged_rows() {
        let s = spec(false, true);
        let step = ledger(&s);
        let band_bytes: u64 = step
            .entries
            .iter()
            .filter(|e| e.placement == Placement::Host)
            .map(Entry::bytes)
            .sum();
        assert!(band_bytes > 8_000 * 4, "the tail band's table and state");
        let h = host_side(&s, &step, HostFacts::default());
        let (up, down) = s.host_traffic_bytes();
        assert!(up > 0);
        assert_eq!(
            h.ledger.live_bytes(Placement::Host, Point::TableUpdate),
            band_bytes + up + down
        );
        assert_eq!(
            h.ledger.live_bytes(Placement::Host, Point::Setup),
            band_bytes
        );
    }

    #[test]
    fn a_batch_is_priced_as_the_reader_assembles_it() {
        let rows: Vec<widebag_csr::SparseRow> = (0..50u32)
            .map(|r| widebag_csr::SparseRow {
                ids: (0..(r % 7)).map(|k| (r * 13 + k * 101) % 997).collect(),
                values: vec![1.0; (r % 7) as usize],
            })
            .collect();
        let targets: Vec<widebag_csr::RowTarget> = (0..50)
            .map(|r| widebag_csr::RowTarget::Class(r % 5))
            .collect();
        let b = widebag_csr::CsrBatch::from_rows(&rows, &targets, 1000, 5).unwrap();
        let facts = BatchFacts {
            n_rows: b.n_rows() as u64,
            nnz: b.nnz() as u64,
            n_unique: b.unique_ids().len() as u64,
            n_targets: b.targets().classes.len() as u64,
        };
        assert_eq!(batch_bytes(&facts), b.heap_bytes());
    }
}
