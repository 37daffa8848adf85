#!/usr/bin/env bash
# Training from a packed dataset larger than memory (issue 31): a synthetic 240,000-wide Zipf
# dataset of GIB GiB, packed a block at a time by `data synth --to packed`, trains with
# `data.shuffle = "blocks"` inside a cgroup v1 memory limit (LIMIT), while its anonymous RSS
# (RssAnon: heap, not the mapped file's pages) is sampled. The same model then trains on a
# subset that fits in memory, read by the libsvm reader, and on that subset packed: the
# examples/s of the three are compared in one run. Packing throughput (MB/s of libsvm input)
# is measured against the libsvm parser on the same file.
#
#   bash benches/larger-than-memory.sh [OUT]     (GIB=16 LIMIT=4G STEPS=3000 BATCH=256 RUNS=3)
#
# Needs root for the cgroup (the machine's cgroup v1 memory controller); without it the big
# run goes unconfined and says so. Writes OUT/summary.json and OUT/table.md.
set -euo pipefail
OUT=${1:-/tmp/widebag-larger-than-memory}
GIB=${GIB:-16}
LIMIT=${LIMIT:-4G}
STEPS=${STEPS:-3000}
BATCH=${BATCH:-256}
SUBSET_ROWS=${SUBSET_ROWS:-2000000}
RUNS=${RUNS:-3}
W=${WIDEBAG:-target/release/widebag}
[ -x "$W" ] || cargo build --release
mkdir -p "$OUT"
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.3f}')"; }

