#!/usr/bin/env python3
"""Mult-DAE on Gowalla in PyTorch: the peer of `widebag train --config configs/gowalla.toml` for
benches/peers/time-to-recall.sh.

The same data (the LightGCN split: each line `user item item ...`), model (items -> 600 tanh ->
items: the L2-normalised bag of a user's training items, input dropout 0.5, the multinomial
log-likelihood -sum x log softmax over the raw counts, mean over the batch), optimizer (Adam, lr
1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay), schedule (half a cosine to 0 over the run's
steps, as `transformers` computes it: the first step at the full rate), batch (500 users, a fresh
permutation each epoch, the last batch of an epoch smaller), epochs (20) and evaluation (every
epoch: full ranking over every item with the user's training items masked, LightGCN's Recall@20
= hits / |test items| and NDCG@20 with the ideal DCG over min(|test items|, 20), mean over the
users with a test item), on as many threads as widebag uses. PyTorch's default initialisation.

As fast as PyTorch allows on the CPU, so that the comparison does not handicap it:
- every epoch's batches (the permutation, each batch's item ids, offsets, rows and counts) and
  every evaluation batch's inputs (the bags, their L2-normalised weights, the training items
  masked from the ranking, the test items as sorted keys) are built before training starts,
  vectorised, as widebag prepares its evaluation once; the dense layout scatters a batch into one
  kept `[rows, items]` buffer, zeroing only the previous batch's entries;
- the dense parameters' Adam is `--adam fused` by default (`foreach`, `single`: PyTorch's CPU
  default), the bag's table SparseAdam (lazy Adam, as widebag's table);
- `--compile` runs the step after the input layer's sums (bag) or after the input dropout
  (dense) through `torch.compile`, the dropout staying eager so that it draws the same masks.

Prints one JSON line per evaluation (`epoch`, `step`, `recall@20`, `ndcg@20`, `clock_s`: from
the start of training, the first step, to the end of the evaluation, `elapsed_s`: from this
process's start, before `import torch`, `eval_s`: the evaluation's own time) and a last line
with `train_s`, `setup_s` (the process's start to the first step: imports, reading, batch and
evaluation inputs, the model), `first_step_s`, `train_minor_faults_per_step` and the
evaluations.

    python3 multdae_peer.py --data ../shared/data/gowalla --threads 2 [--epochs 20] [--seed 0]
    python3 multdae_peer.py --config configs/gowalla-fast.toml --threads 2   (that config's model)
"""

import argparse
import json
import math
import os
import resource
import time

START = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402


def read_lists(path):
    users, items = [], []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2:
                continue
            u = int(parts[0])
            for i in parts[1:]:
                users.append(u)
                items.append(int(i))
    return np.array(users, dtype=np.int64), np.array(items, dtype=np.int64)


def csr(users, items, n_users, n_items):
    order = np.lexsort((items, users))
    users, items = users[order], items[order]
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.add.at(indptr, users + 1, 1)
    return np.cumsum(indptr), items


def gather(indptr, indices, rows):
    """The rows' bags, vectorised: their items one row after the other, the row (0-based in
    `rows`) of each item, and each row's length."""
    rows = np.asarray(rows, dtype=np.int64)
    lens = indptr[rows + 1] - indptr[rows]
    ends = np.cumsum(lens)
    take = np.repeat(indptr[rows] - (ends - lens), lens) + np.arange(ends[-1] if len(rows) else 0)
    return indices[take], np.repeat(np.arange(len(rows)), lens), lens


def bag_rows(indptr, indices, rows):
    """The rows' bags as EmbeddingBag input: (item ids, offsets, counts, the row of each id)."""
    idx, row_of, lens = gather(indptr, indices, rows)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    return (torch.from_numpy(idx), torch.from_numpy(offsets), torch.ones(len(idx)),
            torch.from_numpy(row_of))


class DenseBags:
    """Bags of items as dense `[rows, n_items]` counts, written into one kept buffer: the
    previous bags' entries zeroed, these added (`index_put_` with `accumulate`, as a fresh
    zeroed matrix got them before), so no `[rows, n_items]` matrix is allocated, faulted in and
    zeroed per batch. The returned view is valid until the next call."""

    def __init__(self, rows, n_items, device="cpu"):
        self.buf = torch.zeros(rows, n_items, device=device)
        self.last = None

    def __call__(self, idx, counts, row_of, n_rows):
        if self.last is not None:
            self.buf.index_put_(self.last, torch.zeros((), device=self.buf.device))
        self.last = (row_of, idx)
        x = self.buf[:n_rows]
        x.index_put_((row_of, idx), counts, accumulate=True)
        return x


