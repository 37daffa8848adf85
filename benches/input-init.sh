#!/usr/bin/env bash
# Which input initialisation trains better (`model.input_init`: uniform, widebag's default,
# variance 1/dim; normal, PyTorch's EmbeddingBag N(0, 1); fan_in, PyTorch's Linear
# U(±1/sqrt(width))), each with 3 seeds: on compare.sh's synthetic data and model (240,000 →
# 32 → [64] → 240,000, batch 256, Adam 0.001, 200 steps) in the sparse and head/tail layouts
# (final loss, mean of the last 10 steps), on the Brown corpus (configs/brown.toml: held-out
# accuracy and log-loss) and, with GOWALLA=1, on Gowalla (configs/gowalla.toml, one seed:
# Recall@20; about 10 minutes a run on the 2-core machine).
#   bash benches/input-init.sh [OUT_DIR]
# Env: WIDEBAG_BIN (default target/release/widebag), BROWN_DIR (the unpacked Brown corpus's
# directory holding only its 500 texts ca01 … cr09; default ~/.cache/widebag/data/brown; skipped
# when absent), GOWALLA (0).
set -euo pipefail
out=${1:-widebag-input-init}
bin=${WIDEBAG_BIN:-target/release/widebag}
brown=${BROWN_DIR:-$HOME/.cache/widebag/data/brown}
inits="uniform normal fan_in"
mkdir -p "$out"
model=(--set data.width=240000 --set data.n_classes=240000 --set model.dim=32
  --set "model.hidden=[64]" --set train.batch_size=256 --set train.steps=200
  --set train.device=cpu --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001)
[ -f "$out/data.svm" ] || "$bin" data synth --rows 51200 --to libsvm "$out/data.svm" "${model[@]}"
file=(--set "data.path=\"$out/data.svm\"" --set data.format=libsvm --set model.layout=sparse)
headtail=(--set model.output=adaptive --set model.input_bands.cutoffs=auto
  --set model.output_bands.cutoffs=auto)
for init in $inits; do
  for seed in 1 2 3; do
    echo "== synthetic, $init, seed $seed" >&2
    "$bin" train "${model[@]}" "${file[@]}" --set "model.input_init=\"$init\"" \
      --set "train.seed=$seed" --json > "$out/sparse-$init-$seed.json"
    "$bin" train "${model[@]}" "${file[@]}" "${headtail[@]}" --set "model.input_init=\"$init\"" \
      --set "train.seed=$seed" --json > "$out/headtail-$init-$seed.json"
    if [ -d "$brown" ]; then
      "$bin" train --config configs/brown.toml --set "data.path=\"$brown\"" \
        --set train.device=cpu --set "model.input_init=\"$init\"" --set "train.seed=$((seed - 1))" \
        --json > "$out/brown-$init-$seed.json"
    fi
  done
  if [ "${GOWALLA:-0}" = 1 ]; then
    "$bin" train --config configs/gowalla.toml --set train.device=cpu \
      --set "model.input_init=\"$init\"" --json > "$out/gowalla-$init.json"
  fi
done

python3 - "$out" "$inits" <<'PY'
import json, os, statistics, sys
out, inits = sys.argv[1], sys.argv[2].split()
load = lambda name: json.load(open(f"{out}/{name}.json")) if os.path.exists(f"{out}/{name}.json") else None
metric = lambda s, name: next(m["value"] for m in s["evaluations"][-1]["metrics"] if m["name"] == name)
fmt = lambda v, f=".3f": f"{statistics.mean(v):{f}} ({', '.join(f'{x:{f}}' for x in v)})"
print("| input_init | synthetic sparse: final loss | synthetic head/tail: final loss | Brown accuracy | Brown log-loss | Gowalla Recall@20 |")
print("|---|---|---|---|---|---|")
for init in inits:
    cells = []
    for layout in ["sparse", "headtail"]:
        cells.append(fmt([load(f"{layout}-{init}-{s}")["final_loss_mean10"] for s in (1, 2, 3)]))
    b = [load(f"brown-{init}-{s}") for s in (1, 2, 3)]
    cells += ([fmt([metric(x, "accuracy") for x in b], ".2f"), fmt([metric(x, "log_loss") for x in b])]
              if all(b) else ["–", "–"])
    g = load(f"gowalla-{init}")
    cells.append(f"{metric(g, 'recall@20'):.4f}" if g else "–")
    print(f"| {init} | " + " | ".join(cells) + " |")
print("\nMean over seeds 1, 2, 3 (each seed's figure in brackets); lower loss is better.")
PY
