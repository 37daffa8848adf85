//! The burn-free invariant, checked with `cargo metadata`: the pure crates (CSR batches, data,
//! config, run preparation, ledger, solver, evaluation metrics, checkpoint format, collectives)
//! must not reach any burn crate through normal dependencies, and the config crate does not reach
//! the data crate.

use std::collections::{HashMap, HashSet};
use std::process::Command;

const PURE: &[&str] = &[
    "widebag-csr",
    "widebag-data",
    "widebag-config",
    "widebag-prepare",
    "widebag-ledger",
    "widebag-solver",
    "widebag-eval",
    "widebag-checkpoint",
    "widebag-collective",
    "widebag-kinds",
];

/// Crate pairs where the first must not reach the second: the config crate is schema, loading,
/// validation and units; reading data is the data crate's (run preparation joins the two).
const APART: &[(&str, &str)] = &[("widebag-config", "widebag-data")];

#[test]
fn pure_crates_do_not_depend_on_burn() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    // Normal (non-dev, non-build) edges of the resolved graph.
    let mut edges: HashMap<&str, Vec<&str>> = HashMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let id = node["id"].as_str().unwrap();
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null())
            })
            .map(|d| d["pkg"].as_str().unwrap())
            .collect();
        edges.insert(id, deps);
    }
    let reaches = |from: &str| -> HashSet<&str> {
        let root = names
            .iter()
            .find(|(_, n)| **n == from)
            .map(|(id, _)| *id)
            .unwrap_or_else(|| panic!("{from} is a workspace member"));
        let (mut seen, mut stack) = (HashSet::new(), vec![root]);
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                stack.extend(edges.get(id).into_iter().flatten());
            }
        }
        seen.into_iter().map(|id| names[id]).collect()
    };
    for (from, not) in APART {
        assert!(
            !reaches(from).contains(not),
            "{from} depends on {not} (cargo tree -p {from})"
        );
    }
    for pure in PURE {
        let root = names
            .iter()
            .find(|(_, n)| *n == pure)
            .map(|(id, _)| *id)
            .unwrap_or_else(|| panic!("{pure} is a workspace member"));
        let mut seen = HashSet::new();
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let name = names[id];
            assert!(
                !name.starts_with("burn")
                    && !name.starts_with("cubecl")
                    && !name.starts_with("wgpu"),
                "{pure} depends on {name}"
            );
            stack.extend(edges.get(id).into_iter().flatten());
        }
        assert!(seen.len() > 1, "{pure} has dependencies to walk");
    }
}
