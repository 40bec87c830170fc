#!/usr/bin/env bash
# The Python binding on a GPU: torch CUDA tensors against the CPU backend,
# and the per-call host overhead of the Python path.
#
#   tools/gpu-python-check.sh OUTDIR [LIBSSU]
#
# LIBSSU is the libssu.so to test; by default the newest build*/libssu.so.0
# under the repository that can create a CUDA context. Needs python3 with
# torch (CUDA) and numpy. Writes OUTDIR/gpu_check.json, OUTDIR/overhead.json
# and OUTDIR/gpu-python-check.log. Exits 77 when no GPU or no CUDA-enabled
# libssu is available, 1 when a check fails.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: tools/gpu-python-check.sh OUTDIR [LIBSSU]}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee "$out/gpu-python-check.log") 2>&1

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
python3 "$root/bindings/python/gpu_check.py" --json "$out/gpu_check.json" || status=$?
echo
echo "per-call host overhead, CUDA backend (target: bound <= 15 us):"
python3 "$root/bindings/python/bench_overhead.py" --backend cuda --iters 2000 \
  --json "$out/overhead.json" || status=1
echo
echo "per-call overhead, CPU backend (includes the tiny CPU update itself):"
python3 "$root/bindings/python/bench_overhead.py" --backend cpu --iters 2000 \
  --json "$out/overhead_cpu.json" || status=1
exit $status
