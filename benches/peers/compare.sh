#!/usr/bin/env bash
# widebag against its PyTorch peer, one command, same machine, same run: writes one synthetic
# libsvm file with `widebag data synth`, trains the dense, sparse and head/tail layouts on it
# with `widebag train` (CPU: burn's flex backend) and with benches/peers/torch_peer.py (PyTorch
# on the CPU), RUNS times each, alternating, and prints the median examples/s with its spread
# (min–max over the runs), peak RSS and the final losses side by side with the widebag/torch
# ratios (the median and range of each run's ratio). Run r uses seed r on both sides.
#
# Losses: both sides start the input layer as INPUT_INIT says (widebag's model.input_init:
# uniform, its default; normal, EmbeddingBag's default; fan_in, Linear's), each from its own
# draws, and the table gives the final loss's median and range over the runs' seeds. With
# SAME_INIT=1 the PyTorch peer starts from widebag's own initial weights (`train --save-init`)
# and reads the rows in widebag's order, and the table gives the largest relative difference
# between the two sides' losses at any step of any run (parity: the same computation).
#
# Fairness (docs/benchmarks.md, "Fairness"): both processes get the same threads (THREADS:
# OMP_NUM_THREADS, MKL_NUM_THREADS, RAYON_NUM_THREADS, and the peer's torch.set_num_threads)
# and the same cores (`taskset -c CPUS`); the peer gets the allocator policy ALLOCATOR names
# (common.sh; default tuned: glibc's environment's nearest to the policy widebag sets itself),
# its dense parameters the fused Adam (ADAM=fused), its batches built before the clock;
# COMPILE=1 adds torch.compile (off by default: no faster after warm-up, measured).
# Examples/s is timed from the end of step 1 on both sides; start-up is outside it on both.
#
# Logits: PyTorch's autograd keeps the output's logits for the backward pass; widebag does the
# same here (LOGITS=keep, `model.logits = "keep"`: the full softmax's, or the adaptive head's),
# or makes them again block by block as it does by default (LOGITS=recompute: one output matmul
# more per step, no `[batch, classes]` buffer). The dense layout keeps them either way.
#   bash benches/peers/compare.sh [OUT_DIR]
# Env: WIDEBAG_BIN (default target/release/widebag), PYTHON (a python with torch and numpy),
# ROWS (51200), WIDTH (240000), STEPS (200: one pass over the rows), RUNS (3),
# LAYOUTS ("dense sparse headtail"), LOGITS (keep), and the model: DIM (32), HIDDEN ("64"),
# BATCH (256); THREADS (every core), CPUS (0-(THREADS-1); empty: unpinned), ALLOCATOR (tuned;
# glibc, mallopt, jemalloc), ADAM (fused; foreach, single), COMPILE (0), WIDEBAG_ARGS (more
# arguments for widebag's side, word-split; e.g. the output layer's products in half precision
# on flex's tensor path against the f32 peer: WIDEBAG_ARGS='--set train.cpu_kernels="tensor"
# --set model.output_precision="f16"').
# Writes OUT_DIR/summary.md (the table it prints: each side's median and range over the runs,
# and the median and range of the per-run ratios), OUT_DIR/machine.txt, and each invocation's
# raw output: SIDE-LAYOUT-RUN.json, .log (stderr) and .wall (start and end).
#   Seed model (240,000 → 1024 → 512 → 240,000, batch 128), best layout of each side:
#   DIM=1024 HIDDEN="512" BATCH=128 LAYOUTS=headtail bash benches/peers/compare.sh out-seed
# shellcheck source-path=SCRIPTDIR
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
adam=${ADAM:-fused}
compile=${COMPILE:-0}
read -r -a widebag_args <<< "${WIDEBAG_ARGS:-}"
# shellcheck source=common.sh
. "$here/common.sh"
mkdir -p "$out"
"$py" -c "import torch, numpy" || { echo "compare.sh: $py lacks torch/numpy (pip install torch numpy)" >&2; exit 2; }
write_machine "$out" "$py" "$bin"
compiled=()
[ "$compile" = 1 ] && compiled=(--compile)

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
    timed "$out/widebag-$layout-$run" "$out/widebag-$layout-$run.json" "${widebag_run[@]}" \
      "$bin" train "${model[@]}" "${file[@]}" ${layout_args[$layout]} --set "train.seed=$run" \
      "${save[@]}" "${widebag_args[@]}" --json
    cuts=()
    if [ "$layout" = headtail ]; then
      mapfile -t cuts < <("$py" "$here/cutoffs.py" "$out/widebag-$layout-$run.json")
    fi
    echo "== run $run: torch $layout" >&2
    # shellcheck disable=SC2086
    timed "$out/torch-$layout-$run" "$out/torch-$layout-$run.json" "${torch_run[@]}" \
      "$py" "$here/torch_peer.py" --data "$out/data.svm" --layout "$layout" --dim "$dim" \
      --hidden $hidden --batch "$batch" --steps "$steps" --lr 0.001 "${cuts[@]}" \
      --seed "$run" "${init[@]}" --threads "$threads" --adam "$adam" "${compiled[@]}"
    rm -f "$out/init-$layout-$run.safetensors"
  done
