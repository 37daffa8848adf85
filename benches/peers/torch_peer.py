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

Parity (`compare.sh` with SAME_INIT=1): `--init F` starts from the initial weights `widebag train
--save-init F` wrote (its checkpoint names; widebag's `[in, out]` matrices transposed to
PyTorch's `[out, in]`; the adaptive softmax's tail clusters then get widebag's biases), and
`--order widebag` reads the rows in widebag's order (its seeded shuffle, `data.shuffle = "rows"`,
rebuilt here from `--seed`), so the per-step `losses` of both sides can be compared.

Peak memory: the process's peak RSS (CPU), or torch.cuda.max_memory_allocated on a GPU.
Examples/s is timed from the end of the first step, as widebag times it.

As fast as PyTorch allows on the CPU, so that the comparison does not handicap it:
- every step's batch (its rows' ids, values and labels; per band, the bag's ids, offsets and
  weights) is built before the clock starts, vectorised (widebag assembles its batches on a
  read-ahead thread); the dense layout scatters each batch into one kept `[batch, width]` buffer
  (only the previous batch's entries are zeroed), as widebag keeps its freed blocks;
- the dense parameters' Adam is `--adam fused` by default (one pass per parameter; `foreach`
  and `single`, PyTorch's default on the CPU, are there to compare), the tables' SparseAdam;
- `--threads N` sets torch's threads (compare.sh passes the same count to both sides);
- `--compile` runs the layers after the input layer and the loss through `torch.compile`
  (inductor; the sparse EmbeddingBags stay eager: it does not compile sparse gradients); the
  compilation falls in step 1, before examples/s is timed;
- the allocator is the environment's (compare.sh's ALLOCATOR sets glibc's MALLOC_* variables);
  `minor_faults_per_step` (after step 1) shows what it keeps;
- `setup_s` is the time from the process's start (before `import torch`) to the first step:
  imports, parsing, renumbering, batch preparation, the model.

  python3 benches/peers/torch_peer.py --data F.svm --width W --classes C --layout sparse ...
"""
import argparse
import json
import os
import resource
import sys
import time
import warnings

START = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


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


def renumber(values, n, weights=None):
    """New number of each old id: by frequency (widebag's: the summed |value| of each id, the
    summed |weight| of each class), most frequent first, ties in id order."""
    w = None if weights is None else np.abs(weights).astype(np.float64)
    counts = np.bincount(values, weights=w, minlength=n).astype(np.float64)
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
        self.kept = None  # the dense input's buffer, kept from step to step
        self.filled = None  # the (row, id) entries the last batch set in it

    def inputs(self, batch):
        """The batch as the dense `[rows, width]` input (what `to_dense` of its CSR gives: ids
        that repeat in a row summed), written into the kept buffer: the previous batch's
        entries zeroed, this one's scattered; no `[batch, width]` allocation a step."""
        rows, ids = batch["rows"], batch["ids"]
        if self.kept is None or self.kept.shape[0] < rows:
            self.kept = torch.zeros(rows, self.input.in_features, device=ids.device)
            self.filled = None
        if self.filled is not None:
            self.kept.index_put_(self.filled, torch.zeros((), device=ids.device))
        self.filled = (batch["row_of"], ids)
        x = self.kept[:rows]
        x.index_put_(self.filled, batch["values"], accumulate=True)
        return x

    def head_loss(self, x, labels):
        h = self.mlp(F.relu(self.input(x)))
        return F.cross_entropy(self.output(h), labels)


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
        out = None
        for k, ((ids, offsets, weights), table) in enumerate(zip(batch["bands"], self.tables)):
            bag = table(ids, offsets, per_sample_weights=weights)
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

    def inputs(self, batch):
        """The input layer (sparse EmbeddingBags: outside `torch.compile`, which does not
        compile their sparse gradients)."""
        return self.input(batch)

    def head_loss(self, h, labels):
        h = self.mlp(h)
        if self.adaptive is not None:
            return self.adaptive(h, labels).loss
        return F.cross_entropy(self.output(h), labels)

    def sparse_parameters(self):
        return list(self.input.tables.parameters())


M64 = (1 << 64) - 1


def mix64(z):
    """widebag_data::rng::mix64 (SplitMix64's finaliser)."""
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def hash2(a, b):
    """widebag_data::rng::hash2."""
    return mix64(((a * 0x9e3779b97f4a7c15) & M64) ^ mix64((b + 0x632be59bd9b4e019) & M64))


def widebag_order(n, seed, epoch):
    """The rows of epoch `epoch` (0-based) in widebag's `data.shuffle = "rows"` order: a
    Fisher-Yates permutation drawn from SplitMix64(hash2(seed, epoch)) by multiply-shift."""
    state, order = hash2(seed, epoch), list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9e3779b97f4a7c15) & M64
        j = (mix64(state) * (i + 1)) >> 64
        order[i], order[j] = order[j], order[i]
    return np.asarray(order, np.int64)


