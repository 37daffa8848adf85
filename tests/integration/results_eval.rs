//! Evaluation and export of a trained run: Recall@K and NDCG@K through the chunked evaluation
//! equal the definitions applied to the full log-probability matrix; `widebag eval` on wgpu
//! (tensors) equals the CPU's (flex's host block scorer, a sampled cosine model's included)
//! within 1e-5; exported files load with the safetensors crate and numpy's
//! layout, and a head/tail model's exported embedding is what its bag computes for each id.

use std::path::{Path, PathBuf};

use crate::common::{self, Facility, widebag};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-eval-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// LightGCN-format train and test files: 150 users over 400 items, items drawn with a skew.
fn lightgcn_files(dir: &Path) -> (PathBuf, PathBuf) {
    let (mut train, mut test) = (String::new(), String::new());
    let mut s = 12345u64;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as usize
    };
    for u in 0..150 {
        let n = 5 + next() % 20;
        let items: Vec<String> = (0..n)
            .map(|_| ((next() % 400) * (next() % 400) / 400).to_string())
            .collect();
        train.push_str(&format!("{u} {}\n", items.join(" ")));
        if u % 7 != 0 {
            let t: Vec<String> = (0..1 + next() % 6)
                .map(|_| (next() % 400).to_string())
                .collect();
            test.push_str(&format!("{u} {}\n", t.join(" ")));
        }
    }
    let (a, b) = (dir.join("train.txt"), dir.join("test.txt"));
    std::fs::write(&a, train).unwrap();
    std::fs::write(&b, test).unwrap();
    (a, b)
}

