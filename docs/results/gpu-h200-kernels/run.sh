#!/usr/bin/env bash
# Device run 4, one call of under 10 minutes on a fresh GPU machine, in order of what it is for:
#   1. benches/gpu.sh (WGSL build): the seed model's sparse, head/tail and dense layouts on burn's
#      tensor operations and on widebag's CubeCL output kernels, logits kept (as PyTorch keeps
#      them), each with `explain --measure`, the PyTorch CUDA peer on the same file, and the
#      kernels' runs under `--profile` with cubecl timing every launch;
#   2. Gowalla to Recall@20 0.1641 on the GPU against the PyTorch Mult-DAE peer on CUDA
#      (benches/peers/time-to-recall.sh): the EmbeddingBag + SparseAdam peer, widebag's Mult-DAE;
#   3. the SPIR-V build (burn's `vulkan` feature) with f16 output products: the tensor cores'
#      route through Vulkan's cooperative matrices;
#   4. `plan --calibrate` (the device's throughput model), each layout planned with it.
# Every step has a time limit and nothing starts past END_S seconds; what ran comes back in
# $OUT/r4.tgz. Carried: .gl (the Vulkan loader's .deb packages), .gpu/widebag.xz,
# .gpu/widebag-vk.xz, .gpu/gowalla (train.txt, test.txt).
# Checked on lavapipe with small shapes: SMALL=1 OUT=/tmp/out bash docs/results/gpu-h200-kernels/run.sh
set -uo pipefail
T0=$SECONDS
END=${END_S:-555}
R=${R:-/tmp/r4}
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
unxz .gpu/widebag.xz "$R/widebag"
[ -f .gpu/widebag-vk.xz ] && unxz .gpu/widebag-vk.xz "$R/widebag-vk"
{ nvidia-smi 2>&1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1; } > "$R/smi.txt"
say "setup done"

small=()
[ "${SMALL:-0}" = 1 ] && small=(DIM=32 HIDDEN=64 STEPS=20 ROWS=5120 WIDTH=20000)

# 1. The seed model's three layouts, tensors and kernels, against PyTorch CUDA.
env "${small[@]}" WIDEBAG_BIN="$R/widebag" VULKAN_DEBS=.gl LAYOUTS="sparse headtail dense" \
  QUICKSTART=0 PROFILE=0 HALF= CALIBRATE=0 CUBECL_KERNELS=1 CUBECL_PROFILE=1 \
  WIDEBAG_ARGS='--set model.logits="keep"' LIMIT_S=75 DEADLINE_S="$(lim 285)" \
  bash benches/gpu.sh "$R/g" > "$R/gpu-sh.log" 2>&1
say "gpu.sh rc=$?"
cat "$R/g/steps.txt"
python3 - "$R/g" <<'PY'
import json, sys, glob, os
for p in sorted(glob.glob(sys.argv[1] + "/widebag-*.json") + glob.glob(sys.argv[1] + "/torch-*.json")):
    try:
        d = json.load(open(p))
        print(os.path.basename(p), round(d["examples_per_s"]), round(d["final_loss_mean10"], 3),
              d.get("peak_in_use_bytes", d.get("peak_bytes")))
    except Exception as e:
        print(os.path.basename(p), "no result", type(e).__name__)
PY

# 2. Gowalla, both sides on the GPU, each stopping at its first evaluation at or above 0.1641:
# the PyTorch Mult-DAE (EmbeddingBag + SparseAdam) first, then widebag's (configs/gowalla.toml),
# each its own invocation so that one side's failure or time limit leaves the other's run.
# (configs/gowalla-fast.toml's sampled softmax is left out: on wgpu its negatives' count
# changes every step, and every step compiles kernels anew: 97 after step 1 on lavapipe.)
ttr() {
  local name=$1 t
  shift
  t=$(lim "$1")
  shift
  if [ "$t" = 0 ]; then say "$name skipped (END)"; return; fi
  timeout "$t" env "$@" WIDEBAG_BIN="$R/widebag" GOWALLA_DIR="${GW:-.gpu/gowalla}" RUNS=1 \
    STOP_AT_TARGET=1 FAST_CONFIG=none WIDEBAG_DEVICE=wgpu PEER_DEVICE=cuda \
    bash benches/peers/time-to-recall.sh "$R/$name" > "$R/$name.log" 2>&1
  say "$name rc=$?"
  tail -16 "$R/$name.log"
}
ep=()
[ "${SMALL:-0}" = 1 ] && ep=(EPOCHS=2)
ttr ttr-torch "${TTR_TORCH_S:-60}" "${ep[@]}" MULTDAE=0 PEERS=bag
ttr ttr-widebag "${TTR_WIDEBAG_S:-130}" "${ep[@]}" MULTDAE=1 PEERS=

