//! `plan`'s request and the solver's flags: the budget, pins, device facts and throughput
//! calibration parsed, and the mode (one plan, `--grid`, `--calibrate`).

use std::path::PathBuf;

use anyhow::Context;
use widebag_config::Config;
use widebag_config::units::parse_bytes;
use widebag_solver::Calibration;

use super::flags::{FlagOverride, device_flag, load_args};
use crate::args::{BudgetArgs, CalibrationArgs, DeviceArgs, ObjectiveArg, PlanArgs};
use crate::failure::Failure;

/// The solver's flags, parsed.
#[derive(Clone)]
pub struct SolverFlags {
    /// `--budget` as typed, and in bytes.
    pub budget: Option<(String, u64)>,
    /// `--pin` keys (each a knob).
    pub pins: Vec<String>,
    pub max_buffer_bytes: Option<u64>,
    pub alignment_bytes: Option<u64>,
    /// `--calibration FILE`'s throughput model; `None`: the planned device's built-in one
    /// ([`Calibration::built_in`]), if it has one.
    pub calibration: Option<Calibration>,
    /// `--ranks`: plan rank 0 of a run across this many ranks (1: one process).
    pub ranks: usize,
}

impl SolverFlags {
    /// No flags but the throughput model: the budget from the config or the device.
    pub fn with_calibration(calibration: Option<Calibration>) -> Self {
        Self {
            budget: None,
            pins: Vec::new(),
            max_buffer_bytes: None,
            alignment_bytes: None,
            calibration,
            ranks: 1,
        }
    }
}

/// `--keep-accuracy` as the override it is.
pub(super) fn keep_accuracy_flag() -> FlagOverride {
    FlagOverride::new(
        "--keep-accuracy",
        true,
        "plan.keep_accuracy",
        "true".to_string(),
    )
}

pub(super) fn budget_flag(text: Option<&String>) -> Result<Option<(String, u64)>, Failure> {
    text.map(|t| {
        parse_bytes(t)
            .map(|b| (t.clone(), b))
            .map_err(|e| Failure::usage(anyhow::anyhow!("--budget: {e}")))
    })
    .transpose()
}

/// The throughput model of `--calibration FILE`; `None` without the flag (the planner then
/// takes the device's built-in one). The one place plan, `train --budget` and sweep read it.
pub fn calibration(args: &CalibrationArgs) -> Result<Option<Calibration>, Failure> {
    let Some(path) = &args.calibration else {
        return Ok(None);
    };
    std::fs::read_to_string(path)
        .map_err(anyhow::Error::from)
        .and_then(|t| Ok(serde_json::from_str::<Calibration>(&t)?))
        .with_context(|| format!("--calibration {}", path.display()))
        .map(Some)
        .map_err(Failure::usage)
}

fn solver_flags(args: &BudgetArgs) -> Result<SolverFlags, Failure> {
    for key in &args.pin {
        if !widebag_config::PLAN_KNOBS.contains(&key.as_str()) {
            return Err(Failure::usage(anyhow::anyhow!(
                "--pin {key}: not a knob (use {})",
                widebag_config::PLAN_KNOBS.join(", ")
            )));
        }
    }
    let max_buffer_bytes = args
        .max_buffer
        .as_deref()
        .map(|t| parse_bytes(t).map_err(|e| Failure::usage(anyhow::anyhow!("--max-buffer: {e}"))))
        .transpose()?;
    if args.alignment == Some(0) {
        return Err(Failure::usage(anyhow::anyhow!(
            "--alignment must be at least 1"
        )));
    }
    Ok(SolverFlags {
        budget: budget_flag(args.budget.as_ref())?,
        pins: args.pin.clone(),
        max_buffer_bytes,
        alignment_bytes: args.alignment,
        calibration: calibration(&args.calibration)?,
        ranks: 1,
    })
}

/// `widebag plan` for one configured run.
pub struct OnePlan {
    pub config: Config,
    pub overrides: Vec<String>,
    pub solver: SolverFlags,
    pub json: bool,
    pub verify: bool,
    pub search: bool,
    pub tolerance_pct: f64,
    pub steps: usize,
    /// `--host-budget` as typed, and in bytes.
    pub host_budget: Option<(String, u64)>,
}

/// `widebag plan --grid NAME` (clap refuses the flags it does not use).
pub struct PlanGrid {
    pub name: String,
    pub device: DeviceArgs,
    pub json: bool,
    pub out: Option<PathBuf>,
    pub steps: usize,
    pub tolerance_pct: f64,
}

/// `widebag plan --calibrate`.
pub struct Calibrate {
    pub device: DeviceArgs,
    pub steps: usize,
    pub out: Option<PathBuf>,
    /// Each run's widths, classes, dim and hidden size times this (`--scale`, at least 1).
    pub scale: usize,
}

pub enum PlanRequest {
    One(Box<OnePlan>),
    Grid(PlanGrid),
    Calibrate(Calibrate),
}

