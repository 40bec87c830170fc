#!/usr/bin/env bash
# The Python binding on a GPU: torch CUDA tensors against the CPU backend,
# and the per-call host overhead of the Python path.
#
#   tools/gpu-python-check.sh OUTDIR [LIBSSU]
#
# LIBSSU is the libssu.so to test; by default the newest build*/libssu.so.0
# under the repository that can create a CUDA context. Needs python3 with
# torch (CUDA) and numpy. Runs bindings/python/gpu_check.py (the update),
# bindings/python/tests/gpu_check_formats.py (Mamba-3 step and rotary,
# stochastic rounding with device seeds, int16 pools: CUDA against the CPU
# backend) and the host-overhead benchmark. Writes OUTDIR/gpu_check.json,
# OUTDIR/gpu_check_formats.json, OUTDIR/overhead.json and
# OUTDIR/gpu-python-check.log, which ends with one PASS/FAIL line per check.
# Exits 77 when no GPU or no CUDA-enabled libssu is available, 1 when a
# check fails.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: tools/gpu-python-check.sh OUTDIR [LIBSSU]}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee "$out/gpu-python-check.log") 2>&1

export PYTHONUNBUFFERED=1
export PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
cuda_ok() {
  SSU_LIBRARY="$1" python3 -c 'import ssu, sys; ssu.Context("cuda")' >/dev/null 2>&1
}

if [ -n "${2:-}" ]; then
  lib="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
  cuda_ok "$lib" || { echo "gpu-python-check: $lib cannot create a CUDA context:"; \
    SSU_LIBRARY="$lib" python3 -c 'import ssu; ssu.Context("cuda")'; exit 77; }
else
  lib=""
  for cand in $(ls -t "$root"/build*/libssu.so.0 2>/dev/null); do
    if cuda_ok "$cand"; then lib="$cand"; break; fi
  done
  [ -n "$lib" ] || { echo "gpu-python-check: no build*/libssu.so.0 under $root can create a CUDA context"; exit 77; }
fi
export SSU_LIBRARY="$lib"
echo "gpu-python-check: library $lib"
python3 -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)'

status=0
fail() {  # keeps the first failing status (77 = skipped, 1 = failed)
  [ "$status" -ne 0 ] || status=$1
}
summary=()
python3 "$root/bindings/python/gpu_check.py" --json "$out/gpu_check.json" \
  | tee "$out/.gpu_check.txt"
rc=${PIPESTATUS[0]}; [ "$rc" -eq 0 ] || fail "$rc"
summary+=("$([ "$rc" -eq 0 ] && echo PASS || echo FAIL) update (gpu_check.py: $(tail -1 "$out/.gpu_check.txt"))")
echo
python3 "$root/bindings/python/tests/gpu_check_formats.py" \
  --json "$out/gpu_check_formats.json" | tee "$out/.gpu_check_formats.txt"
rc=${PIPESTATUS[0]}; [ "$rc" -eq 0 ] || fail "$rc"
while IFS= read -r line; do summary+=("$line"); done \
  < <(grep -E '^(PASS|FAIL|SKIP) ' "$out/.gpu_check_formats.txt")
[ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || summary+=("FAIL gpu_check_formats.py exited $rc")
rm -f "$out/.gpu_check.txt" "$out/.gpu_check_formats.txt"
echo
echo "per-call host overhead, CUDA backend (target: bound <= 15 us):"
python3 "$root/bindings/python/bench_overhead.py" --backend cuda --iters 2000 \
  --json "$out/overhead.json" || { fail 1; summary+=("FAIL overhead benchmark (cuda)"); }
echo
echo "per-call overhead, CPU backend (includes the tiny CPU update itself):"
python3 "$root/bindings/python/bench_overhead.py" --backend cpu --iters 2000 \
  --json "$out/overhead_cpu.json" || { fail 1; summary+=("FAIL overhead benchmark (cpu)"); }
echo
echo "gpu-python-check summary:"
printf '%s\n' "${summary[@]}"
echo "gpu-python-check: exit $status"
exit $status
