//! The device choice (`auto` takes a hardware GPU or flex, never a software adapter) and the
//! no-hang rule (a panic in any thread ends the process with exit code 1).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use widebag_model::device::{choose_hardware, list_adapters};

/// Runs the binary without `XDG_RUNTIME_DIR` (as on CI machines and in containers), failing the
/// test if it has not ended within `limit`.
fn run_bare(args: &[&str], envs: &[(&str, &str)], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_widebag"))
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs the binary");
    let started = Instant::now();
    while child.try_wait().expect("waits").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "widebag {args:?} still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("collects the output")
}

#[test]
fn a_panic_in_a_spawned_thread_ends_the_process_with_exit_1() {
    let out = run_bare(
        &["train"],
        &[("WIDEBAG_TEST_PANIC_IN_THREAD", "1")],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("forced-panic"), "{stderr}");
    assert!(stderr.contains("the run failed (exit code 1)"), "{stderr}");
}

#[test]
fn auto_takes_a_hardware_gpu_or_flex_saying_why_and_mesa_stays_quiet() {
    let adapters = list_adapters();
    let hardware = choose_hardware(adapters).is_some();
    let out = run_bare(
        &[
            "train",
            "--json",
            "--set",
            "train.steps=2",
            "--set",
            "data.width=2000",
            "--set",
            "train.batch_size=8",
        ],
        &[],
        Duration::from_secs(300),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "{stderr}");
    if hardware {
        assert_eq!(v["backend"], "wgpu", "{adapters:?}");
    } else {
        assert_eq!(v["backend"], "flex", "{adapters:?}");
        let why: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("using the flex CPU backend"))
            .collect();
        assert_eq!(why.len(), 1, "{stderr}");
        if !adapters.is_empty() {
            // This machine's software adapter is named, and how to ask for it.
            assert!(why[0].contains(&adapters[0].name), "{stderr}");
            assert!(why[0].contains("--device wgpu"), "{stderr}");
        }
    }
}

#[test]
fn asking_for_wgpu_opens_a_software_adapter_quietly() {
    if !crate::common::require(
        "asking_for_wgpu_opens_a_software_adapter_quietly",
        crate::common::Facility::Wgpu,
        !list_adapters().is_empty(),
        "no wgpu adapter is listed",
    ) {
        return;
    }
    let out = run_bare(
        &["plan", "--device", "wgpu", "--json"],
        &[],
        Duration::from_secs(300),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Only widebag's own lines: nothing from the driver that reads like an error.
    assert!(
        stderr.lines().all(|l| l.starts_with("widebag: ")),
        "{stderr}"
    );
}

#[test]
fn train_names_the_compiler_that_ran_wgsl_in_this_build_none_on_flex() {
    if !crate::common::require(
        "train_names_the_compiler_that_ran",
        crate::common::Facility::Wgpu,
        !list_adapters().is_empty(),
        "no wgpu adapter is listed",
    ) {
        return;
    }
    let small = [
        "--json",
        "--set",
        "train.steps=2",
        "--set",
        "data.width=500",
        "--set",
        "model.dim=8",
        "--set",
        "model.hidden=[8]",
    ];
    let run = |device: &str| {
        let args: Vec<&str> = ["train", "--device", device]
            .into_iter()
            .chain(small)
            .collect();
        let out = run_bare(&args, &[], Duration::from_secs(300));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("train --json")
    };
    // The tests' build has no `vulkan` feature: cubecl compiles WGSL, and says so; a build
    // with it names `spirv` where the adapter takes SPIR-V (a silent fallback shows as `wgsl`).
    let compiler = run("wgpu")["compiler"].clone();
    if cfg!(feature = "vulkan") {
        assert!(compiler == "spirv" || compiler == "wgsl", "{compiler}");
    } else {
        assert_eq!(compiler, "wgsl");
    }
    assert!(run("cpu").get("compiler").is_none());
}