pub fn plan(args: &PlanArgs) -> Result<PlanRequest, Failure> {
    let device = args.device;
    if let Some(name) = &args.grid {
        return Ok(PlanRequest::Grid(PlanGrid {
            name: name.clone(),
            device,
            json: args.json,
            out: args.out.clone(),
            steps: args.steps,
            tolerance_pct: args.tolerance,
        }));
    }
    if args.calibrate {
        return Ok(PlanRequest::Calibrate(Calibrate {
            device,
            steps: args.steps,
            out: args.out.clone(),
            scale: args.scale.max(1),
        }));
    }
    let b = &args.budget;
    let mut flags: Vec<FlagOverride> = device_flag(&args.device).into_iter().collect();
    if let Some(o) = b.objective {
        let name = match o {
            ObjectiveArg::Batch => "batch",
            ObjectiveArg::Throughput => "throughput",
        };
        flags.push(FlagOverride::new(
            "--objective",
            name,
            "plan.objective",
            format!("\"{name}\""),
        ));
    }
    if b.keep_accuracy {
        flags.push(keep_accuracy_flag());
    }
    if let Some(n) = b.min_batch {
        flags.push(FlagOverride::new(
            "--min-batch",
            n,
            "plan.min_batch",
            n.to_string(),
        ));
    }
    if let Some(n) = b.max_batch {
        flags.push(FlagOverride::new(
            "--max-batch",
            n,
            "plan.max_batch",
            n.to_string(),
        ));
    }
    Ok(PlanRequest::One(Box::new(OnePlan {
        config: load_args(&args.config, &flags)?,
        overrides: args.config.overrides.clone(),
        solver: SolverFlags {
            ranks: args.ranks.map_or(1, |n| n as usize),
            ..solver_flags(b)?
        },
        json: args.json,
        verify: args.verify,
        search: args.search,
        tolerance_pct: args.tolerance,
        steps: args.steps,
        host_budget: args
            .host_budget
            .as_ref()
            .map(|t| {
                parse_bytes(t)
                    .map(|b| (t.clone(), b))
                    .map_err(|e| Failure::usage(anyhow::anyhow!("--host-budget: {e}")))
            })
            .transpose()?,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;
    use widebag_config::DeviceChoice;

    fn plan_request(args: &[&str]) -> Result<PlanRequest, Failure> {
        let mut all = vec!["widebag", "plan"];
        all.extend_from_slice(args);
        match Cli::parse_from(all).command {
            Command::Plan(a) => plan(&a),
            _ => unreachable!(),
        }
    }

    fn error(r: Result<PlanRequest, Failure>) -> (u8, String) {
        match r {
            Err(f) => (f.code, format!("{:#}", f.error)),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn batch_flags_are_config_keys_validated_once() {
        let Ok(PlanRequest::One(p)) = plan_request(&["--min-batch", "8", "--max-batch", "64"])
        else {
            panic!("a plan")
        };
        assert_eq!((p.config.plan.min_batch, p.config.plan.max_batch), (8, 64));
        let (code, msg) = error(plan_request(&["--min-batch", "0"]));
        assert_eq!(code, 2);
        assert!(
            msg.contains("--min-batch 0") && msg.contains("plan.min_batch"),
            "{msg}"
        );
        let (code, msg) = error(plan_request(&["--min-batch", "5000"]));
        assert_eq!(code, 2);
        assert!(
            msg.contains("plan.max_batch") && msg.contains("--min-batch 5000"),
            "{msg}"
        );
        let (_, msg) = error(plan_request(&[
            "--set",
            "plan.min_batch=9",
            "--max-batch",
            "4",
        ]));
        assert!(msg.contains("--max-batch 4"), "{msg}");
    }

    #[test]
    fn solver_flags_are_parsed_naming_the_flag() {
        let (code, msg) = error(plan_request(&["--budget", "8 gigs"]));
        assert_eq!(code, 2);
        assert!(
            msg.contains("--budget") && msg.contains("unknown unit"),
            "{msg}"
        );
        let (_, msg) = error(plan_request(&["--pin", "model.dim"]));
        assert!(msg.contains("--pin model.dim"), "{msg}");
        let (_, msg) = error(plan_request(&["--max-buffer", "lots"]));
        assert!(msg.contains("--max-buffer"), "{msg}");
        let (_, msg) = error(plan_request(&["--alignment", "0"]));
        assert!(msg.contains("--alignment"), "{msg}");
        let (_, msg) = error(plan_request(&["--calibration", "/nonexistent/cal.json"]));
        assert!(msg.contains("--calibration /nonexistent/cal.json"), "{msg}");
    }

    #[test]
    fn the_device_flag_sets_train_device() {
        let Ok(PlanRequest::One(p)) =
            plan_request(&["--device", "cpu", "--objective", "throughput"])
        else {
            panic!("a plan")
        };
        assert_eq!(p.config.train.device, DeviceChoice::Cpu);
        assert_eq!(
            p.config.plan.objective,
            widebag_config::Objective::Throughput
        );
    }
}
