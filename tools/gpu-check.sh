#!/usr/bin/env bash
# Builds libssu with the CUDA backend, runs the GPU test suite (optionally
# under compute-sanitizer), runs ssu-bench over the recorded configurations
# and, if present, the Python binding's GPU check. Meant for one call on a
# GPU machine:
#
#   bash tools/gpu-check.sh OUTDIR
#
# Environment: GPU_ARCHS (default sm_90a), BUILD (default build-gpu),
# SANITIZE=0 to skip compute-sanitizer, BENCH=0 to skip the benchmarks,
# TESTS=0 to skip the test suites, BENCH_ARGS (extra ssu-bench options).
# BENCH_NEW=0 skips the int16 / 8-bit / stochastic-rounding / Mamba-3 benchmarks,
# BENCH_REPLAY=0 the checkpointed (replay) decode benchmarks; BENCH_SET=plain
# or BENCH_SET=replay runs one of the two groups (default: both).
# NCU=1 profiles one update kernel of each benchmark shape with Nsight Compute.
# CPU_SUITES=0 skips the cpu/api/validation/abi suites, PY=0 the Python check.
# NO_BUILD=1 runs a build of BUILD made elsewhere as it is (nothing rebuilt;
# set CPU_SUITES=0 then, since meson test needs the build's own paths).
# SSU_LONG_TESTS=1 runs the GPU programs' long versions (every large batch
# and the whole update table; tests/README.md), by default they keep one
# case per code path.
# SAN_EVERY=k runs every k-th table case under compute-sanitizer (default 9),
# SAN_TOOLS the compute-sanitizer tools (default: memcheck racecheck
# initcheck), SAN_ONLY=1 the sanitizer runs without the plain test runs.
# Writes OUTDIR/gpu-check.log (everything), OUTDIR/bench.txt (the tables),
# OUTDIR/bench.json (one JSON document per configuration, in order) and
# OUTDIR/testlog.txt; prints a short summary last.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: tools/gpu-check.sh OUTDIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee "$out/gpu-check.log") 2>&1
cd "$root"

archs="${GPU_ARCHS:-sm_90a}"
build="${BUILD:-build-gpu}"
summary=()
note() { summary+=("$*"); echo "== $*"; }

echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv 2>&1
nvcc --version | tail -2
export PATH="$PATH:/usr/local/cuda/bin"

# --- build ------------------------------------------------------------------
t0=$(date +%s)
if [ "${NO_BUILD:-0}" = 1 ]; then
  [ -f "$build/libssu.so" ] || { note "NO_BUILD=1 but no $build/libssu.so"; printf '%s\n' "${summary[@]}"; exit 1; }
  note "build: prebuilt $build (nothing rebuilt)"
else
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dgpu_archs="$archs" -Dbuildtype=release >/dev/null || {
    note "meson setup FAILED"; printf '%s\n' "${summary[@]}"; exit 1; }
fi
if ! ninja -C "$build" > /tmp/ssu-build.txt 2>&1; then
  cat /tmp/ssu-build.txt
  note "build FAILED"
  printf '%s\n' "${summary[@]}"
  exit 1
fi
note "build ok ($archs) in $(( $(date +%s) - t0 )) s"
fi
echo "NEEDED of libssu.so:"; readelf -d "$build/libssu.so" | grep NEEDED
if readelf -d "$build/libssu.so" | grep -qE 'libcuda|libcudart'; then
  note "libssu.so NEEDS libcuda/libcudart: FAIL"
else
  note "libssu.so names neither libcuda nor libcudart"
fi
cuobjdump --list-elf "$build/libssu.so" 2>&1 | head -5

