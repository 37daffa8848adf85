//! Planning one prepared run for a budget, shared by `plan`, `train --budget` and `sweep`: the
//! budget, the pins, the device's facts, the batch cap at the data's rows, and the solver call.

use std::time::Instant;

use anyhow::Context;
use widebag_config::Config;
use widebag_config::units::{format_bytes, parse_bytes};
use widebag_ledger::step::DeviceFacts;
use widebag_model::Compute;
use widebag_prepare::Prepared;
use widebag_solver::{Pins, Plan, Problem, RowSample};

use super::report::{Budget, Report};
use crate::preflight::SAMPLED_BATCHES;
use crate::request::SolverFlags;

/// The budget: the flag, else `plan.budget`, else the device's memory minus the documented
/// reserve; an error naming the flag when none of those exists.
pub fn budget(
    flag: Option<&(String, u64)>,
    config: &Config,
    device_memory_bytes: Option<u64>,
) -> anyhow::Result<Budget> {
    if let Some((text, bytes)) = flag {
        return Ok(Budget {
            bytes: *bytes,
            source: format!("--budget {text}"),
        });
    }
    if let Some(text) = &config.plan.budget {
        let bytes = parse_bytes(text).map_err(|e| anyhow::anyhow!("plan.budget: {e}"))?;
        return Ok(Budget {
            bytes,
            source: format!("plan.budget = \"{text}\""),
        });
    }
    match (
        device_memory_bytes,
        widebag_solver::default_budget_bytes(device_memory_bytes),
    ) {
        (Some(memory), Some(bytes)) => Ok(Budget {
            bytes,
            source: format!(
                "device memory {} minus the reserve {}",
                format_bytes(memory),
                format_bytes(widebag_solver::reserve_bytes(memory))
            ),
        }),
        _ => anyhow::bail!(
            "no budget: this device does not report its memory (wgpu's WGSL path cannot read a \
             GPU's heap size); pass --budget (e.g. --budget 8GiB) or set plan.budget"
        ),
    }
}

/// The knobs pinned: `plan.pin`, `--pin` flags (already checked to be knobs), and knob keys
/// given with `--set`.
pub fn pins(config: &Config, overrides: &[String], flags: &[String]) -> Pins {
    let set_keys = overrides.iter().filter_map(|o| o.split('=').next());
    Pins::from_keys(
        config
            .plan
            .pin
            .iter()
            .map(String::as_str)
            .chain(flags.iter().map(String::as_str))
            .chain(set_keys.map(str::trim)),
    )
}

/// The device's facts: read from the opened device, or given (`--max-buffer`, `--alignment`) to
/// plan for a device this machine does not have; `model.max_buffer_mib` caps the buffer.
pub fn device_facts(
    opened: Option<DeviceFacts>,
    flags: &SolverFlags,
    config: &Config,
) -> DeviceFacts {
    let mut facts = opened.unwrap_or(DeviceFacts {
        max_buffer_bytes: u64::MAX,
        alignment_bytes: 256,
        host_threads: 0,
        bf16: false,
        host_memory: false,
    });
    if let Some(bytes) = flags.max_buffer_bytes {
        facts.max_buffer_bytes = bytes;
    }
    if let Some(a) = flags.alignment_bytes {
        facts.alignment_bytes = a;
    }
    let cap = config.model.max_buffer_mib << 20;
    if cap > 0 {
        facts.max_buffer_bytes = facts.max_buffer_bytes.min(cap);
    }
    facts
}

/// The batches the solver plans with, up to the largest batch it may choose.
pub fn sample(prepared: &Prepared) -> anyhow::Result<RowSample> {
    let c = &prepared.config;
    // A pinned batch may lie above plan.max_batch.
    let largest = c.plan.max_batch.max(c.train.batch_size);
    let dropout = widebag_data::InputDropout::new(c.model.input_dropout, c.train.seed);
    RowSample::collect(&prepared.batches, c.data.width, largest, SAMPLED_BATCHES)
        .map(|s| s.with_dropout(dropout))
        .context("sampling batches for the solver")
}

/// Caps `plan.max_batch` at a data file's row count (a batch cannot hold more rows).
pub fn cap_to_data(prepared: &mut Prepared) -> Option<String> {
    let rows = prepared.data.as_ref()?.rows;
    let c = &mut prepared.config;
    if c.plan.max_batch > rows {
        let note = format!(
            "plan.max_batch {} capped at the data's {rows} rows",
            c.plan.max_batch
        );
        c.plan.max_batch = rows;
        c.plan.min_batch = c.plan.min_batch.min(rows);
        return Some(note);
    }
    None
}

/// Whether the plan cuts a side into bands (head/tail input, the adaptive softmax): the run must
/// be prepared again, for the ids or classes renumbered by frequency and the bands resolved.
pub fn cuts_bands(plan: &Plan) -> bool {
    use widebag_solver::Remedy;
    plan.remedies
        .iter()
        .any(|r| matches!(r.remedy, Remedy::HeadTailInput | Remedy::AdaptiveOutput))
}

/// A plan and how long the solver took, in milliseconds.
pub struct Planned {
    pub report: Report,
    pub planned_ms: f64,
}

/// Solves timed per plan; the fastest is the planning time reported.
const SOLVES_TIMED: usize = 3;

/// Plans `prepared` (its `plan.max_batch` capped at the data's rows first) with the solver's
/// flags; `overrides` are the `--set` arguments, whose knob keys are pinned. `compute` is the
/// opened device, if any: its facts and memory are used unless the flags give them.
pub fn make_plan(
    prepared: &mut Prepared,
    flags: &SolverFlags,
    overrides: &[String],
    compute: Option<&Compute>,
) -> anyhow::Result<Planned> {
    if let Some(note) = cap_to_data(prepared) {
        eprintln!("widebag: {note}");
    }
    let config = &prepared.config;
    let pins = pins(config, overrides, &flags.pins);
    let budget = budget(
        flags.budget.as_ref(),
        config,
        compute.and_then(|c| c.memory_bytes),
    )?;
    let device = device_facts(compute.map(crate::preflight::device_facts), flags, config);
    let rows = sample(prepared)?;
    // `--calibration`'s model, else the opened device's built-in one (none for a device given
    // only by its facts, or one not measured yet: no time predicted).
    let calibration = flags
        .calibration
        .clone()
        .or_else(|| compute.and_then(|c| widebag_solver::Calibration::built_in(&c.adapter)));
    let problem = Problem {
        config: &prepared.config,
        bands: &prepared.model_bands,
        device,
        budget_bytes: budget.bytes,
        sample: &rows,
        pins,
        calibration: calibration.as_ref(),
        ranks: flags.ranks,
    };
    // Timed alone (sampling the data is not planning), the fastest of a few solves: the solve is
    // deterministic, and one solve's time beside other work (the test suite's threads) says more
    // about the machine's load than about the solver.
    let mut planned_ms = f64::INFINITY;
    let mut plan = None;
    for _ in 0..SOLVES_TIMED {
        let started = Instant::now();
        plan = Some(widebag_solver::solve(&problem)?);
        planned_ms = planned_ms.min(started.elapsed().as_secs_f64() * 1e3);
    }
    let plan = plan.expect("solved at least once");
    Ok(Planned {
        report: Report::new(plan, &budget, device, calibration),
        planned_ms,
    })
}