def orders(n, seed, order_kind):
    """Each epoch's rows, in order: numpy's permutation (seeded), or widebag's shuffle."""
    rng = np.random.default_rng(seed)
    epoch = 0
    while True:
        yield widebag_order(n, seed, epoch) if order_kind == "widebag" else rng.permutation(n)
        epoch += 1


def prepare_batches(data, batch_size, steps, seed, order_kind, band_edges=None):
    """The first `steps` batches, every tensor built before training (vectorised): each
    epoch's rows in order, `batch_size` at a time (the last batch of an epoch smaller), sorted
    within a batch in numpy's order. A batch holds its rows' ids, values, the row of each id
    and labels; with `band_edges` (the sparse layouts) also each band's EmbeddingBag input:
    its ids less the band's start, the offsets and the per-sample weights."""
    indptr, ids, vals, labels = data
    out = []
    for order in orders(len(labels), seed, order_kind):
        for start in range(0, len(order), batch_size):
            if len(out) == steps:
                return out
            rows = order[start:start + batch_size]
            if order_kind != "widebag":
                rows = np.sort(rows)
            lens = indptr[rows + 1] - indptr[rows]
            ends = np.cumsum(lens)
            take = np.repeat(indptr[rows] - (ends - lens), lens) + np.arange(ends[-1])
            b_ids, b_vals = ids[take], vals[take]
            row_of = np.repeat(np.arange(len(rows)), lens)
            batch = {"rows": len(rows), "ids": torch.from_numpy(b_ids),
                     "values": torch.from_numpy(b_vals), "row_of": torch.from_numpy(row_of),
                     "labels": torch.from_numpy(labels[rows])}
            if band_edges is not None:
                batch["bands"] = []
                for s, e in band_edges:
                    keep = (b_ids >= s) & (b_ids < e)
                    offsets = np.searchsorted(row_of[keep], np.arange(len(rows)))
                    batch["bands"].append((torch.from_numpy(b_ids[keep] - s),
                                           torch.from_numpy(offsets),
                                           torch.from_numpy(b_vals[keep])))
            out.append(batch)
    return out


def to_device(batch, device):
    """The batch's tensors on `device` (moved once, before training)."""
    move = lambda v: v.to(device) if torch.is_tensor(v) else v  # noqa: E731
    return {k: ([tuple(map(move, band)) for band in v] if k == "bands" else move(v))
            for k, v in batch.items()}


