//! A user vector beside the bag (`data.user_vector`): each LightGCN user's own input column past
//! the items, in its training rows and its held-out rows alike (read from the file or from its
//! packed form), so the input table learns one row per user; keys that cannot take it exit 2
//! naming `data.user_vector`.

use std::path::PathBuf;

use crate::common::{self, widebag};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("widebag-user-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The sample interactions copied into `dir` (training writes sidecars beside the file).
fn sample(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let from = common::repo_root().join("datasets/sample/interactions");
    let (train, test) = (dir.join("train.txt"), dir.join("test.txt"));
    std::fs::copy(from.join("train.txt"), &train).unwrap();
    std::fs::copy(from.join("test.txt"), &test).unwrap();
    (train, test)
}

fn keys(train: &std::path::Path, test: &std::path::Path, value: &str) -> Vec<String> {
    vec![
        format!("data.path=\"{}\"", train.display()),
        "data.format=\"lightgcn\"".into(),
        format!("data.test_path=\"{}\"", test.display()),
        "data.normalize=true".into(),
        format!("data.user_vector={value}"),
        "model.dim=16".into(),
        "model.hidden=[]".into(),
        "model.output=\"multinomial\"".into(),
        "train.batch_size=32".into(),
    ]
}

#[test]
fn each_user_has_its_own_column_in_training_and_held_out_rows() {
    use widebag_prepare::{PrepareOptions, open_data};
    let dir = scratch("columns");
    let (train, test) = sample(&dir);
    let config = widebag_config::load(None, &keys(&train, &test, "0.5")).unwrap();
    let plain = {
        let mut c = config.clone();
        c.data.user_vector = 0.0;
        open_data(&c, &PrepareOptions::READ_ONLY).unwrap()
    };
    let mut prepared = open_data(&config, &PrepareOptions::READ_ONLY).unwrap();
    let items = plain.config.data.width;
    let users = prepared.user_columns.expect("user columns");
    assert_eq!((users.base, users.value), (items, 0.5));
    assert_eq!(prepared.config.data.width, items + users.n_users);
    assert_eq!(
        prepared.config.data.n_classes(),
        plain.config.data.n_classes()
    );
    // Held out: each row is its user's training items and then the user's column.
    let eval_users = prepared.eval_users.clone().unwrap();
    let mut row = 0;
    for (with, without) in prepared.eval.iter().zip(&plain.eval) {
        assert_eq!(with.targets(), without.targets());
        for r in 0..with.n_rows() {
            let (a, b) = (with.row_ptr()[r], with.row_ptr()[r + 1]);
            let (c, d) = (without.row_ptr()[r], without.row_ptr()[r + 1]);
            assert_eq!(&with.ids()[a..b - 1], &without.ids()[c..d]);
            let user = eval_users[row] as usize;
            assert_eq!(
                (with.ids()[b - 1], with.values()[b - 1]),
                ((items + user) as u32, 0.5)
            );
            row += 1;
        }
    }
    // Training: every row has exactly one column past the items, of the set value.
    let batch = prepared.batches.next_batch(32).unwrap();
    for r in 0..batch.n_rows() {
        let row = batch.row_ptr()[r]..batch.row_ptr()[r + 1];
        let past: Vec<_> = row.filter(|&e| batch.ids()[e] as usize >= items).collect();
        assert_eq!(past.len(), 1, "row {r}");
        assert_eq!(batch.values()[past[0]], 0.5);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A run with a user vector trains a table of items + users rows and evaluates every user with
/// its column; the same run on the packed file gives the same losses and figures.
#[test]
fn a_user_vector_trains_on_the_file_and_on_its_packed_form_alike() {
    let dir = scratch("train");
    let (train, test) = sample(&dir);
    let packed = dir.join("train.wbp");
    let s = |p: &std::path::Path| p.display().to_string();
    let o = widebag(&[
        "data",
        "pack",
        &s(&train),
        "--format",
        "lightgcn",
        &s(&packed),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = |file: &std::path::Path, name: &str| {
        let mut sets = keys(file, &test, "1.0");
        sets.push("train.epochs=2".into());
        let out = dir.join(name);
        let mut args = vec![
            "train".to_string(),
            "--json".into(),
            "--out".into(),
            s(&out),
        ];
        for k in sets {
            args.extend(["--set".to_string(), k]);
        }
        let o = widebag(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        common::json(&o)
    };
    let (text, mapped) = (run(&train, "text"), run(&packed, "packed"));
    let (items, users) = (text["data"]["width"].as_u64().unwrap(), 300u64);
    assert_eq!(
        text["table_parameters"].as_u64(),
        Some((items + users) * 16),
        "{text}"
    );
    assert_eq!(common::losses(&text), common::losses(&mapped));
    assert_eq!(text["eval"]["metrics"], mapped["eval"]["metrics"]);
    let recall = text["eval"]["metrics"][0]["value"].as_f64().unwrap();
    assert!(recall.is_finite() && recall > 0.0, "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn keys_that_cannot_take_a_user_vector_exit_2_naming_it() {
    let dir = scratch("bad");
    let (train, test) = sample(&dir);
    let mut cases: Vec<Vec<String>> = vec![
        keys(&train, &test, "-1.0"),
        keys(&train, &test, "nan"),
        vec!["data.user_vector=1.0".into()],
    ];
    let mut tied = keys(&train, &test, "1.0");
    tied.push("model.tie_output=true".into());
    cases.push(tied);
    let mut svm = keys(&train, &test, "1.0");
    svm[1] = "data.format=\"libsvm\"".into();
    cases.push(svm);
    for sets in cases {
        let mut args = vec!["train".to_string()];
        for k in &sets {
            args.extend(["--set".to_string(), k.clone()]);
        }
        let o = widebag(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{sets:?}: {err}");
        assert!(err.contains("data.user_vector"), "{sets:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
