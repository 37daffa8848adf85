#!/usr/bin/env bash
# Device probe 1 (one-off): the seed model's per-kernel profile on the H200, current binary.
set -uo pipefail
T0=$SECONDS; R=/tmp/r1; mkdir -p $R
ldconfig -p | grep -q "libvulkan.so.1 " || { for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; }
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $icd ] && export VK_DRIVER_FILES=$icd
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .gpu/widebag.xz /tmp/widebag && chmod +x /tmp/widebag
B=/tmp/widebag; STEPS=${STEPS:-20}
nvidia-smi > $R/smi.txt 2>&1; echo "setup $((SECONDS-T0))s"
model=(--set data.width=${W:-240000} --set data.n_classes=${W:-240000} --set model.dim=${DIM:-1024} --set 'model.hidden=[512]'
  --set train.batch_size=128 --set train.steps=$STEPS --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001)
$B data synth --rows 5120 --to libsvm $R/data.svm "${model[@]}" 2> $R/synth.log || echo synth failed
file=(--set data.path=$R/data.svm --set data.format=libsvm)
prof() {
  local name=$1 lim=$2; shift 2
  CUBECL_DEBUG_OPTION=profile CUBECL_DEBUG_LOG=$R/k-$name.log timeout $lim $B train --device wgpu "${model[@]}" "${file[@]}" "$@" --profile --json > $R/$name.json 2> $R/$name.log
  echo "$name rc=$? at $((SECONDS-T0))s"
  python3 benches/kernel_profile.py $R/k-$name.log --steps $STEPS --top 14 > $R/kern-$name.json 2>>$R/$name.log
  python3 - $R/$name.json $R/kern-$name.json <<'PY'
import json,sys
try:
  p=json.load(open(sys.argv[1]))["profile"]; print(f"  {p['ms_per_step']:.2f} ms/step:", ", ".join(f"{s['stage']} {s['ms_per_step']:.2f}" for s in sorted(p['stages'],key=lambda s:-s['ms_per_step'])[:6]))
  d=p.get("device_profile"); print("  device_profile", {k:v for k,v in d.items() if k!='top_kernels'} if d else None)
except Exception as e: print("  no profile:", e)
try:
  k=json.load(open(sys.argv[2])); print(f"  timed {k['ms_per_step_timed']:.2f} ms/step")
  for t in k["top"]: print(f"   {t['ms_per_step']:8.3f} ms {t['calls_per_step']:6.1f}x  {t['name'][:150]}")
except Exception as e: print("  no kernels:", e)
PY
}
prof sparse 90 --set model.layout=sparse
prof headtail 75 --set model.layout=sparse --set model.output=adaptive --set model.input_bands.cutoffs=auto --set model.output_bands.cutoffs=auto
prof chunk8k 70 --set model.layout=sparse --set model.class_chunk=8192
prof dense 80 --set model.layout=dense
rm -f $R/data.svm; for f in $R/k-*.log; do xz -T4 $f; done
tar czf $OUT/run1.tgz -C $R . ; echo "done $((SECONDS-T0))s"
