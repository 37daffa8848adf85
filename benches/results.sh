#!/usr/bin/env bash
# Quality on real data, one command: trains and evaluates each case into OUT/ (run directories
# with metrics.jsonl, summary.json and checkpoints) and prints one Markdown table.
#   - Gowalla (the LightGCN split): Mult-DAE (configs/gowalla.toml), full ranking Recall@20 and
#     NDCG@20 with training items masked, LightGCN's definitions; and the head/tail layout
#     (adaptive input + adaptive multinomial output, tails on the host) at a fifth of the table
#     and output values.
#   - GCIDE CBOW: perplexity on 8,192 held-out rows, the full softmax against head/tail.
#   - Brown corpus: genre accuracy on 100 held-out texts (configs/brown.toml; extract the
#     corpus first, see that file).
#   bash benches/results.sh [OUT_DIR]    (needs ../shared/data; a release build)
set -euo pipefail
out=${1:-widebag-results}
mkdir -p "$out"
bin=${WIDEBAG_BIN:-target/release/widebag}
cpu=(--device cpu)

run() { # name, args...
  local name=$1; shift
  echo "== $name" >&2
  rm -rf "${out:?}/$name"
  local t0=$SECONDS
  "$bin" train "${cpu[@]}" --out "$out/$name" "$@" > /dev/null 2> "$out/$name.log"
  echo $((SECONDS - t0)) > "$out/$name.seconds"
}

headtail=(--set 'model.input_bands.cutoffs="auto"' --set 'model.output_bands.cutoffs="auto"'
          --set 'model.input_bands.placement=["device", "host"]')
run gowalla --config configs/gowalla.toml
run gowalla-headtail --config configs/gowalla.toml "${headtail[@]}"
gcide=(--config configs/gcide-headtail.toml --set train.steps=${GCIDE_STEPS:-4000})
run gcide-headtail "${gcide[@]}"
run gcide-full "${gcide[@]}" --set model.output=full --set 'model.input_bands.cutoffs=[]' --set 'model.output_bands.cutoffs=[]'
run brown --config configs/brown.toml

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def summary(name):
    return json.load(open(f"{out}/{name}/summary.json"))
def metric(s, name):
    return next((m["value"] for m in s["eval"]["metrics"] if m["name"] == name), float("nan"))
print("| case | layout | steps × batch | result | table + output values | wall time | peak RSS |")
print("|---|---|---|---|---|---|---|")
for name, what in [("gowalla", "Mult-DAE, full softmax"), ("gowalla-headtail", "head/tail, tails on the host"),
                   ("gcide-full", "full softmax"), ("gcide-headtail", "head/tail, tails on the host"),
                   ("brown", "bag of words → 15 genres")]:
    s = summary(name)
    if s["eval"]["task"] == "recommendation":
        best = max(s["evaluations"], key=lambda e: next(m["value"] for m in e["metrics"] if m["name"] == "recall@20"))
        r = (f"Recall@20 {metric(s, 'recall@20'):.4f}, NDCG@20 {metric(s, 'ndcg@20'):.4f} "
             f"(best: {next(m['value'] for m in best['metrics'] if m['name'] == 'recall@20'):.4f} at epoch {best.get('epoch')})")
    elif s["eval"]["task"] == "language_model":
        r = f"perplexity {metric(s, 'perplexity'):.1f} (NLL {metric(s, 'nll'):.4f})"
    else:
        r = f"accuracy {metric(s, 'accuracy'):.3f}, top-5 {metric(s, 'top5_accuracy'):.3f}"
    values = s["table_parameters"] + s["output_parameters"]
    secs = int(open(f"{out}/{name}.seconds").read())
    print(f"| {name} | {what} | {s['steps']} × {s['batch_size']} | {r} | {values:,} | "
          f"{secs // 60} min {secs % 60} s | {s['peak_rss_bytes'] / 2**20:.0f} MiB |")
PY
