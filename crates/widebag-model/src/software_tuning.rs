//! cubecl's autotuning on a software adapter. On lavapipe (or any CPU adapter) autotuning times
//! each kernel's variants on the CPU's emulation of a GPU, sample after sample, for every new
//! shape a run meets: minutes of a short run, and a choice that says nothing about a real GPU.
//! Before a software adapter opens, widebag asks cubecl for its least tuning (the `minimal`
//! level: coarser shape keys and a looser bar) and one sample per variant, unless
//! `CUBECL_AUTOTUNE_LEVEL` says otherwise; a hardware GPU keeps cubecl's own defaults.

use cubecl_runtime::config::autotune::AutotuneLevel;
use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};

/// The tuning asked for a software adapter: `config` (what cubecl would read from its files and
/// environment) at the least tuning, unless the level came from `level_from_env`.
fn least_tuning(mut config: CubeClRuntimeConfig, level_from_env: bool) -> CubeClRuntimeConfig {
    if !level_from_env {
        config.autotune.level = AutotuneLevel::Minimal;
        config.autotune.bench.min_samples = 1;
        config.autotune.bench.max_samples = 1;
    }
    config
}

/// Sets cubecl's configuration for a software adapter before the runtime reads it; nothing when
/// it has been read already (the process opened a device before).
pub(crate) fn tune_for_software_adapter() {
    let config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    let from_env = std::env::var_os("CUBECL_AUTOTUNE_LEVEL").is_some();
    CubeClRuntimeConfig::try_set(least_tuning(config, from_env));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_software_adapter_gets_the_least_tuning_unless_the_environment_names_a_level() {
        let least = least_tuning(CubeClRuntimeConfig::default(), false);
        assert!(matches!(least.autotune.level, AutotuneLevel::Minimal));
        assert_eq!(least.autotune.bench.samples(), (1, 1));
        let asked = least_tuning(CubeClRuntimeConfig::default(), true);
        assert!(matches!(asked.autotune.level, AutotuneLevel::Balanced));
        assert_eq!(asked.autotune.bench.samples(), (3, 10));
    }
}
