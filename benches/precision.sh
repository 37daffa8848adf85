#!/usr/bin/env bash
# The precision check: f16 and bf16 tables, with stochastic rounding and rounded to the nearest,
# and f16/bf16 optimizer moments, against f32, on GCIDE CBOW (configs/gcide-headtail.toml) and on
# synthetic Zipf data (configs/zipf-headtail.toml): validation loss after the same examples (same
# seed, same held-out rows), wall time and peak RSS, one invocation.
#   bash benches/precision.sh [OUT_DIR]      (needs ../shared/data/gcide for the GCIDE half)
set -euo pipefail
out=${1:-widebag-precision}
mkdir -p "$out"
bin=${WIDEBAG_BIN:-target/release/widebag}

variants=(
  "f32|"
  "f16-sr|model.input_bands.dtype=[\"f16\"]"
  "f16-nearest|model.input_bands.dtype=[\"f16\"] optim.rounding=\"nearest\""
  "bf16-sr|model.input_bands.dtype=[\"bf16\"]"
  "bf16-nearest|model.input_bands.dtype=[\"bf16\"] optim.rounding=\"nearest\""
  "f16-moments|optim.state_dtype=\"f16\""
  "bf16-moments|optim.state_dtype=\"bf16\""
  "bf16-all|model.input_bands.dtype=[\"bf16\"] optim.state_dtype=\"bf16\""
)
for data in gcide zipf; do
  for v in "${variants[@]}"; do
    name=${v%%|*}
    sets=()
    for s in ${v#*|}; do sets+=(--set "$s"); done
    echo "== $data $name"
    /usr/bin/time -v "$bin" train --config "configs/$data-headtail.toml" --device cpu \
      "${sets[@]}" --json > "$out/$data-$name.json" 2> "$out/$data-$name.log"
    grep -E "Elapsed|Maximum resident" "$out/$data-$name.log" || true
  done
done
python3 - "$out" "${variants[@]}" <<'PY'
import json, re, sys
out, names = sys.argv[1], [v.split("|")[0] for v in sys.argv[2:]]
def wall(path):
    m = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", open(path).read())
    h, mnt, s = m.groups()
    return int(h or 0) * 3600 + int(mnt) * 60 + float(s)
print("| data | tables / moments | validation loss | against f32 | wall time | peak RSS |")
print("|---|---|---|---|---|---|")
for data in ["gcide", "zipf"]:
    base = json.load(open(f"{out}/{data}-f32.json"))
    t0 = wall(f"{out}/{data}-f32.log")
    for n in names:
        r = json.load(open(f"{out}/{data}-{n}.json"))
        d = r["eval_loss"] / base["eval_loss"] - 1
        print(f"| {data} | {n} | {r['eval_loss']:.4f} | {100 * d:+.2f}% | "
              f"{wall(f'{out}/{data}-{n}.log') / t0:.2f}× | {r['peak_rss_bytes'] / 2**20:.0f} MiB |")
PY
