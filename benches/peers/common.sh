# Sourced by compare.sh and time-to-recall.sh: both sides run on the same threads, the same
# cores and the allocator policy ALLOCATOR names, and each invocation leaves its raw output.
#
# THREADS (default: every core): OMP_NUM_THREADS, MKL_NUM_THREADS and RAYON_NUM_THREADS, the
#   same for both processes, and the PyTorch peers' torch.set_num_threads.
# CPUS (default 0-(THREADS-1)): `taskset -c CPUS` for both processes; empty: no pinning.
# ALLOCATOR (default tuned): the malloc policy. widebag sets its own at start-up whatever the
#   environment says (src/malloc_policy.rs: mallopt M_MMAP_THRESHOLD 32 MiB and M_TRIM_THRESHOLD
#   1 GiB, and a cache that keeps freed blocks of 32 MiB to 1 GiB, 1 GiB in all, by exact size
#   for the next allocation); it has no switch to turn that off, so only the peer's changes:
#   glibc     the peer on glibc's defaults (adaptive mmap threshold up to 32 MiB, trim at twice it)
#   mallopt   the peer with widebag's two mallopt values as environment variables
#             (MALLOC_MMAP_THRESHOLD_=32 MiB, MALLOC_TRIM_THRESHOLD_=1 GiB), without the cache
#   tuned     what glibc's environment allows towards widebag's whole policy: every block up to
#             1 GiB (the cache's largest) from the heap, where a freed one stays for the next
#             allocation instead of being unmapped, and up to 2 GiB of free heap kept (widebag's
#             1 GiB of free top plus its cache's 1 GiB): MALLOC_MMAP_THRESHOLD_=1 GiB,
#             MALLOC_TRIM_THRESHOLD_=2 GiB. (Measured on the quickstart's sparse layout, torch
#             2.15: 255,000 minor faults a step on glibc's defaults or mallopt's, 34,000 tuned.)
#   jemalloc  both sides on jemalloc (LD_PRELOAD=JEMALLOC, default the system's
#             libjemalloc.so.2: `apt-get install libjemalloc2`), freed pages never returned
#             (MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1), as PyTorch's CPU performance
#             guides advise; widebag's mallopt then tunes an allocator it no longer uses, and its
#             block cache stays.
# Neither side gets MALLOC_ARENA_MAX or MALLOC_TOP_PAD_: widebag sets neither.
# shellcheck shell=bash

threads=${THREADS:-$(nproc)}
cpus=${CPUS-0-$((threads - 1))}
allocator=${ALLOCATOR:-tuned}

threads_env=("OMP_NUM_THREADS=$threads" "MKL_NUM_THREADS=$threads" "RAYON_NUM_THREADS=$threads")
pin=()
if [ -n "$cpus" ]; then
  command -v taskset > /dev/null || { echo "$0: taskset (util-linux) not found; CPUS= to run unpinned" >&2; exit 2; }
  pin=(taskset -c "$cpus")
fi
malloc_unset=(-u MALLOC_MMAP_THRESHOLD_ -u MALLOC_TRIM_THRESHOLD_ -u MALLOC_TOP_PAD_
  -u MALLOC_ARENA_MAX -u GLIBC_TUNABLES -u LD_PRELOAD -u MALLOC_CONF)
widebag_malloc=()
case $allocator in
  glibc) torch_malloc=() ;;
  mallopt) torch_malloc=(MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824) ;;
  tuned) torch_malloc=(MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=2147483648) ;;
  jemalloc)
    jemalloc=${JEMALLOC:-$(ldconfig -p | awk '/libjemalloc\.so\.2 / {print $NF; exit}')}
    if [ -z "$jemalloc" ] || [ ! -f "$jemalloc" ]; then
      echo "$0: no libjemalloc.so.2 (apt-get install libjemalloc2, or JEMALLOC=path)" >&2
      exit 2
    fi
    torch_malloc=("LD_PRELOAD=$jemalloc" "MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1")
    widebag_malloc=("${torch_malloc[@]}") ;;
  *) echo "$0: ALLOCATOR is glibc, mallopt, tuned or jemalloc, not '$allocator'" >&2; exit 2 ;;
esac
# The command prefixes: the same threads and cores for both, the allocator ALLOCATOR names.
widebag_run=(env "${malloc_unset[@]}" "${threads_env[@]}" "${widebag_malloc[@]}" "${pin[@]}")
torch_run=(env "${malloc_unset[@]}" "${threads_env[@]}" "${torch_malloc[@]}" "${pin[@]}")

# timed STEM STDOUT CMD...: runs CMD with its stdout to STDOUT, its stderr to STEM.log and its
# start and end (seconds since the epoch) to STEM.wall.
timed() {
  local stem=$1 stdout=$2
  shift 2
  local start end
  start=$(date +%s.%N)
  # A side that fails is reported and the rest still run (its table cells then say so).
  local rc=0
  "$@" > "$stdout" 2> "$stem.log" || rc=$?
  [ "$rc" = 0 ] || echo "${stem##*/} exited $rc (see $stem.log)" >&2
  end=$(date +%s.%N)
  echo "$start $end" > "$stem.wall"
}

# Writes <out>/machine.txt: the CPU, the cores, torch, the binary, the settings, the date.
write_machine() {
  local out=$1 py=$2 bin=$3
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -n), kernel $(uname -r), $(ldd --version 2>&1 | head -1)"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
    echo "cores: $(nproc) online ($(lscpu | sed -n 's/^CPU(s): *//p' | head -1) CPUs), flags: $(grep -o -w 'avx512f\|avx2\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "widebag: $bin, $("$bin" --version 2>&1 | head -1), sha256 $(sha256sum "$bin" | cut -c1-16), checkout $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "python: $("$py" -c 'import sys, torch, numpy; print(sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__, "fused CPU Adam:", hasattr(torch, "_fused_adam_"))')"
    echo "settings: THREADS=$threads CPUS=${cpus:-unpinned} ALLOCATOR=$allocator"
    echo "widebag runs as: ${widebag_run[*]} $bin ..."
    echo "torch runs as: ${torch_run[*]} $py ..."
  } > "$out/machine.txt"
}
