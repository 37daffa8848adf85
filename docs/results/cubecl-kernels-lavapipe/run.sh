#!/usr/bin/env bash
# widebag's CubeCL softmax kernels (`train.gpu_kernels = "cubecl"`: the softmax's two passes and
# the output layer's Adam step inside its backward pass) against the same
# step as burn's tensor operations (`"tensor"`, the default) on lavapipe: the seed model's sparse,
# dense and head/tail layouts (gpu.sh's: the adaptive softmax over output bands) at small shapes, one synthetic file, each layout run on both kernels in turn
# (ROUNDS times, alternating), `--profile --json` (each stage boundary waits for the device:
# device_profile counts dispatches, blocking reads, new buffers, kernels compiled after step 1),
# then `explain --measure` on both (the measured peak and the ledger's error at it).
# Run from the repository root after `cargo build --release`:
#   bash docs/results/cubecl-kernels-lavapipe/run.sh [OUT]
set -euo pipefail
out=${1:-docs/results/cubecl-kernels-lavapipe}
bin=${WIDEBAG_BIN:-target/release/widebag}
rounds=${ROUNDS:-2}
model=(--set data.width=24000 --set data.n_classes=24000 --set model.dim=32 --set 'model.hidden=[64]'
  --set train.batch_size=128 --set train.steps=20 --set optim.table=adam --set optim.dense=adam
  --set optim.lr=0.001)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" data synth --rows 5120 --to libsvm "$tmp/data.svm" "${model[@]}" 2> "$out/synth.log"
file=(--set "data.path=$tmp/data.svm" --set data.format=libsvm)
layouts=${LAYOUTS:-sparse dense headtail}
# A layout's settings, as benches/gpu.sh sets them.
layout_sets() {
  case $1 in
    headtail) echo '--set model.layout="sparse" --set model.output="adaptive"
      --set model.input_bands.cutoffs="auto" --set model.output_bands.cutoffs="auto"' ;;
    *) echo "--set model.layout=\"$1\"" ;;
  esac
}
for round in $(seq 1 "$rounds"); do
  for layout in $layouts; do
    for kernels in cubecl tensor; do
      name="$layout-$kernels-$round"
      echo "== $name" >&2
      eval "sets=($(layout_sets "$layout"))"
      "$bin" train --device wgpu "${model[@]}" "${file[@]}" "${sets[@]}" \
        --set "train.gpu_kernels=\"$kernels\"" --profile --json > "$out/$name.json" 2> "$out/$name.log"
    done
  done
done
# The ledger against burn's allocator on both kernels (3 steps, the same shapes).
for layout in $layouts; do
  for kernels in cubecl tensor; do
    eval "sets=($(layout_sets "$layout"))"
    "$bin" explain --device wgpu "${model[@]}" "${sets[@]}" \
      --set "train.gpu_kernels=\"$kernels\"" --measure --steps 3 --json \
      > "$out/explain-$layout-$kernels.json" 2> "$out/explain-$layout-$kernels.log"
  done
done
python3 - "$out" "$rounds" $layouts <<'PY'
import json, sys
out, rounds, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| layout | kernels | examples/s (each round) | ms/step | dispatches/step | blocking reads | "
      "compiled after step 1 | final loss | measured peak (MB) | ledger error at peak |")
print("|---|---|---|---|---|---|---|---|---|---|")
for layout in layouts:
    for kernels in ("cubecl", "tensor"):
        runs = [json.load(open(f"{out}/{layout}-{kernels}-{r}.json")) for r in range(1, rounds + 1)]
        p = runs[-1]["profile"]
        d = p["device_profile"]
        eps = ", ".join(f"{r['examples_per_s']:,.0f}" for r in runs)
        x = json.load(open(f"{out}/explain-{layout}-{kernels}.json"))
        print(f"| {layout} | {kernels} | {eps} | {p['ms_per_step']:.1f} | {d['dispatches_per_step']:.1f} "
              f"| {d['reads_per_step']:.1f} | {d['compiled_after_step_1']} | "
              f"{runs[-1]['final_loss_mean10']:.4f} | {x['measured_peak_bytes'] / 1e6:.2f} | "
              f"{x['error_pct']:.3f} % |")
for layout in layouts:
    ratios = []
    for r in range(1, rounds + 1):
        c = json.load(open(f"{out}/{layout}-cubecl-{r}.json"))["examples_per_s"]
        t = json.load(open(f"{out}/{layout}-tensor-{r}.json"))["examples_per_s"]
        ratios.append(c / t)
    print(f"\n{layout}: cubecl / tensor examples/s, each round: " + ", ".join(f"{x:.2f}×" for x in ratios))
PY
