#!/usr/bin/env bash
# Gowalla to the published Recall@20 (0.1641, Mult-VAE on the LightGCN split): widebag's Mult-DAE
# (configs/gowalla.toml, evaluated every epoch) against the same model in PyTorch
# (benches/peers/multdae_peer.py: same data, model, batch, optimizer, schedule, input dropout and
# evaluation) in each of its input layouts, RUNS times each, one after the other:
# `bag` (an EmbeddingBag with SparseAdam, widebag's own layout: the fastest PyTorch way) and
# `dense` (nn.Linear over the dense bag, as RecBole's MultiDAE computes it).
#
# The same conditions for both (docs/benchmarks.md, "Fairness"): the same threads (THREADS:
# OMP_NUM_THREADS, MKL_NUM_THREADS, RAYON_NUM_THREADS, the peer's torch.set_num_threads) and
# cores (`taskset -c CPUS`), the allocator policy ALLOCATOR names (common.sh; default tuned:
# glibc's environment's nearest to the policy widebag sets itself), the peer's fused Adam (ADAM),
# its batches and evaluation inputs built before its clock starts, as widebag's are; COMPILE=1
# adds torch.compile to the peer's training step (off by default: measured no sooner to the
# target, its compilation included).
#
# Each side's clock starts when its training starts, after start-up (imports, parsing, batch and
# evaluation inputs, the model): widebag's at the end of its set-up (an evaluation's `elapsed_s`
# less `setup_s`), the peer's at its first step (`clock_s`). For each side and run: the time on
# that clock to the end of the first evaluation at or above the target, an evaluation's own time,
# the training alone, the start-up and exit (the process's wall time less the clock at its last
# evaluation) and the whole process; then the median and range over the runs of each, and of
# each per-run ratio (the peer's over widebag's run of the same number).
#   bash benches/peers/time-to-recall.sh OUT
# Env: GOWALLA_DIR (default ../shared/data/gowalla), WIDEBAG_BIN (default
# target/release/widebag), PYTHON (a Python with torch and numpy; default python3), RUNS
# (default 3), THREADS (default: every core), CPUS (default 0-(THREADS-1); empty: unpinned),
# ALLOCATOR (tuned; glibc, mallopt, jemalloc), ADAM (fused; foreach, single), COMPILE (0), EPOCHS
# (default 20, the config's), TARGET (default 0.1641), PEERS (the peer's input layouts, default
# "bag dense"), SEED (default 0, the config's: every run the same computation, so the runs
# differ in their timings only), STOP_AT_TARGET (1: each side ends at its first evaluation at or
# above TARGET, widebag by `train.stop_at_metric`, the peer by `--stop-at-target`, both on the
# EPOCHS run's schedule: the time to the target is the same, the rest of the run is not taken;
# the final figures are then those at the target), WIDEBAG_ARGS and PEER_ARGS (more arguments
# for each side, word-split: the same model changed on both sides, e.g. the sampled softmax:
# WIDEBAG_ARGS='--set model.output=sampled_softmax --set model.score=cosine
# --set model.temperature=0.1 --set model.sampling.negatives=4096' PEER_ARGS='--negatives 4096
# --score cosine --temperature 0.1' PEERS=bag).
# FAST_CONFIG (default configs/gowalla-fast.toml; "none": left out) is widebag's fastest config
# to a result: run beside them, evaluated every epoch, with its PyTorch peer
# (`multdae_peer.py --config FAST_CONFIG`: the same sampled model, negatives per step, loss,
# batch, schedule and evaluation; `torch-sampled`), both also timed to FAST_TARGET (default
# 0.1748, the full Mult-DAE's Recall@20); with STOP_AT_TARGET=1 these two stop at FAST_TARGET,
# the Mult-DAE sides at TARGET. MULTDAE=0 leaves widebag's Mult-DAE out (PEERS="" the
# PyTorch Mult-DAE peers).
# WIDEBAG_DEVICE (default cpu; wgpu on a GPU) and PEER_DEVICE (default cpu; cuda on a GPU) say
# where each side trains and evaluates: the same run on a GPU, the peer's batches and evaluation
# inputs moved to the device before its clock, each of its epochs waited for before it is timed.
# On wgpu the first run on a machine also autotunes and compiles every kernel (cubecl keeps
# them in target/environment/ for later runs: docs/gpu.md): RUNS=2 or more times warm runs too.
# Writes OUT/summary.json, OUT/summary.md (the table it prints), OUT/machine.txt and each
# invocation's raw output: widebag-RUN.json, .log, .wall (start and end) and its run directory
# widebag-run-RUN/, torch-PEER-RUN.jsonl, .log, .wall (widebag-fast-RUN.* and
# torch-sampled-RUN.* for FAST_CONFIG).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
out=${1:?usage: bash benches/peers/time-to-recall.sh OUT}
data=${GOWALLA_DIR:-../shared/data/gowalla}
bin=${WIDEBAG_BIN:-target/release/widebag}
python=${PYTHON:-python3}
runs=${RUNS:-3}
epochs=${EPOCHS:-20}
target=${TARGET:-0.1641}
peers=${PEERS-bag dense}
seed=${SEED:-0}
adam=${ADAM:-fused}
compile=${COMPILE:-0}
stop_at_target=${STOP_AT_TARGET:-0}
fast=${FAST_CONFIG:-configs/gowalla-fast.toml}
[ "$fast" = none ] && fast=
fast_target=${FAST_TARGET:-0.1748}
multdae=${MULTDAE:-1}
widebag_device=${WIDEBAG_DEVICE:-cpu}
peer_device=${PEER_DEVICE:-cpu}
read -r -a widebag_args <<< "${WIDEBAG_ARGS:-}"
read -r -a peer_args <<< "${PEER_ARGS:-}"
here=$(dirname "$0")
# shellcheck source=common.sh
. "$here/common.sh"
mkdir -p "$out"
write_machine "$out" "$python" "$bin"
compiled=()
[ "$compile" = 1 ] && compiled=(--compile)
widebag_stop=()
peer_stop=()
fast_stop=()
fast_peer_stop=()
if [ "$stop_at_target" = 1 ]; then
  widebag_stop=(--set 'train.stop_at_metric="recall@20"' --set "train.stop_at_value=$target")
  peer_stop=(--stop-at-target --target "$target")
  fast_stop=(--set 'train.stop_at_metric="recall@20"' --set "train.stop_at_value=$fast_target")
  fast_peer_stop=(--stop-at-target --target "$fast_target")
