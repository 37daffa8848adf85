//! Opens the compute device. `auto` takes a hardware GPU (discrete, then integrated) through the
//! platform's native graphics API (Vulkan, Metal or DX12), and otherwise burn's flex CPU backend:
//! a software adapter (lavapipe, llvmpipe, SwiftShader) only when `--device wgpu` asks for one,
//! and wgpu's OpenGL backend never.
//!
//! The wgpu runtime can be initialised once per process, so the result is cached. The adapter's
//! largest storage-buffer binding is read here; every tensor widebag allocates stays within it.

use std::sync::OnceLock;

use burn::tensor::wgpu::{WgpuBackend, wgpu};
use burn::tensor::{Device, DeviceKind};
use widebag_config::{CpuKernels, DeviceChoice};

use crate::error::ModelError;

/// Which burn backend runs the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    Wgpu,
    Flex,
}

/// How the embedding bag sums a batch's entries into its rows (and autodiff sends their
/// gradients back to the unique rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BagSum {
    /// burn's `select` and `select_assign`: a unit per column, each walking every entry in turn
    /// (flex, and a CPU adapter, whose few threads it keeps busy without atomics).
    ByColumn,
    /// `gather` and `scatter` by element with `[entries, dim]` indices: a unit per value, the
    /// adds atomic where the adapter has f32 atomics (a GPU: the column walk left an H200
    /// nearly idle, 1.5–1.9 ms of the seed model's step).
    ByElement,
}

/// An opened device and what widebag needs to know about it.
#[derive(Clone, Debug)]
pub struct Compute {
    pub device: Device,
    pub backend: BackendKind,
    /// Adapter name, type and graphics API (or "flex (CPU)").
    pub adapter: String,
    /// Largest single buffer, in bytes (`u64::MAX` when the backend has no such limit).
    pub max_buffer_bytes: u64,
    /// Every allocation is rounded up to a multiple of this (cubecl's memory alignment: the
    /// larger of the adapter's uniform and storage buffer offset alignments).
    pub alignment_bytes: u64,
    /// The memory the device computes in, when it can be read: system memory for flex and for
    /// a CPU adapter (lavapipe's heap is system memory). `None` for a GPU on wgpu's WGSL path,
    /// which cannot read the Vulkan heap size (cubecl reads it only on its SPIR-V path).
    pub memory_bytes: Option<u64>,
    /// Set when `auto` fell back to the CPU: the reason, to print once.
    pub fallback_notice: Option<String>,
    /// The shader language cubecl compiles this wgpu device's kernels to (`"spirv"` where the
    /// build has burn's `vulkan` feature and the adapter takes it, else `"wgsl"`), read from
    /// the runtime's own name so that a fallback shows; `None` on flex.
    pub compiler: Option<String>,
    /// How the embedding bag sums its entries on this device.
    pub bag_sum: BagSum,
}

/// The compiler of `device`'s cubecl runtime (its name reads `…wgpu<spirv>…`, `wgpu<wgsl>` or
/// `wgpu<msl>`), `None` for a device without one.
pub fn compiler_of(device: &Device) -> Option<String> {
    use burn::backend::Backend;
    let name = <burn::backend::Dispatch as Backend>::name(device.as_dispatch());
    ["spirv", "wgsl", "msl"]
        .into_iter()
        .find(|c| name.contains(&format!("wgpu<{c}>")))
        .map(str::to_string)
}

/// `MemTotal` from `/proc/meminfo` (Linux), in bytes.
fn system_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl Compute {
    /// The flex CPU backend.
    pub fn flex() -> Self {
        Self {
            device: Device::flex(),
            backend: BackendKind::Flex,
            adapter: "flex (CPU)".to_string(),
            max_buffer_bytes: u64::MAX,
            alignment_bytes: 1,
            memory_bytes: system_memory_bytes(),
            fallback_notice: None,
            compiler: None,
            bag_sum: BagSum::ByColumn,
        }
    }

    /// The embedding bag summed by `bag_sum` (tests: each way on any adapter).
    pub fn with_bag_sum(mut self, bag_sum: BagSum) -> Self {
        self.bag_sum = bag_sum;
        self
    }

    /// Caps the buffer limit (for tests and for `model.max_buffer_mib`).
    pub fn with_buffer_cap(mut self, cap_bytes: u64) -> Self {
        if cap_bytes > 0 {
            self.max_buffer_bytes = self.max_buffer_bytes.min(cap_bytes);
        }
        self
    }
}

