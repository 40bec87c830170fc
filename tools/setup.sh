#!/usr/bin/env bash
# Installs what libssu needs on a fresh Debian 12 (or Ubuntu 22.04+) machine
# and builds it into build/ (release). Safe to run again: installed packages
# are skipped and an existing build directory is reconfigured, not recreated.
#
#   tools/setup.sh                  # build/ with the CUDA backend if nvcc is found
#   tools/setup.sh -Dcuda=disabled  # extra arguments go to `meson setup`
#
# Environment: SSU_BUILD_DIR (default build), SSU_JOBS (default: all cores).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build_dir="${SSU_BUILD_DIR:-build}"
jobs="${SSU_JOBS:-$(nproc)}"

# meson >= 1.0 and ninja build the library; pkg-config (pkgconf) serves
# ssu.pc to users; doctest is the test framework; python3 runs meson.
packages=(meson ninja-build pkg-config doctest-dev g++ python3)
missing=()
for p in "${packages[@]}"; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "setup.sh: missing ${missing[*]} and no apt-get to install them" >&2
    exit 1
  fi
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  echo "setup.sh: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

# nvcc is optional: with it the CUDA backend is compiled and embedded (the
# library still runs without a GPU); meson also looks in /usr/local/cuda/bin.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup.sh: nvcc found: the CUDA backend is built (unless -Dcuda=disabled)"
else
  echo "setup.sh: no nvcc: building the CPU backend only"
fi

if [ -f "$build_dir/meson-private/coredata.dat" ]; then
  meson setup --reconfigure "$build_dir" --buildtype=release "$@"
else
  meson setup "$build_dir" --buildtype=release "$@"
fi
meson compile -C "$build_dir" -j "$jobs"
echo "setup.sh: built into $build_dir/ (ssu-bench: $build_dir/bench/ssu-bench)"
