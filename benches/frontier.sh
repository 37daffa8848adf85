#!/usr/bin/env bash
# The quality cost of the solver's remedies on the three references (docs/remedies.md): one
# `widebag frontier` per reference, each at the config's batch, on flex:
#   brown    configs/brown.toml (15-genre accuracy on 100 held-out texts), budgets 40MiB (the whole
#            model) down to 6MiB;
#   gcide    configs/gcide-headtail.toml made whole (one band each side, the full softmax): CBOW
#            perplexity on 8,192 held-out rows, 200MiB down to 75MiB;
#   gowalla  configs/gowalla.toml (Mult-DAE, Recall@20 and NDCG@20 over the 29,858 test users),
#            740MiB down to 100MiB (about 10 minutes a budget on the 2-core machine).
#   bash benches/frontier.sh OUT [brown] [gcide] [gowalla]      (default: all three)
# Env: WIDEBAG_BIN (default target/release/widebag), DATA_DIR (default ../shared/data), BROWN_DIR
# (the unpacked Brown corpus's directory holding only its 500 texts ca01 … cr09; default
# ~/.cache/widebag/data/brown), JOBS (runs at once, default 1: the time column is then each run's
# alone). Each frontier resumes where it stopped; OUT/REF/results.md is its table.
set -euo pipefail
out=${1:?usage: bash benches/frontier.sh OUT [brown] [gcide] [gowalla]}
shift
refs=${*:-brown gcide gowalla}
bin=${WIDEBAG_BIN:-target/release/widebag}
data=${DATA_DIR:-../shared/data}
brown=${BROWN_DIR:-$HOME/.cache/widebag/data/brown}
jobs=(--jobs "${JOBS:-1}" --device cpu)
mkdir -p "$out"
for ref in $refs; do
  echo "== $ref" >&2
  case $ref in
    brown)
      "$bin" frontier "${jobs[@]}" --config configs/brown.toml --set "data.path=\"$brown\"" \
        --budgets 6MiB,10MiB,20MiB,40MiB --out "$out/brown" ;;
    gcide)
      "$bin" frontier "${jobs[@]}" --config configs/gcide-headtail.toml \
        --set "data.path=\"$data/gcide/gcide.index\"" --set model.output=full \
        --set "model.input_bands.cutoffs=[]" --set "model.output_bands.cutoffs=[]" \
        --set 'model.input_bands.placement=["device"]' \
        --budgets 75MiB,100MiB,150MiB,200MiB --out "$out/gcide" ;;
    gowalla)
      "$bin" frontier "${jobs[@]}" --config configs/gowalla.toml \
        --set "data.path=\"$data/gowalla/train.txt\"" \
        --set "data.test_path=\"$data/gowalla/test.txt\"" \
        --budgets 100MiB,200MiB,400MiB,740MiB --out "$out/gowalla" ;;
    *) echo "unknown reference $ref (brown, gcide, gowalla)" >&2; exit 2 ;;
  esac > "$out/$ref.md"
done
