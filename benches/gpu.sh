#!/usr/bin/env bash
# widebag on a GPU beside PyTorch CUDA, one command, for a Linux machine with an NVIDIA GPU,
# PyTorch with CUDA and no Rust toolchain. It takes a release binary built elsewhere, finds (or
# unpacks beside itself) the Vulkan loader, and runs, on the GPU through wgpu:
#   1. the quickstart (`widebag train` on its embedded defaults);
#   2. the seed model (240,000 → 1024 → [512] → 240,000, batch 128, Adam) in the dense, sparse
#      and head/tail layouts on one synthetic file (`widebag data synth`);
#   3. `widebag explain --measure` for each of those layouts (the ledger against burn's allocator),
#      and each layout again with `--profile` (every stage boundary waits for the device; the
#      step's device_profile: dispatches, blocking reads, new buffers, kernels compiled after
#      step 1) and cubecl timing every launch (benches/kernel_profile.py: the top kernels);
#   4. benches/peers/torch_peer.py --device cuda on the same file and shapes;
#   5. each layout but head/tail again with the output layer's products in half precision
#      (HALF, default f16: `model.output_precision`; HALF= skips it), against the same peer;
#   6. `widebag plan --calibrate` (the device's throughput model; CALIBRATE=0 skips it) and each
#      layout planned with it: predicted against measured step time;
#   7. each layout again with the softmax's log-sum-exp and logit gradient on widebag's CubeCL
#      kernels (`train.gpu_kernels = "cubecl"`) instead of burn's tensor operations, the output
#      layer stepped inside its backward pass (head/tail: the adaptive softmax off autodiff
#      through the same kernels), each with `explain --measure` (CUBECL_KERNELS=0 skips it);
# and writes OUT/gpu.md: one table (examples/s, peak memory, ledger error) naming the GPU and
# driver, with the step profile's largest stages. Every step has its own time limit and a step
# that fails is a row that says so; the rest still runs.
#   cargo build --release && strip -o widebag target/release/widebag     # where Rust is
#   WIDEBAG_BIN=./widebag bash benches/gpu.sh out-gpu                    # on the GPU machine
# Env: HALF (f16; bf16; empty: none), WIDEBAG_BIN (default ./widebag, else target/release/widebag; a name ending in .xz is
# unpacked into OUT first), VULKAN_DEBS (a folder of the
# .deb packages libvulkan1 libglvnd0 libgl1 libglx0 libegl1 libopengl0 libgles2, unpacked into
# OUT/vulkan when the machine has no libvulkan.so.1; default .gl), PYTHON (python3 with torch),
# DEVICE (wgpu), ROWS (25600), STEPS (100), BATCH (128), DIM (1024), HIDDEN ("512"),
# WIDTH (240000), LAYOUTS ("dense sparse headtail"), LIMIT_S (240: each step's time limit),
# DEADLINE_S (unset: none; else no step runs past this many seconds from the start),
# QUICKSTART (1; 0 skips step 1), PROFILE (1; 0 skips burn's tensor path's `--profile` runs),
# CUBECL_PROFILE (1; 0 skips the kernels' `--profile` runs in step 7), TILED (1; 0 skips the
# sparse layout's runs with `model.logits = "tiled"` and its plan by time), WIDEBAG_ARGS (more
# arguments for every widebag train, explain and plan run, word-split, e.g.
# `--set model.logits="keep"`: the logits kept for the backward pass, as PyTorch keeps them),
# CALIBRATE_SCALE (8: `plan --calibrate --scale`, the calibration's widths, classes, dim and
# hidden size times this, so a GPU runs them near the seed model's scale; 1 on lavapipe).
# Without a GPU it runs the same on any Vulkan adapter (Mesa's lavapipe: small shapes, e.g.
# DIM=32 HIDDEN=64 STEPS=20 ROWS=5120), which checks the script, not a GPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-widebag-gpu}
bin=${WIDEBAG_BIN:-}
if [ -z "$bin" ]; then
  if [ -x ./widebag ]; then bin=./widebag; else bin=target/release/widebag; fi
