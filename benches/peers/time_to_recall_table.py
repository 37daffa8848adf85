#!/usr/bin/env python3
"""time-to-recall.sh's summary: reads each side's raw output in OUT and writes OUT/summary.json
and OUT/summary.md (the table it prints).

    python3 time_to_recall_table.py OUT TARGET FAST_TARGET THREADS RUNS FAST_CONFIG SIDE...

SIDE: widebag (configs/gowalla.toml), torch-bag, torch-dense (the PyTorch Mult-DAE peers),
widebag-fast (FAST_CONFIG) and torch-sampled (FAST_CONFIG's model in PyTorch). Every time is
on each side's own clock, from the start of its training to the end of the first evaluation at
or above a target; a ratio is the other side's time over widebag's, run by run. A side with a
run that left no figures (it failed) is left out of the table, which names it.
"""
import json
import os
import statistics
import sys

out, target, fast_target, threads, runs, fast = (sys.argv[1], float(sys.argv[2]),
                                                 float(sys.argv[3]), int(sys.argv[4]),
                                                 int(sys.argv[5]), sys.argv[6])
sides = sys.argv[7:]
targets = [target, fast_target] if "widebag-fast" in sides else [target]


def wall(stem):
    start, end = map(float, open(f"{out}/{stem}.wall").read().split())
    return end - start


def side(stem, evaluations, extra):
    """One invocation: `evaluations` each with `clock_s`, seconds from the start of training."""
    total = wall(stem)
    reached = {}
    for t in targets:
        hit = next((e for e in evaluations if e["recall@20"] >= t), None)
        reached[str(t)] = {"seconds": hit["clock_s"] if hit else None,
                           "epoch": hit["epoch"] if hit else None}
    return {
        "wall_s": total,
        "to_target": reached,
        "seconds_to_target": reached[str(target)]["seconds"],
        "epoch_at_target": reached[str(target)]["epoch"],
        "eval_s_mean": sum(e["eval_s"] for e in evaluations) / len(evaluations),
        "startup_exit_s": total - evaluations[-1]["clock_s"],
        "final_recall@20": evaluations[-1]["recall@20"],
        "final_ndcg@20": evaluations[-1]["ndcg@20"],
        "best_recall@20": max(e["recall@20"] for e in evaluations),
        "epochs_run": evaluations[-1]["epoch"],
        "evaluations": evaluations, **extra,
    }


def widebag(stem):
    w = json.load(open(f"{out}/{stem}.json"))

    def metric(e, n):
        return next(m["value"] for m in e["metrics"] if m["name"] == n)
    # elapsed_s runs from the start of the set-up (after the data is read); training starts
    # after setup_s (and the evaluation batches' normalisation, a few ms, which stays in).
    ev = [{"epoch": e.get("epoch"), "step": e["step"], "recall@20": metric(e, "recall@20"),
           "ndcg@20": metric(e, "ndcg@20"), "elapsed_s": e["elapsed_s"],
           "clock_s": e["elapsed_s"] - w["setup_s"], "eval_s": e["eval_s"]}
          for e in w["evaluations"]]
    # train_s holds the evaluations during training (not the last, unless the run stopped at
    # its target: then every one): they are taken out.
    during = ev if w.get("target_reached_at") else ev[:-1]
    return side(stem, ev, {"train_s": w["train_s"] - sum(e["eval_s"] for e in during),
                           "setup_s": w["setup_s"], "adapter": w["adapter"]})


def torch_peer(stem):
    lines = [json.loads(x) for x in open(f"{out}/{stem}.jsonl") if x.strip()]
    tail = lines[-1]
    return side(stem, tail["evaluations"],
                {"train_s": tail["train_s"], "setup_s": tail["setup_s"], "version": tail["torch"],
                 "adam": tail["adam"], "compile": tail["compile"],
                 "device": tail.get("device", "cpu"), "gpu": tail.get("gpu"),
                 "allocator_env": tail["allocator_env"],
                 "model": {k: tail.get(k) for k in ("negatives", "score", "temperature", "dim",
                                                    "batch", "epochs", "lr")}})


def read(name, run):
    """One invocation's figures; None where it left none (it failed: its .log says why)."""
    stem = {"widebag": f"widebag-{run}", "widebag-fast": f"widebag-fast-{run}"}.get(name)
    try:
        return widebag(stem) if stem else torch_peer(f"{name}-{run}")
    except (OSError, ValueError, LookupError):
        return None


inv = {name: [read(name, r) for r in range(1, runs + 1)] for name in sides}
# A side with a failed run is left out of the table, and the table says so.
failed = {name: [r + 1 for r, x in enumerate(inv[name]) if x is None] for name in sides
          if None in inv[name]}
sides = [name for name in sides if name not in failed]
inv = {name: inv[name] for name in sides}
summary = {"target_recall@20": target, "fast_target_recall@20": fast_target,
           "fast_config": fast, "threads": threads, "runs": runs,
           "machine": open(f"{out}/machine.txt").read(), "invocations": inv,
           "failed_runs": failed}

# Each side's ratios are against widebag's run of the same model: the Mult-DAE peers against
# configs/gowalla.toml, the sampled peer against FAST_CONFIG.
reference = {"torch-bag": "widebag", "torch-dense": "widebag", "torch-sampled": "widebag-fast"}


def span(values, f=".1f"):
    v = [x for x in values if x is not None]
    if not v:
        return "never"
    text = f"{statistics.median(v):{f}} ({min(v):{f}}–{max(v):{f}})"
    return text if len(v) == len(values) else f"{text}, {len(values) - len(v)} never"