def bag_norms(counts, row_of, n_rows):
    """Each entry's count over its row's L2 norm (Mult-DAE's F.normalize of the bag)."""
    norms = torch.zeros(n_rows, device=counts.device).index_add_(0, row_of, counts * counts).sqrt()
    return counts / norms[row_of]


class MultDAEBag(torch.nn.Module):
    """The same Mult-DAE with a sparse input side, as widebag computes it: the first layer an
    EmbeddingBag (sum of the L2-normalised, dropped-out item weights; sparse gradients for
    SparseAdam, lazy Adam like widebag's table), its bias and the decoder dense."""

    def __init__(self, n_items, dim, dropout):
        super().__init__()
        self.p = dropout
        self.encode = torch.nn.EmbeddingBag(n_items, dim, mode="sum", sparse=True)
        bound = 1.0 / math.sqrt(n_items)  # nn.Linear(n_items, dim)'s initialisation
        torch.nn.init.uniform_(self.encode.weight, -bound, bound)
        self.bias = torch.nn.Parameter(torch.empty(dim).uniform_(-bound, bound))
        self.decode = torch.nn.Linear(dim, n_items)

    def bags(self, idx, offsets, weights):
        """The EmbeddingBag's sums (eager: `torch.compile` does not compile sparse gradients)."""
        return self.encode(idx, offsets, per_sample_weights=weights)

    def head(self, bags):
        return self.decode(torch.tanh(bags + self.bias))

    def forward(self, idx, offsets, counts, row_of, n_rows):
        w = torch.nn.functional.dropout(bag_norms(counts, row_of, n_rows), self.p, self.training)
        return self.head(self.bags(idx, offsets, w))

    def loss(self, bags, idx, counts, row_of, n_rows):
        """The multinomial likelihood of the batch's own items, mean over its rows."""
        logp = torch.log_softmax(self.head(bags), dim=1)
        return -(logp[row_of, idx] * counts).sum() / n_rows


class SampledBag(MultDAEBag):
    """The bag Mult-DAE with widebag's sampled softmax (`model.output = "sampled_softmax"`): a
    step scores its rows against the batch's own items and `negatives` items drawn uniformly
    without replacement (the candidates), each drawn item's score less ln(negatives / items)
    (log-Q; 0 for the batch's items), softmax over the candidates against the bag's counts. The
    output weight and bias are sparse embeddings (SparseAdam: only the candidates' rows move),
    scored by `h · w + b` or, with `cosine`, by `cos(h, w) / temperature` (no bias), as widebag
    scores them in training and evaluation."""

    def __init__(self, n_items, dim, dropout, negatives, cosine, temperature):
        super().__init__(n_items, dim, dropout)
        bound = 1.0 / math.sqrt(dim)  # nn.Linear(dim, n_items)'s initialisation
        self.out_w = torch.nn.Embedding(n_items, dim, sparse=True)
        self.out_b = torch.nn.Embedding(n_items, 1, sparse=True)
        torch.nn.init.uniform_(self.out_w.weight, -bound, bound)
        torch.nn.init.uniform_(self.out_b.weight, -bound, bound)
        del self.decode
        self.n_items, self.negatives = n_items, negatives
        self.cosine, self.temperature = cosine, temperature
        self.log_q = math.log(negatives / n_items)

    def scores(self, h, w, b):
        if self.cosine:
            hn = torch.nn.functional.normalize(h, dim=1)
            return hn @ torch.nn.functional.normalize(w, dim=1).T / self.temperature
        return h @ w.T + b.T

    def head(self, bags):
        """Every item's score (evaluation)."""
        h = torch.tanh(bags + self.bias)
        return self.scores(h, self.out_w.weight, self.out_b.weight)

    def loss(self, bags, idx, counts, row_of, n_rows):
        drawn = torch.randperm(self.n_items, device=idx.device)[:self.negatives]
        cand, inverse = torch.unique(torch.cat([idx, drawn]), return_inverse=True)
        positive = torch.zeros(len(cand), dtype=torch.bool, device=idx.device)
        positive[inverse[:len(idx)]] = True
        log_q = torch.where(positive, 0.0, self.log_q)
        h = torch.tanh(bags + self.bias)
        z = self.scores(h, self.out_w(cand), self.out_b(cand)) - log_q
        logp = torch.log_softmax(z, dim=1)
        return -(logp[row_of, inverse[:len(idx)]] * counts).sum() / n_rows


