//! Opens the compute device: wgpu (WGSL path) by default, burn's flex CPU backend as fallback.
//!
//! The wgpu runtime can be initialised once per process, so the result is cached. The adapter's
//! largest storage-buffer binding is read here; every tensor widebag allocates stays within it.

use std::sync::OnceLock;

use burn::tensor::Device;
use widebag_config::DeviceChoice;

use crate::ModelError;

/// Which burn backend runs the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    Wgpu,
    Flex,
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
        }
    }

    /// Caps the buffer limit (for tests and for `model.max_buffer_mib`).
    pub fn with_buffer_cap(mut self, cap_bytes: u64) -> Self {
        if cap_bytes > 0 {
            self.max_buffer_bytes = self.max_buffer_bytes.min(cap_bytes);
        }
        self
    }
}

/// An opened wgpu device: the device, the adapter's description, its largest buffer and its
/// memory alignment.
type WgpuOpen = Result<(Device, String, u64, u64, Option<u64>), String>;
static WGPU: OnceLock<WgpuOpen> = OnceLock::new();

fn init_wgpu() -> WgpuOpen {
    let attempt = std::panic::catch_unwind(|| Device::wgpu_options().init_with_setup());
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

/// Opens the wgpu device (once per process).
pub fn open_wgpu() -> Result<Compute, ModelError> {
    match WGPU.get_or_init(init_wgpu) {
        Ok((device, adapter, max_buffer_bytes, alignment_bytes, memory_bytes)) => Ok(Compute {
            device: device.clone(),
            backend: BackendKind::Wgpu,
            adapter: adapter.clone(),
            max_buffer_bytes: *max_buffer_bytes,
            alignment_bytes: *alignment_bytes,
            memory_bytes: *memory_bytes,
            fallback_notice: None,
        }),
        Err(e) => Err(ModelError::NoAdapter(e.clone())),
    }
}

/// Opens the device the choice asks for. `Auto` falls back to flex with a notice.
pub fn open_device(choice: DeviceChoice) -> Result<Compute, ModelError> {
    match choice {
        DeviceChoice::Cpu => Ok(Compute::flex()),
        DeviceChoice::Wgpu => open_wgpu(),
        DeviceChoice::Auto => match open_wgpu() {
            Ok(c) => Ok(c),
            Err(e) => {
                let mut c = Compute::flex();
                c.fallback_notice = Some(format!(
                    "no wgpu adapter ({e}); falling back to the flex CPU backend"
                ));
                Ok(c)
            }
        },
    }
}