# Rows for GIB GiB, from the bytes per row of a sample's blocks (not its header and
# frequency section, which a small sample would count per row).
"$W" data synth --rows 1000000 --to packed "$OUT/probe.wbp" 2>/dev/null
PER_ROW=$(python3 -c "
import struct
f = open('$OUT/probe.wbp', 'rb'); f.seek(16)
print((struct.unpack('<Q', f.read(8))[0] - 32) / 1000000)")
ROWS=$(python3 -c "print(int(1.03 * $GIB * 2**30 / $PER_ROW) + 1)")  # 3% over: at least GIB
rm -f "$OUT/probe.wbp"

if [ ! -f "$OUT/big.wbp" ] || [ "$(cat "$OUT/big.rows" 2>/dev/null)" != "$ROWS" ]; then
    t0=$(now)
    "$W" data synth --rows "$ROWS" --to packed "$OUT/big.wbp"
    t1=$(now)
    echo "$ROWS" > "$OUT/big.rows"
    echo "$(secs "$t0" "$t1")" > "$OUT/big.synth_s"
fi
BIG_BYTES=$(stat -c %s "$OUT/big.wbp")

# The subset: libsvm text, and the same rows packed by `data pack` (timed against the parser).
"$W" data synth --rows "$SUBSET_ROWS" --to libsvm "$OUT/small.svm"
SVM_BYTES=$(stat -c %s "$OUT/small.svm")
# The writes above (GiBs of dirty pages) are flushed first, or the writeback's CPU time lands on
# whichever timing comes first.
sync
t0=$(now); "$W" data stats "$OUT/small.svm" --no-save --samples 1 > /dev/null; t1=$(now)
PARSE_S=$(secs "$t0" "$t1")
t0=$(now); "$W" data pack "$OUT/small.svm" "$OUT/small.wbp" --samples 1 2>/dev/null; t1=$(now)
PACK_S=$(secs "$t0" "$t1")

train() { # NAME PATH [extra --set ...]: run in a subshell, which it replaces
    local name=$1 path=$2; shift 2
    exec "$W" train --device cpu --json --set "data.path=$path" --set data.format=libsvm \
        --set "train.steps=$STEPS" --set "train.batch_size=$BATCH" --set train.eval_every=0 \
        --set data.shuffle='"blocks"' "$@" > "$OUT/$name.json"
}

# Anonymous RSS of PID, sampled until it exits: the peak in bytes.
watch_anon() {
    local pid=$1 peak=0 kb
    while kill -0 "$pid" 2>/dev/null; do
        kb=$(awk '/RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        [ "${kb:-0}" -gt "$peak" ] && peak=$kb
        sleep 0.2
    done
    echo $((peak * 1024))
}

# The subset pair alternates RUNS times (medians reported); the pack's output is flushed first.
sync
MEM_ANON=0; SUB_ANON=0
for run in $(seq 1 "$RUNS"); do
    (train "memory-$run" "$OUT/small.svm") & MEM_PID=$!
    a=$(watch_anon $MEM_PID); wait $MEM_PID; [ "$a" -gt "$MEM_ANON" ] && MEM_ANON=$a
    (train "packed-subset-$run" "$OUT/small.wbp") & SUB_PID=$!
    a=$(watch_anon $SUB_PID); wait $SUB_PID; [ "$a" -gt "$SUB_ANON" ] && SUB_ANON=$a
done

CG=/sys/fs/cgroup/memory/widebag-larger-than-memory
CONFINED=false
if mkdir -p "$CG" 2>/dev/null && echo "$LIMIT" > "$CG/memory.limit_in_bytes" 2>/dev/null; then
    CONFINED=true
    sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
    (echo $BASHPID > "$CG/cgroup.procs"; exec "$W" train --device cpu --json \
        --set "data.path=$OUT/big.wbp" --set data.format=libsvm --set "train.steps=$STEPS" \
        --set "train.batch_size=$BATCH" --set train.eval_every=0 --set data.shuffle='"blocks"' \
        > "$OUT/packed-big.json") & BIG_PID=$!
else
    echo "no writable cgroup v1 memory controller: the big run is not confined" >&2
    (train packed-big "$OUT/big.wbp") & BIG_PID=$!
fi
BIG_ANON=$(watch_anon $BIG_PID); wait $BIG_PID
CG_PEAK=$([ "$CONFINED" = true ] && cat "$CG/memory.max_usage_in_bytes" || echo null)
[ "$CONFINED" = true ] && rmdir "$CG" 2>/dev/null || true

python3 - "$OUT" <<PY
import json, statistics, sys
out = sys.argv[1]
run = lambda n: json.load(open(f"{out}/{n}.json"))
def median_run(name):
    runs = [run(f"{name}-{r}") for r in range(1, $RUNS + 1)]
    eps = [r["examples_per_s"] for r in runs]
    med = dict(runs[0], examples_per_s=statistics.median(eps))
    med["range"] = (min(eps), max(eps))
    return med
mem, sub, big = median_run("memory"), median_run("packed-subset"), run("packed-big")
big["range"] = None
svm_mb = $SVM_BYTES / 1e6
s = {
    "cpus": open("/proc/cpuinfo").read().count("processor\t:"),
    "big": {"bytes": $BIG_BYTES, "gib": $BIG_BYTES / 2**30, "rows": $ROWS,
            "synth_s": float(open(f"{out}/big.synth_s").read()),
            "memory_limit": "$LIMIT", "confined": "$CONFINED" == "true",
            "cgroup_peak_bytes": $CG_PEAK, "peak_anon_rss_bytes": $BIG_ANON,
            "examples_per_s": big["examples_per_s"], "final_loss_mean10": big["final_loss_mean10"]},
    "packed_subset": {"peak_anon_rss_bytes": $SUB_ANON, "examples_per_s": sub["examples_per_s"],
                      "examples_per_s_range": sub["range"]},
    "memory_subset": {"rows": $SUBSET_ROWS, "peak_anon_rss_bytes": $MEM_ANON,
                      "examples_per_s": mem["examples_per_s"], "examples_per_s_range": mem["range"]},
    "runs": $RUNS,
    "pack": {"libsvm_bytes": $SVM_BYTES, "parse_s": $PARSE_S, "pack_s": $PACK_S,
             "parse_mb_per_s": svm_mb / $PARSE_S, "pack_mb_per_s": svm_mb / $PACK_S},
    "steps": $STEPS, "batch_size": $BATCH,
}
s["big_over_memory"] = s["big"]["examples_per_s"] / s["memory_subset"]["examples_per_s"]
json.dump(s, open(f"{out}/summary.json", "w"), indent=2)
mib = lambda b: f"{b / 2**20:,.0f} MiB"
rows = [
    (f"in memory (libsvm, subset), median of $RUNS", mem, $MEM_ANON),
    (f"packed subset, in place, median of $RUNS", sub, $SUB_ANON),
    (f"packed {s['big']['gib']:.2f} GiB, in place, limit $LIMIT, one run", big, $BIG_ANON),
]
t = "| data | examples/s (min–max) | vs in memory | peak anonymous RSS |\n|---|---:|---:|---:|\n"
for name, r, anon in rows:
    eps = r["examples_per_s"]
    span = f" ({r['range'][0]:,.0f}–{r['range'][1]:,.0f})" if r["range"] else ""
    t += f"| {name} | {eps:,.0f}{span} | {eps / mem['examples_per_s']:.3f}x | {mib(anon)} |\n"
t += f"\npack: {svm_mb:,.0f} MB of libsvm in {$PACK_S:.2f} s ({s['pack']['pack_mb_per_s']:.0f} MB/s); "
t += f"the parser alone (data stats): {$PARSE_S:.2f} s ({s['pack']['parse_mb_per_s']:.0f} MB/s)\n"
open(f"{out}/table.md", "w").write(t)
print(t)
PY
