#!/usr/bin/env bash
# Regenerates bindings/rust/ssu-sys/src/bindings.rs from include/ssu.h with
# bindgen (Debian: apt-get install -y bindgen libclang-dev).
#
#   tools/regen-rust-bindings.sh           rewrite the committed file
#   tools/regen-rust-bindings.sh --check   exit 1 (with a diff) if the
#                                          committed file is not current
#
# The bindings are committed so that building the crates needs neither
# bindgen nor libclang; the ssu-sys test suite runs --check so that a header
# change without regenerated bindings fails. The output depends on the
# bindgen and rustfmt versions; the committed file comes from the versions
# named in its first line and by the "rustfmt" comment below it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
header="$root/include/ssu.h"
target="$root/bindings/rust/ssu-sys/src/bindings.rs"

# rustup installs rustfmt under ~/.cargo/bin; bindgen formats with it.
if ! command -v rustfmt >/dev/null 2>&1 && [ -x "${HOME:-/root}/.cargo/bin/rustfmt" ]; then
  PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi
command -v bindgen >/dev/null 2>&1 || {
  echo "regen-rust-bindings: bindgen not found (apt-get install -y bindgen libclang-dev)" >&2
  exit 2
}
command -v rustfmt >/dev/null 2>&1 || {
  echo "regen-rust-bindings: rustfmt not found; bindgen output would be unformatted" >&2
  exit 2
}

generate() {
  # Constants: `signed` makes the status, dtype, backend and algorithm
  # macros i32 like the typedefs they are used with (flag masks are cast
  # to u32 by the safe crate). size_t is usize on every target Rust runs on.
  bindgen "$header" \
    --allowlist-function 'ssu_.*' \
    --allowlist-type 'ssu_.*' \
    --allowlist-var 'SSU_.*' \
    --size_t-is-usize \
    --default-macro-constant-type signed \
    --raw-line "// Generated from include/ssu.h by tools/regen-rust-bindings.sh; do not edit." \
    -- -std=c99 -I"$root/include"
}

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
generate >"$tmp"

if [ "${1:-}" = "--check" ]; then
  if ! diff -u "$target" "$tmp" >&2; then
    echo "regen-rust-bindings: $target is stale; run tools/regen-rust-bindings.sh" >&2
    exit 1
  fi
  echo "regen-rust-bindings: bindings are current"
else
  cp "$tmp" "$target"
  echo "regen-rust-bindings: wrote $target"
fi
