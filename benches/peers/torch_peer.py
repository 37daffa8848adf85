#!/usr/bin/env python3
"""The PyTorch peer of `widebag train`: the same models on the same libsvm file the CLI writes
(`widebag data synth --to libsvm`), reporting examples/s and peak memory as JSON.

Layouts (as widebag's):
  dense     nn.Linear(width, dim) on the dense [batch, width] input, full softmax, Adam
  sparse    nn.EmbeddingBag(sparse=True, mode="sum", per_sample_weights) + SparseAdam, full
            softmax, Adam for the dense layers
  headtail  adaptive input (one sparse EmbeddingBag per band, dim / factor^k wide, projected up)
            + nn.AdaptiveLogSoftmaxWithLoss, ids and classes renumbered by frequency as widebag
            does (most frequent first, ties in id order)

Peak memory: the process's peak RSS (CPU), or torch.cuda.max_memory_allocated on a GPU.
Examples/s is timed from the end of the first step, as widebag times it.

  python3 benches/peers/torch_peer.py --data F.svm --width W --classes C --layout sparse ...
"""
import argparse
import json
import resource
import sys
import time

import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def rss_bytes():
    """The process's resident memory now (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def read_libsvm(path, zero_based=True):
    """Rows as (indptr, ids, values), one class label per row, and the header's settings
    (`# widebag libsvm: zero_based=true width=W n_classes=C`, as `widebag data` writes it)."""
    indptr, ids, vals, labels, header = [0], [], [], [], {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if n == 1 and line.startswith("# widebag libsvm:"):
                header = dict(kv.split("=", 1) for kv in line.split(":", 1)[1].split())
                zero_based = header.get("zero_based", "true") == "true"
                continue
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            labels.append(int(parts[0].split(",")[0]))
            for tok in parts[1:]:
                if tok.startswith("qid:"):
                    continue
                i, v = tok.split(":")
                ids.append(int(i) - (0 if zero_based else 1))
                vals.append(float(v))
            indptr.append(len(ids))
    data = (np.asarray(indptr, np.int64), np.asarray(ids, np.int64),
            np.asarray(vals, np.float32), np.asarray(labels, np.int64))
    return data, header


def renumber(values, n):
    """New number of each old id: by frequency, most frequent first, ties in id order."""
    counts = np.bincount(values, minlength=n).astype(np.float64)
    order = np.lexsort((np.arange(n), -counts))
    new = np.empty(n, np.int64)
    new[order] = np.arange(n)
    return new


def bands(n, dim, factor, cutoffs):
    edges = [0] + list(cutoffs) + [n]
    return [(edges[k], edges[k + 1], max(dim // factor ** k, 1)) for k in range(len(edges) - 1)]


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        sizes = [dim] + hidden
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return x


class DenseModel(nn.Module):
    def __init__(self, width, classes, dim, hidden):
        super().__init__()
        self.input = nn.Linear(width, dim)
        self.mlp = Mlp(dim, hidden)
        self.output = nn.Linear(([dim] + hidden)[-1], classes)

    def loss(self, batch):
        x = torch.sparse_csr_tensor(batch["indptr"], batch["ids"], batch["values"],
                                    size=(batch["rows"], self.input.in_features)).to_dense()
        h = self.mlp(F.relu(self.input(x)))
        return F.cross_entropy(self.output(h), batch["labels"])


class BagInput(nn.Module):
    """Adaptive input over id bands (one band: a plain sparse EmbeddingBag)."""

    def __init__(self, width, dim, factor, cutoffs):
        super().__init__()
        self.bands = bands(width, dim, factor, cutoffs)
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(e - s, d, mode="sum", sparse=True) for s, e, d in self.bands)
        self.projections = nn.ModuleList(
            nn.Linear(d, dim, bias=False) for _, _, d in self.bands[1:])
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, batch):
        rows = batch["rows"]
        ids, values, row_of = batch["ids"], batch["values"], batch["row_of"]
        out = None
        for k, ((s, e, _), table) in enumerate(zip(self.bands, self.tables)):
            keep = (ids >= s) & (ids < e)
            r = row_of[keep]
            offsets = torch.searchsorted(r, torch.arange(rows, device=r.device))
            bag = table(ids[keep] - s, offsets, per_sample_weights=values[keep])
            if k > 0:
                bag = self.projections[k - 1](bag)
            out = bag if out is None else out + bag
        return F.relu(out + self.bias)


class SparseModel(nn.Module):
    def __init__(self, width, classes, dim, hidden, factor=4, input_cutoffs=(),
                 output_cutoffs=()):
        super().__init__()
        self.input = BagInput(width, dim, factor, input_cutoffs)
        self.mlp = Mlp(dim, hidden)
        last = ([dim] + hidden)[-1]
        if output_cutoffs:
            self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(
                last, classes, list(output_cutoffs), div_value=float(factor), head_bias=True)
            self.output = None
        else:
            self.adaptive = None
            self.output = nn.Linear(last, classes)

    def loss(self, batch):
        h = self.mlp(self.input(batch))
        if self.adaptive is not None:
            return self.adaptive(h, batch["labels"]).loss
        return F.cross_entropy(self.output(h), batch["labels"])

    def sparse_parameters(self):
        return list(self.input.tables.parameters())


def batches(data, batch_size, seed):
    indptr, ids, vals, labels = data
    n = len(labels)
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            rows = np.sort(order[start:start + batch_size])
            lens = indptr[rows + 1] - indptr[rows]
            take = np.concatenate([np.arange(indptr[r], indptr[r + 1]) for r in rows])
            b_ids = ids[take]
            row_of = np.repeat(np.arange(len(rows)), lens)
            yield {
                "rows": len(rows),
                "indptr": torch.from_numpy(np.concatenate([[0], np.cumsum(lens)])),
                "ids": torch.from_numpy(b_ids),
                "values": torch.from_numpy(vals[take]),
                "row_of": torch.from_numpy(row_of),
                "labels": torch.from_numpy(labels[rows]),
            }


def main():
    warnings.filterwarnings("ignore", message="Sparse")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--width", type=int, help="default: the file's header, else the largest id + 1")
    p.add_argument("--classes", type=int, help="default: the header, else the largest label + 1")
    p.add_argument("--layout", choices=["dense", "sparse", "headtail"], required=True)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--hidden", type=int, nargs="*", default=[64])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--input-cutoffs", type=int, nargs="*", default=[])
    p.add_argument("--output-cutoffs", type=int, nargs="*", default=[])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    device = torch.device(a.device)

    rss_after_import = rss_bytes()
    (indptr, ids, vals, labels), header = read_libsvm(a.data)
    a.width = a.width or int(header.get("width", ids.max() + 1))
    a.classes = a.classes or int(header.get("n_classes", labels.max() + 1))
    if a.layout == "headtail":
        ids = renumber(ids, a.width)[ids]
        labels = renumber(labels, a.classes)[labels]
    data = (indptr, ids, vals, labels)

    if a.layout == "dense":
        model = DenseModel(a.width, a.classes, a.dim, a.hidden).to(device)
        optims = [torch.optim.Adam(model.parameters(), lr=a.lr)]
    else:
        cut_in = a.input_cutoffs if a.layout == "headtail" else []
        cut_out = a.output_cutoffs if a.layout == "headtail" else []
        model = SparseModel(a.width, a.classes, a.dim, a.hidden, a.factor, cut_in,
                            cut_out).to(device)
        sparse = {id(q) for q in model.sparse_parameters()}
        optims = [
            torch.optim.SparseAdam(model.sparse_parameters(), lr=a.lr),
            torch.optim.Adam([q for q in model.parameters() if id(q) not in sparse], lr=a.lr),
        ]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    losses, t0 = [], None
    stream = batches(data, a.batch, a.seed)
    for step in range(1, a.steps + 1):
        b = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in next(stream).items()}
        for o in optims:
            o.zero_grad(set_to_none=True)
        loss = model.loss(b)
        loss.backward()
        for o in optims:
            o.step()
        losses.append(loss.detach().item())
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step == 1:
            t0 = time.perf_counter()
    elapsed = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    json.dump({
        "peer": f"torch {torch.__version__}",
        "layout": a.layout,
        "width": a.width,
        "n_classes": a.classes,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "steps": a.steps,
        "batch_size": a.batch,
        "examples_per_s": (a.steps - 1) * a.batch / elapsed if a.steps > 1 else None,
        "peak_bytes": peak,
        "peak_kind": "cuda max_memory_allocated" if device.type == "cuda" else "peak RSS",
        "rss_after_import_bytes": rss_after_import,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "final_loss_mean10": sum(losses[-10:]) / len(losses[-10:]),
        "parameters": sum(q.numel() for q in model.parameters()),
    }, sys.stdout)
    print()


if __name__ == "__main__":
    main()
