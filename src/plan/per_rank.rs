//! `plan --ranks N`: what each rank of the chosen plan holds (its rows of the batch, its block
//! of every table and of the classes, its predicted peak by category, the communication buffers
//! among them) and the bytes each step sends per collective, for a terminal.

use std::fmt::Write;

use widebag_config::units::format_bytes;
use widebag_solver::RankPlan;

/// The categories shown per rank, in order (the rest are summed as "other").
const SHOWN: [(&str, &str); 4] = [
    ("parameters", "params"),
    ("optimizer_state", "state"),
    ("communication", "comm"),
    ("activations", "activ."),
];

/// The per-rank table and rank 0's bytes per step; nothing for one process.
pub fn write_ranks(out: &mut String, ranks: &[RankPlan]) -> std::fmt::Result {
    let Some(first) = ranks.first() else {
        return Ok(());
    };
    writeln!(
        out,
        "  ranks       {} (the budget is per rank; the batch is the global one)",
        ranks.len()
    )?;
    write!(
        out,
        "    {:>4}  {:>6}  {:>18}  {:>9}  {:>10}",
        "rank", "rows", "table rows", "classes", "peak"
    )?;
    for (_, short) in SHOWN {
        write!(out, "  {short:>10}")?;
    }
    writeln!(out, "  {:>10}", "other")?;
    for r in ranks {
        let rows: Vec<String> = r.table_rows.iter().map(usize::to_string).collect();
        write!(
            out,
            "    {:>4}  {:>6}  {:>18}  {:>9}  {:>10}",
            r.rank,
            r.batch_rows,
            rows.join("+"),
            r.classes,
            format_bytes(r.predicted_peak_bytes)
        )?;
        let mut shown = 0;
        for (name, _) in SHOWN {
            let b = r.categories.get(name).copied().unwrap_or(0);
            shown += b;
            write!(out, "  {:>10}", format_bytes(b))?;
        }
        let other = r.categories.values().sum::<u64>().saturating_sub(shown);
        writeln!(out, "  {:>10}", format_bytes(other))?;
    }
    writeln!(
        out,
        "  rank 0 sends per step ({} in all; ≤: an upper bound from the sampled batches):",
        format_bytes(first.traffic.iter().map(|t| t.bytes).sum())
    )?;
    for t in &first.traffic {
        let bound = if t.exact { " " } else { "≤" };
        writeln!(
            out,
            "    {bound}{:>10}  {}",
            format_bytes(t.bytes),
            t.collective
        )?;
    }
    Ok(())
}
