#!/usr/bin/env bash
# ssu.torch on a GPU machine, from this source tree, without network access:
#
#   tools/gpu-torch-check.sh OUTDIR
#
#   1. builds the Python wheel (pip wheel --no-build-isolation: meson-python,
#      meson, ninja and nvcc must be installed) and installs it into
#      OUTDIR/site (pip --target; the machine's environment is not touched);
#      records the wheel's size and the NEEDED entries of the library and of
#      the C extension ssu._fastcall (ssu.torch's per-call path);
#   2. imports ssu and ssu.torch from there with SSU_LIBRARY unset, and
#      requires ssu.torch to use ssu._fastcall;
#   3. runs the binding's pytest suites (tests/test_torch.py runs its CUDA
#      cases: the engines' layouts on CUDA tensors, torch.compile with
#      inductor, CUDA-graph capture; every case on both per-call paths, the
#      C extension and the Python fallback);
#   4. runs examples/python/hf_mamba2_decode.py (transformers' Mamba-2 decode
#      loop, eager and CUDA graph, against transformers' own path);
#   5. measures the per-call host cost (bindings/python/bench_overhead.py,
#      CUDA and CPU backends; the torch rows on the C path and again on the
#      Python one, *_pure_us);
# and prints a summary table last. Everything it writes goes under OUTDIR
# (gpu-torch-check.log holds the whole output).
#
# Environment:
#   GPU_ARCHS   SASS targets of the build (default sm_90a; "auto" builds
#               every architecture, as a plain pip install does, and takes
#               several times longer)
#   SETUP_ARGS  more meson options for the build, e.g. -Dcuda=disabled for a
#               dry run of the script on a machine without a GPU
#   PYTHON      the interpreter with torch, transformers and pytest
#               (default python3)
#   WHEEL       a wheel of this tree built elsewhere (e.g. on a faster
#               machine): unpacked into OUTDIR/site instead of step 1's build;
#               where its ssu._fastcall was built for another Python, the
#               extension is compiled for PYTHON from its source (cc)
#   WHEELHOUSE  a directory of wheels to install meson-python from when it
#               is missing (pip download meson-python on a connected
#               machine). Without meson-python and without WHEELHOUSE, step
#               1 builds the same meson project (bindings/python/meson.build)
#               directly and assembles the package from it, and the wheel
#               row of the summary says so.
# Exits 0 when every step passes, 1 otherwise.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: tools/gpu-torch-check.sh OUTDIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee "$out/gpu-torch-check.log") 2>&1

py="${PYTHON:-python3}"
archs="${GPU_ARCHS:-sm_90a}"
# shellcheck disable=SC2206
meson_args=(-Dgpu_archs="$archs" ${SETUP_ARGS:-})
site="$out/site"
export PYTHONUNBUFFERED=1
# Scripts of this tree (bench_overhead.py sits next to the source package)
# must import the installed package, not the one beside them.
export PYTHONSAFEPATH=1
unset SSU_LIBRARY

summary=()
status=0
record() {  # record PASS|FAIL|SKIP "what" "detail"
  summary+=("$(printf '%-4s  %-34s %s' "$1" "$2" "$3")")
  [ "$1" != FAIL ] || status=1
}
say() { printf '\n=== gpu-torch-check: %s\n' "$*"; }
needed_of() { readelf -d "$1" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' '; }
fastcall_needed() {  # the C extension's NEEDED entries (none, or libc: no libpython)
  local so
  so="$(ls "$site"/ssu/_fastcall*.so 2>/dev/null | head -n 1)"
  if [ -n "$so" ]; then
    local n
    n="$(needed_of "$so")"
    echo "$(basename "$so") NEEDED: ${n:-none}"
  else
    echo "no ssu._fastcall in the package"
  fi
}

