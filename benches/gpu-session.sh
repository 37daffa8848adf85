#!/usr/bin/env bash
# Issue 55's GPU run as one call of under 10 minutes on a fresh lent GPU machine (the device
# tool's `run`), in order of what the done-when needs:
#   1. benches/gpu.sh: the seed model's sparse, head/tail and dense layouts on burn's tensors and
#      on widebag's CubeCL kernels, the sparse layout also with its logits tiled
#      (`model.logits = "tiled"`), each with `explain --measure`, the PyTorch CUDA peer on the
#      same file, and the kernels' runs under `--profile` with cubecl timing every launch;
#   2. Gowalla against the PyTorch peers on CUDA (benches/peers/time-to-recall.sh): the
#      sampled config (configs/gowalla-fast.toml, its shapes padded so that no step compiles)
#      and its `torch-sampled` peer, to 0.1641, twice (the second run warm: cubecl's autotune
#      and compiled kernels kept from the first);
#   3. `plan --calibrate --scale 8` (the device's throughput model), then the sparse layout
#      planned with it by time (`plan.objective = "throughput"`: the logits kept, made again or
#      tiled) and each layout's predicted step;
#   4. the SPIR-V build (burn's `vulkan` feature) with f16 output products, if time is left.
# Every step has a time limit and nothing starts past END_S seconds; what ran comes back in
# $OUT/session.tgz, and $OUT/gpu.md, $OUT/ttr.md. Carried: .gl (the Vulkan loader's .deb
# packages), .gpu/widebag.xz (a stripped release build, xz), .gpu/widebag-vk.xz (optional:
# `--features vulkan`), .gpu/gowalla (train.txt, test.txt).
# Checked on lavapipe with small shapes (no GPU: checks the script, not a device):
#   SMALL=1 OUT=/tmp/out GW=../shared/data/gowalla WIDEBAG_BIN=target/release/widebag \
#     bash benches/gpu-session.sh
set -uo pipefail
T0=$SECONDS
END=${END_S:-555}
R=${R:-/tmp/session}
OUT=${OUT:-/tmp/out}
rm -rf "$R"
mkdir -p "$R" "$OUT"
here=$(pwd)
say() { echo "[$((SECONDS - T0))s] $*"; }
# lim N: N seconds, or what is left before END when that is less (0: skip).
lim() { local left=$((END - (SECONDS - T0))); ((left < $1)) && echo $((left > 5 ? left : 0)) || echo "$1"; }

if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 '; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $icd ] && export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
unxz() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2" && chmod +x "$2"; }
# WIDEBAG_BIN (a binary here, e.g. target/release/widebag for the lavapipe check) over the carried
# .gpu/widebag.xz.
if [ -n "${WIDEBAG_BIN:-}" ]; then
  cp "$WIDEBAG_BIN" "$R/widebag"
else
  unxz .gpu/widebag.xz "$R/widebag"
fi
[ -f .gpu/widebag-vk.xz ] && unxz .gpu/widebag-vk.xz "$R/widebag-vk"
{ nvidia-smi 2>&1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1; } > "$R/smi.txt"
say "setup done"

small=()
[ "${SMALL:-0}" = 1 ] && small=(DIM=32 HIDDEN=64 STEPS=20 ROWS=5120 WIDTH=20000)

# 1. The seed model's three layouts, tensors and kernels (and the sparse layout tiled), against
# PyTorch CUDA; the logits kept elsewhere, as PyTorch keeps them (the tiled runs set their own).
env "${small[@]}" WIDEBAG_BIN="$R/widebag" VULKAN_DEBS=.gl LAYOUTS="sparse headtail dense" \
  QUICKSTART=0 PROFILE=0 HALF= CALIBRATE=0 CUBECL_KERNELS=1 CUBECL_PROFILE=1 TILED=1 \
  WIDEBAG_ARGS='--set model.logits="keep"' LIMIT_S=75 DEADLINE_S="$(lim 300)" \
  bash benches/gpu.sh "$R/g" > "$R/gpu-sh.log" 2>&1
say "gpu.sh rc=$?"
cat "$R/g/steps.txt"