fi
debs=${VULKAN_DEBS:-.gl}
py=${PYTHON:-python3}
device=${DEVICE:-wgpu}
rows=${ROWS:-25600}
steps=${STEPS:-100}
batch=${BATCH:-128}
dim=${DIM:-1024}
hidden=${HIDDEN:-512}
width=${WIDTH:-240000}
layouts=${LAYOUTS:-dense sparse headtail}
limit=${LIMIT_S:-240}
deadline=${DEADLINE_S:-}
read -r -a extra <<< "${WIDEBAG_ARGS:-}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "== $*" >&2; }
packed_bin=""
if [ "${bin%.xz}" != "$bin" ] && [ -f "$bin" ]; then
  # An xz-compressed binary (a stripped release binary is ~96 MB, ~18 MB as .xz).
  packed_bin="$bin, $(stat -c %s "$bin") bytes as .xz"
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
    "$bin" "$out/widebag" && chmod +x "$out/widebag" && bin=$out/widebag
fi
[ -x "$bin" ] || { echo "gpu.sh: no widebag binary at $bin (set WIDEBAG_BIN)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

# The machine: GPU and driver, the binary's size.
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -srm), $(nproc) cores"
  if command -v nvidia-smi >/dev/null; then
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  else
    echo "gpu: none found by nvidia-smi"
  fi
  echo "binary: $bin, $(stat -c %s "$bin") bytes, $(file -b "$bin" 2>/dev/null | grep -o 'not stripped\|stripped' || echo 'strip state unknown')${packed_bin:+ (from $packed_bin)}"
  echo "torch: $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "not available")' 2>/dev/null || echo none)"
} > "$out/machine.txt"
cat "$out/machine.txt" >&2