done

"$py" - "$out" "$runs" "$layouts" "$same_init" "$input_init" "$logits" <<'PY' | tee "$out/summary.md"
import json, statistics, sys
out, runs, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
same_init, input_init, logits = sys.argv[4] == "1", sys.argv[5], sys.argv[6]
mib = lambda b: f"{b / 2**20:,.0f} MiB"
load = lambda side, layout: [json.load(open(f"{out}/{side}-{layout}-{r}.json"))
                             for r in range(1, runs + 1)]
span = lambda v, f=",.1f": f"{statistics.median(v):{f}} ({min(v):{f}}–{max(v):{f}})"
machine = dict(l.split(": ", 1) for l in open(f"{out}/machine.txt").read().splitlines()
               if ": " in l)
w0, t0 = load("widebag", layouts[0])[0], load("torch", layouts[0])[0]
print(f"Machine: {machine['cpu']}, {machine['cores']}; {machine['date']}; CPU for both, "
      f"{t0['threads']} threads each ({machine['settings']}).")
print(f"Model {w0['width']} → {w0['dim']} → {w0['hidden']} → {w0['n_classes']}, batch "
      f"{w0['batch_size']}, {w0['steps']} steps, {runs} runs each, alternating (median, min–max; "
      "the ratios are each run's, widebag's run r over PyTorch's run r); widebag's "
      f"`model.logits = \"{logits}\"`. Examples/s from the end of step 1 on both sides.")
allocator = machine["settings"].split("ALLOCATOR=")[1]
alloc = " ".join(f"{k}={v}" for k, v in t0["allocator_env"].items()) or "glibc's defaults"
print(f"PyTorch: {t0['peer']}, Adam {t0['adam']}, "
      f"{'torch.compile' if t0['compile'] else 'eager'}, batches built before the clock; "
      f"ALLOCATOR={allocator}: PyTorch on {alloc}, widebag on its own policy "
      f"(src/malloc_policy.rs){' over jemalloc' if allocator == 'jemalloc' else ''}.")
if same_init:
    print("Parity: PyTorch started from widebag's initial weights and read the rows in its "
          "order (SAME_INIT=1).")
else:
    print(f"Both sides' input layer initialised as `model.input_init = \"{input_init}\"`, "
          "each from its own draws.")
loss_head = ("largest loss difference at any step" if same_init else
             "final loss (mean of last 10) widebag / torch, median (range)")
print("\n| layout | widebag examples/s | torch examples/s | widebag / torch | widebag peak RSS | "
      f"torch peak RSS | widebag / torch | {loss_head} |")
print("|---|---|---|---|---|---|---|---|")
for layout in layouts:
    w, t = load("widebag", layout), load("torch", layout)
    we = [x["examples_per_s"] for x in w]
    te = [x["examples_per_s"] for x in t]
    ratios = [a / b for a, b in zip(we, te)]
    wr = max(x["peak_rss_bytes"] for x in w)
    tr = max(x["peak_bytes"] for x in t)
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
    print(f"| {layout} | {span(we)} | {span(te)} | **{span(ratios, '.2f')}×** | {mib(wr)} | "
          f"{mib(tr)} | {wr / tr:.2f}× | {loss} |")
print(f"\nPeak RSS: the largest over the runs, the whole process (torch's after import and "
      f"before data: {mib(t0['rss_after_import_bytes'])}). Start-up (imports, parsing, batch "
      f"preparation, the model) is outside the timed steps on both sides: PyTorch's "
      f"{span([x['setup_s'] for l in layouts for x in load('torch', l)], '.1f')} s, widebag's "
      f"set-up after reading the data "
      f"{span([x['setup_s'] for l in layouts for x in load('widebag', l)], '.2f')} s.")
print("\nwidebag's step profile (first run; ms per step and share):")
for layout in layouts:
    p = load("widebag", layout)[0]["profile"]
    top = sorted(p["stages"], key=lambda s: -s["ms_per_step"])[:4]
    print(f"- {layout}: {p['ms_per_step']:.1f} ms/step: " +
          ", ".join(f"{s['stage']} {s['ms_per_step']:.1f} ms ({100 * s['share']:.0f}%)" for s in top))
PY
