//! The step's instruments: [`StepProbe`] reads burn's allocator counters at the ledger's sample
//! points of a step and keeps the peaks, per point, per phase and overall, and carries the
//! step's stage timer ([`profile::StepProfile`]); [`progress`] says which step and stage are
//! under way, for failure reports. They sit below everything they watch: the table, the output
//! layer and the step all report to them, and they import none of those.
//!
//! flex has no allocator counters, but its tensors live on the process's heap: a probe made
//! with [`StepProbe::on_heap`] reads the heap's live bytes instead, from the counter the
//! binary registers ([`set_heap_counter`], its global allocator's). That is how each rank of a
//! multi-process run (one process each) is measured.

pub mod device_counts;
pub mod profile;
pub mod progress;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use burn::tensor::Device;
use serde::Serialize;
pub use widebag_ledger::{Phase, Point};

pub use profile::{Stage, StepProfile};

/// How closely a step is watched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeMode {
    /// Only at phase ends (forward end, backward end, step end): cheap enough for training.
    #[default]
    PhaseEnds,
    /// Also inside the output layer and the table update, where a step's temporaries peak
    /// (`explain --measure`). Each reading drains burn's fusion queue.
    Detailed,
}

/// One allocator reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemorySample {
    /// Bytes of live allocations, with the padding that rounds each to the device's alignment.
    pub in_use_bytes: u64,
    pub padding_bytes: u64,
    pub reserved_bytes: u64,
}

/// The process's anonymous resident memory (Linux `RssAnon`: its heap, stacks and private
/// mappings, not the file-backed pages of a memory-mapped dataset), where it can be read.
pub fn anon_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The process's heap counter (live bytes), registered by the binary that counts them.
static HEAP_COUNTER: OnceLock<fn() -> u64> = OnceLock::new();

/// Registers the heap's live-bytes counter (the binary's global allocator); first call wins.
pub fn set_heap_counter(counter: fn() -> u64) {
    let _ = HEAP_COUNTER.set(counter);
}

/// Peak allocator readings. Readings drain burn's fusion queue first, so they reflect every
/// operation issued so far.
#[derive(Debug)]
pub struct StepProbe {
    device: Device,
    pub mode: ProbeMode,
    pub peak_in_use_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub phase_peak_in_use_bytes: BTreeMap<Phase, u64>,
    pub point_peak_in_use_bytes: BTreeMap<Point, u64>,
    /// [`ProbeMode::Detailed`]: the process's anonymous memory ([`anon_rss_bytes`]) at each
    /// point, its largest reading (what the ledger's host side is compared with).
    pub point_anon_rss_bytes: BTreeMap<Point, u64>,
    pub n_samples: usize,
    /// Bytes in use before the run built anything (left by earlier work in the process); every
    /// reading is taken relative to it.
    pub baseline_bytes: u64,
    /// Wall time of the step's stages.
    pub profile: StepProfile,
    /// Reads the heap's live bytes instead of the device's pools ([`Self::on_heap`]).
    heap: Option<fn() -> u64>,
}

impl StepProbe {
    pub fn new(device: &Device) -> Self {
        Self::with_mode(device, ProbeMode::PhaseEnds)
    }

    pub fn with_mode(device: &Device, mode: ProbeMode) -> Self {
        Self {
            device: device.clone(),
            mode,
            peak_in_use_bytes: 0,
            peak_reserved_bytes: 0,
            phase_peak_in_use_bytes: BTreeMap::new(),
            point_peak_in_use_bytes: BTreeMap::new(),
            point_anon_rss_bytes: BTreeMap::new(),
            n_samples: 0,
            baseline_bytes: device
                .memory_pool_usage()
                .map_or(0, |u| u.bytes_in_use + u.bytes_padding),
            profile: StepProfile::new(device, false),
            heap: None,
        }
    }

    /// A probe reading the process's heap ([`set_heap_counter`]) relative to its bytes now;
    /// `None` when no counter is registered. For a backend whose tensors live on the heap.
    pub fn on_heap(device: &Device, mode: ProbeMode) -> Option<Self> {
        let heap = *HEAP_COUNTER.get()?;
        let mut probe = Self::with_mode(device, mode);
        probe.baseline_bytes = heap();
        probe.heap = Some(heap);
        Some(probe)
    }