/// What `auto` needs to know of an adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterSummary {
    pub name: String,
    pub device_type: wgpu::DeviceType,
    pub backend: wgpu::Backend,
}

impl AdapterSummary {
    fn of(info: &wgpu::AdapterInfo) -> Self {
        Self {
            name: info.name.clone(),
            device_type: info.device_type,
            backend: info.backend,
        }
    }

    fn describe(&self) -> String {
        format!("{} ({:?}, {:?})", self.name, self.device_type, self.backend)
    }
}

/// The platform's native graphics API: the only one widebag opens (never OpenGL).
fn native_api() -> (wgpu::Backend, WgpuBackend) {
    if cfg!(target_vendor = "apple") {
        (wgpu::Backend::Metal, WgpuBackend::Metal)
    } else if cfg!(target_os = "windows") {
        (wgpu::Backend::Dx12, WgpuBackend::Dx12)
    } else {
        (wgpu::Backend::Vulkan, WgpuBackend::Vulkan)
    }
}

/// `auto`'s choice among `adapters` (in the graphics API's order): the first discrete GPU on
/// the native API, else the first integrated one, as the device kind burn selects it by (the
/// index counts adapters of that type on that API). `None` when there is no hardware GPU.
pub fn choose_hardware(adapters: &[AdapterSummary]) -> Option<(DeviceKind, &AdapterSummary)> {
    let (api, _) = native_api();
    let on_api = || adapters.iter().filter(move |a| a.backend == api);
    for (wanted, kind) in [
        (
            wgpu::DeviceType::DiscreteGpu,
            DeviceKind::DiscreteGpu as fn(usize) -> DeviceKind,
        ),
        (wgpu::DeviceType::IntegratedGpu, DeviceKind::IntegratedGpu),
    ] {
        if let Some(a) = on_api().find(|a| a.device_type == wanted) {
            // The first of its type on the API: index 0 in burn's per-type list.
            return Some((kind(0), a));
        }
    }
    None
}

/// Polls a future that wgpu resolves without waiting (adapter enumeration on native targets).
fn resolve_now<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// Every adapter of the native graphics API, without opening any; listed once per process (each
/// listing creates a Vulkan instance, and a grid opens the device once per point).
pub fn list_adapters() -> &'static [AdapterSummary] {
    static ADAPTERS: OnceLock<Vec<AdapterSummary>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let (api, _) = native_api();
        let listed = crate::caught::catch(|| {
            let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
                backends: api.into(),
                ..wgpu::InstanceDescriptor::new_without_display_handle()
            });
            resolve_now(instance.enumerate_adapters(api.into()))
                .iter()
                .map(|a| AdapterSummary::of(&a.get_info()))
                .collect()
        });
        listed.unwrap_or_default()
    })
}

/// An opened wgpu device: the device, the adapter's description, its largest buffer and its
/// memory alignment.
type WgpuOpen = Result<(Device, String, u64, u64, Option<u64>), String>;
static WGPU: OnceLock<WgpuOpen> = OnceLock::new();

/// Opens burn's wgpu runtime on the native graphics API: the adapter `kind` selects, or the
/// best one the API offers (a software adapter when it is the only one).
fn init_wgpu(kind: Option<DeviceKind>) -> WgpuOpen {
    let (_, api) = native_api();
    let attempt = crate::caught::catch(|| {
        let options = Device::wgpu_options().graphics_api(api);
        match kind {
            Some(k) => options.device_kind(k),
            None => options,
        }
        .init_with_setup()
    });
    match attempt {
        Ok(Ok((device, setup))) => {
            let info = setup.adapter.get_info();
            let limits = setup.device.limits();
            let max_buffer_bytes = limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size);
            let alignment_bytes = u64::from(
                limits
                    .min_uniform_buffer_offset_alignment
                    .max(limits.min_storage_buffer_offset_alignment),
            );
            let adapter = format!(
                "{} ({:?}, {:?}, {})",
                info.name, info.device_type, info.backend, info.driver_info
            );
            // A CPU adapter (lavapipe) computes in system memory.
            let memory_bytes = if format!("{:?}", info.device_type) == "Cpu" {
                system_memory_bytes()
            } else {
                None
            };
            Ok((
                device,
                adapter,
                max_buffer_bytes,
                alignment_bytes,
                memory_bytes,
            ))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("wgpu initialisation panicked".to_string()),
    }
}