def read_safetensors(path):
    """Every tensor of a safetensors file as float32 numpy arrays, by name."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}, not F32")
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(body[a:b], np.float32).reshape(t["shape"])
    return out


def load_widebag_init(model, path, layout):
    """Copies widebag's initial weights (`train --save-init`) into `model`: its `[in, out]`
    matrices transposed to PyTorch's `[out, in]`, table shards and class chunks joined. Every
    tensor of the file is used and every parameter of the model set, or it stops."""
    w = read_safetensors(path)
    used, done = set(), set()

    def take(name):
        if name not in w:
            raise SystemExit(f"{path}: no tensor {name} (have {sorted(w)})")
        used.add(name)
        return w[name]

    def joined(prefix, axis):
        """Tensors `prefix0`, `prefix1`, ... (a table's shards) joined along `axis`."""
        parts = [take(f"{prefix}{k}") for k in range(len(w)) if f"{prefix}{k}" in w]
        return np.concatenate(parts, axis=axis)

    def put(param, value, what):
        value = torch.from_numpy(np.array(value, np.float32)).reshape(param.shape)
        if tuple(value.shape) != tuple(param.shape):
            raise SystemExit(f"{path}: {what} has shape {value.shape}, the peer {param.shape}")
        with torch.no_grad():
            param.copy_(value)
        done.add(id(param))

    if layout == "dense":
        put(model.input.weight, take("input.weight").T, "input.weight")
        put(model.input.bias, take("input.bias"), "input.bias")
        put(model.output.weight, take("output.weight").T, "output.weight")
        put(model.output.bias, take("output.bias"), "output.bias")
    else:
        for k, table in enumerate(model.input.tables):
            put(table.weight, joined(f"input.{k}.weight.shard", 0), f"input.{k}.weight")
        for k, proj in enumerate(model.input.projections, 1):
            put(proj.weight, take(f"input_band.{k}.projection").T, f"input_band.{k}.projection")
        put(model.input.bias, take("bag.bias"), "bag.bias")
        if model.adaptive is None:
            put(model.output.weight, joined_chunks(w, take, "weight").T, "output.weight")
            put(model.output.bias, joined_chunks(w, take, "bias"), "output.bias")
        else:
            ad = model.adaptive
            put(ad.head.weight, take("output.head.weight").T, "output.head.weight")
            put(ad.head.bias, take("output.head.bias"), "output.head.bias")
            for k, tail in enumerate(ad.tail, 1):
                put(tail[0].weight, take(f"output.tail.{k}.projection").T, "tail projection")
                put(tail[1].weight, take(f"output.tail.{k}.weight").T, "tail weight")
                put(tail[1].bias, take(f"output.tail.{k}.bias"), "tail bias")
    for i, layer in enumerate(model.mlp.layers):
        put(layer.weight, take(f"hidden.{i}.weight").T, f"hidden.{i}.weight")
        put(layer.bias, take(f"hidden.{i}.bias"), f"hidden.{i}.bias")
    left = sorted(set(w) - used)
    unset = [n for n, q in model.named_parameters() if id(q) not in done]
    if left or unset:
        raise SystemExit(f"{path}: tensors not used {left}, parameters not set {unset}")


def joined_chunks(w, take, kind):
    """The full softmax's class chunks (`output.C.weight`, `[last, n_C]`) joined along classes."""
    parts, c = [], 0
    while f"output.{c}.{kind}" in w:
        parts.append(take(f"output.{c}.{kind}"))
        c += 1
    return np.concatenate(parts, axis=1)


def input_init(model, layout, dim, width, kind):
    """The input layer initialised as widebag's `model.input_init = kind` (drawn with PyTorch's
    generator): every table band's rows, or the dense input weight, `uniform` U(±sqrt(3 / band
    dim)), `normal` N(0, 1) (EmbeddingBag's default) or `fan_in` U(±1/sqrt(width)) (Linear's);
    each tail band's projection U(±sqrt(3 / dim)), the dense input's bias zero. Every later
    layer starts as PyTorch's default, which is widebag's too (U(±1/sqrt(fan_in)))."""

    def fill(weight, band_dim):
        if kind == "normal":
            weight.normal_(0.0, 1.0)
        else:
            bound = (3.0 / band_dim) ** 0.5 if kind == "uniform" else width ** -0.5
            weight.uniform_(-bound, bound)

    with torch.no_grad():
        if layout == "dense":
            fill(model.input.weight, dim)
            model.input.bias.zero_()
            return
        for table in model.input.tables:
            fill(table.weight, table.embedding_dim)
        for proj in model.input.projections:
            bound = (3.0 / dim) ** 0.5
            proj.weight.uniform_(-bound, bound)


def add_tail_biases(adaptive):
    """widebag's adaptive softmax gives each tail cluster's classes a bias; PyTorch's has none."""
    for tail in adaptive.tail:
        tail[1].bias = nn.Parameter(torch.zeros(tail[1].out_features))


ADAM = {"fused": {"fused": True}, "foreach": {"foreach": True}, "single": {"foreach": False}}


def adam(params, lr, kind):
    """torch.optim.Adam (PyTorch's defaults but the learning rate) in implementation `kind`:
    `fused` (one kernel per parameter), `foreach` (multi-tensor) or `single` (per-tensor ops:
    PyTorch's default on the CPU). The same arithmetic to float32 rounding."""
    return torch.optim.Adam(params, lr=lr, **ADAM[kind])


def allocator_env():
    """The glibc allocator settings the environment gave this process (compare.sh's ALLOCATOR)."""
    return {k: v for k, v in os.environ.items()
            if k.startswith("MALLOC_") or k in ("GLIBC_TUNABLES", "LD_PRELOAD")}


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
    p.add_argument("--init", help="start from widebag's initial weights (train --save-init)")
    p.add_argument("--input-init", choices=["pytorch", "uniform", "normal", "fan_in"],
                   default="pytorch",
                   help="the input layer's initialisation: each module's PyTorch default "
                        "(EmbeddingBag N(0, 1), Linear U(±1/sqrt(width))), or as widebag's "
                        "model.input_init of that name")
    p.add_argument("--order", choices=["numpy", "widebag"], default="numpy",
                   help="the rows' order: numpy's permutation, or widebag's seeded shuffle")
    p.add_argument("--threads", type=int, help="torch's threads (default: torch's own choice)")
    p.add_argument("--adam", choices=sorted(ADAM), default="fused",
                   help="the dense parameters' Adam implementation (default fused)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the step's layers after the input (inductor)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)

    rss_after_import = rss_bytes()
    (indptr, ids, vals, labels), header = read_libsvm(a.data)
    a.width = a.width or int(header.get("width", ids.max() + 1))
    a.classes = a.classes or int(header.get("n_classes", labels.max() + 1))
    if a.layout == "headtail":
        ids = renumber(ids, a.width, vals)[ids]
        labels = renumber(labels, a.classes)[labels]
    data = (indptr, ids, vals, labels)

    if a.layout == "dense":
        model = DenseModel(a.width, a.classes, a.dim, a.hidden)
    else:
        cut_in = a.input_cutoffs if a.layout == "headtail" else []
        cut_out = a.output_cutoffs if a.layout == "headtail" else []
        model = SparseModel(a.width, a.classes, a.dim, a.hidden, a.factor, cut_in, cut_out)
        if a.init and model.adaptive is not None:
            add_tail_biases(model.adaptive)
    if a.input_init != "pytorch":
        input_init(model, a.layout, a.dim, a.width, a.input_init)
    if a.init:
        load_widebag_init(model, a.init, a.layout)
    model = model.to(device)
    if a.layout != "dense":
        sparse = {id(q) for q in model.sparse_parameters()}
        optims = [
            torch.optim.SparseAdam(model.sparse_parameters(), lr=a.lr),
            adam([q for q in model.parameters() if id(q) not in sparse], a.lr, a.adam),
        ]
        edges = [(s, e) for s, e, _ in model.input.bands]
    else:
        optims = [adam(model.parameters(), a.lr, a.adam)]
        edges = None
    prepared = prepare_batches(data, a.batch, a.steps, a.seed, a.order, edges)
    if device.type != "cpu":
        prepared = [to_device(b, device) for b in prepared]
    head_loss = torch.compile(model.head_loss) if a.compile else model.head_loss
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    losses, t0, timed_rows = [], None, 0
    setup_s = time.perf_counter() - START
    train_start = time.perf_counter()
    for step, b in enumerate(prepared, 1):
        for o in optims:
            o.zero_grad(set_to_none=True)
        loss = head_loss(model.inputs(b), b["labels"])
        loss.backward()
        for o in optims:
            o.step()
        losses.append(loss.detach().item())
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step == 1:
            t0 = time.perf_counter()
            first_step_s = t0 - train_start
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        else:
            timed_rows += b["rows"]
    end = time.perf_counter()
    elapsed = end - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    peak = (torch.cuda.max_memory_allocated() if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    json.dump({
        "peer": f"torch {torch.__version__}",
        "layout": a.layout,
        "width": a.width,
        "n_classes": a.classes,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "adam": a.adam,
        "compile": a.compile,
        "allocator_env": allocator_env(),
        "steps": a.steps,
        "batch_size": a.batch,
        "examples_per_s": timed_rows / elapsed if a.steps > 1 else None,
        "setup_s": setup_s,
        "train_s": end - train_start,
        "first_step_s": first_step_s,
        "minor_faults_per_step": faults / (a.steps - 1) if a.steps > 1 else None,
        "peak_bytes": peak,
        "peak_kind": "cuda max_memory_allocated" if device.type == "cuda" else "peak RSS",
        "rss_after_import_bytes": rss_after_import,
        "init": "widebag's weights (--init)" if a.init else f"input init {a.input_init}",
        "order": a.order,
        "seed": a.seed,
        "losses": losses,
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "final_loss_mean10": sum(losses[-10:]) / len(losses[-10:]),
        "parameters": sum(q.numel() for q in model.parameters()),
    }, sys.stdout)
    print()


if __name__ == "__main__":
    main()