fn train(out: &Path, extra: &[String]) {
    let mut args: Vec<String> = vec![
        "train".into(),
        "--device".into(),
        "cpu".into(),
        "--out".into(),
        out.display().to_string(),
    ];
    args.extend(extra.iter().cloned());
    let o = widebag(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn set(kv: &[&str]) -> Vec<String> {
    kv.iter()
        .flat_map(|k| ["--set".to_string(), k.to_string()])
        .collect()
}

fn eval_json(run: &Path, device: &str) -> serde_json::Value {
    common::json(&widebag(&[
        "eval",
        run.to_str().unwrap(),
        "--device",
        device,
        "--json",
    ]))
}

/// A recommender's ranking through the bf16 screen (`eval.screening = "bf16"`, the default)
/// and every class in f32 (`"off"`): the same metrics to the last digit, for a dot-product
/// multinomial model and a cosine sampled one, and the screen did run (the ledger of the run
/// says so).
#[test]
fn the_screened_ranking_equals_the_f32_ranking() {
    let name = "the_screened_ranking_equals_the_f32_ranking";
    let has = widebag_ledger::shapes::host_bf16_dot();
    if !common::require(name, Facility::CpuBf16, has, "no avx512bf16 on this CPU") {
        return;
    }
    let dir = tmp("screened");
    let (tr, te) = lightgcn_files(&dir);
    let data = [
        format!("data.path=\"{}\"", tr.display()),
        "data.format=\"lightgcn\"".to_string(),
        format!("data.test_path=\"{}\"", te.display()),
        "train.steps=30".into(),
        "train.batch_size=32".into(),
        "eval.k=[5, 20]".into(),
    ];
    let models: [&[&str]; 2] = [
        &["model.output=\"multinomial\""],
        &[
            "model.output=\"sampled_softmax\"",
            "model.score=\"cosine\"",
            "model.temperature=0.2",
            "model.sampling.negatives=64",
        ],
    ];
    for (i, model) in models.iter().enumerate() {
        let mut keys: Vec<&str> = data.iter().map(|s| s.as_str()).collect();
        keys.extend(model.iter());
        let run = dir.join(format!("model-{i}"));
        train(&run, &set(&keys));
        let screened = eval_json(&run, "cpu");
        let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
        let off = config.replace("screening = \"bf16\"", "screening = \"off\"");
        assert_ne!(off, config, "the run's config names eval.screening");
        std::fs::write(run.join("config.toml"), off).unwrap();
        let f32_scores = eval_json(&run, "cpu");
        assert!(!metrics(&screened).is_empty());
        assert_eq!(metrics(&screened), metrics(&f32_scores), "model {model:?}");
        let ledger = std::fs::read_to_string(run.join("ledger.json")).unwrap();
        assert!(
            ledger.contains("bf16_screened"),
            "the run's ledger: screened"
        );
    }
}

fn metrics(v: &serde_json::Value) -> Vec<(String, f64)> {
    v["report"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["value"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn evaluation_on_wgpu_equals_the_cpu() {
    let dir = tmp("devices");
    let (tr, te) = lightgcn_files(&dir);
    let runs = [
        (
            "rec",
            set(&[
                &format!("data.path=\"{}\"", tr.display()),
                "data.format=\"lightgcn\"",
                &format!("data.test_path=\"{}\"", te.display()),
                "model.output=\"multinomial\"",
                "train.steps=30",
                "train.batch_size=32",
                "eval.k=[5, 20]",
            ]),
        ),
        (
            "sampled-cosine",
            set(&[
                &format!("data.path=\"{}\"", tr.display()),
                "data.format=\"lightgcn\"",
                &format!("data.test_path=\"{}\"", te.display()),
                "model.output=\"sampled_softmax\"",
                "model.score=\"cosine\"",
                "model.temperature=0.2",
                "model.sampling.negatives=64",
                "train.steps=30",
                "train.batch_size=32",
                "eval.k=[5, 20]",
            ]),
        ),
        (
            "lm",
            set(&[
                "data.width=3000",
                "data.n_classes=300",
                "train.steps=20",
                "train.eval_rows=100",
            ]),
        ),
        (
            "adaptive",
            set(&[
                "data.width=3000",
                "data.n_classes=3000",
                "model.output=\"adaptive\"",
                "model.output_bands.cutoffs=[200, 1000]",
                "train.steps=20",
                "train.eval_rows=100",
            ]),
        ),
    ];
    for (name, extra) in &runs {
        let run = dir.join(name);
        train(&run, extra);
        let cpu = eval_json(&run, "cpu");
        assert!(!metrics(&cpu).is_empty(), "{name}: {cpu}");
        if !common::has_wgpu("evaluation_on_wgpu_equals_the_cpu") {
            continue;
        }
        let gpu = eval_json(&run, "wgpu");
        assert_eq!(
            metrics(&cpu).len(),
            metrics(&gpu).len(),
            "{name}: {cpu} {gpu}"
        );
        for ((n, a), (m, b)) in metrics(&cpu).into_iter().zip(metrics(&gpu)) {
            assert_eq!(n, m);
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + a.abs()),
                "{name} {n}: cpu {a}, wgpu {b}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn recall_and_ndcg_match_the_definitions_on_the_full_matrix() {
    use widebag_prepare::{PrepareOptions, open_data};
    let dir = tmp("definition");
    let (tr, te) = lightgcn_files(&dir);
    let config = widebag_config::load(
        None,
        &set(&[
            &format!("data.path=\"{}\"", tr.display()),
            "data.format=\"lightgcn\"",
            &format!("data.test_path=\"{}\"", te.display()),
            "model.output=\"multinomial\"",
            "train.batch_size=64",
        ])
        .chunks(2)
        .map(|c| c[1].clone())
        .collect::<Vec<_>>(),
    )
    .unwrap();
    let prepared = open_data(&config, &PrepareOptions::READ_ONLY).unwrap();
    let compute = common::flex();
    let mut model =
        widebag_model::SparseModel::new(&prepared.config, &prepared.model_bands, &compute).unwrap();
    let set_ = widebag_model::eval::EvalSet {
        batches: prepared.eval.clone(),
        seen: prepared.eval_seen.clone(),
    };
    let spec = widebag_model::eval::eval_spec(&prepared.config);
    let report = widebag_model::eval::evaluate(&mut model, &set_, &spec, compute.backend).unwrap();
    // The definitions (LightGCN's): mask the training items, rank all 400 items, recall =
    // hits / |T|, NDCG with IDCG over min(|T|, K); users without a test item are skipped.
    let (mut recall, mut ndcg, mut users) = (0.0f64, 0.0f64, 0usize);
    for (b, seen) in prepared.eval.iter().zip(&prepared.eval_seen) {
        let lp = widebag_model::tensors::to_vec(model.log_probs(b).unwrap()).unwrap();
        let n = lp.len() / b.n_rows();
        let t = b.targets();
        for r in 0..b.n_rows() {
            let mut test: Vec<u32> = t.classes[t.row_ptr[r]..t.row_ptr[r + 1]].to_vec();
            test.sort_unstable();
            test.dedup();
            if test.is_empty() {
                continue;
            }
            let mut order: Vec<u32> = (0..n as u32).filter(|c| !seen[r].contains(c)).collect();
            order.sort_by(|&a, &c| {
                lp[r * n + c as usize]
                    .total_cmp(&lp[r * n + a as usize])
                    .then(a.cmp(&c))
            });
            let top = &order[..20];
            let hits: Vec<bool> = top.iter().map(|c| test.contains(c)).collect();
            recall += hits.iter().filter(|&&h| h).count() as f64 / test.len() as f64;
            let dcg: f64 = hits
                .iter()
                .enumerate()
                .filter(|(_, h)| **h)
                .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
                .sum();
            let idcg: f64 = (0..test.len().min(20))
                .map(|i| 1.0 / ((i + 2) as f64).log2())
                .sum();
            ndcg += dcg / idcg;
            users += 1;
        }
    }
    assert_eq!(report.n_rows, users);
    let close = |name: &str, want: f64| {
        let got = report.get(name).unwrap();
        assert!((got - want).abs() < 1e-9, "{name}: {got} vs {want}");
    };
    close("recall@20", recall / users as f64);
    close("ndcg@20", ndcg / users as f64);
    // The ranking pass (no log-sum-exp) keeps the log-probability pass's classes in its order,
    // each score one row-wide offset (the row's log-sum-exp) above its log-probability.
    use widebag_model::eval::{ScoreNeed, ScoreOptions, score_rows};
    assert_eq!(prepared.eval.len(), prepared.eval_seen.len());
    for (b, seen) in prepared.eval.iter().zip(&prepared.eval_seen) {
        let rows = [ScoreNeed::Ranking, ScoreNeed::LogProbs].map(|need| {
            let options = ScoreOptions {
                k: 20,
                seen,
                backend: compute.backend,
                need,
                screen: None,
            };
            score_rows(&mut model, b, options).unwrap()
        });
        let [ranking, log_probs] = &rows;
        assert_eq!(ranking.len(), log_probs.len());
        for (r, p) in ranking.iter().zip(log_probs.iter()) {
            let classes = |s: &widebag_model::eval::RowScores| -> Vec<u32> {
                s.top.iter().map(|&(c, _)| c).collect()
            };
            assert_eq!(classes(r), classes(p));
            let offset = r.top[0].1 - p.top[0].1;
            for (a, b) in r.top.iter().zip(&p.top) {
                assert!((a.1 - b.1 - offset).abs() < 1e-4, "{a:?} {b:?} {offset}");
            }
            assert_eq!(r.target_log_prob, 0.0);
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The tensors of a safetensors file, read by the safetensors crate.
fn read_safetensors(path: &Path) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_head_tail_export_holds_what_the_bag_computes_for_each_id() {
    use widebag_prepare::{PrepareOptions, open_data};
    let dir = tmp("export");
    let run = dir.join("run");
    let extra = set(&[
        "data.width=3000",
        "data.n_classes=300",
        "model.input_bands.cutoffs=[100, 800]",
        "model.hidden=[16]",
        "train.steps=15",
    ]);
    train(&run, &extra);
    let to = dir.join("export");
    let o = widebag(&[
        "export",
        run.to_str().unwrap(),
        "--to",
        to.to_str().unwrap(),
        "--device",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let emb = read_safetensors(&to.join("embedding.safetensors"));
    assert_eq!(emb[0].0, "embedding.weight");
    assert_eq!(emb[0].1, vec![3000, 32]);
    let exported = f32s(&emb[0].2);
    // The .npy holds the same values after its header.
    let npy = std::fs::read(to.join("embedding.npy")).unwrap();
    assert_eq!(&npy[..6], b"\x93NUMPY");
    let header = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    assert!(String::from_utf8_lossy(&npy[10..10 + header]).contains("'shape': (3000, 32)"));
    assert_eq!(f32s(&npy[10 + header..]), exported);
    // The dense layers load too, in PyTorch's [out, in] layout.
    let dense = read_safetensors(&to.join("model.safetensors"));
    let names: Vec<&str> = dense.iter().map(|t| t.0.as_str()).collect();
    assert!(
        names.contains(&"output.weight") && names.contains(&"hidden.0.weight"),
        "{names:?}"
    );
    let hw = dense.iter().find(|t| t.0 == "hidden.0.weight").unwrap();
    assert_eq!(hw.1, vec![16, 32]);
    // Each id's exported row is the bag of that id alone (before the bias), through the
    // trainer's own gather and projections, with the frequency renumbering undone.
    let config = widebag_config::load(Some(&run.join("config.toml")), &[]).unwrap();
    let prepared = open_data(&config, &PrepareOptions::READ_ONLY).unwrap();
    assert!(
        prepared.relabel.ids.is_some(),
        "the head/tail split renumbers ids"
    );
    let compute = common::flex();
    let ck = run.join("checkpoints").join("step-00000015");
    let saved = widebag_model::checkpoint::saved::load(&prepared, &compute, &ck).unwrap();
    drop(saved);
    let mut model =
        widebag_model::SparseModel::new(&prepared.config, &prepared.model_bands, &compute).unwrap();
    widebag_model::checkpoint::load(
        &mut model,
        &ck,
        &prepared.config,
        widebag_model::checkpoint::Match::Shapes,
    )
    .unwrap();
    let ids: Vec<u32> = vec![0, 5, 99, 100, 101, 500, 799, 800, 2999];
    let rows: Vec<widebag_csr::SparseRow> = ids
        .iter()
        .map(|&o| widebag_csr::SparseRow {
            ids: vec![prepared.relabel.ids.as_ref().unwrap().map(o)],
            values: vec![1.0],
        })
        .collect();
    let targets = vec![widebag_csr::RowTarget::Class(0); ids.len()];
    let batch = widebag_csr::CsrBatch::from_rows(&rows, &targets, 3000, 300).unwrap();
    let bag = widebag_model::tensors::to_vec(model.bag_forward(&batch).unwrap()).unwrap();
    for (i, &o) in ids.iter().enumerate() {
        let want = &bag[i * 32..(i + 1) * 32];
        let got = &exported[o as usize * 32..(o as usize + 1) * 32];
        common::assert_close(&format!("id {o}"), got, want, 1e-6, 1e-5);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn predict_writes_top_k_per_user_without_their_training_items() {
    let dir = tmp("predict");
    let (tr, te) = lightgcn_files(&dir);
    let run = dir.join("run");
    train(
        &run,
        &set(&[
            &format!("data.path=\"{}\"", tr.display()),
            "data.format=\"lightgcn\"",
            "model.output=\"multinomial\"",
            "train.steps=10",
            "train.batch_size=32",
        ]),
    );
    let out = dir.join("top.csv");
    let o = widebag(&[
        "predict",
        run.to_str().unwrap(),
        "--data",
        te.to_str().unwrap(),
        "--top-k",
        "7",
        "--exclude-seen",
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("row,user,rank,class,name,log_prob"));
    let train_items: Vec<Vec<u32>> = std::fs::read_to_string(&tr)
        .unwrap()
        .lines()
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect()
        })
        .collect();
    let mut per_user = std::collections::BTreeMap::<u32, usize>::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        let (user, class): (u32, u32) = (f[1].parse().unwrap(), f[3].parse().unwrap());
        assert!(
            !train_items[user as usize].contains(&class),
            "user {user} got training item {class}"
        );
        assert!(f[5].parse::<f64>().unwrap() < 0.0);
        *per_user.entry(user).or_default() += 1;
    }
    // Every user with a test line, 7 items each.
    let users = std::fs::read_to_string(&te).unwrap().lines().count();
    assert_eq!(per_user.len(), users);
    assert!(per_user.values().all(|&n| n == 7));
    let _ = std::fs::remove_dir_all(dir);
}
