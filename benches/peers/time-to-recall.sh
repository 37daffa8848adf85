#!/usr/bin/env bash
# Gowalla to the published Recall@20 (0.1641, Mult-VAE on the LightGCN split): widebag's Mult-DAE
# (configs/gowalla.toml, evaluated every epoch) against the same model in PyTorch
# (benches/peers/multdae_peer.py: same data, model, batch, optimizer, schedule, input dropout and
# evaluation) in each of its input layouts, RUNS times each, one after the other:
# `bag` (an EmbeddingBag with SparseAdam, widebag's own layout: the fastest PyTorch way) and
# `dense` (nn.Linear over the dense bag, as RecBole's MultiDAE computes it).
#
# The same conditions for both (docs/benchmarks.md, "Fairness"): the same threads (THREADS:
# OMP_NUM_THREADS, MKL_NUM_THREADS, RAYON_NUM_THREADS, the peer's torch.set_num_threads) and
# cores (`taskset -c CPUS`), the allocator policy ALLOCATOR names (common.sh; default tuned:
# glibc's environment's nearest to the policy widebag sets itself), the peer's fused Adam (ADAM),
# its batches and evaluation inputs built before its clock starts, as widebag's are; COMPILE=1
# adds torch.compile to the peer's training step (off by default: measured no sooner to the
# target, its compilation included).
#
# Each side's clock starts when its training starts, after start-up (imports, parsing, batch and
# evaluation inputs, the model): widebag's at the end of its set-up (an evaluation's `elapsed_s`
# less `setup_s`), the peer's at its first step (`clock_s`). For each side and run: the time on
# that clock to the end of the first evaluation at or above the target, an evaluation's own time,
# the training alone, the start-up and exit (the process's wall time less the clock at its last
# evaluation) and the whole process; then the median and range over the runs of each, and of
# each per-run ratio (the peer's over widebag's run of the same number).
#   bash benches/peers/time-to-recall.sh OUT
# Env: GOWALLA_DIR (default ../shared/data/gowalla), WIDEBAG_BIN (default
# target/release/widebag), PYTHON (a Python with torch and numpy; default python3), RUNS
# (default 3), THREADS (default: every core), CPUS (default 0-(THREADS-1); empty: unpinned),
# ALLOCATOR (tuned; glibc, mallopt, jemalloc), ADAM (fused; foreach, single), COMPILE (0), EPOCHS
# (default 20, the config's), TARGET (default 0.1641), PEERS (the peer's input layouts, default
# "bag dense"), SEED (default 0, the config's: every run the same computation, so the runs
# differ in their timings only), STOP_AT_TARGET (1: each side ends at its first evaluation at or
# above TARGET, widebag by `train.stop_at_metric`, the peer by `--stop-at-target`, both on the
# EPOCHS run's schedule: the time to the target is the same, the rest of the run is not taken;
# the final figures are then those at the target), WIDEBAG_ARGS and PEER_ARGS (more arguments
# for each side, word-split: the same model changed on both sides, e.g. the sampled softmax:
# WIDEBAG_ARGS='--set model.output=sampled_softmax --set model.score=cosine
# --set model.temperature=0.1 --set model.sampling.negatives=4096' PEER_ARGS='--negatives 4096
# --score cosine --temperature 0.1' PEERS=bag).
# Writes OUT/summary.json, OUT/summary.md (the table it prints), OUT/machine.txt and each
# invocation's raw output: widebag-RUN.json, .log, .wall (start and end) and its run directory
# widebag-run-RUN/, torch-PEER-RUN.jsonl, .log, .wall.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
out=${1:?usage: bash benches/peers/time-to-recall.sh OUT}
data=${GOWALLA_DIR:-../shared/data/gowalla}
bin=${WIDEBAG_BIN:-target/release/widebag}
python=${PYTHON:-python3}
runs=${RUNS:-3}
epochs=${EPOCHS:-20}
target=${TARGET:-0.1641}
peers=${PEERS:-bag dense}
seed=${SEED:-0}
adam=${ADAM:-fused}
compile=${COMPILE:-0}
stop_at_target=${STOP_AT_TARGET:-0}
read -r -a widebag_args <<< "${WIDEBAG_ARGS:-}"
read -r -a peer_args <<< "${PEER_ARGS:-}"
here=$(dirname "$0")
# shellcheck source=common.sh
. "$here/common.sh"
mkdir -p "$out"
write_machine "$out" "$python" "$bin"
compiled=()
[ "$compile" = 1 ] && compiled=(--compile)
widebag_stop=()
peer_stop=()
if [ "$stop_at_target" = 1 ]; then
  widebag_stop=(--set 'train.stop_at_metric="recall@20"' --set "train.stop_at_value=$target")
  peer_stop=(--stop-at-target --target "$target")