/// Opens the wgpu device (once per process): `kind`, or the native API's best adapter.
fn open_wgpu_kind(kind: Option<DeviceKind>) -> Result<Compute, ModelError> {
    match WGPU.get_or_init(|| init_wgpu(kind)) {
        Ok((device, adapter, max_buffer_bytes, alignment_bytes, memory_bytes)) => Ok(Compute {
            device: device.clone(),
            backend: BackendKind::Wgpu,
            adapter: adapter.clone(),
            max_buffer_bytes: *max_buffer_bytes,
            alignment_bytes: *alignment_bytes,
            memory_bytes: *memory_bytes,
            fallback_notice: None,
            compiler: compiler_of(device),
            bag_sum: match adapter.contains("(Cpu,") {
                true => BagSum::ByColumn,
                false => BagSum::ByElement,
            },
        }),
        Err(e) => Err(ModelError::NoAdapter(e.clone())),
    }
}

/// Opens the wgpu device (`--device wgpu`): a hardware GPU when there is one, else whatever
/// adapter the native graphics API offers, software ones included (once per process).
pub fn open_wgpu() -> Result<Compute, ModelError> {
    open_wgpu_kind(choose_hardware(list_adapters()).map(|(kind, _)| kind))
}

/// Opens the device the choice asks for. `Auto` takes a hardware GPU, or else flex with a
/// notice saying why.
pub fn open_device(choice: DeviceChoice) -> Result<Compute, ModelError> {
    match choice {
        DeviceChoice::Cpu => Ok(Compute::flex()),
        DeviceChoice::Wgpu => open_wgpu(),
        DeviceChoice::Auto => {
            let adapters = list_adapters();
            let reason = match choose_hardware(adapters) {
                Some((kind, chosen)) => match open_wgpu_kind(Some(kind)) {
                    Ok(c) => return Ok(c),
                    Err(e) => format!("{} did not open ({e})", chosen.describe()),
                },
                None if adapters.is_empty() => "no GPU adapter".to_string(),
                None => {
                    let found: Vec<String> =
                        adapters.iter().map(AdapterSummary::describe).collect();
                    format!(
                        "no hardware GPU, only {} (`--device wgpu` uses it)",
                        found.join(", ")
                    )
                }
            };
            let mut c = Compute::flex();
            c.fallback_notice = Some(format!("{reason}: using the flex CPU backend"));
            Ok(c)
        }
    }
}

/// Whether `compute` runs the output layer's products on tensors that take f16 by default: not
/// flex (its default host kernels compute in f32).
pub fn runs_f16_products(compute: &Compute) -> bool {
    !is_flex(&compute.device) && compute.device.supports_dtype(burn::tensor::DType::F16)
}

/// Whether the device stores bf16 tensors (lavapipe does not).
pub fn stores_bf16(compute: &Compute) -> bool {
    compute.device.supports_dtype(burn::tensor::DType::BF16)
}

/// An error naming the key unless every half-precision table and state `config` places on the
/// device is a dtype the device supports, and the output layer's precision and kernels run there (lavapipe has f16, not bf16). Host-placed bands, and
/// every table under flex's host kernels, keep their rows in host memory: any precision.
pub fn check_precisions(
    config: &widebag_config::Config,
    compute: &Compute,
    n_bands: usize,
) -> Result<(), ModelError> {
    use widebag_config::{BandPlacement, CpuKernels, Precision};
    let host_kernels = is_flex(&compute.device) && config.train.cpu_kernels == CpuKernels::Host;
    let ib = &config.model.input_bands;
    let dtype = |p: Precision| match p {
        Precision::F32 => burn::tensor::DType::F32,
        Precision::F16 => burn::tensor::DType::F16,
        Precision::Bf16 => burn::tensor::DType::BF16,
    };
    for k in 0..n_bands.max(1) {
        if host_kernels || ib.placement_of(k) == BandPlacement::Host {
            continue;
        }
        for (key, p) in [
            ("model.input_bands.dtype", ib.dtype_of(k)),
            ("optim.state_dtype", config.optim.state_dtype),
        ] {
            if !compute.device.supports_dtype(dtype(p)) {
                return Err(ModelError::Unsupported {
                    key,
                    message: format!(
                        "{} for input band {k} on the device: {} does not support it \
                         (use f16 or f32 there, or place the band on the host)",
                        p.name(),
                        compute.adapter
                    ),
                });
            }
        }
    }
    check_output_precision(config, compute, host_kernels)?;
    check_tiled_logits(config, compute)
}

