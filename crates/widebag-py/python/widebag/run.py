"""``train``, ``Run`` and ``load``: a training run in a run directory (the command line's format:
``config.toml``, ``ledger.json``, ``metrics.jsonl``, ``summary.json``, ``checkpoints/``; rows given
from Python packed as ``rows.packed``), so ``widebag eval/predict/export RUN`` read it from a
shell and ``widebag.load(RUN)`` reads a run the command line trained."""

import json
import os
import shutil
import struct
import tempfile

import numpy as np

from . import _native
from .config import Config
from .errors import ConfigError, DataError, DoesNotFit
from .progress import Progress
from .reports import plan
from .rows import csr, labels as as_labels

__all__ = ["Run", "train", "load"]

ROWS_FILE = "rows.packed"


def _device(device):
    return [] if device is None else ["--device", device]


def train(
    config=None,
    data=None,
    targets=None,
    test=None,
    out=None,
    progress=True,
    budget=None,
    device=None,
):
    """Trains ``config`` and returns its ``Run``.

    ``data``: a ``scipy.sparse`` matrix, one row per example (any width); ``None`` trains on the
    config's own data (``data.path``, or synthetic rows). ``targets``: a 1-D array of class labels,
    a sparse matrix of bag targets (weighted classes per row), or ``None``: each row is the bag of
    its own ids (a user's items, as LightGCN's files hold them). ``test``: with ``targets=None``,
    each row's held-out items (a sparse matrix of the same shape): evaluated every
    ``train.eval_every`` steps with the row's training items left out, as the command line does
    with LightGCN's ``test.txt``. ``out``: the run directory (a new temporary one when ``None``).
    ``budget``: plan first for this budget (``"8GiB"``), as ``widebag train --budget``.

    The GIL is released while training; Ctrl-C stops at the next step boundary, writes a
    checkpoint there and raises ``KeyboardInterrupt``.
    """
    config = (config or Config()).copy()
    out = os.fspath(out) if out is not None else tempfile.mkdtemp(prefix="widebag-run-")
    if data is not None:
        _pack(config, data, targets, test, out)
    elif targets is not None or test is not None:
        raise ConfigError("targets and test go with data (a scipy.sparse matrix)")
    argv = ["widebag", "train", *config.args(), *_device(device), "--out", out, "--json"]
    if budget is not None:
        argv += ["--budget", str(budget)]
    bar = Progress(progress)
    try:
        summary = _native.train(argv, bar)
    except DoesNotFit as e:
        if budget is not None and e.plan is None:
            try:  # the plan, with its suggestions, as `widebag.plan` gives it
                plan(config, budget=budget, device=device)
            except DoesNotFit as refused:
                e.plan = refused.plan
        raise
    finally:
        bar.close()
    return Run(out, json.loads(summary))


def _pack(config, data, targets, test, out):
    """Packs the rows into ``out/rows.packed`` and points ``config`` at them."""
    x = csr(data, "data")
    os.makedirs(out, exist_ok=True)
    path = os.path.abspath(os.path.join(out, ROWS_FILE))
    kwargs = {}
    if targets is not None:
        try:
            import scipy.sparse as sp

            sparse = sp.issparse(targets)
        except ImportError:  # pragma: no cover
            sparse = False
        if sparse:
            kwargs["bags"] = csr(targets, "targets")
        else:
            y = as_labels(targets)
            kwargs["labels"] = y
            kwargs["n_classes"] = int(y.max()) + 1 if y.size else 0
    if test is not None:
        kwargs["test"] = csr(test, "test")
    fmt = _native.pack_rows(path, x, **kwargs)
    config.set("data.path", path)
    config.set("data.format", fmt)
    if config.get("data.test_path") is not None:
        config.unset("data.test_path")  # the held-out rows are `test`


