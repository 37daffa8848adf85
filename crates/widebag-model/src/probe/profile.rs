//! Where a step's time goes: wall seconds per stage of the training step, in the step's order
//! (data → unique rows → forward → output → backward → row updates → dense updates), summed over
//! the timed steps. On wgpu the device runs behind the host, so each stage boundary waits for
//! the device first (`Device::sync`) when asked to (`synced`); flex runs each op as it is
//! issued, so its boundaries are exact without waiting.

use std::collections::BTreeMap;
use std::time::Instant;

use burn::tensor::Device;
use serde::Serialize;

use crate::probe::device_counts::{DeviceCounts, DeviceProfile};

/// A stage of the training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Waiting for the next batch from the loader thread (assembly overlaps the steps before).
    Data,
    /// The batch's sorted unique ids, split by band and shard.
    Ids,
    /// Deferred catch-up of the rows, and their gather (with a host band's upload).
    Gather,
    /// The bag, the projections and the hidden layers.
    Forward,
    /// The output layer's forward pass and the loss.
    OutputForward,
    /// The output layer's backward pass (its gradients, and dL/dh).
    OutputBackward,
    /// Autodiff back through the hidden layers and the bag.
    TrunkBackward,
    /// Row updates of the tables and their state (with a host band's download).
    RowUpdate,
    /// Dense optimizer updates.
    DenseUpdate,
}

impl Stage {
    pub const ALL: [Stage; 9] = [
        Stage::Data,
        Stage::Ids,
        Stage::Gather,
        Stage::Forward,
        Stage::OutputForward,
        Stage::OutputBackward,
        Stage::TrunkBackward,
        Stage::RowUpdate,
        Stage::DenseUpdate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Data => "data",
            Stage::Ids => "ids",
            Stage::Gather => "gather",
            Stage::Forward => "forward",
            Stage::OutputForward => "output_forward",
            Stage::OutputBackward => "output_backward",
            Stage::TrunkBackward => "trunk_backward",
            Stage::RowUpdate => "row_update",
            Stage::DenseUpdate => "dense_update",
        }
    }
}

/// Stage timer of the training steps; when its boundaries wait for the device, also what each
/// step asks of the device ([`DeviceCounts`]).
pub struct StepProfile {
    device: Device,
    /// Whether each boundary waits for the device.
    sync: bool,
    last: Instant,
    seconds: BTreeMap<Stage, f64>,
    steps: u64,
    counts: Option<DeviceCounts>,
}

impl std::fmt::Debug for StepProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepProfile")
            .field("sync", &self.sync)
            .field("seconds", &self.seconds)
            .field("steps", &self.steps)
            .field("counts", &self.counts.is_some())
            .finish()
    }
}

impl StepProfile {
    pub fn new(device: &Device, sync: bool) -> Self {
        Self {
            device: device.clone(),
            sync,
            last: Instant::now(),
            seconds: BTreeMap::new(),
            steps: 0,
            counts: sync.then(|| DeviceCounts::new(device)),
        }
    }

    /// Starts the clock of a new step (or of its data wait).
    pub fn start(&mut self) {
        if let Some(c) = &mut self.counts {
            // The step's counts begin once the work before it (an evaluation) is done.
            let _ = self.device.sync();
            c.start_step();
        }
        self.last = Instant::now();
    }

    /// Ends `stage`: the time since the last boundary is its.
    pub fn lap(&mut self, stage: Stage) {
        if self.sync {
            // A failed wait shows up at the step's next read; the timing is then moot.
            let _ = self.device.sync();
        }
        let now = Instant::now();
        *self.seconds.entry(stage).or_default() += (now - self.last).as_secs_f64();
        self.last = now;
    }

    /// One step done.
    pub fn end_step(&mut self) {
        self.steps += 1;
        if let Some(c) = &mut self.counts {
            c.end_step();
        }
    }

    /// Forgets what was timed (after the warm-up steps).
    pub fn reset(&mut self) {
        self.seconds.clear();
        self.steps = 0;
        self.last = Instant::now();
    }

    pub fn report(&self) -> ProfileReport {
        let steps = self.steps.max(1) as f64;
        let total: f64 = self.seconds.values().sum();
        let stages = Stage::ALL
            .iter()
            .filter_map(|&stage| {
                let s = *self.seconds.get(&stage)?;
                Some(StageTime {
                    stage,
                    ms_per_step: 1e3 * s / steps,
                    share: if total > 0.0 { s / total } else { 0.0 },
                })
            })
            .collect();
        ProfileReport {
            steps: self.steps,
            synced: self.sync,
            ms_per_step: 1e3 * total / steps,
            stages,
            device_profile: self.counts.as_ref().map(DeviceCounts::report),
        }
    }
}

/// One stage's time per step.
#[derive(Clone, Debug, Serialize)]
pub struct StageTime {
    pub stage: Stage,
    pub ms_per_step: f64,
    /// Fraction of the timed step.
    pub share: f64,
}

/// The step's time by stage, averaged over the timed steps.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileReport {
    pub steps: u64,
    /// Whether the stage boundaries waited for the device (wgpu with `train.profile`; flex is
    /// always exact).
    pub synced: bool,
    pub ms_per_step: f64,
    /// In step order; stages the layout does not have are left out.
    pub stages: Vec<StageTime>,
    /// What each step after the first asked of the device (wgpu with `--profile`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_profile: Option<DeviceProfile>,
}

impl ProfileReport {
    /// `stage ms (share)` pairs, the largest first.
    pub fn top(&self) -> Vec<&StageTime> {
        let mut v: Vec<&StageTime> = self.stages.iter().collect();
        v.sort_by(|a, b| b.ms_per_step.total_cmp(&a.ms_per_step));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_add_up_per_stage_and_average_over_steps() {
        let mut p = StepProfile::new(&Device::flex(), false);
        for _ in 0..2 {
            p.start();
            std::thread::sleep(std::time::Duration::from_millis(4));
            p.lap(Stage::Forward);
            std::thread::sleep(std::time::Duration::from_millis(2));
            p.lap(Stage::DenseUpdate);
            p.end_step();
        }
        let r = p.report();
        assert_eq!(r.steps, 2);
        let names: Vec<Stage> = r.stages.iter().map(|s| s.stage).collect();
        assert_eq!(names, [Stage::Forward, Stage::DenseUpdate], "step order");
        assert!(r.stages[0].ms_per_step >= 4.0 && r.stages[0].ms_per_step < 40.0);
        assert!(r.stages[1].ms_per_step >= 2.0);
        assert!((r.stages.iter().map(|s| s.share).sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!(r.top()[0].stage, Stage::Forward);
        p.reset();
        assert_eq!(p.report().stages.len(), 0);
    }
}