# The Vulkan loader: the machine's own, else the packages in $debs unpacked under OUT/vulkan (not
# into /). The NVIDIA driver's ICD file is named explicitly where the loader would not find it.
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 '; then
  log "no libvulkan.so.1 on this machine: unpacking $debs/*.deb into $out/vulkan"
  for f in "$debs"/*.deb; do
    [ -e "$f" ] || { echo "gpu.sh: no Vulkan loader and no .deb packages in $debs" >&2; exit 2; }
    dpkg -x "$f" "$out/vulkan"
  done
  export LD_LIBRARY_PATH="$out/vulkan/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "vulkan loader: unpacked from $debs" >> "$out/machine.txt"
else
  echo "vulkan loader: the machine's" >> "$out/machine.txt"
fi
for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json \
  /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/icd.d/nvidia_icd.json; do
  if [ -f "$icd" ]; then
    export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
    echo "vulkan driver: $icd" >> "$out/machine.txt"
    break
  fi
done

: > "$out/steps.txt"
# run NAME CMD...: CMD's stdout to OUT/NAME.json, stderr to OUT/NAME.log, under the time limit.
run() {
  local name=$1
  shift
  log "$name"
  local t0=$SECONDS step_limit=$limit
  if [ -n "$deadline" ]; then
    local left=$((deadline - SECONDS))
    [ "$left" -lt "$step_limit" ] && step_limit=$left
    if [ "$step_limit" -le 5 ]; then
      echo "$name rc=skipped (DEADLINE_S reached)" >> "$out/steps.txt"
      return 0
    fi
  fi
  timeout "$step_limit" "$@" > "$out/$name.json" 2> "$out/$name.log"
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" >> "$out/steps.txt"
  [ $rc -eq 0 ] || { log "$name failed (rc $rc): $(tail -3 "$out/$name.log")"; }
  return 0
}

[ "${QUICKSTART:-1}" = 1 ] && run quickstart "$bin" train --device "$device" --json
if [ "${QUICKSTART:-1}" = 1 ] && ! grep -q "^quickstart rc=0 " "$out/steps.txt"; then
  # What the Vulkan loader saw, for the report: the driver files it searched and why it failed.
  ls -l /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d \
    > "$out/vulkan-debug.log" 2>&1
  VK_LOADER_DEBUG=error,warn,info timeout 60 "$bin" train --device "$device" --set train.steps=1 \
    >> "$out/vulkan-debug.log" 2>&1
fi

hidden_toml="[$(echo "$hidden" | tr ' ' ',')]"
model=(--set "data.width=$width" --set "data.n_classes=$width" --set "model.dim=$dim"
  --set "model.hidden=$hidden_toml" --set "train.batch_size=$batch" --set "train.steps=$steps"
  --set optim.table=adam --set optim.dense=adam --set optim.lr=0.001 "${extra[@]}")
log "data synth: $rows rows"
"$bin" data synth --rows "$rows" --to libsvm "$out/data.svm" "${model[@]}" 2> "$out/synth.log" ||
  { echo "gpu.sh: data synth failed: $(tail -3 "$out/synth.log")" >&2; exit 1; }
file=(--set "data.path=$out/data.svm" --set data.format=libsvm)
declare -A layout_args=(
  [dense]="--set model.layout=dense"
  [sparse]="--set model.layout=sparse"
  [headtail]="--set model.layout=sparse --set model.output=adaptive --set model.input_bands.cutoffs=auto --set model.output_bands.cutoffs=auto"
)
torch_ok=0
"$py" -c "import torch, numpy" 2>/dev/null && torch_ok=1
# profiled NAME ARGS...: `train ARGS --profile --json` as OUT/profile-NAME.json (every stage
# waited for, device_profile) with cubecl timing every launch, summed per kernel into
# OUT/kernels-NAME.json.
profiled() {
  local name=$1
  shift
  CUBECL_DEBUG_OPTION=profile CUBECL_DEBUG_LOG="$out/kernels-$name.log" \
    run "profile-$name" "$bin" train --device "$device" "${model[@]}" "${file[@]}" "$@" --profile --json
  if [ -s "$out/kernels-$name.log" ]; then
    # The steps after the first only (no compilation, no autotune races), when the profile
    # says how many launches a step makes.
    local per_step
    per_step=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["profile"]["device_profile"]["dispatches_per_step"])' \
      "$out/profile-$name.json" 2>/dev/null || true)
    python3 "$here/kernel_profile.py" "$out/kernels-$name.log" --steps "$steps" --top 12 \
      ${per_step:+--steady "$per_step"} > "$out/kernels-$name.json" 2>> "$out/profile-$name.log"
    xz -f "$out/kernels-$name.log" 2>/dev/null || true
  fi
}
for layout in $layouts; do
  # shellcheck disable=SC2086
  run "widebag-$layout" "$bin" train --device "$device" "${model[@]}" "${file[@]}" ${layout_args[$layout]} --json
  # shellcheck disable=SC2086
  [ "${PROFILE:-1}" = 1 ] && profiled "$layout" ${layout_args[$layout]}
  # shellcheck disable=SC2086
  run "explain-$layout" "$bin" explain --device "$device" "${model[@]}" "${file[@]}" ${layout_args[$layout]} \
    --measure --steps 3 --json --svg "$out/explain-$layout.svg"
  if [ $torch_ok = 1 ]; then
    cuts=()
    if [ "$layout" = headtail ] && [ -s "$out/widebag-$layout.json" ]; then
      mapfile -t cuts < <("$py" "$here/peers/cutoffs.py" "$out/widebag-$layout.json")
    fi
    torch_device=cpu
    "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null && torch_device=cuda
    # shellcheck disable=SC2086
    run "torch-$layout" "$py" "$here/peers/torch_peer.py" --data "$out/data.svm" --layout "$layout" \
      --dim "$dim" --hidden $hidden --batch "$batch" --steps "$steps" --lr 0.001 \
      --device "$torch_device" "${cuts[@]}"
  fi
done

# The output layer's products in half precision (`model.output_precision`): the tensor cores'
# operands where the build compiles SPIR-V with cooperative matrices.
half=${HALF-f16}
if [ -n "$half" ]; then
  for layout in $layouts; do
    [ "$layout" = headtail ] && continue
    # shellcheck disable=SC2086
    run "widebag-$layout-$half" "$bin" train --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[$layout]} --set "model.output_precision=\"$half\"" --json
  done
fi

# The full softmax's row log-sum-exp and logit gradient on widebag's CubeCL kernels instead of
# burn's tensor operations (the default), the output layer stepped inside its backward pass (the
# head/tail layout's adaptive softmax off autodiff through the same kernels): what the kernels
# are worth on this device.
if [ "${CUBECL_KERNELS:-1}" = 1 ]; then
  for layout in $layouts; do
    # shellcheck disable=SC2086
    run "widebag-$layout-cubecl" "$bin" train --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[$layout]} --set 'train.gpu_kernels="cubecl"' --json
    # The ledger against the allocator with the kernels (the sparse layout's output step inside
    # its backward pass keeps no output gradient).
    # shellcheck disable=SC2086
    run "explain-$layout-cubecl" "$bin" explain --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[$layout]} --set 'train.gpu_kernels="cubecl"' --measure --steps 3 --json
  done
  for layout in $layouts; do
    # shellcheck disable=SC2086
    [ "${CUBECL_PROFILE:-1}" = 1 ] && profiled "$layout-cubecl" ${layout_args[$layout]} \
      --set 'train.gpu_kernels="cubecl"'
  done
  # The sparse layout with its logits formed tile by tile inside the kernels, never written
  # (`model.logits = "tiled"`, Cut Cross-Entropy's structure; TILED=0 skips it).
  if [ "${TILED:-1}" = 1 ] && [[ " $layouts " == *" sparse "* ]]; then
    tiled=(--set 'train.gpu_kernels="cubecl"' --set 'model.logits="tiled"')
    # shellcheck disable=SC2086
    run widebag-sparse-tiled "$bin" train --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[sparse]} "${tiled[@]}" --json
    # shellcheck disable=SC2086
    run explain-sparse-tiled "$bin" explain --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[sparse]} "${tiled[@]}" --measure --steps 3 --json
    # shellcheck disable=SC2086
    [ "${CUBECL_PROFILE:-1}" = 1 ] && profiled sparse-tiled ${layout_args[sparse]} "${tiled[@]}"
  fi
fi

# The device's throughput model (`plan --calibrate`: 21 runs, 4 and 16 class chunks, f16
# output products and the CubeCL kernels among them), then each layout planned with it (its
# --set keys pinned: the same run), on burn's tensor operations and on the kernels: the step
# time `plan` predicts against the one measured.
if [ "${CALIBRATE:-1}" = 1 ]; then
  # wgpu's WGSL path cannot read a GPU's heap size: plan for the memory nvidia-smi reports.
  budget=()
  total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  [ -n "$total_mib" ] && budget=(--budget "${total_mib// /}MiB")
  run calibrate "$bin" plan --calibrate --scale "${CALIBRATE_SCALE:-8}" --device "$device" --steps 6 \
    --out "$out/calibration.json"
  for layout in $layouts; do
    [ -s "$out/calibration.json" ] || break
    # shellcheck disable=SC2086
    run "plan-$layout" "$bin" plan --device "$device" "${model[@]}" "${file[@]}" ${layout_args[$layout]} \
      "${budget[@]}" --calibration "$out/calibration.json" --json
    [ "${CUBECL_KERNELS:-1}" = 1 ] || continue
    # shellcheck disable=SC2086
    run "plan-$layout-cubecl" "$bin" plan --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[$layout]} --set 'train.gpu_kernels="cubecl"' \
      "${budget[@]}" --calibration "$out/calibration.json" --json
    [ "$layout" = sparse ] && [ "${TILED:-1}" = 1 ] || continue
    # shellcheck disable=SC2086
    run plan-sparse-tiled "$bin" plan --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[sparse]} --set 'train.gpu_kernels="cubecl"' --set 'model.logits="tiled"' \
      "${budget[@]}" --calibration "$out/calibration.json" --json
    # The throughput objective choosing the logits' form (made again, kept, tiled) by time
    # (a WIDEBAG_ARGS that sets model.logits pins it: that plan then keeps the form it was given;
    # benches/gpu-session.sh plans it unpinned).
    # shellcheck disable=SC2086
    run plan-sparse-by-time "$bin" plan --device "$device" "${model[@]}" "${file[@]}" \
      ${layout_args[sparse]} --set 'train.gpu_kernels="cubecl"' \
      --set 'plan.objective="throughput"' "${budget[@]}" \
      --calibration "$out/calibration.json" --json
  done
fi

python3 - "$out" "$layouts" "${half:-}" > "$out/gpu.md" <<'PY'
import json, sys
out, layouts, half = sys.argv[1], sys.argv[2].split(), sys.argv[3]

ok = {line.split()[0] for line in open(f"{out}/steps.txt") if " rc=0 " in line + " "}

def load(name):
    """A step's JSON, when the step succeeded."""
    if name not in ok:
        return None
    try:
        return json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError):
        return None

mib = lambda b: "—" if b is None else f"{b / 2**20:,.0f} MiB"
num = lambda x: "—" if x is None else f"{x:,.0f}"
machine = open(f"{out}/machine.txt").read().strip()
print("widebag on a GPU (`bash benches/gpu.sh`)\n")
print("```\n" + machine + "\n```\n")
q = load("quickstart")
if q:
    print(f"Quickstart (embedded defaults): backend {q['backend']}, adapter {q['adapter']}, "
          f"{q['examples_per_s']:,.0f} examples/s, peak in use {mib(q.get('peak_in_use_bytes'))}, "
          f"final loss (mean of last 10) {q['final_loss_mean10']:.3f}.\n")
elif any(line.startswith("quickstart ") for line in open(f"{out}/steps.txt")):
    print("Quickstart: failed (quickstart.log).\n")
w0 = next((w for w in (load(f"widebag-{l}") for l in layouts) if w), None)
if w0:
    print(f"Model {w0['width']:,} → {w0['dim']} → {w0['hidden']} → {w0['n_classes']:,}, batch "
          f"{w0['batch_size']}, {w0['steps']} steps, Adam (lazy Adam on tables, SparseAdam in "
          f"torch), one run each. Examples/s from the end of the first step on both sides. "
          f"widebag's peak: burn's allocator, bytes in use; torch's: max_memory_allocated.\n")
print("| layout | widebag examples/s | torch examples/s | widebag / torch | widebag peak | "
      "torch peak | ledger predicted | ledger measured | ledger error | final loss widebag / torch |")
print("|---|---|---|---|---|---|---|---|---|---|")
for layout in layouts:
    w, t, e = load(f"widebag-{layout}"), load(f"torch-{layout}"), load(f"explain-{layout}")
    we = w["examples_per_s"] if w else None
    te = t["examples_per_s"] if t else None
    ratio = f"{we / te:.2f}×" if we and te else "—"
    err = f"{e['error_pct']:.1f} %" if e and e.get("error_pct") is not None else "—"
    loss = (f"{w['final_loss_mean10']:.3f}" if w else "failed") + " / " + \
           (f"{t['final_loss_mean10']:.3f}" if t else "—")
    print(f"| {layout} | {num(we) if w else 'failed'} | {num(te)} | {ratio} | "
          f"{mib(w.get('peak_in_use_bytes')) if w else '—'} | {mib(t['peak_bytes']) if t else '—'} | "
          f"{mib(e['predicted_sampled_peak_bytes']) if e else '—'} | "
          f"{mib(e.get('measured_peak_bytes')) if e else '—'} | {err} | {loss} |")
for layout in (l for l in layouts if half and l != "headtail"):
    w, t = load(f"widebag-{layout}-{half}"), load(f"torch-{layout}")
    we = w["examples_per_s"] if w else None
    te = t["examples_per_s"] if t else None
    ratio = f"{we / te:.2f}×" if we and te else "—"
    loss = (f"{w['final_loss_mean10']:.3f}" if w else "failed") + " / " + \
           (f"{t['final_loss_mean10']:.3f}" if t else "—")
    print(f"| {layout}, {half} products | {num(we) if w else 'failed'} | {num(te)} | {ratio} | "
          f"{mib(w.get('peak_in_use_bytes')) if w else '—'} | "
          f"{mib(t['peak_bytes']) if t else '—'} | — | — | — | {loss} |")
for layout, what in [(v, k) for l in layouts for v, k in
                     ((f"{l}-cubecl", "CubeCL softmax kernels"), (f"{l}-tiled", "CubeCL tiled logits"))]:
    base = layout.rsplit("-", 1)[0]
    w, t = load(f"widebag-{layout}"), load(f"torch-{base}")
    e = load(f"explain-{layout}")
    if not w:
        continue
    we, te = w["examples_per_s"], (t["examples_per_s"] if t else None)
    ratio = f"{we / te:.2f}×" if te else "—"
    err = f"{e['error_pct']:.1f} %" if e and e.get("error_pct") is not None else "—"
    loss = f"{w['final_loss_mean10']:.3f} / " + (f"{t['final_loss_mean10']:.3f}" if t else "—")
    print(f"| {base}, {what} | {num(we)} | {num(te)} | {ratio} | "
          f"{mib(w.get('peak_in_use_bytes'))} | {mib(t['peak_bytes']) if t else '—'} | "
          f"{mib(e['predicted_sampled_peak_bytes']) if e else '—'} | "
          f"{mib(e.get('measured_peak_bytes')) if e else '—'} | {err} | {loss} |")
t = next((t for t in (load(f"torch-{l}") for l in layouts) if t), None)
if t:
    print(f"\ntorch: {t['peer']} on {t['device']}.")
w = next((w for w in (load(f"widebag-{l}") for l in layouts) if w), None)
if w:
    print(f"widebag: compiler {w.get('compiler') or '—'} (`train --json`'s `compiler`).")
print("\nwidebag's step profile (`--profile`: ms per step, largest stages; each stage boundary "
      "waits for the device), and what a step after the first asks of the device:")
profiled = [v for l in layouts for v in (l, f"{l}-cubecl", f"{l}-tiled")]
for layout in profiled:
    w = load(f"profile-{layout}")
    p = w and w.get("profile")
    if p:
        top = sorted(p["stages"], key=lambda s: -s["ms_per_step"])[:4]
        print(f"- {layout}: {p['ms_per_step']:.1f} ms/step: " + ", ".join(
            f"{s['stage']} {s['ms_per_step']:.1f} ms ({100 * s['share']:.0f}%)" for s in top))
        d = p.get("device_profile")
        if d:
            print(f"  {d['dispatches_per_step']:.1f} dispatches, {d['reads_per_step']:.1f} blocking "
                  f"reads, {d['allocations_per_step']:.1f} new buffers per step; "
                  f"{d['compiled_after_step_1']} kernels compiled after step 1")
for layout in profiled:
    try:
        k = json.load(open(f"{out}/kernels-{layout}.json"))
    except (OSError, ValueError):
        continue
    which = ("the steps after the first (no compilation or autotune)" if k.get("steady") else
             "every step, the first's compilation and autotune included")
    print(f"\nTop kernels, {layout} (cubecl's timing of each launch, each waited for, over "
          f"{k['steps']} steps: {which}; {k['ms_per_step_timed']:.1f} ms per step timed):\n")
    print("| kernel | calls per step | ms per step |\n|---|---|---|")
    for t in k["top"]:
        print(f"| {t['name']} | {t['calls_per_step']:.1f} | {t['ms_per_step']:.2f} |")
cal = None
try:
    cal = json.load(open(f"{out}/calibration.json"))
except (OSError, ValueError):
    pass
if cal:
    rate = lambda key: f"{cal[key] * 1e3:.3f}" if cal.get(key) is not None else "f32's"
    print(f"\nThroughput model (`plan --calibrate`): {cal['overhead_s'] * 1e3:.2f} ms + "
          f"{cal['s_per_gflop'] * 1e3:.3f} ms/GFLOP + {cal['s_per_gb'] * 1e3:.3f} ms/GB + "
          f"{cal.get('s_per_chunk', 0) * 1e3:.3f} ms per extra class chunk; half-precision "
          f"products {rate('s_per_half_gflop')} ms/GFLOP, the CubeCL kernels' fused product "
          f"{rate('s_per_cube_gflop')} ms/GFLOP; the seed model planned with it against the "
          f"measured step:\n")
    print("| layout | predicted ms/step | measured ms/step | predicted / measured |\n|---|---|---|---|")
    for layout in [v for l in layouts for v in (l, f"{l}-cubecl", f"{l}-tiled")]:
        p, w = load(f"plan-{layout}"), load(f"widebag-{layout}")
        if not p and not w:
            continue
        pred = p and p.get("predicted_step_s")
        meas = w and w["batch_size"] / w["examples_per_s"]
        ratio = f"{pred / meas:.2f}" if pred and meas else "—"
        print(f"| {layout} | {pred * 1e3:.1f} | " if pred else f"| {layout} | — | ", end="")
        print(f"{meas * 1e3:.1f} | {ratio} |" if meas else f"— | {ratio} |")
print("\nSteps (rc, seconds):\n")
print("```\n" + open(f"{out}/steps.txt").read().strip() + "\n```")
PY
cat "$out/gpu.md"