class Run:
    """A trained run: its directory, ``summary`` (the ``--json`` summary), ``history`` (every
    evaluation: step, epoch, metrics, time), ``losses`` (every step's)."""

    def __init__(self, path, summary=None):
        self.path = os.path.abspath(os.fspath(path))
        if summary is None:
            with open(os.path.join(self.path, "summary.json")) as f:
                summary = json.load(f)
        self.summary = summary

    @property
    def history(self):
        """One dict per evaluation: ``step``, ``epoch``, ``elapsed_s`` and each metric."""
        rows = []
        for e in self.summary.get("evaluations", []):
            row = {"step": e["step"], "epoch": e.get("epoch"), "elapsed_s": e.get("elapsed_s")}
            row.update({m["name"]: m["value"] for m in e["metrics"]})
            rows.append(row)
        return rows

    @property
    def losses(self):
        return np.asarray(self.summary.get("losses", []), dtype=np.float32)

    @property
    def config(self):
        return Config(os.path.join(self.path, "config.toml"))

    def _argv(self, command, device):
        return ["widebag", command, self.path, *_device(device)]

    def evaluate(self, data, targets, exclude_seen=True, device=None):
        """The model on rows ``data`` with ``targets`` (labels, or a sparse matrix of bags):
        the task's metrics as a dict (Recall@K and NDCG@K for bags, with each row's own ids left
        out of its ranking when ``exclude_seen``; accuracy for labels; the loss)."""
        x = csr(data, "data")
        kwargs = {}
        import scipy.sparse as sp

        if sp.issparse(targets):
            kwargs["bags"] = csr(targets, "targets")
        else:
            kwargs["labels"] = as_labels(targets)
        out = json.loads(
            _native.evaluate(self._argv("eval", device), x, exclude_seen=exclude_seen, **kwargs)
        )
        result = {m["name"]: m["value"] for m in out["report"]["metrics"]}
        result["step"] = out["step"]
        result["n_rows"] = out["report"]["n_rows"]
        return result

    def predict(self, data, top_k=20, exclude_seen=True, device=None):
        """Each row's best ``top_k`` classes: ``(ids, log_probs)``, two ``[rows, top_k]`` NumPy
        arrays (ids in the data's numbering; -1 and NaN past a row's last class)."""
        x = csr(data, "data")
        return _native.predict(self._argv("eval", device), x, int(top_k), bool(exclude_seen))

    def export(self, to=None):
        """``widebag export``: safetensors and ``.npy`` files in the data's numbering, in ``to``
        (the run's ``export/`` by default). Returns ``{file: what it holds}``."""
        to = os.fspath(to) if to is not None else os.path.join(self.path, "export")
        _step, files = _native.export(["widebag", "export", self.path, "--to", to])
        return dict(files)

    def embedding(self):
        """The input table, ``[width, dim]`` float32, rows in the data's id order (memory-mapped
        from the export)."""
        path = os.path.join(self.path, "export", "embedding.npy")
        if not os.path.exists(path):
            self.export()
        return np.load(path, mmap_mode="r")

    def weights(self):
        """Every parameter by its checkpoint name (``model.safetensors`` of the export), as NumPy
        arrays read in place where their dtype is NumPy's (bf16 is widened to float32)."""
        path = os.path.join(self.path, "export", "model.safetensors")
        if not os.path.exists(path):
            self.export()
        return read_safetensors(path)

    def save(self, path):
        """Copies the run directory to ``path`` (new); returns the copy's ``Run``."""
        path = os.fspath(path)
        shutil.copytree(self.path, path)
        config = os.path.join(path, "config.toml")
        rows = os.path.join(self.path, ROWS_FILE)
        if os.path.exists(rows):
            _repoint(config, rows, os.path.abspath(os.path.join(path, ROWS_FILE)))
        return Run(path)

    def __repr__(self):
        s = self.summary
        last = self.history[-1] if self.history else {}
        shown = "  ".join(f"{k} {v:.4f}" for k, v in last.items() if k not in ("step", "epoch", "elapsed_s") and isinstance(v, float))
        return f"Run({self.path!r}: {s.get('steps')} steps, final loss {s.get('final_loss', float('nan')):.4f}{'  ' + shown if shown else ''})"


def _repoint(config, old, new):
    with open(config) as f:
        text = f.read()
    text = text.replace(json.dumps(old), json.dumps(new))
    tmp = config + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, config)


def load(path):
    """The run in directory ``path`` (written by ``widebag.train`` or ``widebag train --out``)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(os.path.join(path, "config.toml")):
        raise ConfigError(f"{path}: no config.toml there (not a run directory)")
    rows = os.path.join(path, ROWS_FILE)
    config = os.path.join(path, "config.toml")
    if os.path.exists(rows):
        with open(config) as f:
            text = f.read()
        if json.dumps(rows) not in text:
            # A run directory moved since training: its rows are beside its config.
            for line in text.splitlines():
                if line.strip().startswith("path =") and ROWS_FILE in line:
                    old = json.loads(line.split("=", 1)[1].strip())
                    _repoint(config, old, rows)
                    break
    return Run(path)


_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U32": np.uint32, "U8": np.uint8}


def read_safetensors(path):
    """A safetensors file's tensors as NumPy arrays over its memory map."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        buf = raw[base + start : base + end]
        if t["dtype"] == "BF16":
            wide = buf.view(np.uint16).astype(np.uint32) << 16
            out[name] = wide.view(np.float32).reshape(t["shape"])
        elif t["dtype"] in _DTYPES:
            out[name] = buf.view(_DTYPES[t["dtype"]]).reshape(t["shape"])
        else:
            raise DataError(f"{path}: {name}: dtype {t['dtype']} is not read here")
    return out
