"""Bad inputs raise exceptions with the command line's messages; none crashes the interpreter."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

import widebag
from widebag import _native
from widebag.rows import Csr
from conftest import SMALL


def csr(indptr, indices, data, shape, name="data"):
    return Csr(np.asarray(indptr, np.int64), np.asarray(indices, np.int32), np.asarray(data, np.float32), shape, name)


def test_bad_matrices_are_refused_naming_row_and_column(tmp_path):
    out = str(tmp_path / "p.packed")
    with pytest.raises(widebag.DataError, match=r"row 1: column -2"):
        _native.pack_rows(out, csr([0, 1, 2], [0, -2], [1, 1], (2, 5)))
    with pytest.raises(widebag.DataError, match=r"row 0: column 7 is outside 0..5"):
        _native.pack_rows(out, csr([0, 1, 2], [7, 1], [1, 1], (2, 5)))
    with pytest.raises(widebag.DataError, match=r"row 1, column 3: value NaN is not finite"):
        _native.pack_rows(out, csr([0, 1, 2], [0, 3], [1, np.nan], (2, 5)))
    with pytest.raises(widebag.DataError, match="indptr"):
        _native.pack_rows(out, csr([0, 2, 1], [0, 3], [1, 1], (2, 5)))
    with pytest.raises(widebag.DataError, match="indptr"):
        _native.pack_rows(out, csr([0, 1], [0, 3], [1, 1], (2, 5)))
    assert not os.path.exists(out), "nothing is left behind a refused pack"


def test_bad_targets_and_types_raise(interactions, tmp_path):
    x = interactions["train"]
    with pytest.raises(widebag.DataError, match="label -1"):
        widebag.train(widebag.Config(**SMALL), data=x, targets=np.r_[-1, np.zeros(x.shape[0] - 1, int)], out=tmp_path / "a", progress=False)
    with pytest.raises(widebag.DataError, match="labels for"):
        widebag.train(widebag.Config(**SMALL), data=x, targets=np.zeros(5, int), out=tmp_path / "b", progress=False)
    with pytest.raises(widebag.DataError, match="scipy.sparse"):
        widebag.train(widebag.Config(**SMALL), data=np.ones((3, 3)), out=tmp_path / "c", progress=False)
    with pytest.raises(widebag.DataError, match="dtype"):
        widebag.train(widebag.Config(**SMALL), data=sp.csr_matrix(np.ones((3, 3), dtype=complex)), out=tmp_path / "d", progress=False)
    with pytest.raises(widebag.DataError, match="labels must be integers"):
        widebag.train(widebag.Config(**SMALL), data=x, targets=np.full(x.shape[0], 0.5), out=tmp_path / "e", progress=False)
    with pytest.raises(widebag.DataError, match="targets"):
        widebag.train(widebag.Config(**SMALL), data=x, targets=sp.csr_matrix((2, 400)), out=tmp_path / "f", progress=False)


def test_a_run_that_does_not_fit_is_refused_before_it_starts(interactions, tmp_path):
    with pytest.raises(widebag.DoesNotFit) as e:
        widebag.train(widebag.Config(**SMALL), data=interactions["train"], out=tmp_path / "a", budget="1KiB", progress=False)
    assert e.value.plan is not None and e.value.plan["fits"] is False, "the plan comes with the refusal"
    assert not (tmp_path / "a" / "checkpoints").exists(), "refused before it started"


CHILD = r"""
import signal, sys, numpy as np, scipy.sparse as sp, widebag
# Ctrl-C raises KeyboardInterrupt even where the launching shell ignores SIGINT (a background
# job without job control), which Python would otherwise inherit and keep.
signal.signal(signal.SIGINT, signal.default_int_handler)
rng = np.random.default_rng(0)
x = sp.random(2000, 3000, density=0.01, format="csr", random_state=1, dtype=np.float32)
x.data[:] = 1
cfg = widebag.Config(model={"dim": 64, "hidden": []}, train={"batch_size": 32, "epochs": 200, "device": "cpu"})
print("starting", flush=True)
widebag.train(cfg, data=x, out=sys.argv[1], progress=True)
"""


def test_ctrl_c_stops_at_a_step_boundary_with_a_checkpoint(tmp_path):
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if metrics.exists() and metrics.stat().st_size > 0:
            break
        time.sleep(0.05)
    assert child.poll() is None, child.communicate()
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode != 0
    assert "KeyboardInterrupt: widebag: stopped after step" in err, err[-2000:]
    checkpoints = list((out / "checkpoints").iterdir())
    assert checkpoints, "a checkpoint of the step it stopped at"
    lines = metrics.read_text().splitlines()
    assert lines and lines[-1].startswith("{"), "the metrics log is whole"
