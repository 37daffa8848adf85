#!/usr/bin/env bash
# Training across processes against the single process, one invocation, on the CPU (flex):
# the seed model (configs/seed-sparse.toml: 240,000 → 1024 → 512 → 240,000, Adam on both
# parts, batch 128) for STEPS steps, as one process and under `mpirun -np 2` and `-np 4`
# (oversubscribed on a small machine). Prints examples/s, the final loss, each collective's
# bytes sent per step by rank 0, rank 0's peak RSS, and what the row exchange would have sent
# as pooled partial sums instead (counted on the same batches).
#   cargo build --release --features mpi && bash benches/ranks.sh [STEPS] [OUT_DIR]
set -euo pipefail
steps=${1:-20}
out=${2:-widebag-ranks}
bin=${WIDEBAG_BIN:-target/release/widebag}
mkdir -p "$out"
args=(train --config configs/seed-sparse.toml --device cpu --json --set "train.steps=$steps")
"$bin" "${args[@]}" > "$out/np1.json"
for n in 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$bin" "${args[@]}" > "$out/np$n.json"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
runs = {n: json.load(open(f"{out}/np{n}.json")) for n in (1, 2, 4)}
base = runs[1]
print("| processes | examples/s | against 1 | final loss | rank 0's peak RSS |")
print("|---|---|---|---|---|")
for n, r in runs.items():
    print(f"| {n} | {r['examples_per_s']:.1f} | {r['examples_per_s'] / base['examples_per_s']:.2f}× "
          f"| {r['final_loss']:.5f} | {r['peak_rss_bytes'] / 2**30:.2f} GiB |")
print()
keys = sorted({k for n in (2, 4) for k in runs[n]["sent_bytes_per_step"]})
def size(b):
    return f"{b / 2**20:.2f} MiB" if b >= 2**20 else f"{b / 2**10:.1f} KiB"
print("| bytes rank 0 sends per step | -np 2 | -np 4 |")
print("|---|---|---|")
for k in keys:
    cells = [size(runs[n]["sent_bytes_per_step"].get(k, 0)) for n in (2, 4)]
    print(f"| {k} | " + " | ".join(cells) + " |")
print()
print("| the row exchange, rank 0, per step | -np 2 | -np 4 |")
print("|---|---|---|")
rows = {n: sum(v for k, v in runs[n]["sent_bytes_per_step"].items() if k.endswith("(all-to-all)"))
        for n in (2, 4)}
pooled = {n: runs[n]["pooled_alternative_bytes_per_step"] for n in (2, 4)}
print("| rows back (ids, rows, row gradients: what widebag sends) | "
      + " | ".join(size(rows[n]) for n in (2, 4)) + " |")
print("| pooled partial sums (entries, partial sums, bag gradients), counted on the same batches | "
      + " | ".join(f"{size(pooled[n])} ({pooled[n] / rows[n]:.2f}×)" for n in (2, 4)) + " |")
PY