class MultDAE(torch.nn.Module):
    def __init__(self, n_items, dim, dropout):
        super().__init__()
        self.drop = torch.nn.Dropout(dropout)
        self.encode = torch.nn.Linear(n_items, dim)
        self.decode = torch.nn.Linear(dim, n_items)

    def inputs(self, x):
        """The normalised, dropped-out bag (eager: dropout draws from torch's generator in the
        same order whether or not the rest is compiled)."""
        return self.drop(torch.nn.functional.normalize(x, dim=1))

    def head(self, h):
        return self.decode(torch.tanh(self.encode(h)))

    def forward(self, x):
        return self.head(self.inputs(x))

    def loss(self, h, x):
        return -(torch.log_softmax(self.head(h), dim=1) * x).sum(dim=1).mean()


def eval_batches(train, test, n_users, n_items, users_per_batch=1000):
    """Every evaluation batch's inputs, built once per run: the users with a test item, 1,000 at
    a time; their training bags (ids, offsets, counts, rows; the bag layout's L2-normalised
    weights), which are also the items masked from the ranking; their test items as sorted keys
    `row * n_items + item`, and how many distinct test items each has."""
    t_indptr = test[0]
    users = np.flatnonzero(t_indptr[1:] > t_indptr[:-1])
    out = []
    for b in range(0, len(users), users_per_batch):
        rows = users[b:b + users_per_batch]
        idx, offsets, counts, row_of = bag_rows(*train, rows)
        t_idx, t_row, _ = gather(*test, rows)
        keys = np.unique(t_row * n_items + t_idx)
        out.append({
            "n_rows": len(rows), "idx": idx, "offsets": offsets, "counts": counts,
            "row_of": row_of, "weights": bag_norms(counts, row_of, len(rows)),
            "truth_keys": torch.from_numpy(keys),
            "n_truth": torch.from_numpy(np.bincount(keys // n_items, minlength=len(rows))),
            "row_keys": torch.arange(len(rows)).unsqueeze(1) * n_items,
        })
    return users, out


def evaluate(model, users, batches, dense_bags=None, k=20):
    """LightGCN's Recall@k and NDCG@k over the users with a test item, on the inputs
    `eval_batches` built (the dense layout's bags scattered into `dense_bags`' kept buffer)."""
    model.eval()
    dev = next(model.parameters()).device
    discounts = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float64, device=dev))
    ideal = torch.cat([torch.zeros(1, dtype=torch.float64, device=dev), discounts.cumsum(0)])
    recall = ndcg = 0.0
    with torch.inference_mode():
        for e in batches:
            if dense_bags is None:
                scores = model.head(model.bags(e["idx"], e["offsets"], e["weights"]))
            else:
                scores = model(dense_bags(e["idx"], e["counts"], e["row_of"], e["n_rows"]))
            scores.index_put_((e["row_of"], e["idx"]), torch.tensor(-math.inf, device=dev))
            top = torch.topk(scores, k, dim=1).indices
            hits = torch.isin(top + e["row_keys"], e["truth_keys"]).double()
            n_truth = e["n_truth"]
            recall += (hits.sum(dim=1) / n_truth).sum().item()
            ndcg += ((hits * discounts).sum(dim=1) / ideal[n_truth.clamp(max=k)]).sum().item()
    model.train()
    return recall / len(users), ndcg / len(users)


ADAM = {"fused": {"fused": True}, "foreach": {"foreach": True}, "single": {"foreach": False}}


def allocator_env():
    """The glibc allocator settings the environment gave this process (the drivers' ALLOCATOR)."""
    return {k: v for k, v in os.environ.items()
            if k.startswith("MALLOC_") or k in ("GLIBC_TUNABLES", "LD_PRELOAD")}


