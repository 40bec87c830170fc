#!/usr/bin/env bash
# Times one build of the working tree under several values of one environment
# knob (SSU_CUDA_PIPE_TILE, SSU_CUDA_PIPE_MAX_BLOCKS, ...) in one call on a GPU
# machine, and prints a table of times and ratios to the copy, one column per
# value, each configuration run twice in an interleaved order (values in
# order, then in reverse) so that drift between runs shows.
#
#   tools/gpu-sweep.sh OUTDIR VAR 'value ...' 'ssu-bench options' ['options' ...]
#
# A value of `-` leaves VAR unset. Environment: BACKEND (cuda), GPU_ARCHS
# (sm_90a), BUILD (build-gpu), BENCH_ARGS (appended to every run; default
# --iters 60), NO_BUILD=1 (run the build in BUILD as it is, made elsewhere).
# Writes OUTDIR/sweep.txt (the table) and OUTDIR/s<k>-<run>.json.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: tools/gpu-sweep.sh OUTDIR VAR 'value ...' OPTIONS..."
out="${1:?$usage}"
var="${2:?$usage}"
values="${3:?$usage}"
shift 3
[ $# -gt 0 ] || { echo "gpu-sweep: no ssu-bench configuration given" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"
export PATH="$PATH:/usr/local/cuda/bin"

backend="${BACKEND:-cuda}"
build="${BUILD:-build-gpu}"
bench_args=(${BENCH_ARGS:---iters 60})
if [ "${NO_BUILD:-0}" = 1 ]; then
  [ -x "$build/bench/ssu-bench" ] || { echo "gpu-sweep: NO_BUILD=1 but no $build/bench/ssu-bench"; exit 1; }
elif [ ! -f "$build/build.ninja" ]; then
  opts=(-Dbuildtype=release)
  [ "$backend" = cuda ] && opts+=(-Dgpu_archs="${GPU_ARCHS:-sm_90a}")
  meson setup "$build" "${opts[@]}" > "$out/build.txt" 2>&1 || {
    echo "gpu-sweep: meson setup failed"; tail -20 "$out/build.txt"; exit 1; }
fi
if [ "${NO_BUILD:-0}" != 1 ]; then
  ninja -C "$build" bench/ssu-bench >> "$out/build.txt" 2>&1 || {
    echo "gpu-sweep: build failed"; tail -20 "$out/build.txt"; exit 1; }
fi

read -r -a vals <<< "$values"
order=()
for ((j = 0; j < ${#vals[@]}; ++j)); do order+=("$j:a"); done
for ((j = ${#vals[@]} - 1; j >= 0; --j)); do order+=("$j:b"); done
k=0
for cfg in "$@"; do
  k=$((k + 1))
  for o in "${order[@]}"; do
    j=${o%%:*}
    run=${o##*:}
    v=${vals[$j]}
    json="$out/s$k-v$j$run.json"
    # shellcheck disable=SC2086
    if [ "$v" = - ]; then
      env -u "$var" "$build/bench/ssu-bench" --backend "$backend" $cfg "${bench_args[@]}" \
        --json "$json" > "$out/s$k-v$j$run.txt" 2>&1
    else
      env "$var=$v" "$build/bench/ssu-bench" --backend "$backend" $cfg "${bench_args[@]}" \
        --json "$json" > "$out/s$k-v$j$run.txt" 2>&1
    fi || echo "gpu-sweep: '$cfg' with $var=$v exited $?"
  done
done

python3 - "$out" "$var" "$values" "$@" > "$out/sweep.txt" <<'EOF'
import json, os, sys

out, var, values, cfgs = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]

def rows(path):  # one ssu-bench run writes one JSON document
    if not os.path.exists(path):
        return {}
    return {r["batch"]: r for r in json.load(open(path)).get("rows", [])}

head = " | ".join(f"{var}={v} us (ratio)" for v in values)
print(f"| configuration | batch | {head} |")
print("|---|---:|" + "---|" * len(values))
for k, cfg in enumerate(cfgs, 1):
    runs = [(rows(os.path.join(out, f"s{k}-v{j}a.json")), rows(os.path.join(out, f"s{k}-v{j}b.json")))
            for j in range(len(values))]
    batches = sorted(set().union(*[set(a) | set(b) for a, b in runs]))
    for bt in batches:
        cells = []
        for a, b in runs:
            ra, rb = a.get(bt), b.get(bt)
            if ra and rb:
                cells.append(f"{ra['time_us']:.1f} / {rb['time_us']:.1f} ({ra['ratio_to_copy']:.3f})")
            else:
                cells.append("-")
        print(f"| {cfg} | {bt} | " + " | ".join(cells) + " |")
EOF
cat "$out/sweep.txt"
