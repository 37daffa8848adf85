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

Prints one JSON line per evaluation (`epoch`, `step`, `recall@20`, `ndcg@20`, `elapsed_s`: from
this process's start to the end of the evaluation, `eval_s`: the evaluation's own time) and a last
line with `train_s` and the evaluations.

    python3 multdae_peer.py --data ../shared/data/gowalla --threads 2 [--epochs 20] [--seed 0]
"""

import argparse
import json
import math
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


def dense_rows(indptr, indices, rows, n_items):
    """The rows' bags of items as a dense [len(rows), n_items] float tensor of counts."""
    rows = np.asarray(rows, dtype=np.int64)
    lens = indptr[rows + 1] - indptr[rows]
    r = np.repeat(np.arange(len(rows)), lens)
    idx = np.concatenate([indices[indptr[u]:indptr[u + 1]] for u in rows]) if len(rows) else r
    x = torch.zeros(len(rows), n_items)
    x.index_put_((torch.from_numpy(r), torch.from_numpy(idx)),
                 torch.ones(len(idx)), accumulate=True)
    return x


def bag_rows(indptr, indices, rows):
    """The rows' bags as EmbeddingBag input: (item ids, offsets, counts, the row of each id)."""
    rows = np.asarray(rows, dtype=np.int64)
    lens = indptr[rows + 1] - indptr[rows]
    idx = np.concatenate([indices[indptr[u]:indptr[u + 1]] for u in rows])
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    row_of = np.repeat(np.arange(len(rows)), lens)
    return (torch.from_numpy(idx), torch.from_numpy(offsets), torch.ones(len(idx)),
            torch.from_numpy(row_of))


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

    def forward(self, idx, offsets, counts, row_of, n_rows):
        norms = torch.zeros(n_rows).index_add_(0, row_of, counts * counts).sqrt()
        w = torch.nn.functional.dropout(counts / norms[row_of], self.p, self.training)
        h = self.encode(idx, offsets, per_sample_weights=w) + self.bias
        return self.decode(torch.tanh(h))


class MultDAE(torch.nn.Module):
    def __init__(self, n_items, dim, dropout):
        super().__init__()
        self.drop = torch.nn.Dropout(dropout)
        self.encode = torch.nn.Linear(n_items, dim)
        self.decode = torch.nn.Linear(dim, n_items)

    def forward(self, x):
        h = torch.nn.functional.normalize(x, dim=1)
        h = self.drop(h)
        return self.decode(torch.tanh(self.encode(h)))


def evaluate(model, train, test, n_users, n_items, k=20, users_per_batch=1000, bag=False):
    """LightGCN's Recall@k and NDCG@k over the users with a test item, batched on torch."""
    model.eval()
    t_indptr = test[0]
    users = np.array([u for u in range(n_users) if t_indptr[u + 1] > t_indptr[u]])
    discounts = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float64))
    ideal = torch.cat([torch.zeros(1, dtype=torch.float64), discounts.cumsum(0)])
    recall = ndcg = 0.0
    with torch.no_grad():
        for b in range(0, len(users), users_per_batch):
            rows = users[b:b + users_per_batch]
            x = dense_rows(*train, rows, n_items)
            truth = dense_rows(*test, rows, n_items) > 0
            scores = model(*bag_rows(*train, rows), len(rows)) if bag else model(x)
            scores[x > 0] = -math.inf
            top = torch.topk(scores, k, dim=1).indices
            hits = truth.gather(1, top).double()
            n_truth = truth.sum(dim=1)
            recall += (hits.sum(dim=1) / n_truth).sum().item()
            ndcg += ((hits * discounts).sum(dim=1) / ideal[n_truth.clamp(max=k)]).sum().item()
    model.train()
    return recall / len(users), ndcg / len(users)


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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    tu, ti = read_lists(f"{args.data}/train.txt")
    vu, vi = read_lists(f"{args.data}/test.txt")
    n_users = int(max(tu.max(), vu.max())) + 1
    n_items = int(max(ti.max(), vi.max())) + 1
    train = csr(tu, ti, n_users, n_items)
    test = csr(vu, vi, n_users, n_items)
    trainers = [u for u in range(n_users) if train[0][u + 1] > train[0][u]]

    bag = args.input == "bag"
    if bag:
        model = MultDAEBag(n_items, args.dim, args.dropout)
        opts = [torch.optim.SparseAdam([model.encode.weight], lr=args.lr),
                torch.optim.Adam([model.bias, *model.decode.parameters()], lr=args.lr)]
    else:
        model = MultDAE(n_items, args.dim, args.dropout)
        opts = [torch.optim.Adam(model.parameters(), lr=args.lr)]
    per_epoch = math.ceil(len(trainers) / args.batch)
    total = per_epoch * args.epochs
    scheds = [torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1.0 + math.cos(math.pi * s / total))) for opt in opts]

    evaluations, step, train_s = [], 0, 0.0
    for epoch in range(1, args.epochs + 1):
        began = time.perf_counter()
        order = rng.permutation(trainers)
        for b in range(0, len(order), args.batch):
            rows = order[b:b + args.batch]
            if bag:
                idx, offsets, counts, row_of = bag_rows(*train, rows)
                logp = torch.log_softmax(model(idx, offsets, counts, row_of, len(rows)), dim=1)
                loss = -(logp[row_of, idx] * counts).sum() / len(rows)
            else:
                x = dense_rows(*train, rows, n_items)
                logits = model(x)
                loss = -(torch.log_softmax(logits, dim=1) * x).sum(dim=1).mean()
            for opt in opts:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt, sched in zip(opts, scheds):
                opt.step()
                sched.step()
            step += 1
        train_s += time.perf_counter() - began
        began = time.perf_counter()
        recall, ndcg = evaluate(model, train, test, n_users, n_items, bag=bag)
        now = time.perf_counter()
        e = {"epoch": epoch, "step": step, "loss": float(loss), "recall@20": recall,
             "ndcg@20": ndcg, "elapsed_s": now - START, "eval_s": now - began}
        evaluations.append(e)
        print(json.dumps(e), flush=True)
    print(json.dumps({"train_s": train_s, "threads": args.threads, "torch": torch.__version__,
                      "input": args.input,
                      "evaluations": evaluations}), flush=True)


if __name__ == "__main__":
    main()
