"""Fixtures: the command line to compare with (WIDEBAG_BIN, default target/release/widebag),
and a small recommender data set written both as LightGCN's text files and as SciPy matrices."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[3]


def cli_path():
    target = os.environ.get("CARGO_TARGET_DIR", str(REPO / "target"))
    return Path(os.environ.get("WIDEBAG_BIN", Path(target) / "release" / "widebag"))


@pytest.fixture(scope="session")
def cli():
    """Runs the command line; returns its parsed JSON stdout (``--json``) or its text."""
    path = cli_path()
    if not path.exists():
        pytest.fail(f"{path}: build the command line first (cargo build --release)")

    def run(*args, check=True):
        p = subprocess.run([str(path), *map(str, args)], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"widebag {' '.join(map(str, args))}: exit {p.returncode}\n{p.stderr}")
        out = p.stdout.strip()
        if "--json" in args and out:
            return json.loads(out.splitlines()[-1])
        return p

    return run


@pytest.fixture(scope="session")
def interactions(tmp_path_factory):
    """300 users over 400 items (every item held by some user), training and held-out items
    disjoint: LightGCN's train.txt/test.txt and the same rows as CSR matrices."""
    rng = np.random.default_rng(7)
    n_users, n_items = 300, 400
    train_rows, test_rows = [], []
    for u in range(n_users):
        k = int(rng.integers(6, 30))
        items = np.sort(rng.choice(n_items, size=k, replace=False))
        train_rows.append(items[:-3])
        test_rows.append(items[-3:])
    train_rows[0] = np.union1d(train_rows[0], [n_items - 1])
    test_rows[0] = np.setdiff1d(test_rows[0], [n_items - 1])
    d = tmp_path_factory.mktemp("interactions")
    for name, rows in (("train.txt", train_rows), ("test.txt", test_rows)):
        with open(d / name, "w") as f:
            for u, items in enumerate(rows):
                f.write(" ".join(map(str, [u, *items])) + "\n")

    def matrix(rows):
        indptr = np.cumsum([0] + [len(r) for r in rows])
        indices = np.concatenate(rows).astype(np.int32)
        return sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(n_users, n_items))

    return {"dir": d, "train": matrix(train_rows), "test": matrix(test_rows)}


# A small Mult-DAE, the same for both sides.
SMALL = {
    "model": {"output": "multinomial", "dim": 16, "hidden": [], "activation": "tanh"},
    "train": {"batch_size": 64, "epochs": 2, "eval_every": 5, "seed": 3, "device": "cpu"},
    "optim": {"dense": "adam", "table": "adam", "lr": 0.01},
    "eval": {"k": [5, 20]},
}


def small_overrides():
    out = []
    for section, keys in SMALL.items():
        for k, v in keys.items():
            out.append(f"{section}.{k}={json.dumps(v)}")
    return out
