#!/usr/bin/env bash
# The replay (checkpointed decode) kernels on a GPU machine, from a build made
# elsewhere: their test program, the recorded replay benchmarks and, with
# NCU=1, every replay launch of one cycle timed by Nsight Compute (which
# steps cost what: appends against the flush).
#
#   BUILD=build bash tools/gpu-replay-bench.sh OUTDIR
#
# Environment: BUILD (default build), TESTS=0 skips test_gpu_replay,
# BENCH=0 the benchmarks, ITERS (default 30), BATCHES (default 1,8,64,512),
# SWEEP="VAR=v1,v2 ..." reruns the f32 / bf16 benchmarks once per value of
# each environment variable (tuning knobs such as SSU_CUDA_REPLAY_PREFETCH),
# CONFIGS="ARGS;ARGS..." adds ';'-separated ssu-bench argument sets (e.g.
# "--replay 16 --state-dtype bf16 --tokens 3 --batch 64,256"), BASELINE=DIR
# runs every benchmark a second time, right after, with the libssu.so.0 in
# DIR (another build's library: ssu-bench's RUNPATH gives way to
# LD_LIBRARY_PATH), so that a change is measured against its predecessor in
# the same run (a tuning knob inside the candidate build is no baseline: the
# candidate's kernels are another allocation),
# NCU_BATCHES (default 1,8,64) the batches NCU=1 profiles, NCU_DTYPES (default
# "f32 bf16") the state dtypes, NCU_COUNT (default 16) the launches timed.
# Writes OUTDIR/replay.log (everything) and OUTDIR/bench.json (one JSON
# document per line); prints a short table last.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: tools/gpu-replay-bench.sh OUTDIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee "$out/replay.log") 2>&1
cd "$root"
build="${BUILD:-build}"
iters="--iters ${ITERS:-30}"
batches="${BATCHES:-1,8,64,512}"
summary=()
note() { summary+=("$*"); echo "== $*"; }

echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1

if [ "${TESTS:-1}" != 0 ]; then
  t0=$(date +%s)
  "$build/tests/gpu/test_gpu_replay" > "$out/test_gpu_replay.txt" 2>&1
  rc=$?
  tail -3 "$out/test_gpu_replay.txt"
  note "test_gpu_replay: exit $rc in $(( $(date +%s) - t0 )) s"
fi

# One benchmark: prints its table, appends its JSON (with "variant": the
# label), keeps the replay rows' "batch us/step" for the summary under label
# $1; with BASELINE, the same again on the baseline library.
bench_once() {
  local label="$1"; shift
  echo "### $label: ssu-bench --backend cuda $*"
  rm -f "$out/one.json"
  "$build/bench/ssu-bench" --backend cuda "$@" --json "$out/one.json" || { note "$label: exit $?"; return; }
  python3 - "$out/one.json" "$label" "$out/bench.json" <<'EOF' >> "$out/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
d["variant"] = sys.argv[2]
with open(sys.argv[3], "a") as f:
    json.dump(d, f)
    f.write("\n")
cells = [f"b{r['batch']} {r['time_us']:.1f} (floor {r['floor_us']:.1f})" for r in d.get("rows", [])]
print(f"{sys.argv[2]:<40} " + "  ".join(cells))
EOF
}
bench() {
  local label="$1"; shift
  bench_once "$label" "$@"
  if [ -n "${BASELINE:-}" ]; then
    LD_LIBRARY_PATH="$BASELINE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" bench_once "$label [baseline]" "$@"
  fi
}

if [ "${BENCH:-1}" != 0 ]; then
  : > "$out/bench.json"; : > "$out/summary.txt"
  bench "f32" --replay 16 --batch "$batches" $iters
  bench "bf16" --replay 16 --state-dtype bf16 --batch "$batches" $iters
  for spec in ${SWEEP:-}; do
    var="${spec%%=*}"; vals="${spec#*=}"
    for v in ${vals//,/ }; do
      export "$var=$v"
      bench "f32 $var=$v" --replay 16 --batch "$batches" $iters
      bench "bf16 $var=$v" --replay 16 --state-dtype bf16 --batch "$batches" $iters
      unset "$var"
    done
  done
  IFS=';' read -r -a configs <<< "${CONFIGS:-}"
  for cfg in "${configs[@]}"; do
    # an argument set, split into words on purpose
    [ -n "${cfg// /}" ] && bench "$cfg" $cfg $iters
  done
  if [ "${FULL:-0}" = 1 ]; then
    bench "f32 T=4" --replay 16 --tokens 4 --batch 64,256 $iters
    bench "f32 T=4 accept 2" --replay 16 --tokens 4 --accept 2 --batch 64,256 $iters
    bench "Mamba-1 f32" --replay 16 --mamba1 --batch 1,64,256 $iters
  fi
fi

if [ "${NCU:-0}" != 0 ] && command -v ncu >/dev/null; then
  for sd in ${NCU_DTYPES:-f32 bf16}; do
    for b in ${NCU_BATCHES:-1 8 64}; do
      # One warm-up cycle is skipped; the next cycle's 16 replay launches.
      ncu --kernel-name "regex:ssu_replay" --launch-skip 16 --launch-count ${NCU_COUNT:-16} \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --csv "$build/bench/ssu-bench" --backend cuda --replay 16 --state-dtype $sd \
        --batch $b --iters 2 > "$out/ncu-$sd-b$b.csv" 2>&1
      python3 - "$out/ncu-$sd-b$b.csv" "$sd b$b" <<'EOF' | tee -a "$out/summary.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
rows = rows[next((i for i, r in enumerate(rows) if r[:1] == ["ID"]), len(rows)):]
if not rows: print(sys.argv[2], "ncu: no rows"); sys.exit()
hdr = rows[0]; ki = hdr.index("Kernel Name"); mi = hdr.index("Metric Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit"); ii = hdr.index("ID")
by = {}
for r in rows[1:]:
    by.setdefault(r[ii], {"k": r[ki]})[r[mi]] = (r[vi], r[ui])
cells = []
for i, m in sorted(by.items(), key=lambda x: int(x[0])):
    v, u = m.get("gpu__time_duration.sum", ("0", "ns"))
    us = float(v.replace(",", "")) / (1000.0 if u == "ns" else 1.0 if u == "us" else 1e-3)
    cells.append(f"{us:.1f}")
print(f"ncu {sys.argv[2]:<10} us per launch: " + " ".join(cells))
EOF
    done
  done
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
cat "$out/summary.txt" 2>/dev/null
