#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The size check (ctest size_test, docs/architecture.md "Size limits and how
# they are checked"): no library source file over 1,000 lines and no
# function over 100 lines (issue 16, STYLE.md 15).
#
#   scripts/check-size.sh SRC_DIR [--enforce DIR...] [--info DIR...] [--note TEXT]
#
# DIRs are relative to SRC_DIR; every *.c and *.h under them (recursively)
# is read. Findings in an --enforce directory fail the check; findings in an
# --info directory are printed, marked "info", and never fail. With no DIR
# at all, every library directory is enforced: core transport engine proto
# api/src. A DIR that does not exist is named and skipped. --note prints
# TEXT once at the top (the ctest says there why a directory is info only).
#
# How a file is measured: its number of lines (wc -l); over 1,000 fails.
#
# How a function is measured: the code style puts the opening brace of a
# function body alone at column 0, and its closing brace at column 0 too.
# So a function starts at a line whose first character is '{' and ends at
# the next line whose first character is '}'; its length is the number of
# lines from the one to the other, both braces counted (a body "{ x; }"
# written as "{", one statement, "}" is 3 lines). Over 100 fails. The
# function is named from the nearest line before the '{' that starts at
# column 0 with an identifier (the first line of its signature): the name
# is the identifier in front of that line's first '('. The line reported is
# the opening brace's. Braces at column 0 elsewhere (a struct or array
# initializer written that way) are measured the same; the style does not
# write them so. A '{' at column 0 inside an open body, or a body still
# open at the end of the file, is reported as a problem in the file (and
# fails in an --enforce directory): the rule above could not measure it.
#
# Exit status: 0 when no enforced finding, 1 otherwise, 2 on bad usage.
set -uo pipefail

FILE_MAX=1000
FUNC_MAX=100

usage() {
	echo "usage: $0 SRC_DIR [--enforce DIR...] [--info DIR...] [--note TEXT]" >&2
	exit 2
}
[ $# -ge 1 ] || usage
src=$(cd "$1" 2>/dev/null && pwd) || usage
shift
enforce=() info=() note="" mode=""
while [ $# -gt 0 ]; do
	case $1 in
	--enforce) mode=enforce ;;
	--info) mode=info ;;
	--note) [ $# -ge 2 ] || usage; note=$2; shift ;;
	-*) usage ;;
	*)
		case $mode in
		enforce) enforce+=("${1%/}") ;;
		info) info+=("${1%/}") ;;
		*) usage ;;
		esac
		;;
	esac
	shift
done
if [ ${#enforce[@]} -eq 0 ] && [ ${#info[@]} -eq 0 ]; then
	enforce=(core transport engine proto api/src)
fi

# measure KIND DIR...: one line per finding, prefixed "KIND ", on stdout
measure() {
	local kind=$1 d
	shift
	for d in "$@"; do
		if [ ! -d "$src/$d" ]; then
			echo "skip $d"
			continue
		fi
		(cd "$src" && find "$d" -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort) |
		while IFS= read -r f; do
			awk -v kind="$kind" -v file="$f" -v fmax="$FILE_MAX" -v gmax="$FUNC_MAX" '
			function name_of(s,   m) {
				if (match(s, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
					m = substr(s, RSTART, RLENGTH - 1)
					sub(/[ \t]+$/, "", m)
					return m
				}
				return "?"
			}
			open == 0 && /^[A-Za-z_]/ { sig = $0 }
			/^\{/ {
				if (open)
					printf "%s %s:%d: a \"{\" at column 0 inside the body opened at line %d: cannot measure\n", kind, file, NR, start
				open = 1; start = NR; fname = name_of(sig)
				next
			}
			/^\}/ && open {
				len = NR - start + 1
				if (len > gmax)
					printf "%s %s:%d: function %s: %d lines (limit %d)\n", kind, file, start, fname, len, gmax
				open = 0; sig = ""
			}
			END {
				if (open)
					printf "%s %s:%d: body opened here is not closed at column 0 by the end of the file: cannot measure\n", kind, file, start
				if (NR > fmax)
					printf "%s %s: %d lines (limit %d)\n", kind, file, NR, fmax
			}' "$src/$f"
		done
	done
}

echo "check-size: files <= $FILE_MAX lines, functions <= $FUNC_MAX lines (from the \"{\" at column 0 to the \"}\" at column 0, both counted)"
[ -n "$note" ] && echo "check-size: $note"
[ ${#enforce[@]} -gt 0 ] && echo "check-size: enforced (a finding fails): ${enforce[*]}"
[ ${#info[@]} -gt 0 ] && echo "check-size: information only (printed, never fails): ${info[*]}"

fail=0 nfail=0 ninfo=0
while IFS= read -r line; do
	case $line in
	"skip "*) echo "check-size: ${line#skip } does not exist: skipped" ;;
	"enforce "*) echo "check-size: ${line#enforce }"; nfail=$((nfail + 1)); fail=1 ;;
	"info "*) echo "check-size: info: ${line#info }"; ninfo=$((ninfo + 1)) ;;
	esac
done < <(
	[ ${#enforce[@]} -gt 0 ] && measure enforce "${enforce[@]}"
	[ ${#info[@]} -gt 0 ] && measure info "${info[@]}"
)

if [ "$fail" -ne 0 ]; then
	echo "check-size: FAIL: $nfail finding(s) in enforced directories; $ninfo for information"
	exit 1
fi
echo "check-size: OK: no finding in enforced directories; $ninfo for information"
exit 0
