#!/usr/bin/env bash
# Checks the language bindings and examples against a built libssu.
#
#   tools/ci-bindings.sh [BUILD_DIR]      (default: $SSU_BUILD_DIR or build)
#
# Installs what it needs when missing (apt-get: bindgen libclang-dev cargo
# python3-venv; pip in a throw-away venv: numpy pytest), installs the library
# from BUILD_DIR into a temporary staging prefix, then runs against that
# install only:
#   1. cargo test of ssu-sys and ssu (offline), which includes the check that
#      the committed bindgen output matches include/ssu.h;
#   2. the Python package: pip install of bindings/python (a wheel that
#      builds a CPU-only libssu from this tree and bundles it), `import ssu`
#      from it with no SSU_LIBRARY, then pytest against the staged library
#      (the torch tests run only where torch is installed already);
#   3. the four examples (C and C++ built with pkg-config only, Rust through
#      ssu-sys's pkg-config lookup, Python through the installed package) on
#      the CPU backend, requiring all four to print the same checksum.
# Any failure fails the script.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${1:-${SSU_BUILD_DIR:-build}}"
[ -d "$build" ] || { echo "ci-bindings: build directory '$build' not found" >&2; exit 1; }
build="$(cd "$build" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say() { printf '\n--- ci-bindings: %s\n' "$*"; }

# ---- tools -------------------------------------------------------------------
say "tools"
[ -d "${HOME:-/root}/.cargo/bin" ] && PATH="${HOME:-/root}/.cargo/bin:$PATH"
need_apt=()
command -v bindgen >/dev/null 2>&1 || need_apt+=(bindgen)
[ -n "$(ls /usr/lib/llvm-*/lib/libclang*.so* 2>/dev/null | head -n 1)" ] || need_apt+=(libclang-dev)
command -v cargo >/dev/null 2>&1 || need_apt+=(cargo)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing: ${need_apt[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v rustfmt >/dev/null 2>&1; then
  # bindgen formats with rustfmt; without it the freshness check cannot match.
  echo "ci-bindings: rustfmt not found (rustup component add rustfmt, or apt-get install rustfmt)" >&2
  exit 1
fi
echo "cargo: $(cargo --version)  bindgen: $(bindgen --version)  python3: $(python3 --version)"

# ---- install the library into a staging prefix ------------------------------
say "meson install -C $build into a staging prefix"
stage="$work/stage"
meson install -C "$build" --destdir "$stage" --quiet
pcfile="$(find "$stage" -name ssu.pc | head -n 1)"
[ -n "$pcfile" ] || { echo "ci-bindings: ssu.pc was not installed" >&2; exit 1; }
libso="$(find "$stage" -name 'libssu.so.0' | head -n 1)"
libdir="$(dirname "$libso")"
# The staged ssu.pc names the configured prefix; a copy whose prefix points
# into the staging tree stands for an installed library. (pkg-config's
# --define-prefix guesses the prefix as two levels above the .pc file, which
# is wrong for multiarch libdirs such as lib/x86_64-linux-gnu.)
mkdir -p "$work/pkgconfig"
prefix="$(sed -n 's/^prefix=//p' "$pcfile")"
sed "s|^prefix=.*|prefix=$stage$prefix|" "$pcfile" >"$work/pkgconfig/ssu.pc"
export PKG_CONFIG_PATH="$work/pkgconfig"
export PKG_CONFIG=pkg-config
echo "pkg-config ssu: $(pkg-config --cflags --libs ssu)"
[ -f "$(pkg-config --variable=libdir ssu)/libssu.so" ] || {
  echo "ci-bindings: the relocated ssu.pc does not point at the staged libssu.so" >&2; exit 1; }
unset SSU_LIB_DIR SSU_LIBRARY

# ---- Rust --------------------------------------------------------------------
say "cargo test (ssu-sys, ssu; offline)"
export CARGO_NET_OFFLINE=true
CARGO_TARGET_DIR="$work/cargo" cargo test --offline --manifest-path bindings/rust/Cargo.toml

# ---- Python ------------------------------------------------------------------
say "pip install bindings/python (CPU-only wheel) into a venv; import ssu; pytest"
# System site packages stay visible, so that a torch installed on the
# machine is tested too; CI never installs torch itself.
python3 -m venv --system-site-packages "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check numpy pytest
# From the tree itself (its subprojects/libssu symlink must resolve to this
# repository); the wheel builds and bundles a CPU-only libssu.
"$py" -m pip install -q --disable-pip-version-check "$root/bindings/python" \
  -Csetup-args=-Dcuda=disabled
(cd "$work" && "$py" -c '
import sys, ssu
print("import ssu:", ssu.library_path, ssu.version_string())
sys.exit(0 if ssu.library_path.startswith(sys.prefix) else "ssu did not load its bundled library")')
"$py" -c 'import torch' 2>/dev/null && echo "torch is installed: the ssu.torch tests run" \
  || echo "torch is not installed: the ssu.torch tests skip"
export SSU_LIBRARY="$libso"
# Run from outside the tree so that `import ssu` is the installed package.
(cd "$work" && "$py" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests")
"$py" "$root/bindings/python/bench_overhead.py" --iters 1000 | sed 's/^/  /'

# ---- examples ------------------------------------------------------------------
say "examples (CPU backend): build through pkg-config, run, compare checksums"
unset SSU_BACKEND
cflags="$(pkg-config --cflags ssu)"
libs="$(pkg-config --libs ssu)"
# shellcheck disable=SC2086
cc -std=c99 -O2 -Wall -Wextra -Werror -pedantic examples/c/decode_loop.c $cflags $libs \
  -o "$work/decode_loop_c"
# shellcheck disable=SC2086
c++ -std=c++17 -O2 -Wall -Wextra -Werror -pedantic examples/cpp/decode_loop.cpp $cflags $libs \
  -o "$work/decode_loop_cpp"
CARGO_TARGET_DIR="$work/cargo-example" cargo build --offline --release -q \
  --manifest-path examples/rust/Cargo.toml

declare -A sums
run_example() {
  local name="$1"
  shift
  local log="$work/example_$name.txt"
  LD_LIBRARY_PATH="$libdir" "$@" >"$log"
  sed 's/^/  /' "$log"
  sums[$name]="$(sed -n 's/^state checksum: //p' "$log")"
  [ -n "${sums[$name]}" ] || { echo "ci-bindings: $name printed no checksum" >&2; exit 1; }
}
run_example c "$work/decode_loop_c"
run_example cpp "$work/decode_loop_cpp"
run_example rust "$work/cargo-example/release/decode_loop"
run_example python "$py" examples/python/decode_loop.py

ref="${sums[c]}"
for name in cpp rust python; do
  if [ "${sums[$name]}" != "$ref" ]; then
    echo "ci-bindings: checksums differ: c=$ref $name=${sums[$name]}" >&2
    exit 1
  fi
done
echo "all four examples print state checksum $ref"
say "passed"
