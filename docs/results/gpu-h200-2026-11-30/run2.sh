#!/usr/bin/env bash
# Device run 2: benches/gpu.sh with the WGSL build (the seed model's three layouts, profile,
# ledger, PyTorch CUDA), then the SPIR-V build (burn's vulkan feature) on the same layouts.
set -uo pipefail
T0=$SECONDS
mkdir -p /tmp/g /tmp/v
WIDEBAG_BIN=.gpu/widebag.xz VULKAN_DEBS=.gl LAYOUTS="sparse headtail dense" LIMIT_S=110 \
  DEADLINE_S=${D1:-360} bash benches/gpu.sh /tmp/g > /tmp/g/gpu-sh.log 2>&1
echo "wgsl gpu.sh rc=$? at $((SECONDS-T0))s"; cat /tmp/g/steps.txt
# The sparse layout again with the logits kept for the backward pass (as PyTorch does).
export LD_LIBRARY_PATH=/tmp/g/vulkan/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; [ -f $icd ] && export VK_DRIVER_FILES=$icd
M=(--set data.width=240000 --set data.n_classes=240000 --set model.dim=1024 --set 'model.hidden=[512]'
  --set train.batch_size=128 --set train.steps=100 --set optim.table=adam --set optim.dense=adam
  --set optim.lr=0.001 --set data.path=/tmp/g/data.svm --set data.format=libsvm --set model.layout=sparse)
timeout 60 /tmp/g/widebag train --device wgpu "${M[@]}" --set model.logits=keep --json \
  > /tmp/g/widebag-sparse-keep.json 2> /tmp/g/widebag-sparse-keep.log
echo "sparse keep rc=$? at $((SECONDS-T0))s"
timeout 60 /tmp/g/widebag train --device wgpu "${M[@]}" --set model.logits=keep --profile --json \
  > /tmp/g/profile-sparse-keep.json 2> /tmp/g/profile-sparse-keep.log
echo "sparse keep profile rc=$? at $((SECONDS-T0))s"
python3 - <<'PY'
import json
for n in ("widebag-sparse", "widebag-sparse-keep", "widebag-headtail", "widebag-dense"):
    try:
        d = json.load(open(f"/tmp/g/{n}.json")); print(n, d.get("compiler"), round(d["examples_per_s"]), d["final_loss_mean10"])
    except Exception as e: print(n, "failed", e)
PY
if [ -f .gpu/widebag-vk.xz ]; then
  WIDEBAG_BIN=.gpu/widebag-vk.xz VULKAN_DEBS=.gl LAYOUTS="sparse dense headtail" LIMIT_S=80 \
    PYTHON=/bin/false DEADLINE_S=${D2:-150} bash benches/gpu.sh /tmp/v > /tmp/v/gpu-sh.log 2>&1
  echo "spirv gpu.sh rc=$? at $((SECONDS-T0))s"; cat /tmp/v/steps.txt
  grep -h '"compiler"' -o /tmp/v/quickstart.json /tmp/g/quickstart.json 2>/dev/null
  python3 -c 'import json;[print(p, json.load(open(p)).get("compiler")) for p in ("/tmp/g/quickstart.json","/tmp/v/quickstart.json")]' 2>&1
fi
cp /tmp/g/gpu.md $OUT/gpu-wgsl.md 2>/dev/null; cp /tmp/v/gpu.md $OUT/gpu-spirv.md 2>/dev/null
rm -f /tmp/g/data.svm /tmp/v/data.svm /tmp/g/widebag /tmp/v/widebag; rm -rf /tmp/g/vulkan /tmp/v/vulkan
tar czf $OUT/gpu-wgsl.tgz -C /tmp/g . ; tar czf $OUT/gpu-spirv.tgz -C /tmp/v . 2>/dev/null
cat $OUT/gpu-wgsl.md | head -40; ls -la $OUT; echo "done $((SECONDS-T0))s"
