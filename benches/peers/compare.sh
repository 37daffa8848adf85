#!/usr/bin/env bash
# widebag against its PyTorch peer, one command, same machine, same run: writes one synthetic
# libsvm file with `widebag data synth`, trains the dense, sparse and head/tail layouts on it
# with `widebag train` (CPU: burn's flex backend) and with benches/peers/torch_peer.py (PyTorch
# on the CPU), and prints examples/s and peak RSS side by side with the widebag/torch ratios.
#   bash benches/peers/compare.sh [OUT_DIR]
# Env: WIDEBAG_BIN (default target/release/widebag), PYTHON (a python with torch and numpy),
# ROWS (51200), WIDTH (240000), STEPS (20).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-widebag-peers}
bin=${WIDEBAG_BIN:-target/release/widebag}
py=${PYTHON:-python3}
rows=${ROWS:-51200}
width=${WIDTH:-240000}
steps=${STEPS:-20}
mkdir -p "$out"
"$py" -c "import torch, numpy" || { echo "compare.sh: $py lacks torch/numpy (pip install torch numpy)" >&2; exit 2; }

model=(--set "data.width=$width" --set "data.n_classes=$width" --set model.dim=32
  --set 'model.hidden=[64]' --set train.batch_size=256 --set "train.steps=$steps"
  --set train.device=cpu --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001)
"$bin" data synth --rows "$rows" --to libsvm "$out/data.svm" "${model[@]}"
file=(--set "data.path=$out/data.svm" --set data.format=libsvm)

declare -A layout_args=(
  [dense]="--set model.layout=dense"
  [sparse]="--set model.layout=sparse"
  [headtail]="--set model.layout=sparse --set model.output=adaptive --set model.input_bands.cutoffs=auto --set model.output_bands.cutoffs=auto"
)
for layout in dense sparse headtail; do
  echo "== widebag $layout" >&2
  # shellcheck disable=SC2086
  "$bin" train "${model[@]}" "${file[@]}" ${layout_args[$layout]} --json > "$out/widebag-$layout.json"
  cuts=()
  if [ "$layout" = headtail ]; then
    mapfile -t cuts < <("$py" - "$out/widebag-$layout.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
side = {b["side"]: b["cutoffs"] for b in r["bands"]}
print("--input-cutoffs"); [print(c) for c in side.get("input", [])]
print("--output-cutoffs"); [print(c) for c in side.get("output", [])]
PY
)
  fi
  echo "== torch $layout" >&2
  "$py" "$here/torch_peer.py" --data "$out/data.svm" --layout "$layout" --dim 32 --hidden 64 \
    --batch 256 --steps "$steps" --lr 0.001 "${cuts[@]}" > "$out/torch-$layout.json"
done

"$py" - "$out" <<'PY'
import json, platform, sys
out = sys.argv[1]
mib = lambda b: f"{b / 2**20:,.0f} MiB"
print(f"Machine: {platform.node()}, {__import__('os').cpu_count()} cores; CPU for both.")
print("| layout | widebag examples/s | torch examples/s | widebag / torch | widebag peak RSS | torch peak RSS | widebag / torch |")
print("|---|---|---|---|---|---|---|")
for layout in ["dense", "sparse", "headtail"]:
    w = json.load(open(f"{out}/widebag-{layout}.json"))
    t = json.load(open(f"{out}/torch-{layout}.json"))
    print(f"| {layout} | {w['examples_per_s']:.1f} | {t['examples_per_s']:.1f} | "
          f"{w['examples_per_s'] / t['examples_per_s']:.2f}× | {mib(w['peak_rss_bytes'])} | "
          f"{mib(t['peak_bytes'])} | {w['peak_rss_bytes'] / t['peak_bytes']:.2f}× |")
t = json.load(open(f"{out}/torch-sparse.json"))
print(f"\n{t['peer']}, {t['threads']} threads; torch's RSS after import and before data: "
      f"{mib(t['rss_after_import_bytes'])}.")
PY
