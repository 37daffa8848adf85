#!/usr/bin/env bash
# widebag against its PyTorch peer, one command, same machine, same run: writes one synthetic
# libsvm file with `widebag data synth`, trains the dense, sparse and head/tail layouts on it
# with `widebag train` (CPU: burn's flex backend) and with benches/peers/torch_peer.py (PyTorch
# on the CPU), RUNS times each, alternating, and prints the median examples/s with its spread
# (min–max over the runs), peak RSS and the final losses side by side with the widebag/torch
# ratios (of the medians).
#   bash benches/peers/compare.sh [OUT_DIR]
# Env: WIDEBAG_BIN (default target/release/widebag), PYTHON (a python with torch and numpy),
# ROWS (51200), WIDTH (240000), STEPS (200: one pass over the rows), RUNS (3),
# LAYOUTS ("dense sparse headtail"), and the model: DIM (32), HIDDEN ("64"), BATCH (256).
#   Seed model (240,000 → 1024 → 512 → 240,000, batch 128), best layout of each side:
#   DIM=1024 HIDDEN="512" BATCH=128 LAYOUTS=headtail bash benches/peers/compare.sh out-seed
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-widebag-peers}
bin=${WIDEBAG_BIN:-target/release/widebag}
py=${PYTHON:-python3}
rows=${ROWS:-51200}
width=${WIDTH:-240000}
steps=${STEPS:-200}
runs=${RUNS:-3}
layouts=${LAYOUTS:-dense sparse headtail}
dim=${DIM:-32}
hidden=${HIDDEN:-64}
batch=${BATCH:-256}
mkdir -p "$out"
"$py" -c "import torch, numpy" || { echo "compare.sh: $py lacks torch/numpy (pip install torch numpy)" >&2; exit 2; }

hidden_toml="[$(echo "$hidden" | tr ' ' ',')]"
model=(--set "data.width=$width" --set "data.n_classes=$width" --set "model.dim=$dim"
  --set "model.hidden=$hidden_toml" --set "train.batch_size=$batch" --set "train.steps=$steps"
  --set train.device=cpu --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001)
"$bin" data synth --rows "$rows" --to libsvm "$out/data.svm" "${model[@]}"
file=(--set "data.path=$out/data.svm" --set data.format=libsvm)

declare -A layout_args=(
  [dense]="--set model.layout=dense"
  [sparse]="--set model.layout=sparse"
  [headtail]="--set model.layout=sparse --set model.output=adaptive --set model.input_bands.cutoffs=auto --set model.output_bands.cutoffs=auto"
)
for run in $(seq 1 "$runs"); do
  for layout in $layouts; do
    echo "== run $run: widebag $layout" >&2
    # shellcheck disable=SC2086
    "$bin" train "${model[@]}" "${file[@]}" ${layout_args[$layout]} --json > "$out/widebag-$layout-$run.json"
    cuts=()
    if [ "$layout" = headtail ]; then
      mapfile -t cuts < <("$py" "$here/cutoffs.py" "$out/widebag-$layout-$run.json")
    fi
    echo "== run $run: torch $layout" >&2
    # shellcheck disable=SC2086
    "$py" "$here/torch_peer.py" --data "$out/data.svm" --layout "$layout" --dim "$dim" \
      --hidden $hidden --batch "$batch" --steps "$steps" --lr 0.001 "${cuts[@]}" \
      > "$out/torch-$layout-$run.json"
  done
done

"$py" - "$out" "$runs" "$layouts" <<'PY'
import json, os, platform, statistics, sys
out, runs, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
mib = lambda b: f"{b / 2**20:,.0f} MiB"
load = lambda side, layout: [json.load(open(f"{out}/{side}-{layout}-{r}.json"))
                             for r in range(1, runs + 1)]
w0 = load("widebag", layouts[0])[0]
print(f"Machine: {platform.node()}, {os.cpu_count()} cores; CPU for both. Model {w0['width']} → "
      f"{w0['dim']} → {w0['hidden']} → {w0['n_classes']}, batch {w0['batch_size']}, "
      f"{w0['steps']} steps, {runs} runs each (median, min–max).")
print("| layout | widebag examples/s | torch examples/s | widebag / torch | widebag peak RSS | "
      "torch peak RSS | widebag / torch | final loss (mean of last 10) widebag / torch |")
print("|---|---|---|---|---|---|---|---|")
for layout in layouts:
    w, t = load("widebag", layout), load("torch", layout)
    we = [x["examples_per_s"] for x in w]
    te = [x["examples_per_s"] for x in t]
    wr = max(x["peak_rss_bytes"] for x in w)
    tr = max(x["peak_bytes"] for x in t)
    span = lambda v: f"{statistics.median(v):,.1f} ({min(v):,.1f}–{max(v):,.1f})"
    print(f"| {layout} | {span(we)} | {span(te)} | "
          f"{statistics.median(we) / statistics.median(te):.2f}× | {mib(wr)} | {mib(tr)} | "
          f"{wr / tr:.2f}× | {w[0]['final_loss_mean10']:.3f} / {t[0]['final_loss_mean10']:.3f} |")
t = load("torch", layouts[0])[0]
print(f"\n{t['peer']}, {t['threads']} threads; torch's RSS after import and before data: "
      f"{mib(t['rss_after_import_bytes'])}.")
print("\nwidebag's step profile (first run; ms per step and share):")
for layout in layouts:
    p = load("widebag", layout)[0]["profile"]
    top = sorted(p["stages"], key=lambda s: -s["ms_per_step"])[:4]
    print(f"- {layout}: {p['ms_per_step']:.1f} ms/step: " +
          ", ".join(f"{s['stage']} {s['ms_per_step']:.1f} ms ({100 * s['share']:.0f}%)" for s in top))
PY