# --- tests -------------------------------------------------------------------
if [ "${TESTS:-1}" != 0 ]; then
 if [ "${SAN_ONLY:-0}" != 1 ]; then
  t0=$(date +%s)
  env -u SSU_TEST_EVERY "$build/tests/gpu/test_gpu_update" 2>&1
  rc=$?
  note "gpu suite: exit $rc in $(( $(date +%s) - t0 )) s"
  # The table again with the direct kernels on every call of their form,
  # whatever its size (by default they take only calls too small for the
  # pipelined grid).
  t0=$(date +%s)
  SSU_CUDA_DIRECT=1 "$build/tests/gpu/test_gpu_update" --test-case='*table*,*8-bit*' 2>&1 | tail -4
  note "gpu table and 8-bit states with SSU_CUDA_DIRECT=1: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
  # CPU / CUDA state bits again with the direct kernels off (the simple
  # kernels take the small calls; and no 8-bit items of two heads, so that
  # the pipelined 8-bit kernels run every case one head at a time too) and
  # on for every call of their form.
  for dm in 0 1; do
    t0=$(date +%s)
    SSU_CUDA_DIRECT=$dm SSU_CUDA_PIPE_PAIRS=$dm "$build/tests/gpu/test_gpu_rounding" 2>&1 | tail -4
    note "test_gpu_rounding with SSU_CUDA_DIRECT=$dm SSU_CUDA_PIPE_PAIRS=$dm: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
  done
  # The Mamba-1 kernels for every per-channel call of their form (by default
  # they take only calls with two row tiles and sequences per SM), three
  # sequences per block: runs shorter than their ring, padding, the table's
  # layouts; and CPU / CUDA state bits with them.
  t0=$(date +%s)
  SSU_CUDA_M1=1 SSU_CUDA_M1_SEQS=3 SSU_TEST_FILTER=A_per_channel \
    "$build/tests/gpu/test_gpu_update" --test-case='*table*' 2>&1 | tail -4
  note "gpu table's per-channel cases with SSU_CUDA_M1=1: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  SSU_CUDA_M1=1 SSU_CUDA_M1_SEQS=3 "$build/tests/gpu/test_gpu_rounding" 2>&1 | tail -4
  note "test_gpu_rounding with SSU_CUDA_M1=1: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
  # The other GPU programs (rounding / CPU bit equality, Mamba-3, ...).
  for t in "$build"/tests/gpu/test_gpu_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    name=$(basename "$t")
    [ "$name" = test_gpu_update ] && continue
    t0=$(date +%s)
    env -u SSU_TEST_EVERY "$t" 2>&1 | tail -25
    note "$name: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
  done
  t0=$(date +%s)
  if [ "${CPU_SUITES:-1}" != 0 ]; then
    meson test -C "$build" --no-rebuild --suite cpu --suite api --suite validation --suite abi \
      --print-errorlogs 2>&1 | tail -15
    note "cpu/api/validation/abi suites: exit $? in $(( $(date +%s) - t0 )) s"
  else
    note "cpu/api/validation/abi suites: skipped (CPU_SUITES=0)"
  fi
 fi
  if [ "${SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
    for tool in ${SAN_TOOLS:-memcheck racecheck initcheck}; do
      t0=$(date +%s)
      SSU_TEST_EVERY=${SAN_EVERY:-9} compute-sanitizer --tool $tool --error-exitcode 99 \
        --print-limit 20 "$build/tests/gpu/test_gpu_update" \
        --test-case='*table*,*graph*,*error word*' 2>&1 | tail -12
      note "compute-sanitizer $tool: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
      for t in "$build"/tests/gpu/test_gpu_*; do
        [ -x "$t" ] && [ -f "$t" ] || continue
        name=$(basename "$t")
        [ "$name" = test_gpu_update ] && continue
        t0=$(date +%s)
        SSU_TEST_EVERY=${SAN_EVERY:-9} compute-sanitizer --tool $tool --error-exitcode 99 \
          --print-limit 20 "$t" 2>&1 | tail -6
        note "compute-sanitizer $tool $name: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
      done
    done
  fi
  cp "$build/meson-logs/testlog.txt" "$out/testlog.txt" 2>/dev/null
fi

# --- benchmarks ----------------------------------------------------------------
if [ "${BENCH:-1}" != 0 ]; then
  : > "$out/bench.txt"
  : > "$out/bench.json"
  # Returns ssu-bench's exit status; a run that wrote no JSON adds none.
  bench() {
    echo "### ssu-bench --backend cuda $* ${BENCH_ARGS:-}" | tee -a "$out/bench.txt"
    rm -f /tmp/ssu-bench.json
    "$build/bench/ssu-bench" --backend cuda "$@" ${BENCH_ARGS:-} --json /tmp/ssu-bench.json \
      2>&1 | tee -a "$out/bench.txt"
    local rc=${PIPESTATUS[0]}
    echo "(${SECONDS} s into the run)" | tee -a "$out/bench.txt"
    if [ -f /tmp/ssu-bench.json ]; then
      cat /tmp/ssu-bench.json >> "$out/bench.json"
      echo >> "$out/bench.json"
    fi
    return "$rc"
  }
  iters="--iters ${BENCH_ITERS:-100}"
  # BENCH_SET picks the groups: plain (the update in every recorded form),
  # replay (checkpointed decode), all (default).
  set_has() { case "${BENCH_SET:-all}" in all|*"$1"*) return 0;; esac; return 1; }
  if set_has plain; then
    bench --state-dtype f32 $iters
    bench --state-dtype bf16 --batch 1,8,64,256,512 $iters
    bench --state-dtype f16 --batch 1,8,64,256,512 $iters
    bench --mamba1 --batch 1,8,64,256,512 $iters
    bench --mamba1 --state-dtype bf16 --batch 8,64,256,512 $iters
    bench --tokens 4 --batch 1,8,64,128,256 $iters
    bench --tokens 4 --state-dtype bf16 --batch 64,256 $iters
    bench --pdl --state-dtype f32 --batch 1,8,64 $iters
    bench --pdl --state-dtype bf16 --batch 1,8,64 $iters
    if [ "${BENCH_NEW:-1}" != 0 ]; then
      bench --state-dtype i16 --batch 8,64,256,512 $iters
      bench --state-dtype i8 --batch 1,8,64,256,512 $iters
      bench --state-dtype f8e4m3 --sr-compare --batch 1,8,64,256,512 $iters
      bench --state-dtype bf16 --sr-compare --batch 1,8,64,256 $iters
      bench --state-dtype f16 --sr-compare --batch 1,8,64,256 $iters
      bench --mamba3 $iters
    fi
  fi
  if [ "${BENCH_REPLAY:-1}" != 0 ] && set_has replay; then
    # Checkpointed decode: whole ring cycles per step against the plain
    # update of the same shape and batch; all sequences flushing on the same
    # step, then staggered (a server: ~1/L of them flush on every step);
    # speculative verify (4 tokens, K accepted) beside the plain update that
    # stores intermediate states instead.
    for s in f32 bf16 i8 f8e4m3; do
      bench --replay 16 --state-dtype $s --batch 1,8,64,512 $iters ||
        note "replay bench ($s state) failed: exit $?"
    done
    for s in f32 bf16; do
      bench --replay 16 --stagger --state-dtype $s --batch 8,64,512 $iters ||
        note "replay bench (staggered, $s state) failed: exit $?"
      bench --tokens 4 --intermediate --state-dtype $s --batch 64,256 $iters
      for k in 2 4; do
        bench --replay 16 --tokens 4 --accept $k --state-dtype $s --batch 64,256 $iters ||
          note "replay bench (T=4, $k accepted, $s state) failed: exit $?"
      done
    done
    bench --mamba1 --replay 16 --batch 1,64,256 $iters ||
      note "replay bench (Mamba-1) failed: exit $?"
  fi
  note "benchmarks done (bench.txt)"