say "environment"
"$py" - <<'EOF'
import importlib, platform
print("python", platform.python_version())
for name in ("torch", "transformers", "triton", "pytest", "numpy", "mesonpy"):
    try:
        m = importlib.import_module(name)
        print(f"{name:12s} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"{name:12s} missing ({type(e).__name__})")
import torch
if torch.cuda.is_available():
    print("device      ", torch.cuda.get_device_name(), "CUDA", torch.version.cuda)
EOF
echo "meson $(meson --version 2>/dev/null || echo missing), ninja $(ninja --version 2>/dev/null || echo missing)"
nvcc --version 2>/dev/null | tail -1 || echo "nvcc missing"

# ---- 1. wheel -----------------------------------------------------------------
say "build the wheel (gpu_archs=$archs) and install it into $site"
rm -rf "$site" "$out/wheel" "$out/buildtools"
mkdir -p "$out/wheel"
if ! "$py" -c 'import mesonpy' 2>/dev/null && [ -n "${WHEELHOUSE:-}" ]; then
  "$py" -m pip install -q --no-index --find-links "$WHEELHOUSE" --target "$out/buildtools" \
    meson-python && export PYTHONPATH="$out/buildtools${PYTHONPATH:+:$PYTHONPATH}"
fi
wheel_rc=1
t0=$(date +%s)
if [ -n "${WHEEL:-}" ]; then
  # Unpacked rather than pip-installed: a wheel built elsewhere may carry
  # another interpreter's tag (its files do not depend on it).
  mkdir -p "$site" && "$py" -m zipfile -e "$WHEEL" "$site"
  wheel_rc=$?
  if [ "$wheel_rc" -eq 0 ] && ! (cd "$out" && PYTHONPATH="$site" "$py" -c 'import ssu._fastcall' \
      2>/dev/null); then
    # The wheel's ssu._fastcall is built for the interpreter that built the
    # wheel; this one gets its own from the one C file (Python headers only).
    echo "building ssu._fastcall for $("$py" --version 2>&1)"
    inc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    suffix="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
    rm -f "$site"/ssu/_fastcall*.so
    cc -O2 -shared -fPIC -fvisibility=hidden -I"$inc" "$root/bindings/python/ssu/_fastcall.c" \
      -o "$site/ssu/_fastcall$suffix" || echo "gpu-torch-check: could not build ssu._fastcall"
  fi
  if [ "$wheel_rc" -eq 0 ]; then
    needed="$(needed_of "$site/ssu/libssu.so.0")"
    record PASS "wheel install (prebuilt)" \
      "$(basename "$WHEEL"), $(du -k "$WHEEL" | cut -f1) KiB; NEEDED: $needed; $(fastcall_needed)"
  else
    record FAIL "wheel install (prebuilt)" "pip install exited $wheel_rc (see the log)"
  fi
elif "$py" -c 'import mesonpy' 2>/dev/null; then
  # In the tree (pip >= 21.3 builds in place): the subproject symlink must
  # resolve to this repository.
  "$py" -m pip wheel --no-build-isolation --no-deps -w "$out/wheel" "$root/bindings/python" \
    "${meson_args[@]/#/-Csetup-args=}" -Cbuild-dir="$out/build-wheel" \
    && "$py" -m pip install -q --no-deps --target "$site" "$out"/wheel/ssu-*.whl
  wheel_rc=$?
  whl="$(ls "$out"/wheel/ssu-*.whl 2>/dev/null | head -n 1)"
  if [ "$wheel_rc" -eq 0 ] && [ -n "$whl" ]; then
    needed="$(needed_of "$site/ssu/libssu.so.0")"
    record PASS "wheel build + install" \
      "$(basename "$whl"), $(du -k "$whl" | cut -f1) KiB, $(( $(date +%s) - t0 )) s; NEEDED: $needed; $(fastcall_needed)"
  else
    record FAIL "wheel build + install" "pip wheel/install exited $wheel_rc (see the log)"
  fi
else
  echo "meson-python is not installed: building bindings/python/meson.build with meson directly"
  if [ -f "$out/build-pkg/build.ninja" ]; then
    meson configure "$out/build-pkg" "${meson_args[@]}"
  else
    meson setup "$out/build-pkg" "$root/bindings/python" -Dbuildtype=release "${meson_args[@]}"
  fi
  if ninja -C "$out/build-pkg"; then
    mkdir -p "$site/ssu"
    cp "$root"/bindings/python/ssu/*.py "$out/build-pkg/libssu.so.0" "$site/ssu/"
    cp "$out"/build-pkg/_fastcall*.so "$site/ssu/" 2>/dev/null
    wheel_rc=0
    needed="$(needed_of "$site/ssu/libssu.so.0")"
    record SKIP "wheel build + install" \
      "no meson-python here (set WHEELHOUSE); package assembled from the same meson build; NEEDED: $needed; $(fastcall_needed)"
  else
    record FAIL "wheel build + install" "meson build of bindings/python failed"
  fi
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

# ---- 2. import ----------------------------------------------------------------
say "import ssu, ssu.torch without SSU_LIBRARY"
if [ "$wheel_rc" -eq 0 ] && (cd "$out" && "$py" -c '
import ssu, ssu.torch, sys
print("ssu", ssu.__version__, "library", ssu.library_path, "libssu", ssu.version_string())
print("ssu.torch per-call path:", ssu.torch._fastcall or "Python (no ssu._fastcall)")
sys.exit(0 if ssu.library_path.startswith(sys.argv[1]) and ssu.torch._fast else 1)' "$site"); then
  record PASS "import ssu.torch (bundled library)" "$site/ssu/libssu.so.0, ssu._fastcall"
else
  record FAIL "import ssu.torch (bundled library)" "see the log"
fi

# ---- 3. tests -----------------------------------------------------------------
say "pytest bindings/python/tests"
(cd "$out" && "$py" -m pytest -q -p no:cacheprovider -rs --junitxml="$out/pytest.xml" \
  "$root/bindings/python/tests") | tee "$out/pytest.txt"
rc=${PIPESTATUS[0]}
line="$(grep -E '[0-9]+ (passed|failed)' "$out/pytest.txt" | tail -n 1)"
cuda_cases="$("$py" -c '
import re, sys, xml.etree.ElementTree as ET
cuda = re.compile(r"[[-]cuda[]-]|^test_cuda_graph|^test_mixed_devices")
cases = ET.parse(sys.argv[1]).iter("testcase")
print(sum(1 for c in cases if cuda.search(c.get("name")) and len(c) == 0))' "$out/pytest.xml")"
record "$([ "$rc" -eq 0 ] && echo PASS || echo FAIL)" "pytest (ssu.torch and the rest)" \
  "$line; $cuda_cases CUDA cases passed"

# ---- 4. transformers decode loop ----------------------------------------------
say "examples/python/hf_mamba2_decode.py"
"$py" "$root/examples/python/hf_mamba2_decode.py" --device cuda --tokens 64 \
  --json "$out/hf_mamba2_decode.json" | tee "$out/hf_mamba2_decode.txt"
rc=${PIPESTATUS[0]}
record "$([ "$rc" -eq 0 ] && echo PASS || echo FAIL)" "HF Mamba-2 decode (eager + graph)" \
  "$(grep -E '^(PASS|FAIL) ' "$out/hf_mamba2_decode.txt" | sed 's/;.*//' | tr '\n' ' ')"

# ---- 5. host cost -------------------------------------------------------------
say "per-call host cost"
for backend in cuda cpu; do
  if "$py" "$root/bindings/python/bench_overhead.py" --backend "$backend" --iters 5000 \
      --json "$out/overhead_$backend.json"; then
    detail="$("$py" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(", ".join(f"{k[:-3]} {r[k]:.2f} us" for k in
      ("bound_us", "c_floor_us", "torch_us", "torch_pure_us", "torch_views_us",
       "torch_views_pure_us", "torch_op_us") if k in r))' \
      "$out/overhead_$backend.json")"
    record INFO "host cost per call ($backend)" "$detail"
  else
    record FAIL "host cost per call ($backend)" "bench_overhead.py failed"
  fi
done

say "summary"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
echo "gpu-torch-check: $([ "$status" -eq 0 ] && echo PASS || echo FAIL) (output under $out)"
exit $status
