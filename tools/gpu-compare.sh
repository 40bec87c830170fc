#!/usr/bin/env bash
# Times the working tree against reference versions of some of its files in
# one call on a GPU machine: builds the tree and a copy of it with the files
# under REFDIR laid over it, runs every ssu-bench configuration on both (the
# tree, the reference, the tree again, so that drift between runs shows), and
# prints a table of times and ratios to the copy last.
#
#   tools/gpu-compare.sh OUTDIR REFDIR 'ssu-bench options' ['options' ...]
#
# REFDIR mirrors the repository's paths (REFDIR/kernels/ssu_pipelined.cu,
# ...); `tools/compare-ref.sh REV` writes one for the files that differ from a
# git revision. Environment: BACKEND (cuda), GPU_ARCHS (sm_90a), BUILD
# (build-gpu), REF_TREE (/tmp/ssu-compare-ref: the reference copy and its
# build), MESON_OPTS (more `meson setup` options for both), BENCH_ARGS
# (appended to every run; default --iters 60). Writes OUTDIR/compare.txt (the
# table), OUTDIR/<run>.json (ssu-bench's JSON) and OUTDIR/build-*.txt.
#
# PREBUILT=1 builds nothing: BUILD must hold a build of the tree made
# elsewhere (bench/ssu-bench and the library), REFDIR the reference's
# libssu.so.0 (its library directory); the reference runs the tree's
# ssu-bench with that library first on the loader's path.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: tools/gpu-compare.sh OUTDIR REFDIR OPTIONS...}"
refdir="${2:?usage: tools/gpu-compare.sh OUTDIR REFDIR OPTIONS...}"
shift 2
[ $# -gt 0 ] || { echo "gpu-compare: no ssu-bench configuration given" >&2; exit 2; }
[ -d "$refdir" ] || { echo "gpu-compare: $refdir is not a directory" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
refdir="$(cd "$refdir" && pwd)"
cd "$root"
export PATH="$PATH:/usr/local/cuda/bin"

backend="${BACKEND:-cuda}"
build="${BUILD:-build-gpu}"
ref_tree="${REF_TREE:-/tmp/ssu-compare-ref}"
setup_opts=(-Dbuildtype=release ${MESON_OPTS:-})
[ "$backend" = cuda ] && setup_opts+=(-Dgpu_archs="${GPU_ARCHS:-sm_90a}")
bench_args=(${BENCH_ARGS:---iters 60})

new_bin="$root/$build/bench/ssu-bench"
ref_bin="$ref_tree/build/bench/ssu-bench"
ref_env=()
if [ "${PREBUILT:-0}" = 1 ]; then
  [ -x "$new_bin" ] || { echo "gpu-compare: PREBUILT=1 but no $new_bin" >&2; exit 2; }
  [ -e "$refdir/libssu.so.0" ] || { echo "gpu-compare: PREBUILT=1 but no $refdir/libssu.so.0" >&2; exit 2; }
  ref_bin=$new_bin
  ref_env=(LD_LIBRARY_PATH="$refdir")
  echo "prebuilt: $build, reference library in $refdir"
else
# The reference tree: the working tree without build directories or .git,
# with REFDIR's files over it.
rm -rf "$ref_tree"
mkdir -p "$ref_tree"
tar --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C "$ref_tree"
laid=$(cd "$refdir" && find . -type f | sed 's|^\./||')
[ -n "$laid" ] || { echo "gpu-compare: $refdir holds no files" >&2; exit 2; }
(cd "$refdir" && tar -cf - .) | tar -xf - -C "$ref_tree"
echo "reference: $(echo "$laid" | tr '\n' ' ')"

t0=$(date +%s)
build_tree() {  # dir builddir log
  (cd "$1" && { [ -f "$2/build.ninja" ] || meson setup "$2" "${setup_opts[@]}" >/dev/null; } &&
    ninja -C "$2" bench/ssu-bench) > "$3" 2>&1
}
build_tree "$root" "$build" "$out/build-new.txt" & p1=$!
build_tree "$ref_tree" build "$out/build-ref.txt" & p2=$!
ok=1
wait $p1 || { echo "gpu-compare: build of the tree failed"; tail -20 "$out/build-new.txt"; ok=0; }
wait $p2 || { echo "gpu-compare: build of the reference failed"; tail -20 "$out/build-ref.txt"; ok=0; }
[ $ok = 1 ] || exit 1
echo "builds: $(( $(date +%s) - t0 )) s"
fi

i=0
for cfg in "$@"; do
  i=$((i + 1))
  for run in new ref new2; do
    bin=$new_bin
    envs=()
    [ $run = ref ] && bin=$ref_bin && envs=("${ref_env[@]}")
    # shellcheck disable=SC2086
    env "${envs[@]}" "$bin" --backend "$backend" $cfg "${bench_args[@]}" --json "$out/c$i-$run.json" \
      > "$out/c$i-$run.txt" 2>&1 || echo "gpu-compare: '$cfg' ($run) exited $?"
  done
done

python3 - "$out" "$@" > "$out/compare.txt" <<'EOF'
import json, os, sys

out, cfgs = sys.argv[1], sys.argv[2:]

def rows(path):  # one ssu-bench run writes one JSON document
    if not os.path.exists(path):
        return {}
    return {r["batch"]: r for r in json.load(open(path)).get("rows", [])}

print("| configuration | batch | ref us | new us | new again us | ref ratio | new ratio | time change |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for k, cfg in enumerate(cfgs, 1):
    ref, new, new2 = (rows(os.path.join(out, f"c{k}-{r}.json")) for r in ("ref", "new", "new2"))
    for b in sorted(set(ref) | set(new)):
        r, n, n2 = ref.get(b), new.get(b), new2.get(b)
        f = lambda x, key, fmt: format(x[key], fmt) if x and key in x else "-"
        change = "-"
        if r and n:
            change = f"{(n['time_us'] / r['time_us'] - 1) * 100:+.1f} %"
        print(f"| {cfg} | {b} | {f(r, 'time_us', '.1f')} | {f(n, 'time_us', '.1f')} | "
              f"{f(n2, 'time_us', '.1f')} | {f(r, 'ratio_to_copy', '.3f')} | "
              f"{f(n, 'ratio_to_copy', '.3f')} | {change} |")
EOF
cat "$out/compare.txt"
