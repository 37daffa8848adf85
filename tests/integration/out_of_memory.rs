//! Memory refused at run time, after the ledger's check passed (a budget larger than the device
//! really has): widebag names the step and stage under way and the ledger's prediction instead
//! of leaving a panic from inside burn.

use std::process::Command;

/// The host refuses an allocation (an address-space cap under what the ledger said the machine
/// has): the report comes before Rust's abort, which stable Rust cannot turn into an error.
#[test]
fn a_refused_host_allocation_names_where_and_the_ledger() {
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 2500000; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_widebag"))
        .args(["train", "--device", "cpu"])
        .args(["--set", "data.width=2000000", "--set", "model.dim=256"])
        .args(["--set", "train.steps=3"])
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{e}");
    assert!(
        e.contains("error: out of host memory: an allocation of")
            && e.contains("refused during set-up (before step 1)")
            && e.contains("the ledger predicted a peak of 5.73 GiB"),
        "{e}"
    );
}

/// The device refuses an allocation mid-run (simulated at step 3: burn reports wgpu's
/// out-of-memory error as a panic): a plain error with exit code 1, no backtrace from burn.
#[test]
fn a_refused_device_allocation_is_a_plain_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_widebag"))
        .args(["train", "--device", "cpu", "--set", "train.steps=5"])
        .env("WIDEBAG_FAULT_DEVICE_OOM_AT_STEP", "3")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains("error: the device refused an allocation during step 3, stage `ids`")
            && e.contains("the ledger predicted a peak of")
            && !e.contains("panicked"),
        "{e}"
    );
}
