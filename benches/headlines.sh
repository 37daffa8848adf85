#!/usr/bin/env bash
# The README's headline figures, measured again into docs/results/<name>/, one folder each: a
# README.md saying the command, the machine and the binary's commit, the raw output the figure is
# read from, and a summary.md with the figures as the README quotes them
# (tests/integration/headlines.rs checks that each README figure is in its folder).
#   bash benches/headlines.sh [NAME ...]
# NAME: quickstart ledger-grid plan-grid seed-budget gowalla gcide (default: all of them).
# The PyTorch comparisons write their own folders (benches/peers/compare.sh and
# benches/peers/time-to-recall.sh; docs/benchmarks.md says how). Env: WIDEBAG_BIN (default
# target/release/widebag), DATA (../shared/data). Run on a quiet machine: examples/s and wall
# times are read from these runs.
set -euo pipefail
bin=${WIDEBAG_BIN:-target/release/widebag}
data=${DATA:-../shared/data}
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(quickstart ledger-grid plan-grid seed-budget gowalla gcide)

machine() {
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, \
$(free -g | awk '/^Mem:/ {print $2}') GiB memory, $(. /etc/os-release && echo "$PRETTY_NAME")"
  if command -v vulkaninfo >/dev/null; then
    echo "- Vulkan: $(vulkaninfo --summary 2>/dev/null | sed -n 's/^ *deviceName *= *//p' | head -1)"
  fi
  echo "- commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src crates || echo ' (with local changes)')"
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
}

# begin NAME TITLE COMMAND...: a fresh folder with its README.md.
begin() {
  local name=$1 title=$2; shift 2
  dir="docs/results/$name"
  rm -rf "$dir" && mkdir -p "$dir"
  { echo "# $title"; echo; echo "- command: \`$*\`"; machine; echo; } > "$dir/README.md"
  echo "== $name" >&2
}

for name in "${names[@]}"; do
  case $name in
  quickstart)
    begin quickstart "The quickstart, on flex and on lavapipe" \
      "widebag train --json --device cpu; widebag train --json --device wgpu"
    for device in cpu wgpu; do
      t0=$(date +%s.%N)
      "$bin" train --json --device "$device" > "$dir/$device.json" 2> "$dir/$device.log"
      t1=$(date +%s.%N)
      python3 -c "print(f'{$t1 - $t0:.2f}')" > "$dir/$device.wall_s"
    done
    python3 - "$dir" <<'PY' >> "$dir/README.md"
import json, sys
d = sys.argv[1]
for device, what in (("cpu", "flex"), ("wgpu", "lavapipe (wgpu)")):
    s = json.load(open(f"{d}/{device}.json"))
    wall = float(open(f"{d}/{device}.wall_s").read())
    print(f"- {what}: {wall:.2f} s wall, {s['examples_per_s']:,.0f} examples/s after the first step, "
          f"loss {s['first_loss']:.4f} → {s['final_loss']:.4f}")
PY
    ;;
  ledger-grid)
    # The grid CI's test runs (tests/integration/accuracy_grids.rs); `--grid full` (48 points)
    # takes an hour of lavapipe.
    begin ledger-grid "The ledger against burn's allocator: explain's small grid on lavapipe" \
      "widebag explain --grid small --device wgpu --steps 2 --json --out docs/results/ledger-grid"
    "$bin" explain --grid small --device wgpu --steps 2 --json --out "$dir" > "$dir/stdout.json" 2> "$dir/stderr.log"
    python3 - "$dir" <<'PY' >> "$dir/README.md"
import json, sys
rows = json.load(open(f"{sys.argv[1]}/grid.json"))
rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
errs = [abs(r["error_pct"]) for r in rows if r.get("error_pct") is not None]
print(f"- {len(rows)} points, worst error {max(errs):.2f}% (grid.md, grid.json)")
PY
    ;;
  plan-grid)
    begin plan-grid "The solver against runs: plan's grid on lavapipe" \
      "widebag plan --grid small --device wgpu --json --out docs/results/plan-grid"
    "$bin" plan --grid small --device wgpu --json --out "$dir" > "$dir/stdout.json" 2> "$dir/stderr.log"
    python3 - "$dir" <<'PY' >> "$dir/README.md"
import json, sys
rows = json.load(open(f"{sys.argv[1]}/plan-grid.json"))
pct = [r["plan_vs_search_pct"] for r in rows]
ms = [r["planned_ms"] for r in rows]
below = sum(r["batch_size"] < r["max_batch"] for r in rows)
print(f"- {len(rows)} points, {below} of them below plan.max_batch: the plan {min(pct):.1f}–{max(pct):.1f}% "
      f"of the searched batch, planned in {min(ms):.1f}–{max(ms):.1f} ms")
PY
    ;;
  seed-budget)
    begin seed-budget "The seed model in 1.5 GB (benches/headline.sh, flex)" \
      "bash benches/headline.sh docs/results/seed-budget"
    bash benches/headline.sh "$dir" > "$dir/table.md" 2> "$dir/stderr.log"
    cat "$dir/table.md" >> "$dir/README.md"
    ;;
  gowalla)
    begin gowalla "Gowalla Recall@20: the Mult-DAE (configs/gowalla.toml, 20 epochs, flex)" \
      "widebag train --config configs/gowalla.toml --device cpu --json"
    t0=$SECONDS
    "$bin" train --config configs/gowalla.toml --device cpu --set "data.path=\"$data/gowalla/train.txt\"" \
      --set "data.test_path=\"$data/gowalla/test.txt\"" --json > "$dir/gowalla.json" 2> "$dir/gowalla.log"
    echo $((SECONDS - t0)) > "$dir/gowalla.seconds"
    python3 - "$dir" <<'PY' >> "$dir/README.md"
import json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/gowalla.json"))
m = {x["name"]: x["value"] for x in s["eval"]["metrics"]}
secs = int(open(f"{d}/gowalla.seconds").read())
print(f"- Recall@20 {m['recall@20']:.4f}, NDCG@20 {m['ndcg@20']:.4f}, "
      f"{s['table_parameters'] + s['output_parameters']:,} table and output values, {secs} s")
PY
    ;;
  gcide)
    begin gcide "GCIDE CBOW: head/tail against the full softmax (benches/results.sh's two GCIDE runs)" \
      "widebag train --config configs/gcide-headtail.toml --set train.steps=4000 [--set model.output=full ...]"
    gcide=(--config configs/gcide-headtail.toml --set train.steps=4000 --device cpu --json)
    "$bin" train "${gcide[@]}" > "$dir/headtail.json" 2> "$dir/headtail.log"
    "$bin" train "${gcide[@]}" --set model.output=full --set 'model.input_bands.cutoffs=[]' \
      --set 'model.output_bands.cutoffs=[]' > "$dir/full.json" 2> "$dir/full.log"
    python3 - "$dir" <<'PY' >> "$dir/README.md"
import json, math, sys
d = sys.argv[1]
s = {n: json.load(open(f"{d}/{n}.json")) for n in ("headtail", "full")}
ppl = {n: next(m["value"] for m in x["eval"]["metrics"] if m["name"] == "perplexity") for n, x in s.items()}
values = {n: x["table_parameters"] + x["output_parameters"] for n, x in s.items()}
print(f"- held-out perplexity {ppl['headtail']:,.1f} with head/tail against {ppl['full']:,.1f} "
      f"with the full softmax, at {values['full'] / values['headtail']:.1f}× fewer values")
PY
    ;;
  *) echo "headlines.sh: unknown $name" >&2; exit 2 ;;
  esac
done
