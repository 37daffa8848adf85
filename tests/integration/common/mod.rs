//! Helpers shared by the integration tests: what a test may need that a machine may lack
//! ([`require`]), device selection, running the binary, closeness and finite-difference checks.

#![allow(
    dead_code,
    reason = "`tests/wgpu_table_memory.rs` includes this module too and uses one helper"
)]

pub mod disk;

use widebag_model::{Compute, open_device};

/// The repository root (the root package's directory).
pub fn repo_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `path` relative to the repository root, with `/` separators.
pub fn repo_relative(path: &std::path::Path) -> String {
    let root = repo_root();
    let rel = path.strip_prefix(&root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Every f32 tensor of a safetensors file, by name: `(shape, values)`.
pub fn safetensors_f32(
    path: &std::path::Path,
) -> std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, t)| {
            let d = t
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (n, (t.shape().to_vec(), d))
        })
        .collect()
}

/// Runs the `widebag` binary with `args` and returns its output.
pub fn widebag(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_widebag"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("runs the binary")
}

/// The arguments of `widebag sweep` of `file` into `out` on flex.
pub fn sweep_args<'a>(file: &'a std::path::Path, out: &'a std::path::Path) -> [&'a str; 7] {
    [
        "sweep",
        "--config",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
    ]
}

/// Runs the binary with `args` and `env`, waits until `ready()` holds, then kills it with
/// SIGKILL (a failure if it ends on its own first, or never gets there within two minutes).
pub fn kill_when(args: &[&str], env: &[(&str, &str)], ready: impl Fn() -> bool) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_widebag"))
        .args(args)
        .envs(env.iter().copied())
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("runs the binary");
    let start = std::time::Instant::now();
    while !ready() {
        assert!(start.elapsed().as_secs() < 120, "the run never got there");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended ({status}) before it could be killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
}

/// Something a test needs that a machine may lack. Each has its variable,
/// `WIDEBAG_REQUIRE_<FACILITY>` ([`Facility::var`]), read by [`require`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Facility {
    /// Running as root (user id 0): to mount, and to become another user.
    Root,
    /// Mounting a small tmpfs (and remounting it read-only): [`disk::SmallDisk`].
    Tmpfs,
    /// util-linux's `setpriv`, to run the binary as another user.
    Setpriv,
    /// The real datasets in `../shared/data` beside the checkout ([`shared_data`]).
    Data,
    /// A wgpu adapter (lavapipe will do).
    Wgpu,
    /// A wgpu adapter that stores bf16 tensors (lavapipe has f16, not bf16).
    Bf16,
    /// A widebag built with `--features mpi`, named by `WIDEBAG_MPI_BIN`.
    Mpi,
    /// A CPU with a bf16 dot product (x86's AVX-512 BF16), which a screened ranking runs on.
    CpuBf16,
}

impl Facility {
    /// The variable that makes the facility required: `WIDEBAG_REQUIRE_ROOT`, `…_TMPFS`,
    /// `…_SETPRIV`, `…_DATA`, `…_WGPU`, `…_BF16`, `…_MPI`, `…_CPU_BF16`.
    pub fn var(self) -> &'static str {
        match self {
            Facility::Root => "WIDEBAG_REQUIRE_ROOT",
            Facility::Tmpfs => "WIDEBAG_REQUIRE_TMPFS",
            Facility::Setpriv => "WIDEBAG_REQUIRE_SETPRIV",
            Facility::Data => "WIDEBAG_REQUIRE_DATA",
            Facility::Wgpu => "WIDEBAG_REQUIRE_WGPU",
            Facility::Bf16 => "WIDEBAG_REQUIRE_BF16",
            Facility::Mpi => "WIDEBAG_REQUIRE_MPI",
            Facility::CpuBf16 => "WIDEBAG_REQUIRE_CPU_BF16",
        }
    }

    /// Whether the facility is required here: its variable is `1`.
    pub fn required(self) -> bool {
        std::env::var(self.var()).is_ok_and(|v| v == "1")
    }
}

/// The one convention for whatever a test may lack: `true` when `available`; otherwise the test
/// (or the part of it that needs `facility`) is skipped — a notice naming the test, the facility
/// and `why` on stderr, and `false` — unless `WIDEBAG_REQUIRE_<FACILITY>=1`, which makes a
/// missing facility a failure instead. `.ci/run` sets the variable of every facility CI
/// provides, so a CI machine that lost one fails rather than passing by skipping. There is no
/// catch-all variable: a machine is told what it has, facility by facility (CI's lavapipe has
/// no bf16, and its bf16 tests assert the refusal instead).
pub fn require(
    test: &str,
    facility: Facility,
    available: bool,
    why: impl std::fmt::Display,
) -> bool {
    if available {
        return true;
    }
    assert!(
        !facility.required(),
        "{test}: {}=1 but {facility:?} is missing here: {why}",
        facility.var()
    );
    eprintln!(
        "{test}: skipped, {facility:?} is missing here: {why} (set {}=1 to make this a failure)",
        facility.var()
    );
    false
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
}

