#!/usr/bin/env bash
# The head/tail quality check: on GCIDE CBOW (configs/gcide-headtail.toml) and on synthetic Zipf
# data (240,000 ids and classes), the head/tail model (adaptive input + adaptive softmax, cutoffs
# chosen for a fifth of the unsplit bytes, tail bands on the host) against the unsplit model with
# the full softmax, after the same examples; validation loss on the same held-out rows.
#   bash benches/quality.sh [OUT_DIR]      (needs ../shared/data/gcide for the GCIDE half)
set -euo pipefail
out=${1:-widebag-quality}
mkdir -p "$out"
bin=${WIDEBAG_BIN:-target/release/widebag}
full=(--set model.output=full --set 'model.input_bands.cutoffs=[]' --set 'model.output_bands.cutoffs=[]')

run() { # name, args...
  local name=$1; shift
  echo "== $name"
  /usr/bin/time -v "$bin" train "$@" --json > "$out/$name.json" 2> "$out/$name.log"
  grep -E "Elapsed|Maximum resident" "$out/$name.log" || true
}
run gcide-headtail --config configs/gcide-headtail.toml
run gcide-full --config configs/gcide-headtail.toml "${full[@]}"
run zipf-headtail --config configs/zipf-headtail.toml
run zipf-full --config configs/zipf-headtail.toml "${full[@]}"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("| data | model | examples | validation loss | table + output values | ratio | peak RSS |")
print("|---|---|---|---|---|---|---|")
for data in ["gcide", "zipf"]:
    runs = {m: json.load(open(f"{out}/{data}-{m}.json")) for m in ["full", "headtail"]}
    base = runs["full"]["table_parameters"] + runs["full"]["output_parameters"]
    for m, r in runs.items():
        p = r["table_parameters"] + r["output_parameters"]
        print(f"| {data} | {m} | {r['steps'] * r['batch_size']:,} | {r['eval_loss']:.4f} | {p:,} | "
              f"{base / p:.2f}× | {r['peak_rss_bytes'] / 2**20:.0f} MiB |")
    d = runs["headtail"]["eval_loss"] / runs["full"]["eval_loss"] - 1
    print(f"| {data} | head/tail vs full | | {100 * d:+.2f}% | | | |")
PY
