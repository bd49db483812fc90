#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ctest man_test (label unit): the man pages generated from docs/man/*.md
# (docs/man/CMakeLists.txt: MAN_DIR/manN/PAGE.N, and link pages holding
# ".so manN/PAGE.N") checked against the library that was built:
#  (a) every symbol libverbus.so exports (nm -D --defined-only, type T) is
#      named in the NAME section of exactly one page; every name other than
#      a page's own has a link page; and every name a page or a link gives
#      is exported, or is a function-like macro of verbus.h (vb_ctx_stats,
#      vb_sub_stats): a page that names a function that is gone is stale;
#  (b) every page and link renders with `man --warnings=w -l` (all groff
#      warnings; MANWIDTH=80) with nothing on stderr;
#  (c) every link page is one ".so manN/PAGE.N" line naming a page that
#      exists, is no link itself and names the link in its NAME section.
# Exits 1 naming every problem.
#
#   tests/unit/man_test.sh MAN_DIR LIBVERBUS_SO VERBUS_H
set -uo pipefail
export LC_ALL=C   # sort and comm agree; man runs in C.UTF-8 (render)

if [ $# -ne 3 ]; then
	echo "usage: $0 MAN_DIR LIBVERBUS_SO VERBUS_H" >&2
	exit 2
fi
dir=$1 lib=$2 hdr=$3
bad=0
fail() { echo "man_test: FAIL: $*"; bad=1; }

for tool in nm man groff; do
	if ! command -v "$tool" > /dev/null; then
		echo "man_test: FAIL: '$tool' not found (Debian: binutils, man-db, groff-base)"
		exit 1
	fi
done
if [ ! -d "$dir" ]; then
	echo "man_test: FAIL: no man page directory $dir (built with -DVERBUS_MAN=ON?)"
	exit 1
fi
t=$(mktemp -d "${TMPDIR:-/tmp}/verbus-man-test.XXXXXX")
trap 'rm -rf "$t"' EXIT

# ---- what the library exports and what the header defines as macros ------
if ! nm -D --defined-only "$lib" > "$t/nm" 2> "$t/nm.err"; then
	echo "man_test: FAIL: nm -D $lib: $(cat "$t/nm.err")"
	exit 1
fi
awk '$2 == "T" { print $3 }' "$t/nm" | sort -u > "$t/exported"
if [ ! -s "$t/exported" ]; then
	echo "man_test: FAIL: $lib exports no function"
	exit 1
fi
sed -nE 's/^#define[[:space:]]+(vb_[A-Za-z0-9_]+)\(.*/\1/p' "$hdr" | sort -u > "$t/macros"
sort -u "$t/exported" "$t/macros" > "$t/known"

# ---- the pages ------------------------------------------------------------
# names_of FILE: the names in a page's NAME section (before " - ").
names_of() {
	awk '/^\.SH / { if (in_name) exit; in_name = ($0 ~ /^\.SH "?NAME"?$/); next }
	     in_name && !/^\./ { printf "%s ", $0 }
	     END { print "" }' "$1" |
		sed -E 's/[[:space:]]+\\?-[[:space:]].*//' | tr -s ', ' '\n' | sed '/^$/d'
}

cd "$dir" || exit 1
shopt -s nullglob
files=(man[1-9]/*)
if [ ${#files[@]} -eq 0 ]; then
	echo "man_test: FAIL: no man page under $dir/man[1-9]"
	exit 1
fi
: > "$t/named"   # NAME PAGE, for every name a page's NAME section gives
: > "$t/linked"  # NAME TARGET, for every link page
npages=0 nlinks=0
for f in "${files[@]}"; do
	sect=${f%%/*}; sect=${sect#man}
	base=${f##*/}
	if [ "${base##*.}" != "$sect" ]; then
		fail "$f: not a section-$sect name"
		continue
	fi
	name=${base%.*}
	if head -c 4 "$f" | grep -q '^\.so '; then
		nlinks=$((nlinks + 1))
		if [ "$(wc -l < "$f")" -ne 1 ]; then
			fail "$f: a link page must be one '.so' line"
			continue
		fi
		target=$(sed -n 's/^\.so \(.*\)$/\1/p' "$f")
		if [ ! -f "$target" ]; then
			fail "$f: '.so $target': no such page"
		elif head -c 4 "$target" | grep -q '^\.so '; then
			fail "$f: '.so $target' is itself a link"
		elif ! names_of "$target" | grep -qx "$name"; then
			fail "$f: '.so $target', whose NAME section does not name $name"
		fi
		echo "$name $target" >> "$t/linked"
		continue
	fi
	npages=$((npages + 1))
	names_of "$f" > "$t/names"
	if [ ! -s "$t/names" ]; then
		fail "$f: no NAME section"
		continue
	fi
	grep -qx "$name" "$t/names" || fail "$f: its NAME section does not name $name"
	while read -r n; do
		echo "$n $f" >> "$t/named"
		if [ "$n" != "$name" ] && [ ! -f "man$sect/$n.$sect" ]; then
			fail "$f names $n but there is no link page man$sect/$n.$sect ('man $n' finds nothing)"
		fi
	done < "$t/names"
done

# ---- (a) symbols against pages ------------------------------------------
# a name given by two pages
awk '{ n[$1]++; p[$1] = p[$1] " " $2 } END { for (k in n) if (n[k] > 1) print k ":" p[k] }' \
	"$t/named" | sort > "$t/dups"
while read -r d; do fail "named by more than one page: $d"; done < "$t/dups"
# names of section-3 pages and links: all of them must be the library's
{ awk '$2 ~ /^man3\// { print $1 }' "$t/named"; awk '$2 ~ /^man3\// { print $1 }' "$t/linked"; } |
	sort -u > "$t/documented"
comm -23 "$t/exported" "$t/documented" > "$t/missing"
comm -13 "$t/known" "$t/documented" > "$t/stale"
if [ -s "$t/missing" ]; then
	fail "exported by $(basename "$lib") but named on no page: $(tr '\n' ' ' < "$t/missing")"
fi
if [ -s "$t/stale" ]; then
	fail "named on a page but neither exported nor a macro of $(basename "$hdr") (stale page?): $(tr '\n' ' ' < "$t/stale")"
fi

# ---- (b) every file renders without a warning -------------------------------
# render FILE N: man's output and stderr into $t/out.N, $t/err.N, status $t/rc.N
render() {
	MANWIDTH=80 MANPAGER=cat LC_ALL=C.UTF-8 man --warnings=w -l "$1" > "$t/out.$2" 2> "$t/err.$2"
	echo $? > "$t/rc.$2"
}
jobs_max=$(nproc 2> /dev/null || echo 2)
for i in "${!files[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
		wait -n
	done
	render "${files[$i]}" "$i" &
done
wait
for i in "${!files[@]}"; do
	f=${files[$i]}
	if [ "$(cat "$t/rc.$i")" -ne 0 ]; then
		fail "man -l $f failed: $(cat "$t/err.$i")"
	elif [ -s "$t/err.$i" ]; then
		fail "man --warnings -l $f:"
		sed 's/^/    /' "$t/err.$i"
	elif [ ! -s "$t/out.$i" ]; then
		fail "man -l $f rendered nothing"
	fi
done

if [ "$bad" -ne 0 ]; then
	echo "man_test: FAILED"
	exit 1
fi
echo "man_test: ok: $(wc -l < "$t/exported") exported functions, each on one page;" \
	"$npages pages and $nlinks links render without a warning (MANWIDTH=80)"
exit 0
