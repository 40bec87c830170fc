#!/usr/bin/env bash
# Writes the versions at git revision REV of the files that differ between REV
# and the working tree into DIR (default .compare-ref), under their
# repository paths, for tools/gpu-compare.sh. Files added since REV are left
# out (the reference tree keeps the working tree's), files deleted since REV
# are restored.
#
#   tools/compare-ref.sh REV [DIR]
set -euo pipefail

rev="${1:?usage: tools/compare-ref.sh REV [DIR]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dir="${2:-.compare-ref}"
git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "compare-ref: no revision $rev" >&2; exit 2; }
rm -rf "$dir"
mkdir -p "$dir"
n=0
while IFS= read -r path; do
  git cat-file -e "$rev:$path" 2>/dev/null || continue  # added since REV
  mkdir -p "$dir/$(dirname "$path")"
  git show "$rev:$path" > "$dir/$path"
  n=$((n + 1))
done < <(git diff --name-only "$rev" -- . ":(exclude)$dir")
echo "compare-ref: $n file(s) of $(git rev-parse --short "$rev") in $dir"
