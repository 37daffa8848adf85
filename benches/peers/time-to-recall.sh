#!/usr/bin/env bash
# Gowalla to the published Recall@20 (0.1641, Mult-VAE on the LightGCN split): widebag's Mult-DAE
# (configs/gowalla.toml, evaluated every epoch) against the same model in PyTorch
# (benches/peers/multdae_peer.py: same data, model, batch, optimizer, schedule, input dropout and
# evaluation) in each of its input layouts, on the same number of threads, one after the other:
# `bag` (an EmbeddingBag with SparseAdam, widebag's own layout: the fastest PyTorch way) and
# `dense` (nn.Linear over the dense bag, as RecBole's MultiDAE computes it). For each side: the wall time
# from the process's start to the end of the first evaluation at or above the target, the
# evaluation's own time, and the final Recall@20 and NDCG@20.
#   bash benches/peers/time-to-recall.sh OUT
# Env: GOWALLA_DIR (default ../shared/data/gowalla), WIDEBAG_BIN (default
# target/release/widebag), PYTHON (a Python with torch and numpy; default python3), THREADS
# (default: every core), EPOCHS (default 20, the config's), TARGET (default 0.1641), PEERS (the
# peer's input layouts, default "bag dense").
# Writes OUT/summary.json, OUT/summary.md (the table it prints), each side's raw output.
set -euo pipefail
out=${1:?usage: bash benches/peers/time-to-recall.sh OUT}
data=${GOWALLA_DIR:-../shared/data/gowalla}
bin=${WIDEBAG_BIN:-target/release/widebag}
python=${PYTHON:-python3}
threads=${THREADS:-$(nproc)}
epochs=${EPOCHS:-20}
target=${TARGET:-0.1641}
peers=${PEERS:-bag dense}
here=$(dirname "$0")
mkdir -p "$out"
rm -rf "$out/widebag-run"

echo "== widebag ($threads threads)" >&2
start=$(date +%s.%N)
RAYON_NUM_THREADS=$threads "$bin" train --config configs/gowalla.toml --device cpu \
  --set "data.path=\"$data/train.txt\"" --set "data.test_path=\"$data/test.txt\"" \
  --set train.eval_every=1 --set "train.epochs=$epochs" --json --out "$out/widebag-run" \
  > "$out/widebag.json" 2> "$out/widebag.log"
end=$(date +%s.%N)
echo "$start $end" > "$out/widebag.wall"

for peer in $peers; do
  echo "== PyTorch, $peer input ($threads threads)" >&2
  start=$(date +%s.%N)
  "$python" "$here/multdae_peer.py" --data "$data" --threads "$threads" --epochs "$epochs" \
    --input "$peer" > "$out/torch-$peer.jsonl" 2> "$out/torch-$peer.log"
  end=$(date +%s.%N)
  echo "$start $end" > "$out/torch-$peer.wall"
done

"$python" - "$out" "$target" "$threads" $peers <<'PY'
import json, sys
out, target, threads, peers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
wall = lambda side: (lambda a, b: b - a)(*map(float, open(f"{out}/{side}.wall").read().split()))

def side(name, evaluations, extra):
    total = wall(name)
    last = evaluations[-1]["elapsed_s"]
    # The process's wall time less what came after the evaluation: start-up and data included.
    at = lambda e: total - (last - e["elapsed_s"])
    hit = next((e for e in evaluations if e["recall@20"] >= target), None)
    return {
        "wall_s": total,
        "seconds_to_target": at(hit) if hit else None,
        "epoch_at_target": hit["epoch"] if hit else None,
        "eval_s_mean": sum(e["eval_s"] for e in evaluations) / len(evaluations),
        "final_recall@20": evaluations[-1]["recall@20"],
        "final_ndcg@20": evaluations[-1]["ndcg@20"],
        "best_recall@20": max(e["recall@20"] for e in evaluations),
        "evaluations": evaluations, **extra,
    }

w = json.load(open(f"{out}/widebag.json"))
metric = lambda e, n: next(m["value"] for m in e["metrics"] if m["name"] == n)
wb = [{"epoch": e.get("epoch"), "step": e["step"], "recall@20": metric(e, "recall@20"),
       "ndcg@20": metric(e, "ndcg@20"), "elapsed_s": e["elapsed_s"], "eval_s": e["eval_s"]}
      for e in w["evaluations"]]
summary = {"target_recall@20": target, "threads": threads,
           # widebag's train_s holds its evaluations during training (not the last): take them out.
           "widebag": side("widebag", wb, {"train_s": w["train_s"] - sum(e["eval_s"] for e in wb[:-1]),
                                           "adapter": w["adapter"]})}
for peer in peers:
    lines = [json.loads(l) for l in open(f"{out}/torch-{peer}.jsonl") if l.strip()]
    tail = lines[-1]
    summary[f"torch-{peer}"] = side(f"torch-{peer}", tail["evaluations"],
                                    {"train_s": tail["train_s"], "version": tail["torch"]})
s = lambda x, f=".1f": "never" if x is None else f"{x:{f}}"
ratio = lambda a, b: "-" if a is None or b is None else f"{b / a:.2f}×"
names = {"bag": "PyTorch (EmbeddingBag + SparseAdam)", "dense": "PyTorch (dense nn.Linear input)"}
sides = ["widebag"] + [f"torch-{p}" for p in peers]
cols = ["widebag"] + [names.get(p, f"PyTorch ({p})") for p in peers]
wt = summary["widebag"]
rows = [
    f"Gowalla Mult-DAE to Recall@20 ≥ {target}, {threads} threads each, one after the other; "
    "widebag's speed-up over each peer in brackets.\n",
    "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|",
]
def row(label, cell, key=None):
    cells = []
    for name in sides:
        text = cell(summary[name])
        if key and name != "widebag":
            text += f" ({ratio(wt[key], summary[name][key])})"
        cells.append(text)
    rows.append(f"| {label} | " + " | ".join(cells) + " |")
row("wall time to the target (s)",
    lambda x: f"{s(x['seconds_to_target'])} (epoch {s(x['epoch_at_target'], '')})", "seconds_to_target")
row("an evaluation pass (s, mean)", lambda x: f"{x['eval_s_mean']:.2f}", "eval_s_mean")
row("training only (s)", lambda x: f"{x['train_s']:.1f}", "train_s")
row("whole run (s)", lambda x: f"{x['wall_s']:.1f}", "wall_s")
row("final Recall@20 / NDCG@20", lambda x: f"{x['final_recall@20']:.4f} / {x['final_ndcg@20']:.4f}")
row("best Recall@20", lambda x: f"{x['best_recall@20']:.4f}")
table = "\n".join(rows) + "\n"
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
open(f"{out}/summary.md", "w").write(table)
print(table)
PY
