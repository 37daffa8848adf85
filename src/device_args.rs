//! The device flag (`--device auto|wgpu|cpu`), defined once and flattened into every command
//! that opens a device.

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, ValueEnum)]
pub enum DeviceArg {
    Auto,
    Wgpu,
    Cpu,
}

/// The device flag, shared by every command that opens a device.
#[derive(Args, Clone, Copy)]
pub struct DeviceArgs {
    /// Device: auto (the default: a hardware GPU through wgpu, else burn's flex CPU backend),
    /// wgpu (a software adapter when there is no GPU), or cpu (flex).
    #[arg(long, value_enum)]
    pub device: Option<DeviceArg>,
}
