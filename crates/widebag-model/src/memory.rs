//! Samples burn's allocator counters during a step and keeps the peaks, per phase and overall.

use std::collections::BTreeMap;

use burn::tensor::Device;
use serde::Serialize;

/// The phases of a training step at which memory is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Setup,
    Forward,
    Backward,
    Update,
}

/// One allocator reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemorySample {
    pub in_use_bytes: u64,
    pub reserved_bytes: u64,
}

/// Peak allocator readings. Readings drain burn's fusion queue first, so they reflect every
/// operation issued so far.
#[derive(Clone, Debug)]
pub struct MemoryMeter {
    device: Device,
    pub peak_in_use_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub phase_peak_in_use_bytes: BTreeMap<Phase, u64>,
    pub n_samples: usize,
}

impl MemoryMeter {
    pub fn new(device: &Device) -> Self {
        Self {
            device: device.clone(),
            peak_in_use_bytes: 0,
            peak_reserved_bytes: 0,
            phase_peak_in_use_bytes: BTreeMap::new(),
            n_samples: 0,
        }
    }

    /// Whether the backend reports allocator counters (wgpu does; flex does not).
    pub fn available(&self) -> bool {
        self.device.memory_pool_usage().is_some()
    }

    /// Reads the allocator now and folds the reading into the peaks.
    pub fn sample(&mut self, phase: Phase) -> Option<MemorySample> {
        let usage = self.device.memory_pool_usage()?;
        let s = MemorySample {
            in_use_bytes: usage.bytes_in_use,
            reserved_bytes: usage.bytes_reserved,
        };
        self.n_samples += 1;
        self.peak_in_use_bytes = self.peak_in_use_bytes.max(s.in_use_bytes);
        self.peak_reserved_bytes = self.peak_reserved_bytes.max(s.reserved_bytes);
        let p = self.phase_peak_in_use_bytes.entry(phase).or_default();
        *p = (*p).max(s.in_use_bytes);
        Some(s)
    }

    /// High-water mark of the dynamic pools: sum over pools of peak pages times page size.
    pub fn pool_high_water_bytes(&self) -> Option<u64> {
        let report = self.device.memory_pool_report()?;
        Some(report.iter().map(|p| p.pages_peak * p.page_size).sum())
    }
}
