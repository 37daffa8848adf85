//! Data files through the binary: every `--format` on the samples in `datasets/sample/`, scipy's
//! own `.npz` files, conversion round trips, the `data stats --json` keys, training on files, and
//! (when `../shared/data` is present) the real datasets.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

use common::widebag;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ok(args: &[&str]) -> Output {
    let out = widebag(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("widebag-files-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn convert(input: &Path, format: &str, to: &str, out: &Path) {
    ok(&[
        "data",
        "convert",
        s(input),
        "--format",
        format,
        "--to",
        to,
        s(out),
    ]);
}

/// Synthetic rows written as libsvm.
fn synth_libsvm(out: &Path, rows: usize, width: usize, n_classes: usize) {
    ok(&[
        "data",
        "synth",
        "--rows",
        &rows.to_string(),
        "--set",
        &format!("data.width={width}"),
        "--set",
        &format!("data.n_classes={n_classes}"),
        "--to",
        "libsvm",
        s(out),
    ]);
}

fn stats_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["data", "stats"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", "--no-save"]);
    serde_json::from_slice(&ok(&all).stdout).expect("one JSON object")
}

#[test]
fn scipy_npz_files_read_exactly() {
    let dir = scratch("scipy");
    let expected =
        std::fs::read_to_string(root().join("tests/data/npz/scipy_csr.expected.svm")).unwrap();
    // Deflated with int32 indices and float64 data, and stored with int64 indices/pointers.
    for name in ["scipy_csr.npz", "scipy_csr_stored_int64.npz"] {
        let out = dir.join(format!("{name}.svm"));
        let npz = root().join("tests/data/npz").join(name);
        convert(&npz, "npz", "libsvm", &out);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), expected, "{name}");
        // Packed streamed (each member from the map), it holds the same rows.
        let packed = dir.join(format!("{name}.wbp"));
        ok(&["data", "pack", s(&npz), "--format", "npz", s(&packed)]);
        let again = dir.join(format!("{name}.wbp.svm"));
        convert(&packed, "npz", "libsvm", &again);
        assert_eq!(std::fs::read_to_string(&again).unwrap(), expected, "{name}");
    }
}

#[test]
fn conversions_round_trip() {
    let dir = scratch("round");
    let svm = dir.join("synthetic.svm");
    synth_libsvm(&svm, 500, 3000, 50);
    let (npz, svm2, npz2) = (dir.join("a.npz"), dir.join("b.svm"), dir.join("c.npz"));
    convert(&svm, "libsvm", "npz", &npz);
    convert(&npz, "npz", "libsvm", &svm2);
    assert_eq!(
        std::fs::read(&svm).unwrap(),
        std::fs::read(&svm2).unwrap(),
        "libsvm → npz → libsvm"
    );
    convert(&svm2, "libsvm", "npz", &npz2);
    assert_eq!(
        std::fs::read(&npz).unwrap(),
        std::fs::read(&npz2).unwrap(),
        "npz → libsvm → npz"
    );
    // A scipy matrix without targets: the rows keep their values and empty rows survive.
    let scipy = root().join("tests/data/npz/scipy_csr.npz");
    let (n1, s1) = (dir.join("s.npz"), dir.join("s.svm"));
    convert(&scipy, "npz", "npz", &n1);
    convert(&n1, "npz", "libsvm", &s1);
    let v = stats_json(&[s(&s1), "--format", "libsvm"]);
    assert_eq!(
        (v["rows"].as_u64(), v["empty_rows"].as_u64()),
        (Some(6), Some(3))
    );
    assert_eq!(v["width"], 12);
    // Text converts with its vocabulary kept beside the output.
    let words = dir.join("words.svm");
    ok(&[
        "data",
        "convert",
        s(&root().join("datasets/sample/docs.txt")),
        "--format",
        "text",
        "--mode",
        "cbow",
        "--to",
        "libsvm",
        s(&words),
    ]);
    let vocab = std::fs::read_to_string(dir.join("words.svm.vocab.tsv")).unwrap();
    assert!(vocab.starts_with("the\t"), "{}", &vocab[..40]);
}

