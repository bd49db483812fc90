#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The ABI check (ctest abi_test, label unit): the SONAME of the built
# libverbus.so and the set of symbols it defines and exports must be those
# listed in api/libverbus.abi. A symbol added, removed or renamed without
# that file changing fails, naming the symbols and what to do.
#
#   tests/unit/abi_test.sh LIBVERBUS_SO ABI_FILE
set -uo pipefail

lib=$1 abi=$2
for f in "$lib" "$abi"; do
	[ -r "$f" ] || { echo "abi_test: FAIL: cannot read $f"; exit 1; }
done
for tool in nm readelf; do
	command -v "$tool" >/dev/null || { echo "abi_test: FAIL: $tool not found (binutils)"; exit 1; }
done
t=$(mktemp -d "${TMPDIR:-/tmp}/verbus-abi-test.XXXXXX")
trap 'rm -rf "$t"' EXIT
bad=0

want_soname=$(awk '$1 == "soname" {print $2}' "$abi")
have_soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ -z "$want_soname" ]; then
	echo "abi_test: FAIL: $abi has no 'soname' line"
	bad=1
elif [ "$have_soname" != "$want_soname" ]; then
	echo "abi_test: FAIL: the library's SONAME is '$have_soname', $abi says '$want_soname'"
	bad=1
fi

grep -v -e '^#' -e '^soname ' -e '^[[:space:]]*$' "$abi" | LC_ALL=C sort > "$t/want"
if [ -n "$(uniq -d "$t/want")" ]; then
	echo "abi_test: FAIL: $abi lists a symbol twice: $(uniq -d "$t/want" | tr '\n' ' ')"
	bad=1
fi
nm -D --defined-only "$lib" | awk 'NF == 3 {print $3}' | sed 's/@.*//' | LC_ALL=C sort -u > "$t/have"
if [ ! -s "$t/have" ]; then
	echo "abi_test: FAIL: nm found no exported symbol in $lib"
	bad=1
fi
added=$(LC_ALL=C comm -13 "$t/want" "$t/have")
removed=$(LC_ALL=C comm -23 "$t/want" "$t/have")
if [ -n "$added" ]; then
	echo "abi_test: FAIL: exported by $lib but not in $abi (a new symbol: add it there and raise the minor version):"
	printf '  + %s\n' $added
	bad=1
fi
if [ -n "$removed" ]; then
	echo "abi_test: FAIL: in $abi but not exported by $lib (removing a symbol breaks every program linked to it: restore it, or raise the major version and the soname line):"
	printf '  - %s\n' $removed
	bad=1
fi
if [ "$bad" = 0 ]; then
	echo "abi_test: $have_soname exports the $(wc -l < "$t/have") symbols of $abi"
fi
exit $bad