/// An error naming `model.logits` when it asks for the tiled logits where widebag's CubeCL
/// kernels do not run: flex (the config's own checks ask for `train.gpu_kernels = "cubecl"`).
fn check_tiled_logits(
    config: &widebag_config::Config,
    compute: &Compute,
) -> Result<(), ModelError> {
    if config.model.logits != widebag_config::Logits::Tiled || !is_flex(&compute.device) {
        return Ok(());
    }
    Err(ModelError::Unsupported {
        key: "model.logits",
        message: "\"tiled\" forms the logits in widebag's CubeCL kernels, on wgpu: flex has none \
                  (train on wgpu, or use \"recompute\" or \"keep\")"
            .to_string(),
    })
}

/// An error naming `model.output_precision` unless its half dtype runs where the output layer
/// runs: on burn's tensors (not flex's host kernels, which compute in f32), on a device that has
/// the dtype (lavapipe has f16, not bf16).
fn check_output_precision(
    config: &widebag_config::Config,
    compute: &Compute,
    host_kernels: bool,
) -> Result<(), ModelError> {
    use widebag_config::Precision;
    let key = "model.output_precision";
    let p = config.model.output_precision;
    let dtype = match p {
        Precision::F32 => return Ok(()),
        Precision::F16 => burn::tensor::DType::F16,
        Precision::Bf16 => burn::tensor::DType::BF16,
    };
    if host_kernels {
        return Err(ModelError::Unsupported {
            key,
            message: format!(
                "{} products run on burn's tensors: flex's host kernels compute the output layer \
                 in f32 (set train.cpu_kernels = \"tensor\", or train on wgpu)",
                p.name()
            ),
        });
    }
    if !compute.device.supports_dtype(dtype) {
        return Err(ModelError::Unsupported {
            key,
            message: format!(
                "{} on the device: {} does not support it (f16 or f32 there)",
                p.name(),
                compute.adapter
            ),
        });
    }
    Ok(())
}

/// Whether `device` is flex's (tensors whose buffers the host kernels can use in place).
pub fn is_flex(device: &Device) -> bool {
    *device == Device::flex()
}

/// Which code runs a model's output layer, dense optimizers and table updates: chosen once, from
/// the device and `train.cpu_kernels`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputePath {
    /// The host kernels of `crate::cpu` (flex with `train.cpu_kernels = "host"`).
    Host,
    /// burn's tensor operations (wgpu, or flex with `train.cpu_kernels = "tensor"`).
    Tensor,
}

impl ComputePath {
    /// Host kernels on flex unless `choice` asks for the tensor path; tensors elsewhere.
    pub fn choose(device: &Device, choice: CpuKernels) -> Self {
        match (is_flex(device), choice) {
            (true, CpuKernels::Host) => ComputePath::Host,
            _ => ComputePath::Tensor,
        }
    }
}

/// Threads the host kernels run on for `device`: rayon's pool on flex, 0 elsewhere (the ledger
/// prices one scratch block per thread).
pub fn host_threads(device: &Device) -> u64 {
    if is_flex(device) {
        rayon::current_num_threads() as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(
        name: &str,
        device_type: wgpu::DeviceType,
        backend: wgpu::Backend,
    ) -> AdapterSummary {
        AdapterSummary {
            name: name.into(),
            device_type,
            backend,
        }
    }

    #[test]
    fn auto_takes_a_discrete_gpu_then_an_integrated_one_never_software_or_gl() {
        use wgpu::DeviceType::{Cpu, DiscreteGpu, IntegratedGpu, Other, VirtualGpu};
        let (api, _) = native_api();
        let lavapipe = adapter("llvmpipe", Cpu, api);
        let igpu = adapter("igpu", IntegratedGpu, api);
        let dgpu = adapter("dgpu", DiscreteGpu, api);
        let gl = adapter("gl gpu", DiscreteGpu, wgpu::Backend::Gl);
        let pick = |list: &[AdapterSummary]| choose_hardware(list).map(|(_, a)| a.name.clone());
        assert_eq!(
            pick(&[lavapipe.clone(), igpu.clone(), dgpu.clone()]),
            Some("dgpu".into())
        );
        assert_eq!(pick(&[lavapipe.clone(), igpu.clone()]), Some("igpu".into()));
        assert_eq!(pick(std::slice::from_ref(&lavapipe)), None);
        assert_eq!(pick(&[gl, lavapipe.clone()]), None);
        let virt = adapter("virtio", VirtualGpu, api);
        let other = adapter("swiftshader", Other, api);
        assert_eq!(pick(&[virt, other]), None);
        assert_eq!(pick(&[]), None);
        let (kind, _) = choose_hardware(&[lavapipe, dgpu]).unwrap();
        assert_eq!(kind, DeviceKind::DiscreteGpu(0));
    }
}
