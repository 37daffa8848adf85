#!/usr/bin/env bash
# Device run 5 (short, after run.sh): each layout planned with run.sh's fitted H200 calibration
# (--budget: wgpu's WGSL path cannot read a GPU's heap size); Gowalla's Mult-DAE on the SPIR-V
# build with f16 output products; the seed model's sparse layout on SPIR-V with f16 products
# under --profile with cubecl timing every launch (which kernels the tensor cores ran).
set -uo pipefail
T0=$SECONDS; R=/tmp/r5; OUT=${OUT:-/tmp/out}; rm -rf $R; mkdir -p $R $OUT
say() { echo "[$((SECONDS - T0))s] $*"; }
ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 ' || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; [ -f $icd ] && export VK_DRIVER_FILES=$icd
unxz() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2" && chmod +x "$2"; }
unxz .gpu/widebag.xz $R/widebag; unxz .gpu/widebag-vk.xz $R/widebag-vk
M=(--set data.width=240000 --set data.n_classes=240000 --set model.dim=1024 --set 'model.hidden=[512]'
  --set train.batch_size=128 --set train.steps=100 --set optim.table=adam --set optim.dense=adam
  --set optim.lr=0.001 --set 'model.logits="keep"')
$R/widebag data synth --rows 5120 --to libsvm $R/data.svm "${M[@]}" 2> $R/synth.log
M+=(--set data.path=$R/data.svm --set data.format=libsvm)
say setup
declare -A L=([sparse]="--set model.layout=sparse" [dense]="--set model.layout=dense"
  [headtail]="--set model.layout=sparse --set model.output=adaptive --set model.input_bands.cutoffs=auto --set model.output_bands.cutoffs=auto")
for l in sparse headtail dense; do for k in tensor cubecl; do
  # shellcheck disable=SC2086
  timeout 20 $R/widebag plan --device wgpu "${M[@]}" ${L[$l]} --set "train.gpu_kernels=\"$k\"" \
    --budget 139GiB --calibration .gpu/calibration-h200.json --json > $R/plan-$l-$k.json 2> $R/plan-$l-$k.log
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], d.get("predicted_step_s"), d.get("status"))' $R/plan-$l-$k.json $l-$k 2>&1 | tail -1
done; done
say plans
timeout 80 env WIDEBAG_BIN=$R/widebag-vk GOWALLA_DIR=.gpu/gowalla RUNS=1 STOP_AT_TARGET=1 FAST_CONFIG=none \
  WIDEBAG_DEVICE=wgpu MULTDAE=1 PEERS= WIDEBAG_ARGS='--set model.output_precision="f16"' \
  bash benches/peers/time-to-recall.sh $R/ttr-widebag-spirv-f16 > $R/ttr.log 2>&1
say "ttr spirv f16 rc=$?"; tail -14 $R/ttr.log
CUBECL_DEBUG_OPTION=profile CUBECL_DEBUG_LOG=$R/kernels-spirv-sparse-f16.log timeout 45 $R/widebag-vk train \
  --device wgpu "${M[@]}" --set model.layout=sparse --set 'model.output_precision="f16"' --set train.steps=20 \
  --profile --json > $R/profile-spirv-sparse-f16.json 2> $R/profile-spirv-sparse-f16.log
say "profile rc=$?"
d=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["profile"]["device_profile"]["dispatches_per_step"])' $R/profile-spirv-sparse-f16.json 2>/dev/null)
python3 benches/kernel_profile.py $R/kernels-spirv-sparse-f16.log --steps 20 --top 12 ${d:+--steady $d} > $R/kernels-spirv-sparse-f16.json 2>> $R/profile-spirv-sparse-f16.log
python3 -c '
import json, sys
k = json.load(open(sys.argv[1])); print("ms per step timed", k["ms_per_step_timed"])
for t in k["top"]: print(round(t["ms_per_step"], 2), round(t["calls_per_step"], 1), t["name"][:150])' $R/kernels-spirv-sparse-f16.json 2>&1 | head -16
xz -f $R/kernels-spirv-sparse-f16.log
rm -f $R/widebag $R/widebag-vk $R/data.svm
tar czf $OUT/r5.tgz --exclude="*.safetensors" --exclude="checkpoint*" -C $R .
say done
