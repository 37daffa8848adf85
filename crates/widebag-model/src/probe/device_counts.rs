//! What a training step asks of a wgpu device, counted step by step (`train --profile`): kernel
//! launches (cubecl's launch observer, by kernel name), reads of device tensors that block the
//! host (widebag's own, [`crate::tensors::reads`]), kernels first launched after the first step
//! (compiled, or raced by autotune, then: cubecl's launched-kernel collection against every
//! kernel launched before), and new pages of the device's dynamic memory pools (a lower bound on
//! new device buffers: the persistent, dedicated and staging pools report no pages).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use burn::tensor::Device;
use cubecl_runtime::launched::LaunchedKernels;
use cubecl_runtime::logging::{LaunchObservation, LaunchObserver};
use serde::Serialize;

/// Every kernel launch of the process, by name, once counting has begun.
#[derive(Default)]
struct Launches {
    total: AtomicU64,
    by_name: Mutex<HashMap<&'static str, u64>>,
}

impl LaunchObserver for Launches {
    fn launched(&self, kernel: &'static str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut names = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        *names.entry(kernel).or_default() += 1;
    }
}

/// The process's launch counter and the guard that keeps it installed (for the process's life:
/// an observer is process-wide in cubecl).
struct Installed {
    launches: Arc<Launches>,
    _guard: LaunchObservation,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

fn launches() -> &'static Launches {
    let installed = INSTALLED.get_or_init(|| {
        let launches = Arc::new(Launches::default());
        let observer: Arc<dyn LaunchObserver> = Arc::<Launches>::clone(&launches);
        Installed {
            launches,
            _guard: LaunchObservation::new(observer),
        }
    });
    &installed.launches
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Reading {
    launches: u64,
    reads: u64,
    pages: u64,
}

/// The device's counters, read at each step's start and end.
pub struct DeviceCounts {
    device: Device,
    at_start: Reading,
    collecting: Option<LaunchedKernels>,
    /// Every kernel launched so far (stable hashes).
    seen: HashSet<u128>,
    /// Steps ended; the counts are of steps 2 onwards.
    steps: u64,
    launches: u64,
    reads: u64,
    pages: u64,
    compiled_after_step_1: u64,
    /// Launches by kernel name at the end of step 1.
    names_after_step_1: HashMap<&'static str, u64>,
}

impl DeviceCounts {
    /// Counting begins (the launch observer installed, if it was not).
    pub fn new(device: &Device) -> Self {
        launches();
        Self {
            device: device.clone(),
            at_start: Reading::default(),
            collecting: None,
            seen: HashSet::new(),
            steps: 0,
            launches: 0,
            reads: 0,
            pages: 0,
            compiled_after_step_1: 0,
            names_after_step_1: HashMap::new(),
        }
    }

    fn read(&self) -> Reading {
        let pages = (self.device.memory_pool_report())
            .map_or(0, |pools| pools.iter().map(|p| p.pages).sum());
        Reading {
            launches: launches().total.load(Ordering::Relaxed),
            reads: crate::tensors::reads(),
            pages,
        }
    }

    /// A step begins.
    pub fn start_step(&mut self) {
        self.at_start = self.read();
        self.collecting = Some(LaunchedKernels::new());
    }

    /// The step that began ends.
    pub fn end_step(&mut self) {
        let now = self.read();
        let launched = self.collecting.take().map(LaunchedKernels::finish);
        let new = launched
            .iter()
            .flatten()
            .filter(|h| !self.seen.contains(h))
            .count();
        self.seen.extend(launched.into_iter().flatten());
        if self.steps >= 1 {
            self.compiled_after_step_1 += new as u64;
            self.launches += now.launches - self.at_start.launches;
            self.reads += now.reads - self.at_start.reads;
            self.pages += now.pages.saturating_sub(self.at_start.pages);
        } else {
            let names = launches().by_name.lock().unwrap_or_else(|p| p.into_inner());
            self.names_after_step_1 = names.clone();
        }
        self.steps += 1;
    }

    /// The counts per step after the first, and the kernels launched most.
    pub fn report(&self) -> DeviceProfile {
        let steps = self.steps.saturating_sub(1);
        let per = |n: u64| n as f64 / steps.max(1) as f64;
        let names = launches().by_name.lock().unwrap_or_else(|p| p.into_inner());
        let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
        for (name, n) in names.iter() {
            let before = self.names_after_step_1.get(name).copied().unwrap_or(0);
            if *n > before {
                calls.insert(name, n - before);
            }
        }
        let mut top: Vec<KernelCalls> = (calls.into_iter())
            .map(|(name, n)| KernelCalls {
                name: name.to_string(),
                calls_per_step: per(n),
            })
            .collect();
        top.sort_by(|a, b| b.calls_per_step.total_cmp(&a.calls_per_step));
        top.truncate(TOP_KERNELS);
        DeviceProfile {
            steps,
            dispatches_per_step: per(self.launches),
            reads_per_step: per(self.reads),
            allocations_per_step: per(self.pages),
            compiled_after_step_1: self.compiled_after_step_1,
            top_kernels: top,
        }
    }
}

/// Kernels listed in a profile, the most launched first.
const TOP_KERNELS: usize = 12;

/// A kernel's launches per step.
#[derive(Clone, Debug, Serialize)]
pub struct KernelCalls {
    pub name: String,
    pub calls_per_step: f64,
}

/// What the steps after the first asked of the device, per step.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceProfile {
    /// Steps counted (every step but the first, which compiles the kernels).
    pub steps: u64,
    /// Kernel launches (dispatches) a step.
    pub dispatches_per_step: f64,
    /// Reads of device tensors that block the host a step.
    pub reads_per_step: f64,
    /// New pages of the dynamic memory pools a step (new device buffers, a lower bound).
    pub allocations_per_step: f64,
    /// Kernels first launched after step 1: compiled (or raced by autotune) mid-run.
    pub compiled_after_step_1: u64,
    pub top_kernels: Vec<KernelCalls>,
}
