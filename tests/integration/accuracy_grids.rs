//! The accuracy grids on wgpu.
//! - The ledger's (`explain --grid small`): every point's predicted peak within 1 % of the
//!   allocator's. The claim is 0.44–0.63 % worst on this grid over the runs recorded (0.13 % on
//!   the full one), so the bar is the claim with a margin, not the 3 % `explain --measure` holds
//!   for any model.
//! - The solver's (`plan --grid small`): every plan below `plan.max_batch`, ≥ 97 % of the searched
//!   batch, measured under the budget, planned in under 500 ms of wall time, beside CI's other work
//!   (the sparse rows count the distinct ids of 8 batches of up to 8,192 rows).
//!
//! They are the two longest tests from empty kernel caches, and libtest starts tests in name
//! order: in a module named to sort first they start at once instead of one of them running alone
//! at the end (a cold CI run on 2da842a: 366 and 429 s side by side, the integration binary 996 s
//! against 1,002 s with them last).

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
    // The worst points are the smallest (width 1,000, batch 32: 805-863 KB), where a few KiB the
    // ledger does not itemize move with the run: 0.44-0.47 % alone, 0.63 % (dense, 2.7 KiB more
    // than alone) in a CI run beside the other tests. A tensor of 8 KiB missing from a small
    // step's pricing crosses 1 %; 3 % (the bar `explain --measure` holds for any model) would
    // let 25 KiB through.
    const GRID_BAR_PCT: f64 = 1.0;
    for r in &measured {
        assert!(r["error_pct"].as_f64().unwrap() <= GRID_BAR_PCT, "{r}");
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
        // At the cap the plan and the search both stop there: 100% by construction. Every
        // budget of the grid binds below it (a sparse row at 1,024 rows once tested nothing).
        let (batch, cap) = (r["batch_size"].as_u64(), r["max_batch"].as_u64());
        let (batch, cap) = (batch.expect("a batch"), cap.expect("a cap"));
        assert!(
            batch < cap,
            "the plan stops at the cap, not the budget: {r}"
        );
        assert!(
            r["plan_vs_search_pct"].as_f64().unwrap() >= 97.0,
            "plan below 97% of search: {r}"
        );
        assert!(r["under_budget"].as_bool().unwrap(), "over budget: {r}");
        assert!(r["planned_ms"].as_f64().unwrap() < 500.0, "slow: {r}");
        assert!(r["pass"].as_bool().unwrap(), "{r}");
    }
    assert!(
        rows.iter()
            .any(|r| r["model"].as_str().unwrap().starts_with("sparse")),
        "a sparse model's rows"
    );
    assert!(dir.join("plan-grid.md").is_file());
}