fi

for run in $(seq 1 "$runs"); do
  if [ "$multdae" = 1 ]; then
    echo "== run $run: widebag ($threads threads)" >&2
    rm -rf "$out/widebag-run-$run"
    timed "$out/widebag-$run" "$out/widebag-$run.json" "${widebag_run[@]}" \
      "$bin" train --config configs/gowalla.toml --device "$widebag_device" \
      --set "data.path=\"$data/train.txt\"" --set "data.test_path=\"$data/test.txt\"" \
      --set train.eval_every=1 --set "train.epochs=$epochs" --set "train.seed=$seed" \
      "${widebag_stop[@]}" "${widebag_args[@]}" --json --out "$out/widebag-run-$run"
  fi
  for peer in $peers; do
    echo "== run $run: PyTorch, $peer input ($threads threads)" >&2
    timed "$out/torch-$peer-$run" "$out/torch-$peer-$run.jsonl" "${torch_run[@]}" \
      "$python" "$here/multdae_peer.py" --data "$data" --threads "$threads" --epochs "$epochs" \
      --input "$peer" --seed "$seed" --adam "$adam" --device "$peer_device" "${compiled[@]}" \
      "${peer_stop[@]}" \
      "${peer_args[@]}"
  done
  if [ -n "$fast" ]; then
    echo "== run $run: widebag, $fast ($threads threads)" >&2
    rm -rf "$out/widebag-fast-run-$run"
    timed "$out/widebag-fast-$run" "$out/widebag-fast-$run.json" "${widebag_run[@]}" \
      "$bin" train --config "$fast" --device "$widebag_device" \
      --set "data.path=\"$data/train.txt\"" --set "data.test_path=\"$data/test.txt\"" \
      --set train.eval_every=1 --set "train.seed=$seed" "${fast_stop[@]}" \
      --json --out "$out/widebag-fast-run-$run"
    echo "== run $run: PyTorch, $fast's model ($threads threads)" >&2
    timed "$out/torch-sampled-$run" "$out/torch-sampled-$run.jsonl" "${torch_run[@]}" \
      "$python" "$here/multdae_peer.py" --config "$fast" --data "$data" --threads "$threads" \
      --seed "$seed" --adam "$adam" --device "$peer_device" "${fast_peer_stop[@]}"
  fi
done

sides=()
[ "$multdae" = 1 ] && sides+=(widebag)
for peer in $peers; do sides+=("torch-$peer"); done
[ -n "$fast" ] && sides+=(widebag-fast torch-sampled)
"$python" "$here/time_to_recall_table.py" "$out" "$target" "$fast_target" "$threads" "$runs" \
  "${fast:-none}" "${sides[@]}"