# 3. SPIR-V with f16 output products (the tensor cores), on the same file.
M=(--set data.width=240000 --set data.n_classes=240000 --set model.dim=1024 --set 'model.hidden=[512]'
  --set train.batch_size=128 --set train.steps=100 --set optim.table=adam --set optim.dense=adam
  --set optim.lr=0.001 --set "data.path=$R/g/data.svm" --set data.format=libsvm --set 'model.logits="keep"')
[ "${SMALL:-0}" = 1 ] && M+=(--set data.width=20000 --set data.n_classes=20000 --set model.dim=32
  --set 'model.hidden=[64]' --set train.steps=20)
one() {
  local name=$1 bin=$2 t
  t=$(lim "$3")
  shift 3
  if [ "$t" = 0 ]; then say "$name skipped (END)"; return; fi
  timeout "$t" "$bin" train --device wgpu "${M[@]}" "$@" --json > "$R/$name.json" 2> "$R/$name.log"
  local rc=$?
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], d.get("compiler"), round(d["examples_per_s"]), d["final_loss_mean10"], d.get("peak_in_use_bytes"))' \
    "$R/$name.json" "$name" 2> /dev/null || { echo "$name rc=$rc"; tail -3 "$R/$name.log"; }
  say "$name done"
}
if [ -x "$R/widebag-vk" ]; then
  one spirv-sparse-f16 "$R/widebag-vk" 90 --set model.layout=sparse --set 'model.output_precision="f16"'
  one spirv-dense-f16 "$R/widebag-vk" 60 --set model.layout=dense --set 'model.output_precision="f16"'
  one spirv-sparse "$R/widebag-vk" 40 --set model.layout=sparse
fi

# 4. The device's throughput model, then each layout planned with it.
t=$(lim 150)
if [ "$t" != 0 ]; then
  timeout "$t" "$R/widebag" plan --calibrate --device wgpu --steps 6 --out "$R/calibration.json" \
    > "$R/calibrate.json" 2> "$R/calibrate.log"
  say "calibrate rc=$?"
  if [ -s "$R/calibration.json" ]; then
    cat "$R/calibration.json" | head -c 600; echo
    for k in tensor cubecl; do
      for l in sparse dense; do
        "$R/widebag" plan --device wgpu "${M[@]}" --set "model.layout=$l" \
          --set "train.gpu_kernels=\"$k\"" --calibration "$R/calibration.json" --json \
          > "$R/plan-$l-$k.json" 2> "$R/plan-$l-$k.log"
        python3 -c 'import json, sys; print(sys.argv[2], json.load(open(sys.argv[1])).get("predicted_step_s"))' \
          "$R/plan-$l-$k.json" "$l-$k" 2> /dev/null
      done
    done
  fi
fi

cp "$R/g/gpu.md" "$OUT/gpu.md" 2> /dev/null
for n in ttr-torch ttr-widebag; do cp "$R/$n/summary.md" "$OUT/$n.md" 2> /dev/null; done
rm -f "$R/g/data.svm" "$R/widebag" "$R/widebag-vk" "$R/g/widebag"
rm -rf "$R/g/vulkan"
tar czf "$OUT/r4.tgz" --exclude="*.safetensors" --exclude="checkpoint*" --exclude="*.svm" -C "$R" .
cd "$here" || exit
ls -la "$OUT"
say "done"