fi

for run in $(seq 1 "$runs"); do
  echo "== run $run: widebag ($threads threads)" >&2
  rm -rf "$out/widebag-run-$run"
  timed "$out/widebag-$run" "$out/widebag-$run.json" "${widebag_run[@]}" \
    "$bin" train --config configs/gowalla.toml --device cpu \
    --set "data.path=\"$data/train.txt\"" --set "data.test_path=\"$data/test.txt\"" \
    --set train.eval_every=1 --set "train.epochs=$epochs" --set "train.seed=$seed" \
    "${widebag_stop[@]}" "${widebag_args[@]}" --json --out "$out/widebag-run-$run"
  for peer in $peers; do
    echo "== run $run: PyTorch, $peer input ($threads threads)" >&2
    timed "$out/torch-$peer-$run" "$out/torch-$peer-$run.jsonl" "${torch_run[@]}" \
      "$python" "$here/multdae_peer.py" --data "$data" --threads "$threads" --epochs "$epochs" \
      --input "$peer" --seed "$seed" --adam "$adam" "${compiled[@]}" "${peer_stop[@]}" \
      "${peer_args[@]}"
  done
done

# shellcheck disable=SC2086
"$python" - "$out" "$target" "$threads" "$runs" $peers <<'PY'
import json, os, statistics, sys
out, target, threads, runs, peers = (sys.argv[1], float(sys.argv[2]), int(sys.argv[3]),
                                     int(sys.argv[4]), sys.argv[5:])
wall = lambda stem: (lambda a, b: b - a)(*map(float, open(f"{out}/{stem}.wall").read().split()))

def side(stem, evaluations, extra):
    """One invocation: `evaluations` each with `clock_s`, seconds from the start of training."""
    total = wall(stem)
    hit = next((e for e in evaluations if e["recall@20"] >= target), None)
    return {
        "wall_s": total,
        "seconds_to_target": hit["clock_s"] if hit else None,
        "epoch_at_target": hit["epoch"] if hit else None,
        "eval_s_mean": sum(e["eval_s"] for e in evaluations) / len(evaluations),
        "startup_exit_s": total - evaluations[-1]["clock_s"],
        "final_recall@20": evaluations[-1]["recall@20"],
        "final_ndcg@20": evaluations[-1]["ndcg@20"],
        "best_recall@20": max(e["recall@20"] for e in evaluations),
        "evaluations": evaluations, **extra,
    }

def widebag(run):
    w = json.load(open(f"{out}/widebag-{run}.json"))
    metric = lambda e, n: next(m["value"] for m in e["metrics"] if m["name"] == n)
    # elapsed_s runs from the start of the set-up (after the data is read); training starts
    # after setup_s (and the evaluation batches' normalisation, a few ms, which stays in).
    ev = [{"epoch": e.get("epoch"), "step": e["step"], "recall@20": metric(e, "recall@20"),
           "ndcg@20": metric(e, "ndcg@20"), "elapsed_s": e["elapsed_s"],
           "clock_s": e["elapsed_s"] - w["setup_s"], "eval_s": e["eval_s"]}
          for e in w["evaluations"]]
    # train_s holds the evaluations during training (not the last, unless the run stopped at
    # its target: then every one): they are taken out.
    during = ev if w.get("target_reached_at") else ev[:-1]
    return side(f"widebag-{run}", ev, {"train_s": w["train_s"] - sum(e["eval_s"] for e in during),
                                       "setup_s": w["setup_s"], "adapter": w["adapter"]})