#[test]
fn stats_json_has_the_documented_keys_for_every_format() {
    let sample = root().join("datasets/sample");
    let cases: Vec<(Vec<String>, u64)> = vec![
        (
            vec![
                s(&sample.join("interactions/train.txt")).into(),
                "--format".into(),
                "lightgcn".into(),
                "--test".into(),
                s(&sample.join("interactions/test.txt")).into(),
            ],
            300,
        ),
        (
            vec![
                s(&sample.join("docs.txt")).into(),
                "--format".into(),
                "text".into(),
            ],
            40,
        ),
        // 17 index lines, two of which share one entry block.
        (
            vec![
                s(&sample.join("tiny.index")).into(),
                "--format".into(),
                "dictd".into(),
            ],
            16,
        ),
        (
            vec![
                s(&root().join("tests/data/npz/scipy_csr.npz")).into(),
                "--format".into(),
                "npz".into(),
            ],
            6,
        ),
    ];
    for (args, rows) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = stats_json(&args);
        assert_eq!(v["rows"].as_u64(), Some(rows), "{args:?}");
        for key in ["width", "nnz_total"] {
            assert!(v[key].is_u64(), "{args:?}: {key}");
        }
        for key in ["min", "mean", "p50", "p99", "max"] {
            assert!(v["nnz_per_row"][key].is_number(), "{args:?}: {key}");
        }
        assert!(v["top_coverage"]["1"].is_number(), "{args:?}");
        for b in ["128", "1024"] {
            assert!(v["unique_ids_per_batch"][b].is_number(), "{args:?}: {b}");
        }
    }
    // CBOW: one row per in-vocabulary word, the centre word as the one target.
    let v = stats_json(&[
        s(&sample.join("docs.txt")),
        "--format",
        "text",
        "--mode",
        "cbow",
        "--window",
        "1",
    ]);
    let words: usize = std::fs::read_to_string(sample.join("docs.txt"))
        .unwrap()
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .count();
    assert_eq!(v["rows"].as_u64(), Some(words as u64));
}