def ratios(name, ref, get):
    """`name`'s value over `ref`'s, run by run."""
    return [None if get(p) is None or get(w) is None else get(p) / get(w)
            for p, w in zip(inv[name], inv[ref])]


names = {"widebag": "widebag, configs/gowalla.toml",
         "widebag-fast": f"widebag, {fast}",
         "torch-bag": "PyTorch Mult-DAE (EmbeddingBag + SparseAdam)",
         "torch-dense": "PyTorch Mult-DAE (dense nn.Linear input)",
         "torch-sampled": f"PyTorch, {fast}'s model"}
rows = [
    f"Gowalla to Recall@20 ≥ {' and ≥ '.join(map(str, targets))}, {threads} threads each, one "
    f"after the other, {runs} run(s) each: median (min–max) over the runs; in brackets, the "
    "side's time over widebag's for the same model (the Mult-DAE peers against "
    "configs/gowalla.toml, the sampled peer against "
    f"{fast}). Clocks start when training starts (after start-up) on every side; every side "
    "evaluates every epoch (full ranking) and its evaluations are on its clock.",
]
if os.environ.get("STOP_AT_TARGET") == "1":
    rows.append(f"Each Mult-DAE side ended at its first evaluation at or above {target}, "
                f"{fast} and its peer at or above {fast_target} (STOP_AT_TARGET=1, on the full "
                "run's schedule): training, the whole process and the final figures are up "
                "to there.")
torch_side = next((inv[n][0] for n in sides if n.startswith("torch-")), None)
widebag_side = next((inv[n][0] for n in sides if n.startswith("widebag")), None)
if widebag_side or torch_side:
    rows.append("Devices: " + "; ".join(
        ([f"widebag on {widebag_side['adapter']}"] if widebag_side else []) +
        ([f"PyTorch on {torch_side['gpu'] or torch_side['device']}"] if torch_side else [])) + ".")
if torch_side:
    alloc = (" ".join(f"{k}={v}" for k, v in torch_side["allocator_env"].items())
             or "glibc's defaults")
    allocator = summary["machine"].split("ALLOCATOR=")[1].split()[0]
    rows.append(f"PyTorch {torch_side['version']}: Adam {torch_side['adam']} (SparseAdam for "
                f"the sparse tables), {'torch.compile' if torch_side['compile'] else 'eager'}, "
                f"batches and evaluation inputs built before its clock; ALLOCATOR={allocator}: "
                f"PyTorch on {alloc}, widebag on its own policy"
                f"{' over jemalloc' if allocator == 'jemalloc' else ''}.")
if failed:
    rows.append("Left out, a run failed (its .log in OUT says why): " + ", ".join(
        f"{name} (run {', '.join(map(str, rs))})" for name, rs in failed.items()) + ".")
rows += ["", "| | " + " | ".join(names[n] for n in sides) + " |", "|---" * (len(sides) + 1) + "|"]


def row(label, get, f=".1f", ratio=True, epoch=None):
    cells = []
    for name in sides:
        text = span([get(x) for x in inv[name]], f)
        if epoch:
            at = sorted({epoch(x) for x in inv[name] if epoch(x) is not None})
            text += f" (epoch {'/'.join(map(str, at))})" if at else ""
        ref = reference.get(name)
        if ratio and ref in inv and any(r is not None for r in ratios(name, ref, get)):
            text += f" ({span(ratios(name, ref, get), '.2f')}×)"
        cells.append(text)
    rows.append(f"| {label} | " + " | ".join(cells) + " |")


for t in targets:
    row(f"time to Recall@20 ≥ {t} from the start of training (s)",
        lambda x, t=t: x["to_target"][str(t)]["seconds"],
        epoch=lambda x, t=t: x["to_target"][str(t)]["epoch"])
row("an evaluation pass (s, mean)", lambda x: x["eval_s_mean"], ".2f")
row("training only (s)", lambda x: x["train_s"])
row("start-up and exit (s)", lambda x: x["startup_exit_s"], ratio=False)
row("whole process (s)", lambda x: x["wall_s"])
row("epochs run", lambda x: x["epochs_run"], ".0f", ratio=False)
row("final Recall@20", lambda x: x["final_recall@20"], ".4f", ratio=False)
row("final NDCG@20", lambda x: x["final_ndcg@20"], ".4f", ratio=False)
row("best Recall@20", lambda x: x["best_recall@20"], ".4f", ratio=False)

if "widebag-fast" in inv:
    rows += ["", f"widebag's fastest config ({fast}) against each other side: that side's time "
             "to the target over the fastest config's, run by run, median (min–max).", "",
             "| sooner than | " + " | ".join(f"to {t}" for t in targets) + " |",
             "|---" * (len(targets) + 1) + "|"]
    for name in sides:
        if name == "widebag-fast":
            continue
        cells = [span(ratios(name, "widebag-fast",
                             lambda x, t=t: x["to_target"][str(t)]["seconds"]), ".2f")
                 for t in targets]
        cells = [c if c == "never" else c + "×" for c in cells]
        rows.append(f"| {names[name]} | " + " | ".join(cells) + " |")
    summary["fast_speedup"] = {
        name: {str(t): ratios(name, "widebag-fast",
                              lambda x, t=t: x["to_target"][str(t)]["seconds"])
               for t in targets}
        for name in sides if name != "widebag-fast"}

table = "\n".join(rows) + "\n"
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
open(f"{out}/summary.md", "w").write(table)
print(table)
