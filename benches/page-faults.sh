#!/usr/bin/env bash
# Page faults per training step, and examples/s, of two widebag binaries in one invocation: a
# binary from before a change (BEFORE_BIN) against this one (WIDEBAG_BIN), on the seed model's
# sparse and head/tail layouts (compare.sh's synthetic data and settings) and, with GOWALLA_DIR,
# Gowalla's Mult-DAE (configs/gowalla.toml, no evaluation). Faults per step are the difference
# between a run of 2·STEPS steps and one of STEPS steps (the start-up's faults cancel), from the
# child's minor faults (getrusage); examples/s from the longer run's `--json`.
#   BEFORE_BIN=/tmp/widebag-4afe92b bash benches/page-faults.sh
# Env: BEFORE_BIN (required), WIDEBAG_BIN (default target/release/widebag), STEPS (default 8),
# GOWALLA_DIR (default ../shared/data/gowalla; skipped when absent).
set -euo pipefail
before=${BEFORE_BIN:?BEFORE_BIN: a widebag binary from before the change}
after=${WIDEBAG_BIN:-target/release/widebag}
steps=${STEPS:-8}
gowalla=${GOWALLA_DIR:-../shared/data/gowalla}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
seed=(--set data.width=240000 --set data.n_classes=240000 --set model.dim=1024
  --set "model.hidden=[512]" --set train.batch_size=128 --set train.device=cpu
  --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001
  --set 'model.input_init="uniform"' --set model.layout=sparse)
"$after" data synth --rows 51200 --to libsvm "$tmp/data.svm" "${seed[@]}" 2> /dev/null
file=(--set "data.path=$tmp/data.svm" --set data.format=libsvm)
headtail=(--set model.output=adaptive --set model.input_bands.cutoffs=auto
  --set model.output_bands.cutoffs=auto)
workloads=("seed-sparse" "seed-headtail")
if [ -f "$gowalla/train.txt" ]; then
  sed -e "s/^epochs = .*/steps = 1/" -e '/^eval_every/d' -e '/^test_path/d' \
    -e "s#^path = .*#path = \"$gowalla/train.txt\"#" configs/gowalla.toml > "$tmp/gowalla.toml"
  workloads+=("gowalla")
fi
args() {
  case $1 in
    seed-sparse) echo "${seed[@]} ${file[@]}" ;;
    seed-headtail) echo "${seed[@]} ${file[@]} ${headtail[@]}" ;;
    gowalla) echo "--config $tmp/gowalla.toml --device cpu" ;;
  esac
}
for w in "${workloads[@]}"; do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    for n in "$steps" $((2 * steps)); do
      # shellcheck disable=SC2046 # the workload's arguments are words
      python3 - "$tmp/$w-$side-$n" "$bin" train $(args "$w") --set "train.steps=$n" --json <<'PY'
import json, resource, subprocess, sys
out, cmd = sys.argv[1], sys.argv[2:]
r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
json.dump({"faults": faults, "run": json.loads(r.stdout)}, open(out + ".json", "w"))
PY
    done
  done
done
python3 - "$tmp" "$steps" "${workloads[@]}" <<'PY'
import json, sys
tmp, steps, workloads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
load = lambda w, s, n: json.load(open(f"{tmp}/{w}-{s}-{n}.json"))
print(f"Minor page faults per step ({2 * steps} steps less {steps}) and examples/s ({2 * steps} steps)\n")
print("| workload | faults/step before | faults/step after | examples/s before | examples/s after | after / before | final loss before / after |")
print("|---|---|---|---|---|---|---|")
for w in workloads:
    row = {}
    for s in ("before", "after"):
        short, long = load(w, s, steps), load(w, s, 2 * steps)
        row[s] = ((long["faults"] - short["faults"]) / steps, long["run"]["examples_per_s"],
                  long["run"]["final_loss"])
    b, a = row["before"], row["after"]
    print(f"| {w} | {b[0]:,.0f} | {a[0]:,.0f} | {b[1]:.1f} | {a[1]:.1f} | {a[1] / b[1]:.2f}× | {b[2]:.5f} / {a[2]:.5f} |")
PY
