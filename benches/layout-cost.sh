#!/usr/bin/env bash
# What the time-costing layout remedies cost: MLP checkpointing (`model.checkpointing = "mlp"`)
# and a narrower class chunk (`model.class_chunk = 512`, 8 chunks of the quickstart's 4,096
# classes) against the quickstart as it is, on one device, 3 alternating pairs in one loop after
# a warm-up run. Prints each run's wall time and the largest difference of the per-step losses
# against the baseline's.
#   bash benches/layout-cost.sh [DEVICE] [STEPS] [OUT_DIR]     (DEVICE: cpu or wgpu)
set -euo pipefail
device=${1:-cpu}
steps=${2:-300}
out=${3:-widebag-layout-cost}
bin=${WIDEBAG_BIN:-target/release/widebag}
mkdir -p "$out"
run() { # name, sets...
  local name=$1; shift
  rm -rf "$out/$name"
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" train --device "$device" --set "train.steps=$steps" --out "$out/$name" "$@" \
    > /dev/null 2>&1
  t1=$(date +%s.%N)
  echo "$name $(echo "$t1 - $t0" | bc)" >> "$out/times.txt"
}
: > "$out/times.txt"
run warmup
for i in 1 2 3; do
  run "base-$i"
  run "mlp-$i" --set 'model.checkpointing="mlp"'
  run "chunk-$i" --set model.class_chunk=512
done
python3 - "$out" <<'PY'
import json, sys, collections
out = sys.argv[1]
times = collections.defaultdict(list)
for line in open(f"{out}/times.txt"):
    name, t = line.split()
    times[name.split("-")[0]].append(float(t))
def losses(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    return [r["loss"] for r in rows if "step" in r and "loss" in r]
base = losses("base-1")
for v in ("mlp", "chunk"):
    d = max(abs(a - b) for a, b in zip(losses(f"{v}-1"), base))
    lo, hi = min(times[v]), max(times[v])
    blo, bhi = min(times["base"]), max(times["base"])
    print(f"{v}: wall {lo:.2f}-{hi:.2f} s against {blo:.2f}-{bhi:.2f} s "
          f"({sum(times[v]) / sum(times['base']):.2f}x), max |loss - base| {d:.2e} over {len(base)} steps")
PY
