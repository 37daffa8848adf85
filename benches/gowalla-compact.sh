#!/usr/bin/env bash
# Gowalla at 5× fewer values, one invocation (issue 30 §2, issue 56 §3): trains
# configs/gowalla.toml, configs/gowalla-compact.toml (tied, full softmax) and
# configs/gowalla-compact-sampled.toml (the sampled cosine model, 112 wide) one after the other
# into OUT/ and prints one Markdown table: table + output values (the `table_parameters` and `output_parameters` of each summary), how many times
# fewer, Recall@20 and NDCG@20, each compact model's share of the full model's Recall@20 and
# NDCG@20, wall time and peak RSS.
#   bash benches/gowalla-compact.sh [OUT_DIR]    (needs ../shared/data/gowalla; a release build)
# Env: DATA_DIR (a LightGCN split's directory with train.txt and test.txt; default
# ../shared/data/gowalla: the recipe applied unchanged to another data set, e.g.
# ../shared/data/yelp2018), EPOCHS (default: the configs' 20), WIDEBAG_BIN.
set -euo pipefail
out=${1:-widebag-gowalla-compact}
mkdir -p "$out"
bin=${WIDEBAG_BIN:-target/release/widebag}
data=${DATA_DIR:-../shared/data/gowalla}
sets=(--set "data.path=\"$data/train.txt\"" --set "data.test_path=\"$data/test.txt\"")
[ -n "${EPOCHS:-}" ] && sets+=(--set "train.epochs=$EPOCHS")

for name in gowalla gowalla-compact gowalla-compact-sampled; do
  echo "== $name" >&2
  rm -rf "${out:?}/$name"
  t0=$SECONDS
  "$bin" train --out "$out/$name" --config "configs/$name.toml" "${sets[@]}" > /dev/null 2> "$out/$name.log"
  echo $((SECONDS - t0)) > "$out/$name.seconds"
done

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
for name in ["gowalla", "gowalla-compact", "gowalla-compact-sampled"]:
    s = json.load(open(f"{out}/{name}/summary.json"))
    m = {x["name"]: x["value"] for x in s["eval"]["metrics"]}
    rows[name] = (s, m, int(open(f"{out}/{name}.seconds").read()))
full_values = rows["gowalla"][0]["table_parameters"] + rows["gowalla"][0]["output_parameters"]
full_recall, full_ndcg = rows["gowalla"][1]["recall@20"], rows["gowalla"][1]["ndcg@20"]
print("| config | table + output values | fewer | Recall@20 | NDCG@20 | of the full model's Recall@20 | of its NDCG@20 | wall time | peak RSS |")
print("|---|---|---|---|---|---|---|---|---|")
for name, (s, m, secs) in rows.items():
    values = s["table_parameters"] + s["output_parameters"]
    print(f"| configs/{name}.toml | {values:,} | {full_values / values:.2f}× | {m['recall@20']:.4f} | "
          f"{m['ndcg@20']:.4f} | {m['recall@20'] / full_recall:.3f}× | {m['ndcg@20'] / full_ndcg:.3f}× | "
          f"{secs // 60} min {secs % 60} s | "
          f"{s['peak_rss_bytes'] / 2**20:.0f} MiB |")
PY
