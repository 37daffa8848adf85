#!/usr/bin/env bash
# Parses one libsvm file with widebag's reader (criterion bench, all cores through rayon) and
# with scikit-learn's load_svmlight_file (one core, its C parser) and prints the MB/s of each and
# the ratio. Usage: bash benches/libsvm_vs_sklearn.sh [FILE.svm]
# Without FILE, 200,000 synthetic rows (width 240,000, ~20 ids per row) are written first.
# Needs: cargo, python3 with scikit-learn (`pip install scikit-learn`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR_BENCH:-$HOME/.cache/widebag/target-bench}"
FILE="${1:-}"
if [[ -z "$FILE" ]]; then
  FILE="$(mktemp -d)/synthetic-200k.svm"
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR_MAIN:-$HOME/.cache/widebag/target}" \
    cargo run --quiet --release -- data synth --rows 200000 --to libsvm "$FILE"
fi
BYTES=$(stat -c %s "$FILE")
echo "file: $FILE ($BYTES bytes), cores: $(nproc)"
WIDEBAG_BENCH_LIBSVM="$FILE" cargo bench --quiet --manifest-path benches/libsvm-parse/Cargo.toml \
  --bench libsvm_parse -- --noplot >/dev/null
EST="$CARGO_TARGET_DIR/criterion/libsvm_parse/read_libsvm/new/estimates.json"
python3 - "$FILE" "$BYTES" "$EST" <<'PY'
import json, sys, time
import numpy as np
from sklearn.datasets import load_svmlight_file
path, nbytes, est = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ns = json.load(open(est))["mean"]["point_estimate"]
ours = nbytes / (ns / 1e9) / 1e6
times = []
for _ in range(3):
    t = time.perf_counter()
    X, y = load_svmlight_file(path, dtype=np.float32)
    times.append(time.perf_counter() - t)
best = min(times)
theirs = nbytes / best / 1e6
print(f"widebag read_libsvm     {ours:8.1f} MB/s  (criterion mean {ns/1e9:.3f} s)")
print(f"sklearn load_svmlight   {theirs:8.1f} MB/s  (best of 3: {best:.3f} s; {X.shape[0]} rows, nnz {X.nnz})")
print(f"ratio widebag/sklearn   {ours/theirs:8.2f}x")
PY
