"""Training from SciPy matrices: the command line's losses to the last digit on the same rows,
its run directory, evaluation, prediction and export from Python, the GIL released."""

import json
import threading

import numpy as np
import scipy.sparse as sp

import widebag
from conftest import SMALL, small_overrides


def cli_train(cli, interactions, out):
    d = interactions["dir"]
    return cli(
        "train", "--set", f"data.path={d / 'train.txt'}", "--set", "data.format=lightgcn",
        "--set", f"data.test_path={d / 'test.txt'}", *sum((["--set", o] for o in small_overrides()), []),
        "--out", out, "--json",
    )


def test_training_from_a_scipy_matrix_gives_the_command_lines_losses(cli, interactions, tmp_path):
    expected = cli_train(cli, interactions, tmp_path / "cli")
    run = widebag.train(
        widebag.Config(**SMALL), data=interactions["train"], test=interactions["test"],
        out=tmp_path / "py", progress=False,
    )
    assert run.summary["losses"] == expected["losses"]
    assert len(run.losses) == expected["steps"] > 0
    ours = [e["metrics"] for e in run.summary["evaluations"]]
    theirs = [e["metrics"] for e in expected["evaluations"]]
    assert ours == theirs and ours, "the same held-out metrics, LightGCN's protocol"
    assert set(run.history[-1]) >= {"step", "recall@20", "ndcg@20"}


def test_labels_from_numpy_give_the_libsvm_files_losses(cli, tmp_path):
    rng = np.random.default_rng(1)
    n, width, classes = 400, 1000, 7
    rows = [np.sort(rng.choice(width, size=int(rng.integers(2, 12)), replace=False)) for _ in range(n)]
    rows[0] = np.union1d(rows[0], [width - 1])
    y = rng.integers(0, classes, size=n)
    y[0] = classes - 1
    vals = [np.round(rng.uniform(0.5, 2.0, size=len(r)), 3).astype(np.float32) for r in rows]
    path = tmp_path / "d.svm"
    with open(path, "w") as f:
        for r, v, c in zip(rows, vals, y):
            f.write(f"{c} " + " ".join(f"{i}:{x:g}" for i, x in zip(r, v)) + "\n")
    x = sp.csr_matrix(
        (np.concatenate(vals), np.concatenate(rows), np.cumsum([0] + [len(r) for r in rows])),
        shape=(n, width),
    )
    common = {"model": {"dim": 8, "hidden": [16]}, "train": {"batch_size": 50, "epochs": 2, "eval_rows": 100, "seed": 5, "device": "cpu"}}
    args = [f"{s}.{k}={json.dumps(v)}" for s, ks in common.items() for k, v in ks.items()]
    expected = cli("train", "--set", f"data.path={path}", "--set", "data.format=libsvm",
                   "--set", "data.zero_based=true", *sum((["--set", a] for a in args), []), "--json")
    run = widebag.train(widebag.Config(**common), data=x, targets=y, out=tmp_path / "py", progress=False)
    assert run.summary["losses"] == expected["losses"]
    assert run.summary["eval_loss"] == expected["eval_loss"]
    acc = run.evaluate(x[:100], y[:100])
    assert 0.0 <= acc["accuracy"] <= 1.0 and acc["n_rows"] == 100


def test_evaluate_predict_and_export_match_the_command_line(cli, interactions, tmp_path):
    run = widebag.train(
        widebag.Config(**SMALL), data=interactions["train"], test=interactions["test"],
        out=tmp_path / "run", progress=False,
    )
    got = run.evaluate(interactions["train"], interactions["test"])
    cli_eval = cli("eval", run.path, "--json")
    for m in cli_eval["report"]["metrics"]:
        assert got[m["name"]] == m["value"], m["name"]
    ids, scores = run.predict(interactions["train"][:10], top_k=5)
    assert ids.shape == scores.shape == (10, 5) and ids.dtype == np.int64
    assert np.all(np.diff(scores, axis=1) <= 0), "best first"
    seen = interactions["train"][:10]
    for r in range(10):
        assert not set(ids[r]) & set(seen[r].indices), "exclude_seen leaves a row's own items out"
    svm = tmp_path / "rows.txt"
    with open(svm, "w") as f:
        for u in range(10):
            f.write(" ".join(map(str, [u, *seen[u].indices])) + "\n")
    p = cli("predict", run.path, "--data", svm, "--top-k", 5, "--exclude-seen", "--output", "jsonl")
    # A LightGCN file is read against the training file: users 0..9 are its first rows, each
    # user's input its training items, as `data` gives them here.
    lines = {l["user"]: l for l in map(json.loads, p.stdout.splitlines())}
    assert [[t["class"] for t in lines[u]["top"]] for u in range(10)] == ids.tolist()
    files = run.export()
    assert any(f.endswith("embedding.npy") for f in files)
    emb = run.embedding()
    assert emb.shape == (400, 16) and emb.dtype == np.float32
    w = run.weights()
    assert any(a.shape == (400, 16) for a in w.values())
    cli("export", run.path, "--to", tmp_path / "cli-export")
    assert np.array_equal(np.load(tmp_path / "cli-export" / "embedding.npy"), np.asarray(emb))


def test_a_saved_run_loads_and_a_command_line_run_loads(cli, interactions, tmp_path):
    run = widebag.train(widebag.Config(**SMALL), data=interactions["train"], out=tmp_path / "a", progress=False)
    copy = run.save(tmp_path / "b")
    again = widebag.load(copy.path)
    assert again.summary["losses"] == run.summary["losses"]
    ids, _ = again.predict(interactions["train"][:3], top_k=4)
    assert ids.shape == (3, 4)
    cli_train(cli, interactions, tmp_path / "cli")
    loaded = widebag.load(tmp_path / "cli")
    assert loaded.history and "recall@20" in loaded.history[-1]


def test_training_releases_the_gil(interactions, tmp_path):
    ticks = [0]
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=tick)
    t.start()
    try:
        cfg = widebag.Config(**SMALL).set("train.epochs", 6)
        widebag.train(cfg, data=interactions["train"], out=tmp_path / "r", progress=False)
    finally:
        done.set()
        t.join()
    assert ticks[0] > 10_000, f"another thread ran only {ticks[0]} loops while training"


def test_the_wheel_trains_on_wgpu_as_the_command_line_does(interactions, tmp_path):
    """The same `device` choice as the command line: wgpu (lavapipe on a machine without a GPU,
    which CI provides) from Python."""
    cfg = widebag.Config(**SMALL).set("train.epochs", 1)
    run = widebag.train(cfg, data=interactions["train"], out=tmp_path / "w", device="wgpu", progress=False)
    assert run.summary["backend"] == "wgpu"
    cpu = widebag.train(cfg, data=interactions["train"], out=tmp_path / "c", device="cpu", progress=False)
    assert np.allclose(run.losses, cpu.losses, rtol=1e-4, atol=1e-4)