def torch_peer(peer, run):
    lines = [json.loads(l) for l in open(f"{out}/torch-{peer}-{run}.jsonl") if l.strip()]
    tail = lines[-1]
    return side(f"torch-{peer}-{run}", tail["evaluations"],
                {"train_s": tail["train_s"], "setup_s": tail["setup_s"], "version": tail["torch"],
                 "adam": tail["adam"], "compile": tail["compile"],
                 "allocator_env": tail["allocator_env"]})

sides = ["widebag"] + [f"torch-{p}" for p in peers]
summary = {"target_recall@20": target, "threads": threads, "runs": runs,
           "machine": open(f"{out}/machine.txt").read(),
           "invocations": {"widebag": [widebag(r) for r in range(1, runs + 1)],
                           **{f"torch-{p}": [torch_peer(p, r) for r in range(1, runs + 1)]
                              for p in peers}}}
inv = summary["invocations"]

def span(values, f=".1f"):
    v = [x for x in values if x is not None]
    if not v:
        return "never"
    text = f"{statistics.median(v):{f}} ({min(v):{f}}–{max(v):{f}})"
    return text if len(v) == len(values) else f"{text}, {len(values) - len(v)} never"

def ratios(name, key):
    """The peer's value over widebag's, run by run."""
    return [None if p[key] is None or w[key] is None else p[key] / w[key]
            for p, w in zip(inv[name], inv["widebag"])]

names = {"bag": "PyTorch (EmbeddingBag + SparseAdam)", "dense": "PyTorch (dense nn.Linear input)"}
cols = ["widebag"] + [names.get(p, f"PyTorch ({p})") for p in peers]
t0 = inv[sides[1]][0] if peers else None
rows = [
    f"Gowalla Mult-DAE to Recall@20 ≥ {target}, {threads} threads each, one after the other, "
    f"{runs} runs each: median (min–max) over the runs; widebag's speed-up over each peer, the "
    "median (min–max) of the per-run ratios, in brackets. Clocks start when training starts "
    "(after start-up) on both sides.",
]
if os.environ.get("STOP_AT_TARGET") == "1":
    rows.append("Each side ended at its first evaluation at or above the target (STOP_AT_TARGET=1, "
                "on the full run's schedule): training, the whole process and the final figures "
                "are up to the target.")
allocator = summary["machine"].split("ALLOCATOR=")[1].split()[0]
if t0:
    alloc = " ".join(f"{k}={v}" for k, v in t0["allocator_env"].items()) or "glibc's defaults"
    rows.append(f"PyTorch {t0['version']}: Adam {t0['adam']} (SparseAdam for the bag's table), "
                f"{'torch.compile' if t0['compile'] else 'eager'}, batches and evaluation inputs "
                f"built before its clock; ALLOCATOR={allocator}: PyTorch on {alloc}, widebag on "
                f"its own policy{' over jemalloc' if allocator == 'jemalloc' else ''}.")
rows += ["", "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]

def row(label, key, f=".1f", ratio=True, extra=None):
    cells = []
    for name in sides:
        text = span([x[key] for x in inv[name]], f)
        if extra:
            text += extra(inv[name])
        if ratio and name != "widebag" and any(r is not None for r in ratios(name, key)):
            text += f" ({span(ratios(name, key), '.2f')}×)"
        cells.append(text)
    rows.append(f"| {label} | " + " | ".join(cells) + " |")

def epochs_at(xs):
    at = sorted({x["epoch_at_target"] for x in xs if x["epoch_at_target"] is not None})
    return f" (epoch {'/'.join(map(str, at))})" if at else ""
row("time to the target from the start of training (s)", "seconds_to_target", extra=epochs_at)
row("an evaluation pass (s, mean)", "eval_s_mean", ".2f")
row("training only (s)", "train_s")
row("start-up and exit (s)", "startup_exit_s", ratio=False)
row("whole process (s)", "wall_s")
row("final Recall@20", "final_recall@20", ".4f", ratio=False)
row("final NDCG@20", "final_ndcg@20", ".4f", ratio=False)
row("best Recall@20", "best_recall@20", ".4f", ratio=False)
table = "\n".join(rows) + "\n"
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
open(f"{out}/summary.md", "w").write(table)
print(table)
PY