#[test]
fn stats_are_saved_beside_the_data_and_reused_by_train() {
    let dir = scratch("saved");
    let train = dir.join("train.txt");
    std::fs::copy(
        root().join("datasets/sample/interactions/train.txt"),
        &train,
    )
    .unwrap();
    ok(&["data", "stats", s(&train), "--format", "lightgcn"]);
    assert!(dir.join("train.txt.stats.json").exists());
    let out = ok(&[
        "train",
        "--device",
        "cpu",
        "--json",
        "--set",
        &format!("data.path={}", s(&train)),
        "--set",
        "data.format=lightgcn",
        "--set",
        "train.steps=3",
        "--set",
        "train.batch_size=16",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["data"]["stats_reused"], true);
    assert_eq!(v["data"]["rows"], 300);
    assert_eq!(v["width"], v["data"]["width"]);
}

#[test]
fn train_runs_on_every_file_format() {
    let sample = root().join("datasets/sample");
    let dir = scratch("train");
    let svm = dir.join("s.svm");
    synth_libsvm(&svm, 300, 2000, 40);
    let npz = dir.join("s.npz");
    convert(&svm, "libsvm", "npz", &npz);
    let docs = dir.join("docs.txt");
    std::fs::copy(sample.join("docs.txt"), &docs).unwrap();
    for name in ["tiny.index", "tiny.dict.dz", "interactions/train.txt"] {
        let to = dir.join(Path::new(name).file_name().unwrap());
        std::fs::copy(sample.join(name), to).unwrap();
    }
    let cases: Vec<Vec<String>> = vec![
        vec![
            format!("data.path={}", s(&svm)),
            "data.format=libsvm".into(),
        ],
        vec![format!("data.path={}", s(&npz)), "data.format=npz".into()],
        vec![
            format!("data.path={}", s(&dir.join("train.txt"))),
            "data.format=lightgcn".into(),
        ],
        vec![
            format!("data.path={}", s(&docs)),
            "data.format=text".into(),
            "data.mode=cbow".into(),
        ],
        vec![
            format!("data.path={}", s(&dir.join("tiny.index"))),
            "data.format=dictd".into(),
            "data.mode=bow".into(),
        ],
    ];
    for sets in cases {
        let mut args = vec!["train", "--device", "cpu", "--json"];
        for set in &sets {
            args.extend(["--set", set]);
        }
        args.extend(["--set", "train.steps=4", "--set", "train.batch_size=32"]);
        let out = ok(&args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["final_loss"].as_f64().unwrap().is_finite(), "{sets:?}");
        assert!(v["data"]["rows"].as_u64().unwrap() > 0, "{sets:?}");
    }
    assert!(dir.join("docs.txt.vocab.tsv").exists());
}

#[test]
fn file_keys_are_checked_and_bad_files_exit_2() {
    let out = widebag(&["train", "--set", "data.path=x.svm"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("data.format"));
    let bad = root().join("tests/data/bad/bad_token.libsvm");
    let out = widebag(&[
        "train",
        "--set",
        &format!("data.path={}", s(&bad)),
        "--set",
        "data.format=libsvm",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad_token.libsvm:1:7"));
}

/// The real datasets, when a checkout sits beside `shared/data` (skipped with a notice
/// otherwise, or a failure under `WIDEBAG_REQUIRE_DATA=1`, which `.ci/run` sets).
#[test]
fn real_datasets_when_present() {
    let Some(data) = common::shared_data("real_datasets_when_present") else {
        return;
    };
    let g = data.join("gowalla");
    let v = stats_json(&[
        s(&g.join("train.txt")),
        "--format",
        "lightgcn",
        "--test",
        s(&g.join("test.txt")),
    ]);
    assert_eq!(v["rows"], 29_858);
    assert_eq!(v["width"], 40_981);
    assert_eq!(v["nnz_total"], 810_128);
    // Three GCIDE entries hold Windows-1252 bytes (0x92), which are refused as non-UTF-8 unless
    // --skip-bad-lines skips (and counts) them.
    let gcide_index = data.join("gcide/gcide.index");
    let gcide = s(&gcide_index);
    let out = widebag(&["data", "stats", gcide, "--format", "dictd", "--no-save"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gcide.dict.dz:110764:26"));
    let v = stats_json(&[gcide, "--format", "dictd", "--skip-bad-lines"]);
    assert_eq!(
        v["rows"], 126_237,
        "distinct GCIDE entry blocks less the 3 skipped"
    );
    assert_eq!(v["width"], 216_859, "distinct lower-cased words");
}

#[test]
fn data_stats_takes_the_format_from_a_known_extension_and_says_so() {
    let dir = scratch("infer");
    let p = dir.join("d.libsvm");
    std::fs::write(&p, "1 1:1 3:2\n0 2:1\n").unwrap();
    let out = ok(&["data", "stats", p.to_str().unwrap(), "--no-save"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("read as libsvm"), "{stderr}");
    let q = dir.join("d.rows");
    std::fs::write(&q, "1 1:1\n").unwrap();
    let out = widebag(&["data", "stats", q.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("--format") && stderr.contains("d.rows"),
        "{stderr}"
    );
}

#[test]
fn a_missing_file_is_one_clear_line_naming_the_key() {
    let out = widebag(&[
        "train",
        "--set",
        "data.path=\"no-such-file.svm\"",
        "--set",
        "data.format=\"libsvm\"",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr.trim(),
        "error: data.path: no-such-file.svm: No such file or directory (os error 2)"
    );
}

/// Every format packed with its reader's settings: the header's statistics are the file's, and
/// training on the packed dataset gives the losses of training on the file.
#[test]
fn a_packed_dataset_trains_as_the_file_it_was_packed_from() {
    let sample = root().join("datasets/sample");
    let dir = scratch("pack");
    let svm = dir.join("s.svm");
    synth_libsvm(&svm, 300, 2000, 40);
    // Copies: training on a file writes its sidecars beside it.
    for name in [
        "docs.txt",
        "tiny.index",
        "tiny.dict.dz",
        "interactions/train.txt",
    ] {
        let to = dir.join(Path::new(name).file_name().unwrap());
        std::fs::copy(sample.join(name), to).unwrap();
    }
    let (train, docs, index) = (
        dir.join("train.txt"),
        dir.join("docs.txt"),
        dir.join("tiny.index"),
    );
    let npz = dir.join("s.npz");
    convert(&svm, "libsvm", "npz", &npz);
    // Documents labelled by the second character of their file names (Brown's genre letter).
    let brown = dir.join("brown");
    std::fs::create_dir_all(&brown).unwrap();
    let words = [
        "The/at", "cat/nn", "sat/vbd", "on/in", "a/at", "mat/nn", "dog/nn", "./.",
    ];
    for f in 0..90usize {
        let text: Vec<&str> = (0..3 + f % 17)
            .map(|k| words[(f * 3 + k * k) % 8])
            .collect();
        let genre = (b'a' + (f % 5) as u8) as char;
        std::fs::write(brown.join(format!("c{genre}{f:02}")), text.join(" ")).unwrap();
    }
    let labelled = [
        "data.tokens=\"tagged\"",
        "data.label=\"file_name\"",
        "data.label_chars=[1, 2]",
    ];
    // Each case: the file, its format, the flags `data pack` and `data stats` read it with, and
    // the keys `train` reads it with.
    let cases: [(&Path, &str, &[&str], &[&str]); 6] = [
        (&svm, "libsvm", &[], &[]),
        (&train, "lightgcn", &[], &[]),
        (&docs, "text", &["--mode", "cbow"], &["data.mode=cbow"]),
        (&index, "dictd", &["--mode", "bow"], &["data.mode=bow"]),
        (&npz, "npz", &[], &[]),
        (
            &brown,
            "text",
            &[
                "--tokens",
                "tagged",
                "--label",
                "file-name",
                "--label-chars",
                "1,2",
            ],
            &labelled,
        ),
    ];
    for (i, (file, format, mode, sets)) in cases.into_iter().enumerate() {
        let packed = dir.join(format!("{i}.wbp"));
        let mut args = vec!["data", "pack", s(file), "--format", format];
        args.extend(mode);
        args.extend(["--block-rows", "64", "--samples", "3", s(&packed)]);
        ok(&args);
        let again = dir.join(format!("{i}-again.wbp"));
        *args.last_mut().unwrap() = s(&again);
        ok(&args);
        assert_eq!(
            std::fs::read(&packed).unwrap(),
            std::fs::read(&again).unwrap()
        );
        let stats = |path: &Path, extra: &[&str]| -> serde_json::Value {
            let mut a = vec![
                "data",
                "stats",
                s(path),
                "--json",
                "--no-save",
                "--samples",
                "3",
            ];
            a.extend(["--format", format]);
            a.extend(extra);
            let mut v: serde_json::Value = serde_json::from_slice(&ok(&a).stdout).unwrap();
            v.as_object_mut().unwrap().remove("source");
            v
        };
        assert_eq!(stats(&packed, mode), stats(file, mode), "{format}");
        let losses = |path: &Path, extra: &[&str]| -> Vec<f64> {
            let set = format!("data.path={}", s(path));
            let fmt = format!("data.format={format}");
            let mut a = vec![
                "train", "--device", "cpu", "--json", "--set", &set, "--set", &fmt,
            ];
            for s in sets {
                a.extend(["--set", s]);
            }
            a.extend(["--set", "train.steps=12", "--set", "train.batch_size=32"]);
            a.extend(["--set", "train.eval_every=0"]);
            for e in extra {
                a.extend(["--set", e]);
            }
            common::losses(&serde_json::from_slice(&ok(&a).stdout).unwrap())
        };
        // Read in place, in either shuffle, the packed file trains as the file in memory.
        // The shuffle's blocks need not be the packed ones (64 rows).
        let blocks: &[&str] = &[
            "data.shuffle=\"blocks\"",
            "data.shuffle_block_rows=32",
            "data.shuffle_rows=96",
        ];
        for extra in [&[][..], blocks] {
            assert_eq!(
                losses(&packed, extra),
                losses(file, extra),
                "{format} {extra:?}"
            );
        }
        // Named by its path alone, the packed file is read with the settings it records: the
        // same losses and the same evaluation as with its format and mode given.
        let run = |with_settings: bool| -> serde_json::Value {
            let set = format!("data.path={}", s(&packed));
            let fmt = format!("data.format={format}");
            let mut a = vec!["train", "--device", "cpu", "--json", "--set", &set];
            if with_settings {
                a.extend(["--set", &fmt]);
                for s in sets {
                    a.extend(["--set", s]);
                }
            }
            a.extend(["--set", "train.steps=6", "--set", "train.batch_size=32"]);
            serde_json::from_slice(&ok(&a).stdout).unwrap()
        };
        let (alone, given) = (run(false), run(true));
        assert_eq!(common::losses(&alone), common::losses(&given), "{format}");
        assert_eq!(
            alone["eval"], given["eval"],
            "{format}: the same task and metrics"
        );
        if format == "libsvm" {
            // Held-out rows named in place, and head/tail bands renumbered by the stored
            // frequencies.
            let split: &[&str] = &[
                "train.eval_rows=40",
                "model.input_bands.cutoffs=[300]",
                "model.output=\"adaptive\"",
                "model.output_bands.cutoffs=[10]",
                "data.shuffle=\"blocks\"",
                "data.shuffle_block_rows=64",
            ];
            assert_eq!(
                losses(&packed, split),
                losses(file, split),
                "{format} {split:?}"
            );
        }
        // Its statistics and vocabulary come from the packed file: nothing is written beside it.
        let beside: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&format!("{i}.wbp.")))
            .collect();
        assert!(beside.is_empty(), "{beside:?}");
    }
    // The header alone says what the file holds, without --format.
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["data", "stats", s(&dir.join("0.wbp")), "--json"]).stdout)
            .unwrap();
    assert_eq!(v["rows"], 300);
    // Rows packed as CBOW windows are not trained as documents.
    let out = widebag(&[
        "train",
        "--set",
        &format!("data.path={}", s(&dir.join("2.wbp"))),
        "--set",
        "data.format=text",
        "--set",
        "data.mode=bow",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pack the source again"));
}