/// The real datasets beside the checkout (`../shared/data`), when there (else the skip notice,
/// or a failure under `WIDEBAG_REQUIRE_DATA=1`).
pub fn shared_data(test: &str) -> Option<std::path::PathBuf> {
    let data = repo_root().join("../shared/data");
    let present = ["gowalla/train.txt", "gowalla/test.txt", "gcide/gcide.index"]
        .iter()
        .all(|f| data.join(f).is_file());
    require(
        test,
        Facility::Data,
        present,
        format_args!("{} does not hold gowalla/ and gcide/", data.display()),
    )
    .then_some(data)
}

/// The wgpu device, or `None` (test skipped with a notice) when no adapter exists; a failure
/// under `WIDEBAG_REQUIRE_WGPU=1` (set by `.ci/run`), through [`require`].
pub fn wgpu_or_skip(test: &str) -> Option<Compute> {
    match open_device(widebag_config::DeviceChoice::Wgpu) {
        Ok(c) => Some(c),
        Err(e) => {
            require(
                test,
                Facility::Wgpu,
                false,
                format_args!("no wgpu adapter ({e})"),
            );
            None
        }
    }
}

/// Whether the wgpu tests run: an adapter opens. Otherwise a skip notice, or a failure under
/// `WIDEBAG_REQUIRE_WGPU=1`, through [`require`].
pub fn has_wgpu(test: &str) -> bool {
    match open_device(widebag_config::DeviceChoice::Wgpu) {
        Ok(_) => true,
        Err(e) => require(
            test,
            Facility::Wgpu,
            false,
            format_args!("no wgpu adapter ({e})"),
        ),
    }
}

/// The one JSON value a successful run printed on stdout.
pub fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON value")
}

/// The per-step `losses` of a run summary (`train --json`).
pub fn losses(v: &serde_json::Value) -> Vec<f64> {
    v["losses"]
        .as_array()
        .expect("a losses list")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

pub fn flex() -> Compute {
    Compute::flex()
}

/// `|a - b| <= atol + rtol * |b|` elementwise, with the first offender in the message.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= atol + rtol * b.abs(),
            "{what}[{i}]: got {a}, want {b} (|diff| {})",
            (a - b).abs()
        );
    }
}

/// Central finite difference of `model`'s loss on `batch` in table entry `(id, col)`; the entry
/// is restored.
pub fn fd_table(
    model: &mut widebag_model::SparseModel,
    batch: &widebag_csr::CsrBatch,
    (id, col): (u32, usize),
    eps: f32,
) -> f32 {
    model.perturb_table(id, col, eps).unwrap();
    let up = model.loss(batch).unwrap();
    model.perturb_table(id, col, -2.0 * eps).unwrap();
    let down = model.loss(batch).unwrap();
    model.perturb_table(id, col, eps).unwrap();
    (up - down) / (2.0 * eps)
}

/// Central finite difference of `model`'s loss on `batch` in element `index` of the dense
/// parameter `name`; the element is restored.
pub fn fd_dense(
    model: &mut widebag_model::SparseModel,
    batch: &widebag_csr::CsrBatch,
    (name, index): (&str, usize),
    eps: f32,
) -> f32 {
    model.perturb_dense(name, index, eps).unwrap();
    let up = model.loss(batch).unwrap();
    model.perturb_dense(name, index, -2.0 * eps).unwrap();
    let down = model.loss(batch).unwrap();
    model.perturb_dense(name, index, eps).unwrap();
    (up - down) / (2.0 * eps)
}

/// The bar a gradient meets against its finite difference: `|fd − grad| ≤ 2e-3 + 2e-2·|grad|`.
pub fn assert_fd(what: &str, fd: f32, grad: f32) {
    assert!(
        (fd - grad).abs() <= 2e-3 + 2e-2 * grad.abs(),
        "{what}: fd {fd}, grad {grad}"
    );
}

/// The sparse layout of `config` (explicit cutoffs) on `compute`.
pub fn wide(config: &widebag_config::Config, compute: &Compute) -> widebag_model::SparseModel {
    let bands = widebag_config::bands::ModelBands::resolve(config).unwrap();
    widebag_model::SparseModel::new(config, &bands, compute).unwrap()
}

/// `config.train.batch_size` synthetic rows of `config` from row `first_row`.
pub fn batch(config: &widebag_config::Config, first_row: u64) -> widebag_csr::CsrBatch {
    widebag_data::SyntheticStream::new(widebag_prepare::synthetic_spec(config))
        .unwrap()
        .batch_at(first_row, config.train.batch_size)
        .unwrap()
}

/// Every gradient of a batch, flattened: the loss, the rows, then each dense parameter.
pub fn flat_grads(g: widebag_model::step::Grads) -> Vec<f32> {
    let mut out = vec![g.loss];
    out.extend(g.rows_to_vec().unwrap());
    for t in g.dense().into_iter() {
        out.extend(widebag_model::tensors::to_vec(t.clone()).unwrap());
    }
    out
}