# 2. Gowalla, both sides on the GPU, each stopping at its first evaluation at or above 0.1641:
# the sampled config and its PyTorch peer, twice each (the second warm).
ep=()
peer=${PEER_DEVICE:-cuda}
[ "${SMALL:-0}" = 1 ] && ep=(EPOCHS=2) && peer=${PEER_DEVICE:-cpu}
t=$(lim 150)
if [ "$t" != 0 ]; then
  timeout "$t" env "${ep[@]}" WIDEBAG_BIN="$R/widebag" GOWALLA_DIR="${GW:-.gpu/gowalla}" RUNS=2 \
    STOP_AT_TARGET=1 FAST_TARGET=0.1641 MULTDAE=0 PEERS= WIDEBAG_DEVICE=wgpu PEER_DEVICE="$peer" \
    bash benches/peers/time-to-recall.sh "$R/ttr" > "$R/ttr.log" 2>&1
  say "time-to-recall rc=$?"
  tail -16 "$R/ttr.log"
else
  say "time-to-recall skipped (END)"
fi

# 3. The device's throughput model at the seed model's scale, then the sparse layout planned
# with it: on the kernels as measured, and by time (the logits' form left to the solver).
M=(--set data.width=240000 --set data.n_classes=240000 --set model.dim=1024 --set 'model.hidden=[512]'
  --set train.batch_size=128 --set train.steps=100 --set optim.table=adam --set optim.dense=adam
  --set optim.lr=0.001 --set "data.path=$R/g/data.svm" --set data.format=libsvm)
scale=8
if [ "${SMALL:-0}" = 1 ]; then
  M+=(--set data.width=20000 --set data.n_classes=20000 --set model.dim=32 --set 'model.hidden=[64]'
    --set train.steps=20)
  scale=1
fi
t=$(lim 120)
if [ "$t" != 0 ]; then
  timeout "$t" "$R/widebag" plan --calibrate --scale "$scale" --device wgpu --steps 4 \
    --out "$R/calibration.json" > "$R/calibrate.json" 2> "$R/calibrate.log"
  say "calibrate rc=$?"
fi
if [ -s "$R/calibration.json" ]; then
  head -c 600 "$R/calibration.json"; echo
  for l in sparse dense; do
    for k in tensor cubecl; do
      "$R/widebag" plan --device wgpu "${M[@]}" --set "model.layout=$l" --set 'model.logits="keep"' \
        --set "train.gpu_kernels=\"$k\"" --calibration "$R/calibration.json" --json \
        > "$R/plan-$l-$k.json" 2> "$R/plan-$l-$k.log"
    done
  done
  "$R/widebag" plan --device wgpu "${M[@]}" --set 'train.gpu_kernels="cubecl"' \
    --set 'plan.objective="throughput"' --pin train.batch_size --pin optim.table --pin optim.dense \
    --pin model.output_bands --pin model.input_bands.cutoffs \
    --calibration "$R/calibration.json" > "$R/plan-by-time.txt" 2> "$R/plan-by-time.log"
  grep -A4 "^  logits" "$R/plan-by-time.txt"
  for f in "$R"/plan-*.json; do
    python3 -c 'import json, sys; print(sys.argv[1].rsplit("/", 1)[1], json.loads(open(sys.argv[1]).readline()).get("predicted_step_s"))' "$f" 2> /dev/null
  done
fi

# 4. SPIR-V with f16 output products (the tensor cores), on the same file, with what is left.
one() {
  local name=$1 bin=$2 t
  t=$(lim "$3")
  shift 3
  if [ "$t" = 0 ]; then say "$name skipped (END)"; return; fi
  timeout "$t" "$bin" train --device wgpu "${M[@]}" --set 'model.logits="keep"' "$@" --json \
    > "$R/$name.json" 2> "$R/$name.log"
  local rc=$?
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], d.get("compiler"), round(d["examples_per_s"]), d["final_loss_mean10"], d.get("peak_in_use_bytes"))' \
    "$R/$name.json" "$name" 2> /dev/null || { echo "$name rc=$rc"; tail -3 "$R/$name.log"; }
}
if [ -x "$R/widebag-vk" ]; then
  one spirv-sparse-f16 "$R/widebag-vk" 80 --set model.layout=sparse --set 'model.output_precision="f16"'
  one spirv-dense-f16 "$R/widebag-vk" 50 --set model.layout=dense --set 'model.output_precision="f16"'
fi

cp "$R/g/gpu.md" "$OUT/gpu.md" 2> /dev/null
cp "$R/ttr/summary.md" "$OUT/ttr.md" 2> /dev/null
rm -f "$R/g/data.svm" "$R/widebag" "$R/widebag-vk" "$R/g/widebag"
rm -rf "$R/g/vulkan"
tar czf "$OUT/session.tgz" --exclude="*.safetensors" --exclude="checkpoint*" --exclude="*.svm" -C "$R" .
cd "$here" || exit
ls -la "$OUT"
say "done"
