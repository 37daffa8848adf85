#!/usr/bin/env bash
# What `model.logits = "keep"` buys on flex: Gowalla's Mult-DAE (configs/gowalla.toml, its 41k-class
# multinomial output) for STEPS steps with the logits recomputed in backward (the default) and
# kept from the forward pass, alternating, RUNS pairs in one invocation; each run's examples/s
# (after its first step), its final loss (the two must be equal) and the heap's peak.
#   bash benches/logits-cost.sh
# Env: GOWALLA_DIR (default ../shared/data/gowalla), WIDEBAG_BIN (default target/release/widebag),
# STEPS (default 20), RUNS (default 3).
set -euo pipefail
data=${GOWALLA_DIR:-../shared/data/gowalla}
bin=${WIDEBAG_BIN:-target/release/widebag}
steps=${STEPS:-20}
runs=${RUNS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Steps instead of epochs, and no held-out evaluation: the training step alone.
sed -e "s/^epochs = .*/steps = $steps/" -e '/^eval_every/d' -e '/^test_path/d' \
  -e "s#^path = .*#path = \"$data/train.txt\"#" configs/gowalla.toml > "$tmp/config.toml"
for i in $(seq "$runs"); do
  for mode in recompute keep; do
    "$bin" train --config "$tmp/config.toml" --device cpu --set "model.logits=\"$mode\"" --json \
      2> /dev/null > "$tmp/$mode-$i.json"
  done
done
python3 - "$tmp" "$runs" "$steps" <<'PY'
import json, statistics, sys
tmp, runs, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {m: [json.load(open(f"{tmp}/{m}-{i}.json")) for i in range(1, runs + 1)] for m in ("recompute", "keep")}
eps = {m: [r["examples_per_s"] for r in rs] for m, rs in rows.items()}
med = {m: statistics.median(v) for m, v in eps.items()}
print(f"Gowalla Mult-DAE on flex, {steps} steps × batch 500, {runs} alternating pairs\n")
print("| model.logits | examples/s (median; range) | final loss | heap peak (MiB) |")
print("|---|---|---|---|")
for m, rs in rows.items():
    losses = sorted({r["final_loss"] for r in rs})
    peak = max(r.get("peak_in_use_bytes") or 0 for r in rs) / 2**20
    print(f"| {m} | {med[m]:.1f} ({min(eps[m]):.1f}–{max(eps[m]):.1f}) | {', '.join(map(str, losses))} | {peak:.1f} |")
print(f"\nkept / recomputed: {med['keep'] / med['recompute']:.3f}×")
PY
