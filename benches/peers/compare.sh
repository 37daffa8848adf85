#!/usr/bin/env bash
# widebag against its PyTorch peer, one command, same machine, same run: writes one synthetic
# libsvm file with `widebag data synth`, trains the dense, sparse and head/tail layouts on it
# with `widebag train` (CPU: burn's flex backend) and with benches/peers/torch_peer.py (PyTorch
# on the CPU), RUNS times each, alternating, and prints the median examples/s with its spread
# (min–max over the runs), peak RSS and the final losses side by side with the widebag/torch
# ratios (of the medians). Run r uses seed r on both sides.
#
# Losses: both sides start the input layer as INPUT_INIT says (widebag's model.input_init:
# uniform, its default; normal, EmbeddingBag's default; fan_in, Linear's), each from its own
# draws, and the table gives the final loss's median and range over the runs' seeds. With
# SAME_INIT=1 the PyTorch peer starts from widebag's own initial weights (`train --save-init`)
# and reads the rows in widebag's order, and the table gives the largest relative difference
# between the two sides' losses at any step of any run (parity: the same computation).
#
# Logits: PyTorch's autograd keeps the output's logits for the backward pass; widebag does the
# same here (LOGITS=keep, `model.logits = "keep"`: the full softmax's, or the adaptive head's),
# or makes them again block by block as it does by default (LOGITS=recompute: one output matmul
# more per step, no `[batch, classes]` buffer). The dense layout keeps them either way.
#   bash benches/peers/compare.sh [OUT_DIR]
# Env: WIDEBAG_BIN (default target/release/widebag), PYTHON (a python with torch and numpy),
# ROWS (51200), WIDTH (240000), STEPS (200: one pass over the rows), RUNS (3),
# LAYOUTS ("dense sparse headtail"), LOGITS (keep), and the model: DIM (32), HIDDEN ("64"),
# BATCH (256).
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
same_init=${SAME_INIT:-0}
input_init=${INPUT_INIT:-uniform}
logits=${LOGITS:-keep}
mkdir -p "$out"
"$py" -c "import torch, numpy" || { echo "compare.sh: $py lacks torch/numpy (pip install torch numpy)" >&2; exit 2; }

hidden_toml="[$(echo "$hidden" | tr ' ' ',')]"
model=(--set "data.width=$width" --set "data.n_classes=$width" --set "model.dim=$dim"
  --set "model.hidden=$hidden_toml" --set "train.batch_size=$batch" --set "train.steps=$steps"
  --set train.device=cpu --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001
  --set "model.input_init=\"$input_init\"" --set "model.logits=\"$logits\"")
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
    init=("--input-init" "$input_init")
    save=()
    if [ "$same_init" = 1 ]; then
      save=(--save-init "$out/init-$layout-$run.safetensors")
      init=(--init "$out/init-$layout-$run.safetensors" --order widebag)
    fi
    # shellcheck disable=SC2086
    "$bin" train "${model[@]}" "${file[@]}" ${layout_args[$layout]} --set "train.seed=$run" \
      "${save[@]}" --json > "$out/widebag-$layout-$run.json"
    cuts=()
    if [ "$layout" = headtail ]; then
      mapfile -t cuts < <("$py" "$here/cutoffs.py" "$out/widebag-$layout-$run.json")
    fi
    echo "== run $run: torch $layout" >&2
    # shellcheck disable=SC2086
    "$py" "$here/torch_peer.py" --data "$out/data.svm" --layout "$layout" --dim "$dim" \
      --hidden $hidden --batch "$batch" --steps "$steps" --lr 0.001 "${cuts[@]}" \
      --seed "$run" "${init[@]}" > "$out/torch-$layout-$run.json"
    rm -f "$out/init-$layout-$run.safetensors"
  done
done

"$py" - "$out" "$runs" "$layouts" "$same_init" "$input_init" "$logits" <<'PY'
import json, os, platform, statistics, sys
out, runs, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
same_init, input_init, logits = sys.argv[4] == "1", sys.argv[5], sys.argv[6]
mib = lambda b: f"{b / 2**20:,.0f} MiB"
load = lambda side, layout: [json.load(open(f"{out}/{side}-{layout}-{r}.json"))
                             for r in range(1, runs + 1)]
w0 = load("widebag", layouts[0])[0]
print(f"Machine: {platform.node()}, {os.cpu_count()} cores; CPU for both. Model {w0['width']} → "
      f"{w0['dim']} → {w0['hidden']} → {w0['n_classes']}, batch {w0['batch_size']}, "
      f"{w0['steps']} steps, {runs} runs each (median, min–max); widebag's "
      f"`model.logits = \"{logits}\"`.")
if same_init:
    print("Parity: PyTorch started from widebag's initial weights and read the rows in its "
          "order (SAME_INIT=1).")
else:
    print(f"Both sides' input layer initialised as `model.input_init = \"{input_init}\"`, "
          "each from its own draws.")
loss_head = ("largest loss difference at any step" if same_init else
             "final loss (mean of last 10) widebag / torch, median (range)")
print("| layout | widebag examples/s | torch examples/s | widebag / torch | widebag peak RSS | "
      f"torch peak RSS | widebag / torch | {loss_head} |")
print("|---|---|---|---|---|---|---|---|")
for layout in layouts:
    w, t = load("widebag", layout), load("torch", layout)
    we = [x["examples_per_s"] for x in w]
    te = [x["examples_per_s"] for x in t]
    wr = max(x["peak_rss_bytes"] for x in w)
    tr = max(x["peak_bytes"] for x in t)
    span = lambda v, f=",.1f": f"{statistics.median(v):{f}} ({min(v):{f}}–{max(v):{f}})"
    if same_init:
        diffs = [(abs(a - b) / abs(b), r + 1, s + 1) for r, (x, y) in enumerate(zip(w, t))
                 for s, (a, b) in enumerate(zip(x["losses"], y["losses"]))]
        d, r, s = max(diffs)
        loss = f"{100 * d:.3f} % (run {r}, step {s} of {len(w[0]['losses'])})"
    else:
        wl = [x["final_loss_mean10"] for x in w]
        tl = [x["final_loss_mean10"] for x in t]
        overlap = max(min(wl), min(tl)) <= min(max(wl), max(tl))
        loss = (f"{span(wl, '.3f')} / {span(tl, '.3f')}: "
                f"{'ranges overlap' if overlap else 'ranges apart'}")
    print(f"| {layout} | {span(we)} | {span(te)} | "
          f"{statistics.median(we) / statistics.median(te):.2f}× | {mib(wr)} | {mib(tr)} | "
          f"{wr / tr:.2f}× | {loss} |")
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
