//! The accuracy grids on wgpu: the ledger's (`explain --grid small`: every point's predicted peak
//! within 3% of the allocator's) and the solver's (`plan --grid small`: the plan ≥ 97% of the
//! searched batch, under the budget, planned in under 50 ms). They are the two longest tests from
//! empty kernel caches, and libtest starts tests in name order: in a module named to sort first
//! they start at once instead of one of them running alone at the end (a cold CI run on 2da842a:
//! 366 and 429 s side by side, the integration binary 996 s against 1,002 s with them last).

use crate::common;

use common::{has_wgpu, json, widebag};

#[test]
fn ledger_grid_meets_the_bar_on_wgpu() {
    if !has_wgpu("ledger_grid") {
        return;
    }
    // The table (grid.md) and the rows (grid.json) are kept under the target directory.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ledger-grid");
    let dir_arg = dir.to_string_lossy().to_string();
    let out = widebag(&[
        "explain", "--grid", "small", "--device", "wgpu", "--steps", "2", "--json", "--out",
        &dir_arg,
    ]);
    let rows = json(&out);
    let rows = rows.as_array().unwrap();
    let measured: Vec<_> = rows
        .iter()
        .filter(|r| r["measured_peak_bytes"].as_u64().is_some())
        .collect();
    assert!(measured.len() >= 24, "{} points measured", measured.len());
    for layout in ["sparse", "dense"] {
        assert!(measured.iter().any(|r| r["layout"] == layout));
    }
    for r in &measured {
        assert!(r["error_pct"].as_f64().unwrap() <= 3.0, "{r}");
    }
    assert!(dir.join("grid.md").is_file() && dir.join("grid.json").is_file());
}

#[test]
fn plan_grid_meets_the_bars_on_wgpu() {
    if !has_wgpu("plan_grid") {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-grid");
    let dir_arg = dir.to_string_lossy().to_string();
    let out = widebag(&[
        "plan", "--grid", "small", "--device", "wgpu", "--json", "--out", &dir_arg,
    ]);
    let rows = json(&out);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 10, "5 budgets × 2 models");
    for r in rows {
        assert!(
            r["plan_vs_search_pct"].as_f64().unwrap() >= 97.0,
            "plan below 97% of search: {r}"
        );
        assert!(r["under_budget"].as_bool().unwrap(), "over budget: {r}");
        assert!(r["planned_ms"].as_f64().unwrap() < 50.0, "slow: {r}");
        assert!(r["pass"].as_bool().unwrap(), "{r}");
    }
    assert!(dir.join("plan-grid.md").is_file());
}
