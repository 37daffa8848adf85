//! `plan --ranks N` (issue 18's per-rank planning): every rank's block of each table and of the
//! classes covers the model once, the per-rank peak counts the exchanges' buffers, and the bytes
//! each step sends per collective are what `train --ranks N` counts: exactly for the collectives
//! fixed by the shapes, within the sampled bound for the ids and rows.

use crate::common::{json, widebag};

const SETS: [&str; 10] = [
    "data.width=3000",
    "data.n_classes=900",
    "data.nnz=12.0",
    "model.dim=16",
    "model.hidden=[24]",
    "train.batch_size=40",
    "train.steps=6",
    "optim.table=\"adam\"",
    "optim.dense=\"adam\"",
    "train.device=\"cpu\"",
];

fn args<'a>(cmd: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![cmd];
    for s in &SETS {
        a.extend(["--set", s]);
    }
    a.extend_from_slice(extra);
    a
}

#[test]
fn plan_ranks_matches_what_train_ranks_sends() {
    for ranks in ["2", "3"] {
        let plan = widebag(&args(
            "plan",
            &[
                "--ranks",
                ranks,
                "--budget",
                "64MiB",
                "--pin",
                "train.batch_size",
                "--json",
            ],
        ));
        assert!(
            plan.status.success(),
            "{}",
            String::from_utf8_lossy(&plan.stderr)
        );
        let plan = json(&plan);
        let per_rank = plan["plan"]["ranks"].as_array().expect("per-rank plans");
        let n: usize = ranks.parse().unwrap();
        assert_eq!(per_rank.len(), n);
        let sum = |key: &str| -> u64 {
            per_rank
                .iter()
                .map(|r| match &r[key] {
                    serde_json::Value::Array(a) => a.iter().map(|x| x.as_u64().unwrap()).sum(),
                    v => v.as_u64().unwrap(),
                })
                .sum()
        };
        assert_eq!(sum("table_rows"), 3000, "{ranks} ranks: table blocks");
        assert_eq!(sum("classes"), 900, "{ranks} ranks: class blocks");
        assert_eq!(sum("batch_rows"), 40, "{ranks} ranks: the global batch");
        // The headline is rank 0's step, and every rank's peak counts its exchanges' buffers.
        assert_eq!(
            plan["predicted_peak_bytes"],
            per_rank[0]["predicted_peak_bytes"]
        );
        for r in per_rank {
            assert!(
                r["categories"]["communication"].as_u64().unwrap() > 0,
                "{r}"
            );
        }

        let train = widebag(&args("train", &["--ranks", ranks, "--json"]));
        assert!(
            train.status.success(),
            "{}",
            String::from_utf8_lossy(&train.stderr)
        );
        let sent = json(&train)["sent_bytes_per_step"].clone();
        for t in per_rank[0]["traffic"].as_array().unwrap() {
            let name = t["collective"].as_str().unwrap();
            let predicted = t["bytes"].as_f64().unwrap();
            let measured = sent[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{name} not sent"));
            if t["exact"].as_bool().unwrap() {
                assert_eq!(measured, predicted, "{ranks} ranks: {name}");
            } else {
                assert!(
                    measured <= predicted && measured > 0.0,
                    "{ranks} ranks: {name}: measured {measured} over the bound {predicted}"
                );
            }
        }
    }
}

#[test]
fn plan_ranks_refuses_what_ranks_cannot_run() {
    let out = widebag(&args("plan", &["--ranks", "2", "--verify"]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ranks"), "{err}");
    let out = widebag(&args(
        "plan",
        &["--ranks", "2", "--set", "model.layout=\"dense\""],
    ));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model.layout"));
}
