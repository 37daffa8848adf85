#!/usr/bin/env bash
# Each remedy that costs quality taken alone on Gowalla (docs/remedies.md): `widebag frontier` at
# one budget with every other such remedy pinned, so the solver must take that one to keep Adam
# on both parts at the config's batch (configs/gowalla.toml, Recall@20 and NDCG@20 over the
# 29,858 test users, about 10 minutes a run on the 2-core machine):
#   input    head/tail input alone (the output layer whole, f32 tables and moments), 500MiB;
#   output   the adaptive softmax alone (the input table whole), 500MiB;
#   precision  --keep-accuracy: f16 tables and bf16 moments, 600MiB.
#   bash benches/remedy-alone.sh OUT [input] [output] [precision]      (default: all three)
# Env: WIDEBAG_BIN (default target/release/widebag), DATA_DIR (default ../shared/data). The
# whole model at the same command: benches/frontier.sh's gowalla 740MiB row.
set -euo pipefail
out=${1:?usage: bash benches/remedy-alone.sh OUT [input] [output] [precision]}
shift
which=${*:-input output precision}
bin=${WIDEBAG_BIN:-target/release/widebag}
data=${DATA_DIR:-../shared/data}
gowalla=(--device cpu --config configs/gowalla.toml
  --set "data.path=\"$data/gowalla/train.txt\"" --set "data.test_path=\"$data/gowalla/test.txt\"")
mkdir -p "$out"
for w in $which; do
  echo "== $w" >&2
  case $w in
    input)
      "$bin" frontier "${gowalla[@]}" --budgets 500MiB --out "$out/input" \
        --set 'plan.pin=["model.output_bands", "model.input_bands.dtype", "optim.state_dtype"]' ;;
    output)
      "$bin" frontier "${gowalla[@]}" --budgets 500MiB --out "$out/output" \
        --set 'plan.pin=["model.input_bands.cutoffs", "model.input_bands.dtype", "optim.state_dtype"]' ;;
    precision)
      "$bin" frontier "${gowalla[@]}" --budgets 600MiB --keep-accuracy --out "$out/precision" ;;
    *) echo "unknown remedy $w (input, output, precision)" >&2; exit 2 ;;
  esac > "$out/$w.md"
done
