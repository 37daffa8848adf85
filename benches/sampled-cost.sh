#!/usr/bin/env bash
# The sampled softmax's quality cost as the solver offers it (docs/remedies.md, its reference
# in crates/widebag-solver/src/reference.rs): each reference trained whole (the full softmax)
# and with `model.output = "sampled_softmax"` at the rung's 1,024 negatives, nothing else
# changed, one after the other in one invocation, on flex:
#   gcide    configs/gcide-headtail.toml made whole (one band each side): CBOW, 200 steps,
#            perplexity on 8,192 held-out rows (computed with the full softmax either way);
#   gowalla  configs/gowalla.toml (Mult-DAE, 20 epochs): Recall@20 and NDCG@20 over the 29,858
#            test users (about 11 minutes whole, 2-core machine);
#   gcide-time  the gcide runs at about the same training time: the full softmax's 200 steps
#            against the sampled softmax's 2,400 (its steps are about 12× cheaper).
#   bash benches/sampled-cost.sh OUT [gcide] [gowalla] [gcide-time]   (default: gcide gowalla)
# Env: WIDEBAG_BIN (default target/release/widebag), DATA_DIR (default ../shared/data).
# OUT/REF-{whole,sampled}.json are the runs' `--json` reports; OUT/summary.md the table.
set -euo pipefail
out=${1:?usage: bash benches/sampled-cost.sh OUT [gcide] [gowalla]}
shift
refs=${*:-gcide gowalla}
bin=${WIDEBAG_BIN:-target/release/widebag}
data=${DATA_DIR:-../shared/data}
mkdir -p "$out"
sampled=(--set model.output=sampled_softmax --set model.sampling.negatives=1024)
for ref in $refs; do
  case $ref in
    gcide|gcide-time)
      args=(--config configs/gcide-headtail.toml --set "data.path=\"$data/gcide/gcide.index\""
        --set model.output=full --set "model.input_bands.cutoffs=[]"
        --set "model.output_bands.cutoffs=[]" --set 'model.input_bands.placement=["device"]') ;;
    gowalla)
      args=(--config configs/gowalla.toml --set "data.path=\"$data/gowalla/train.txt\""
        --set "data.test_path=\"$data/gowalla/test.txt\"") ;;
    *) echo "unknown reference $ref (gcide, gowalla, gcide-time)" >&2; exit 2 ;;
  esac
  for kind in whole sampled; do
    extra=()
    [ "$kind" = sampled ] && extra=("${sampled[@]}")
    [ "$ref-$kind" = gcide-time-sampled ] && extra+=(--set train.steps=2400)
    echo "== $ref $kind" >&2
    start=$(date +%s.%N)
    "$bin" train --device cpu --json "${args[@]}" "${extra[@]}" > "$out/$ref-$kind.json"
    end=$(date +%s.%N)
    echo "$end - $start" | bc > "$out/$ref-$kind.seconds"
  done
done
python3 - "$out" $refs <<'PY'
import json, math, sys
out, refs = sys.argv[1], sys.argv[2:]
rows = ["| reference | output | figure | train s | examples/s |", "|---|---|---|---|---|"]
for ref in refs:
    for kind in ("whole", "sampled"):
        v = json.load(open(f"{out}/{ref}-{kind}.json"))
        if ref.startswith("gcide"):
            fig = f"perplexity {math.exp(v['eval_loss']):,.1f}"
        else:
            m = {x["name"]: x["value"] for x in v["eval"]["metrics"]}
            fig = f"Recall@20 {m['recall@20']:.4f}, NDCG@20 {m['ndcg@20']:.4f}"
        what = f"{v['output']}{' (1,024 negatives)' if kind == 'sampled' else ''}, {v['steps']:,} steps"
        rows.append(f"| {ref} | {what} | {fig} | {v['train_s']:.1f} | {v['examples_per_s']:,.0f} |")
open(f"{out}/summary.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
