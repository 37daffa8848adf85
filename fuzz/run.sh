#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer's coverage instrumentation — rustc's stable
# `-Cpasses=sancov-module` flags, as cargo-fuzz passes them, so no nightly toolchain — and runs
# each for SECONDS (default 10) from its committed seeds (fuzz/seeds/TARGET) and a scratch
# corpus, with memory capped. A crash, a panic, a hang (-timeout) or an allocation over the cap
# stops the target and leaves the input in fuzz/artifacts/TARGET/.
#   bash fuzz/run.sh [SECONDS]          TARGETS="libsvm npz" bash fuzz/run.sh 600
# FUZZ_BUILD_ONLY=1 builds the targets and runs none (CI builds them beside its tests).
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-10}
targets=${TARGETS:-"libsvm npz lightgcn text dictd config set sweep checkpoint packed"}
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/widebag/fuzz-target}
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks --cfg fuzzing"
# An explicit --target keeps the instrumentation out of build scripts, as cargo-fuzz does.
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --bins --quiet --target "$host"
if [ -n "${FUZZ_BUILD_ONLY:-}" ]; then exit 0; fi
bin="$CARGO_TARGET_DIR/$host/release"
corpus=${FUZZ_CORPUS:-$CARGO_TARGET_DIR/corpus}
status=0
for t in $targets; do
  mkdir -p "$corpus/$t" "artifacts/$t"
  echo "== $t (${secs}s)"
  if ! "$bin/$t" "$corpus/$t" "seeds/$t" -max_total_time="$secs" \
      -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="artifacts/$t/" \
      -print_final_stats=1 2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY|.*panicked)"; then
    :
  fi
  if ls "artifacts/$t/" 2>/dev/null | grep -q .; then
    echo "!! $t: failing inputs in fuzz/artifacts/$t/"
    status=1
  fi
done
exit $status
