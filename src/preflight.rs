//! The checks before a run, shared by train, explain, plan, sweep and bench: open the device, read
//! its facts, predict the step's ledger, and refuse a step with a tensor over the device's
//! largest buffer or a peak over the memory it computes in.

use anyhow::Context;
use widebag_collective::partition::local_rows;
use widebag_config::DeviceChoice;
use widebag_config::units::format_bytes;
use widebag_ledger::host_side::HostSide;
use widebag_ledger::step::{BatchFacts, DeviceFacts, Sampling, StepSpec};
use widebag_ledger::{Ledger, Placement};
use widebag_model::{Compute, open_device};
use widebag_prepare::Prepared;

use crate::failure::Failure;

/// Batches sampled for the ledger's batch statistics.
pub const SAMPLED_BATCHES: usize = 8;

/// Opens the device, printing the fallback notice when `auto` fell back to the CPU.
pub fn open_compute(device: DeviceChoice) -> Result<Compute, Failure> {
    open_with(device, open_device)
}

/// Opens the device with `open`, keeping what opening it added to the process's memory (the
/// host side's baseline), and prints the fallback notice when `auto` fell back to the CPU.
fn open_with(
    device: DeviceChoice,
    open: impl FnOnce(DeviceChoice) -> Result<Compute, widebag_model::ModelError>,
) -> Result<Compute, Failure> {
    let compute = crate::host_memory::opening(|| open(device))
        .context("opening the device")
        .map_err(Failure::run)?;
    if let Some(notice) = &compute.fallback_notice {
        eprintln!("widebag: {notice}");
    }
    Ok(compute)
}

/// Opens the device for a measured run; flex runs small products on every thread first, so that
/// the state it keeps once it has run (its threads' matrix-product scratch) is in the process's
/// baseline, not in the steps' readings. Only measured runs pay for it (about 40 ms and 13 MB on
/// this project's 2-core machine).
fn open_primed(device: DeviceChoice) -> Result<Compute, widebag_model::ModelError> {
    let compute = open_device(device)?;
    if compute.backend == widebag_model::BackendKind::Flex {
        widebag_model::probe::prime_backend(&compute.device);
    }
    Ok(compute)
}

/// Opens a device whose allocator can be read, for the commands that measure memory: `auto` asks
/// for wgpu (a software adapter included: `auto` alone would take flex on a machine without a
/// GPU, which has no allocator counters), and falls back as `auto` does when wgpu cannot open;
/// flex is primed ([`open_primed`]).
pub fn open_measurable(device: DeviceChoice) -> Result<Compute, Failure> {
    if device == DeviceChoice::Auto
        && let Ok(compute) = crate::host_memory::opening(|| open_device(DeviceChoice::Wgpu))
    {
        return Ok(compute);
    }
    open_with(device, open_primed)
}

/// What the device tells the ledger.
pub fn device_facts(compute: &Compute) -> DeviceFacts {
    DeviceFacts {
        max_buffer_bytes: compute.max_buffer_bytes,
        alignment_bytes: compute.alignment_bytes,
        host_threads: widebag_model::device::host_threads(&compute.device),
        bf16: widebag_model::device::stores_bf16(compute),
        host_memory: compute.backend == widebag_model::BackendKind::Flex,
    }
}

/// The step of `prepared`'s config on a device with these facts, and its ledger: batch facts
/// are the largest among the first [`SAMPLED_BATCHES`] batches (the bound a plan keeps to).
pub fn predict(prepared: &Prepared, device: DeviceFacts) -> anyhow::Result<(StepSpec, Ledger)> {
    predict_batches(prepared, device, 0, SAMPLED_BATCHES)
}

/// [`predict`] from batches `skip .. skip + n` of the run: what `explain --measure` compares
/// with the steps it reads (all but the warm-up).
pub fn predict_batches(
    prepared: &Prepared,
    device: DeviceFacts,
    skip: usize,
    n: usize,
) -> anyhow::Result<(StepSpec, Ledger)> {
    let config = &prepared.config;
    let bs = config.train.batch_size;
    let mut source = prepared.batches.clone();
    for _ in 0..skip {
        source
            .next_batch(bs)
            .context("sampling batches for the ledger")?;
    }
    let sampling = Sampling::of_run(config, n).after(skip);
    let batch =
        BatchFacts::sample(&source, &sampling).context("sampling batches for the ledger")?;
    let mut spec = StepSpec::from_config(config, &prepared.model_bands, device, batch);
    spec.sample_bands(&source, &sampling)
        .context("sampling batches for the ledger")?;
    let ledger = widebag_ledger::step::ledger(&spec);
    Ok((spec, ledger))
}

/// The host side of `spec`'s step (device ledger `ledger`) on `prepared`'s data, with the
/// process's measured baseline; `batches_in_flight` is the run's (a measured run reads all of
/// its batches ahead).
pub fn host_side(
    prepared: &Prepared,
    spec: &StepSpec,
    ledger: &Ledger,
    batches_in_flight: u64,
) -> HostSide {
    let mut facts = prepared.host_facts(crate::host_memory::baseline_bytes(), batches_in_flight);
    let itemized = facts.rows_bytes + facts.eval_bytes + facts.order_bytes + facts.maps_bytes;
    facts.retained_bytes = crate::host_memory::reading_retained_bytes(itemized);
    widebag_ledger::host_side::host_side(spec, ledger, facts)
}