    /// Bytes in use (with padding) and reserved now, from the heap or the device's pools.
    fn read(&self) -> Option<(u64, u64, u64)> {
        if let Some(heap) = self.heap {
            let live = heap();
            return Some((live, 0, live));
        }
        let usage = self.device.memory_pool_usage()?;
        Some((
            usage.bytes_in_use + usage.bytes_padding,
            usage.bytes_padding,
            usage.bytes_reserved,
        ))
    }

    /// Whether the backend reports allocator counters (wgpu does; flex does not).
    pub fn available(&self) -> bool {
        self.heap.is_some() || self.device.memory_pool_usage().is_some()
    }

    /// Reads the allocator now and folds the reading into the peaks.
    pub fn sample(&mut self, point: Point) -> Option<MemorySample> {
        let (in_use, padding_bytes, reserved_bytes) = self.read()?;
        let s = MemorySample {
            in_use_bytes: in_use.saturating_sub(self.baseline_bytes),
            padding_bytes,
            reserved_bytes,
        };
        self.n_samples += 1;
        self.peak_in_use_bytes = self.peak_in_use_bytes.max(s.in_use_bytes);
        self.peak_reserved_bytes = self.peak_reserved_bytes.max(s.reserved_bytes);
        let p = self
            .phase_peak_in_use_bytes
            .entry(point.phase())
            .or_default();
        *p = (*p).max(s.in_use_bytes);
        let p = self.point_peak_in_use_bytes.entry(point).or_default();
        *p = (*p).max(s.in_use_bytes);
        if self.mode == ProbeMode::Detailed
            && let Some(anon) = anon_rss_bytes()
        {
            let p = self.point_anon_rss_bytes.entry(point).or_default();
            *p = (*p).max(anon);
        }
        Some(s)
    }

    /// Ends a stage of the step on the profile's clock.
    pub fn lap(&mut self, stage: Stage) {
        progress::ended(stage);
        self.profile.lap(stage);
    }

    /// Like [`Self::sample`], in [`ProbeMode::Detailed`] only.
    pub fn detail(&mut self, point: Point) {
        if self.mode == ProbeMode::Detailed {
            self.sample(point);
        }
    }

    /// Forgets the peaks (after warm-up steps).
    pub fn reset(&mut self) {
        let (baseline_bytes, heap) = (self.baseline_bytes, self.heap);
        let fresh = StepProfile::new(&self.device, false);
        let profile = std::mem::replace(&mut self.profile, fresh);
        *self = Self::with_mode(&self.device, self.mode);
        self.baseline_bytes = baseline_bytes;
        self.heap = heap;
        self.profile = profile;
    }

    /// High-water mark of the pools: sum over pools of peak pages times page size.
    pub fn pool_high_water_bytes(&self) -> Option<u64> {
        let report = self.device.memory_pool_report()?;
        Some(report.iter().map(|p| p.pages_peak * p.page_size).sum())
    }
}

/// Small forward and backward passes (matrix products, autodiff) on this thread and on every
/// thread of the pool, so the state the backend keeps once it has run is allocated before a heap
/// baseline is read: the thread pools, and each thread's matrix-product scratch (the `gemm`
/// crate keeps an L2-sized buffer per thread that has multiplied, about 1 MiB here; with one
/// pool thread, products of the step run on the pool's thread that the caller's never reach).
pub fn prime_backend(device: &Device) {
    let products = |device: &Device| {
        for (n, k, m) in [
            (64, 64, 64),
            (512, 512, 512),
            (1024, 64, 256),
            (64, 1024, 512),
        ] {
            let a = crate::tensors::floats(vec![0.5; n * k], [n, k], device)
                .autodiff()
                .require_grad();
            let b = crate::tensors::floats(vec![0.25; k * m], [k, m], device)
                .autodiff()
                .require_grad();
            let _ = burn::tensor::activation::relu(a.matmul(b)).sum().backward();
        }
    };
    products(device);
    rayon::broadcast(|_| products(device));
}
