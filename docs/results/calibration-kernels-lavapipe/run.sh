#!/usr/bin/env bash
# The throughput model fitted on lavapipe with the CubeCL kernel runs (19 runs), this project's 2-core machine, 2026-11-30:
# from the repository root after `cargo build --release`.
set -euo pipefail
out=${1:-docs/results/calibration-kernels-lavapipe}
XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} target/release/widebag plan --calibrate --device wgpu --steps 6 \
  --out "$out/calibration.json" > "$out/stdout.txt" 2> "$out/stderr.log"
# The sparse layout of docs/results/cubecl-kernels-lavapipe/ planned with it on both kernels.
for k in tensor cubecl; do
  XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} target/release/widebag plan --device wgpu --set data.width=24000 \
    --set data.n_classes=24000 --set model.dim=32 --set 'model.hidden=[64]' --set train.batch_size=128 \
    --set optim.table=adam --set optim.dense=adam --set "train.gpu_kernels=\"$k\"" \
    --calibration "$out/calibration.json" --json > "$out/plan-sparse-$k.json"
done