fi

# --- profile (NCU=1): one update kernel per configuration ------------------------
if [ "${NCU:-0}" != 0 ] && command -v ncu >/dev/null; then
  cfgs=("--state-dtype f32 --batch 256" "--state-dtype bf16 --batch 256" \
        "--tokens 4 --batch 128" "--mamba1 --batch 256")
  # NCU_CFGS: ';'-separated ssu-bench configurations instead of those.
  [ -n "${NCU_CFGS:-}" ] && IFS=';' read -r -a cfgs <<< "$NCU_CFGS"
  for cfg in "${cfgs[@]}"; do
    echo "### ncu: ssu-bench --backend cuda $cfg" | tee -a "$out/ncu.txt"
    # shellcheck disable=SC2086
    ncu --kernel-name "regex:^ssu_(update|pipe|direct|m1)_" --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis \
      --section SchedulerStats --section ComputeWorkloadAnalysis \
      "$build/bench/ssu-bench" --backend cuda $cfg --iters 3 2>&1 | tee -a "$out/ncu.txt" |
      grep -E "ssu_(update|pipe|direct|m1)_|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Shared Memory Config|Stall|Warp Cycles Per Issued|Issued Warp|L2 Hit|Mem Busy|Max Bandwidth|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Executed Ipc" | head -40
  done
  note "ncu profiles done"
fi

# --- Python binding -------------------------------------------------------------
if [ -x tools/gpu-python-check.sh ] && [ "${PY:-1}" != 0 ]; then
  tools/gpu-python-check.sh "$out/py" "$build/libssu.so.0" > /dev/null 2>&1
  note "python gpu check: exit $? (log in py/)"
fi

echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
if [ -s "$out/bench.txt" ]; then
  grep -E '^###|^\| [0-9]' "$out/bench.txt" | cut -c1-110
fi