def from_config(path, args, ap):
    """Sets the model, batch, schedule and optimizer from a widebag config (`--config`), so that
    the peer is the config's model: refuses a config whose model it does not compute (a hidden
    layer, another activation, pooling, score, proposal or optimizer)."""
    import tomllib
    with open(path, "rb") as f:
        c = tomllib.load(f)
    model, train, optim = c.get("model", {}), c.get("train", {}), c.get("optim", {})
    sampling = model.get("sampling", {})
    need = {
        "data.normalize": (c.get("data", {}).get("normalize", False), True),
        "model.hidden": (model.get("hidden", []), []),
        "model.activation": (model.get("activation", "tanh"), "tanh"),
        "model.pooling": (model.get("pooling", "sum"), "sum"),
        "model.tie_output": (model.get("tie_output", False), False),
        "model.sampling.proposal": (sampling.get("proposal", "uniform"), "uniform"),
        "model.sampling.batch_negatives": (sampling.get("batch_negatives", True), True),
        "optim.dense": (optim.get("dense", "adam"), "adam"),
        "optim.table": (optim.get("table", "adam"), "adam"),
        "optim.schedule": (optim.get("schedule", "cosine"), "cosine"),
    }
    for key, (got, want) in need.items():
        if got != want:
            ap.error(f"{path}: {key} = {got!r}: the peer computes {want!r} only")
    output = model.get("output", "multinomial")
    if output not in ("multinomial", "sampled_softmax"):
        ap.error(f"{path}: model.output = {output!r}: the peer computes multinomial or "
                 "sampled_softmax")
    args.dim = model.get("dim", args.dim)
    args.dropout = model.get("input_dropout", args.dropout)
    args.batch = train.get("batch_size", args.batch)
    args.epochs = train.get("epochs", args.epochs)
    args.lr = optim.get("lr", args.lr)
    if output == "sampled_softmax":
        args.input = "bag"
        args.negatives = sampling.get("negatives", 1024)
        args.score = model.get("score", "dot")
        args.temperature = model.get("temperature", 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/gowalla")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--dim", type=int, default=600)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.1641)
    ap.add_argument("--input", choices=["dense", "bag"], default="dense",
                    help="dense: nn.Linear over the dense bag (RecBole's MultiDAE); bag: "
                         "EmbeddingBag + SparseAdam on the first layer (widebag's layout)")
    ap.add_argument("--adam", choices=sorted(ADAM), default="fused",
                    help="the dense parameters' Adam implementation (default fused)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the training step's layers after the input (inductor)")
    ap.add_argument("--negatives", type=int, default=0,
                    help="> 0: the sampled softmax over the batch's items and this many drawn "
                         "ones (bag input only), as widebag's model.output = \"sampled_softmax\"")
    ap.add_argument("--score", choices=["dot", "cosine"], default="dot",
                    help="the sampled softmax's scores (widebag's model.score)")
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="divides cosine scores (widebag's model.temperature)")
    ap.add_argument("--stop-at-target", action="store_true",
                    help="end at the first evaluation at or above --target, as widebag's "
                         "train.stop_at_metric does (the schedule stays the --epochs run's)")
    ap.add_argument("--device", default="cpu",
                    help="cpu or cuda: where the model, every batch and every evaluation input "
                         "live (all moved there before the clock starts); on cuda each epoch's "
                         "and the first step's time waits for the device")
    ap.add_argument("--config", default=None,
                    help="a widebag config (TOML): its model, batch, epochs, learning rate and "
                         "sampled softmax replace the flags above (refused unless the peer "
                         "computes that model)")
    args = ap.parse_args()
    if args.config:
        from_config(args.config, args, ap)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")

    def sync():
        """Waits for the device's queued work (a no-op on the CPU), so a clock read after it
        counts that work."""
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    rng = np.random.default_rng(args.seed)

    tu, ti = read_lists(f"{args.data}/train.txt")
    vu, vi = read_lists(f"{args.data}/test.txt")
    n_users = int(max(tu.max(), vu.max())) + 1
    n_items = int(max(ti.max(), vi.max())) + 1
    train = csr(tu, ti, n_users, n_items)
    test = csr(vu, vi, n_users, n_items)
    trainers = np.flatnonzero(train[0][1:] > train[0][:-1])

    bag = args.input == "bag"
    if args.negatives > 0 and not bag:
        ap.error("--negatives needs --input bag")
    if args.negatives > 0:
        model = SampledBag(n_items, args.dim, args.dropout, args.negatives,
                           args.score == "cosine", args.temperature).to(dev)
        opts = [torch.optim.SparseAdam([model.encode.weight, model.out_w.weight,
                                        model.out_b.weight], lr=args.lr),
                torch.optim.Adam([model.bias], lr=args.lr, **ADAM[args.adam])]
    elif bag:
        model = MultDAEBag(n_items, args.dim, args.dropout).to(dev)
        opts = [torch.optim.SparseAdam([model.encode.weight], lr=args.lr),
                torch.optim.Adam([model.bias, *model.decode.parameters()], lr=args.lr,
                                 **ADAM[args.adam])]
    else:
        model = MultDAE(n_items, args.dim, args.dropout).to(dev)
        opts = [torch.optim.Adam(model.parameters(), lr=args.lr, **ADAM[args.adam])]
    per_epoch = math.ceil(len(trainers) / args.batch)
    total = per_epoch * args.epochs
    scheds = [torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1.0 + math.cos(math.pi * s / total))) for opt in opts]

    # Every epoch's batches and every evaluation's inputs, built before training starts.
    epochs = []
    for _ in range(args.epochs):
        order = rng.permutation(trainers)
        epochs.append([tuple(t.to(dev) for t in bag_rows(*train, order[b:b + args.batch]))
                       + (len(order[b:b + args.batch]),)
                       for b in range(0, len(order), args.batch)])
    eval_users, eval_inputs = eval_batches(train, test, n_users, n_items)
    eval_inputs = [{k: v.to(dev) if torch.is_tensor(v) else v for k, v in e.items()}
                   for e in eval_inputs]
    train_bags = None if bag else DenseBags(args.batch, n_items, dev)
    eval_bags = None if bag else DenseBags(max(e["n_rows"] for e in eval_inputs), n_items, dev)
    sync()
    loss_of = torch.compile(model.loss) if args.compile else model.loss

    evaluations, step, train_s = [], 0, 0.0
    setup_s = time.perf_counter() - START
    train_start = time.perf_counter()
    faults = 0
    for epoch, batches in enumerate(epochs, 1):
        began = time.perf_counter()
        faults -= resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for idx, offsets, counts, row_of, n_rows in batches:
            if bag:
                w = torch.nn.functional.dropout(bag_norms(counts, row_of, n_rows), model.p)
                loss = loss_of(model.bags(idx, offsets, w), idx, counts, row_of, n_rows)
            else:
                x = train_bags(idx, counts, row_of, n_rows)
                loss = loss_of(model.inputs(x), x)
            for opt in opts:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt, sched in zip(opts, scheds):
                opt.step()
                sched.step()
            step += 1
            if step == 1:
                sync()
                first_step_s = time.perf_counter() - train_start
        sync()
        train_s += time.perf_counter() - began
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        began = time.perf_counter()
        recall, ndcg = evaluate(model, eval_users, eval_inputs, eval_bags)
        now = time.perf_counter()
        e = {"epoch": epoch, "step": step, "loss": float(loss.detach()), "recall@20": recall,
             "ndcg@20": ndcg, "elapsed_s": now - START, "clock_s": now - train_start,
             "eval_s": now - began}
        evaluations.append(e)
        print(json.dumps(e), flush=True)
        if args.stop_at_target and recall >= args.target:
            break
    print(json.dumps({"train_s": train_s, "setup_s": setup_s, "first_step_s": first_step_s,
                      "train_minor_faults_per_step": faults / max(step, 1), "threads": args.threads,
                      "torch": torch.__version__, "device": str(dev),
                      "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
                      "input": args.input, "adam": args.adam,
                      "compile": args.compile, "allocator_env": allocator_env(),
                      "negatives": args.negatives, "score": args.score,
                      "temperature": args.temperature, "dim": args.dim,
                      "batch": args.batch, "epochs": args.epochs, "lr": args.lr,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "evaluations": evaluations}), flush=True)


if __name__ == "__main__":
    main()
