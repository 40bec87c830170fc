#!/bin/sh
# ABI checks of the built library:
#  - the dynamic symbol table defines only ssu_* symbols (plus the version
#    node of the version script), and every SSU_API function of ssu.h is there;
#  - SONAME is libssu.so.0;
#  - it needs neither libcuda nor libcudart (the driver is dlopen-ed);
#  - ssu.h includes nothing but <stddef.h> and <stdint.h>.
# Usage: check_exports.sh path/to/libssu.so path/to/ssu.h
set -u
lib="$1"
header="$2"
fail=0
err() { echo "FAIL: $*"; fail=1; }

[ -f "$lib" ] || { echo "no library at $lib"; exit 1; }
[ -f "$header" ] || { echo "no header at $header"; exit 1; }

syms=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $2 " " $3 } NF == 2 { print $1 " " $2 }')
[ -n "$syms" ] || err "nm -D --defined-only $lib printed nothing"
echo "$syms" | while read -r type name; do
  case "$name" in
    ssu_*) ;;
    LIBSSU_*) [ "$type" = "A" ] || { echo "FAIL: $name is not a version node ($type)"; exit 1; } ;;
    *) echo "FAIL: exported symbol outside the ssu_ namespace: $type $name"; exit 1 ;;
  esac
done || fail=1
exported=$(echo "$syms" | awk '{ print $2 }' | sed 's/@.*//' | sort -u)
echo "exported: $(echo "$exported" | grep -c '^ssu_') ssu_* symbols"

# Every function declared SSU_API in the header is exported.
declared=$(grep -v '^[[:space:]]*#' "$header" | tr '\n' ' ' | grep -o 'SSU_API[^;(]*(' | sed 's/($//; s/.*[ *]//' | sort -u)
[ -n "$declared" ] || err "found no SSU_API declarations in $header"
for f in $declared; do
  echo "$exported" | grep -qx "$f" || err "$f is declared in ssu.h but not exported"
done

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libssu.so.0" ] || err "SONAME is '$soname', expected libssu.so.0"

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
echo "NEEDED: $(echo $needed)"
echo "$needed" | grep -q 'libcuda' && err "libssu.so links libcuda/libcudart: $needed"

includes=$(grep -E '^[[:space:]]*#[[:space:]]*include' "$header" | sed 's/[[:space:]]//g' | sort -u)
for inc in $includes; do
  case "$inc" in
    '#include<stddef.h>'|'#include<stdint.h>') ;;
    *) err "ssu.h includes $inc (only <stddef.h> and <stdint.h> are allowed)" ;;
  esac
done

[ $fail -eq 0 ] && echo "abi: ok"
exit $fail
