#!/usr/bin/env bash
# The full softmax's three forms of logits on wgpu with widebag's CubeCL kernels, chosen by the
# throughput model and measured: `plan --objective throughput` with CALIBRATION (a
# `plan --calibrate --out` file of this device) prices `model.logits` = recompute, keep and
# tiled at one batch and optimizer pair (every other knob pinned), then each form trains STEPS
# steps, RUNS rounds alternating, in one invocation: examples/s (after the first step) and final
# loss (the three must be equal) beside the plan's prediction, and each form's peak as
# `explain --measure` reads it from the allocator at every point of the step.
#   CALIBRATION=docs/results/calibration-tiled-2026-11-30/lavapipe-tiled.json bash benches/logits-forms.sh OUT
# Env: WIDEBAG_BIN (target/release/widebag), CLASSES (30000), CHUNK (8000), BATCH (256),
# DIM (32), HIDDEN (64), STEPS (12), RUNS (1), DEVICE (wgpu).
set -euo pipefail
out=${1:?usage: logits-forms.sh OUT}
mkdir -p "$out"
bin=${WIDEBAG_BIN:-target/release/widebag}
cal=${CALIBRATION:?a calibration file: plan --calibrate --out FILE}
sets=(--set 'train.gpu_kernels="cubecl"' --set "data.n_classes=${CLASSES:-30000}"
  --set "data.width=${CLASSES:-30000}" --set "model.class_chunk=${CHUNK:-8000}"
  --set "train.batch_size=${BATCH:-256}" --set "model.dim=${DIM:-32}"
  --set "model.hidden=[${HIDDEN:-64}]")
pins=(--pin model.output_bands --pin optim.table --pin optim.dense --pin model.checkpointing
  --pin model.input_bands.placement)
device=${DEVICE:-wgpu}
"$bin" plan --device "$device" --calibration "$cal" --set 'plan.objective="throughput"' \
  "${sets[@]}" "${pins[@]}" > "$out/plan.txt"
"$bin" plan --device "$device" --calibration "$cal" --set 'plan.objective="throughput"' \
  "${sets[@]}" "${pins[@]}" --json > "$out/plan.json"
for form in recompute keep tiled; do
  "$bin" explain --device "$device" "${sets[@]}" --set "model.logits=\"$form\"" --measure \
    --steps 2 --json --svg "$out/explain-$form.svg" 2> "$out/explain-$form.log" > "$out/explain-$form.json"
done
for i in $(seq "${RUNS:-1}"); do
  for form in recompute keep tiled; do
    "$bin" train --device "$device" "${sets[@]}" --set "model.logits=\"$form\"" \
      --set "train.steps=${STEPS:-12}" --json 2> "$out/$form-$i.log" > "$out/$form-$i.json"
  done
done
python3 - "$out" "${RUNS:-1}" <<'PY' | tee "$out/summary.md"
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
plan = json.loads(open(f"{out}/plan.json").readline())["plan"]
choice = plan["logits"]
print(f"plan: model.logits = \"{choice['chosen']}\" (configured \"{choice['configured']}\")\n")
print("| model.logits | predicted examples/s | measured examples/s (median of runs) | "
      "measured / predicted | final loss | plan's peak MiB | measured peak MiB (explain --measure) |")
print("|---|---|---|---|---|---|---|")
for o in choice["options"]:
    form = o["logits"]
    rs = [json.load(open(f"{out}/{form}-{i}.json")) for i in range(1, runs + 1)]
    eps = statistics.median(r["examples_per_s"] for r in rs)
    losses = sorted({r["final_loss"] for r in rs})
    peak = json.load(open(f"{out}/explain-{form}.json"))["measured_peak_bytes"] / 2**20
    print(f"| {form}{' (chosen)' if form == choice['chosen'] else ''} | "
          f"{o['predicted_examples_per_s']:.1f} | {eps:.1f} | {eps / o['predicted_examples_per_s']:.2f} | "
          f"{', '.join(map(str, losses))} | {o['predicted_peak_bytes'] / 2**20:.1f} | {peak:.1f} |")
PY
