#!/usr/bin/env bash
# Device run 3 (short): the SPIR-V build (burn's vulkan feature) against the WGSL build, the seed model.
set -uo pipefail
T0=$SECONDS; R=/tmp/r3; mkdir -p $R
ldconfig -p | grep -q "libvulkan.so.1 " || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; [ -f $icd ] && export VK_DRIVER_FILES=$icd
unxz() { python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$1" "$2" && chmod +x "$2"; }
unxz .gpu/widebag-vk.xz /tmp/wvk; unxz .gpu/widebag.xz /tmp/wgs
M=(--set data.width=240000 --set data.n_classes=240000 --set model.dim=1024 --set 'model.hidden=[512]'
  --set train.batch_size=128 --set train.steps=100 --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001)
/tmp/wgs data synth --rows 12800 --to libsvm $R/data.svm "${M[@]}" 2> $R/synth.log
M+=(--set data.path=$R/data.svm --set data.format=libsvm)
echo "setup $((SECONDS-T0))s"
one() { local name=$1 bin=$2; shift 2
  if (( SECONDS - T0 > ${DL:-175} )); then echo "$name skipped (deadline)"; return; fi
  timeout ${LIM:-55} $bin train --device wgpu "${M[@]}" "$@" --json > $R/$name.json 2> $R/$name.log
  local rc=$?
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], d.get("compiler"), round(d["examples_per_s"]), d["final_loss_mean10"], d.get("peak_in_use_bytes"))' $R/$name.json $name 2>/dev/null || { echo "$name rc=$rc"; tail -3 $R/$name.log; }
  echo "  at $((SECONDS-T0))s"; }
one spirv-sparse /tmp/wvk --set model.layout=sparse
one spirv-dense /tmp/wvk --set model.layout=dense
one wgsl-sparse /tmp/wgs --set model.layout=sparse
one spirv-sparse-keep /tmp/wvk --set model.layout=sparse --set model.logits=keep
LIM=40 one spirv-headtail /tmp/wvk --set model.layout=sparse --set model.output=adaptive --set model.input_bands.cutoffs=auto --set model.output_bands.cutoffs=auto
rm -f $R/data.svm; tar czf $OUT/run3.tgz -C $R .; echo "done $((SECONDS-T0))s"
