#!/usr/bin/env bash
# The README's headline: the seed model (configs/seed-sparse.toml, 240,000 → 1024 → 512 →
# 240,000, batch 128, Adam) inside the 1.5 GB its owner first estimated. One invocation, CPU
# (flex), the same seed, examples and held-out rows for both runs:
#   1. the plain f32 sparse layout as configured (it does not fit 1.5 GB: 1.84 GiB even with SGD);
#   2. the plan `--budget 1.5GB` chooses with the batch pinned at 128.
# It prints the plan's knobs, both validation losses and the examples/s ratio.
#   bash benches/headline.sh [OUT_DIR] [STEPS]
set -euo pipefail
out=${1:-widebag-headline}
steps=${2:-400}
mkdir -p "$out"
bin=${WIDEBAG_BIN:-target/release/widebag}
common=(--config configs/seed-sparse.toml --device cpu --set "train.steps=$steps"
  --set train.eval_rows=4096 --json)
echo "== plain f32 sparse layout"
"$bin" train "${common[@]}" > "$out/plain.json" 2> "$out/plain.log"
echo "== the 1.5GB plan"
"$bin" train "${common[@]}" --budget 1.5GB --set 'plan.pin=["train.batch_size"]' \
  > "$out/plan.json" 2> "$out/plan.log"
grep "planned for" "$out/plan.log" || true
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
plain, plan = (json.load(open(f"{out}/{n}.json")) for n in ("plain", "plan"))
print("| layout | validation loss | against plain | examples/s against plain |")
print("|---|---|---|---|")
for name, r in (("plain f32 sparse", plain), ("1.5GB plan", plan)):
    d = r["eval_loss"] / plain["eval_loss"] - 1
    s = r["examples_per_s"] / plain["examples_per_s"]
    print(f"| {name} | {r['eval_loss']:.4f} | {100 * d:+.2f}% | {s:.2f}× |")
PY