/// Refuses a step (or its evaluation pass) whose largest allocation exceeds the device's buffer
/// limit, with the numbers.
pub fn check_fits(ledger: &Ledger, spec: &StepSpec) -> anyhow::Result<()> {
    let eval = widebag_ledger::step::eval_peak(spec, ledger, 20);
    if eval.largest_bytes > spec.device.max_buffer_bytes {
        anyhow::bail!(
            "does not fit: evaluation needs one {} buffer, over the device's largest buffer of {} \
             (an evaluation pass peaks at {})",
            format_bytes(eval.largest_bytes),
            format_bytes(spec.device.max_buffer_bytes),
            format_bytes(eval.peak_bytes)
        );
    }
    if let Some((name, bytes)) = ledger.largest_allocation()
        && bytes > spec.device.max_buffer_bytes
    {
        anyhow::bail!(
            "does not fit: `{name}` needs one {} buffer, over the device's largest buffer of {} \
             (the step's predicted peak is {})",
            format_bytes(bytes),
            format_bytes(spec.device.max_buffer_bytes),
            format_bytes(ledger.peak(Placement::Device).bytes)
        );
    }
    Ok(())
}

/// Refuses a step whose predicted peak exceeds the memory the device computes in, where that is
/// known (system memory for flex and for a CPU adapter: there the device's tensors and the host
/// side (`host`: the data, the batches, the host tier, the process) share it, so both count).
/// Names the ledger's peak, where it falls and its largest parts.
pub fn check_memory(ledger: &Ledger, host: &HostSide, compute: &Compute) -> anyhow::Result<()> {
    check_memory_shared(ledger, host, compute, 1)
}

/// [`check_memory`] for `sharing` ranks of a multi-process run that share this machine's memory,
/// each holding about what `ledger` and `host` (rank 0's, the largest) predict.
pub fn check_memory_shared(
    ledger: &Ledger,
    host: &HostSide,
    compute: &Compute,
    sharing: usize,
) -> anyhow::Result<()> {
    let Some(memory) = compute.memory_bytes else {
        return Ok(());
    };
    let device = ledger.peak(Placement::Device);
    let host = host.host_peak_bytes();
    let one = device.bytes.saturating_add(host);
    let need = one.saturating_mul(sharing.max(1) as u64);
    if need <= memory {
        return Ok(());
    }
    if sharing > 1 {
        anyhow::bail!(
            "does not fit: {sharing} ranks on this machine each need about {} (rank 0's ledger: {} \
             on the device at `{}`, {} on the host side), {} in all, more than the {} of memory {} \
             computes in; `widebag plan --ranks N --budget` finds a layout that fits",
            format_bytes(one),
            format_bytes(device.bytes),
            device.point.name(),
            format_bytes(host),
            format_bytes(need),
            format_bytes(memory),
            compute.adapter
        );
    }
    let mut parts: Vec<_> = ledger
        .categories_at(Placement::Device, device.point)
        .into_iter()
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    let largest: Vec<String> = parts
        .iter()
        .take(3)
        .map(|(c, b)| format!("{} {}", c.name(), format_bytes(*b)))
        .collect();
    anyhow::bail!(
        "does not fit: the ledger predicts a peak of {} ({} on the device at `{}`, {} on the host \
         side), more than the {} of memory {} computes in (largest: {}); `widebag plan --budget` \
         finds a layout that fits",
        format_bytes(need),
        format_bytes(device.bytes),
        device.point.name(),
        format_bytes(host),
        format_bytes(memory),
        compute.adapter,
        largest.join(", ")
    )
}

/// Rank `rank` of `size`'s step and ledger over batches `skip .. steps` of the run (`skip` 1
/// for `explain --measure`, which drops a warm-up step; 0 before training): the global batches'
/// largest statistics and its rows' of each.
pub fn predict_rank(
    prepared: &Prepared,
    device: DeviceFacts,
    rank: usize,
    size: usize,
    skip: usize,
) -> anyhow::Result<(StepSpec, Ledger)> {
    let config = &prepared.config;
    let (bs, steps) = (config.train.batch_size, config.train.steps);
    let failed = |e: widebag_data::DataError| {
        anyhow::Error::from(e).context("sampling batches for the ledger")
    };
    let mut source = prepared.batches.clone();
    for _ in 0..skip {
        source.next_batch(bs).map_err(failed)?;
    }
    let (mut global, mut local) = (BatchFacts::default(), BatchFacts::default());
    let n = steps.saturating_sub(skip).clamp(1, SAMPLED_BATCHES);
    let sampling = Sampling::of_run(config, n).after(skip);
    // Each rank's rows of a global batch are dropped out as the whole batch is.
    sampling
        .each(&source, |b| {
            global.fold(&b);
            local.fold(&b.row_range(local_rows(b.n_rows(), rank, size)));
        })
        .map_err(failed)?;
    let mut spec = StepSpec::from_config(config, &prepared.model_bands, device, global);
    spec.sample_bands(&source, &sampling).map_err(failed)?;
    let spec = spec.on_rank(rank as u64, size as u64, local);
    let ledger = widebag_ledger::step::ledger(&spec);
    Ok((spec, ledger))
}
