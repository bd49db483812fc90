#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The size check can fail (ctest size_selftest, label unit):
# scripts/check-size.sh on tiny synthetic trees. At the limits (a 100-line
# function, a 1,000-line file) it must pass; one line over (a 101-line
# function, a 1,001-line file) it must exit 1 and name the culprit; in an
# --info directory the same findings are printed and it exits 0.
#
#   tests/unit/size_selftest.sh CHECK_SIZE_SH
set -uo pipefail
. "$(dirname "$0")/selftest_lib.sh"

check=$1
t=$(mktemp -d "${TMPDIR:-/tmp}/verbus-size-selftest.XXXXXX")
trap 'rm -rf "$t"' EXIT
bad=0

# func NAME LINES: a function whose body, from "{" to "}", is LINES lines,
# with a two-line signature (the name is on the first).
func() {
	local i
	printf 'static int %s(int a,\n\t\tint b)\n{\n' "$1"
	for ((i = 0; i < $2 - 3; i++)); do
		printf '\ta += b;\n'
	done
	printf '\treturn a;\n}\n'
}

# pad N: N lines of comment
pad() {
	local i
	for ((i = 0; i < $1; i++)); do
		printf '/* filler */\n'
	done
}

# expect NAME RC PATTERN ARGS...: run the check on $t/src with ARGS
expect() {
	local name=$1 want=$2 pattern=$3
	shift 3
	expect_output "$name" "$want" "$pattern" "$check" "$t/src" "$@"
}

fresh() { rm -rf "$t/src"; mkdir -p "$t/src/core" "$t/src/transport/verbs" "$t/src/api/src"; }

# At the limits: a 100-line function in a file of exactly 1,000 lines.
fresh
{ func at_limit 100; pad $((1000 - 102)); } > "$t/src/core/ok.c"
[ "$(wc -l < "$t/src/core/ok.c")" -eq 1000 ] || { echo "FAIL: the synthetic file is not 1000 lines"; exit 1; }
expect "100-line function, 1,000-line file" 0 "check-size: OK" --enforce core transport

# One line over: a 101-line function (in a subdirectory, and in a header).
fresh
{ pad 5; func too_long 101; } > "$t/src/transport/verbs/long.c"
expect "101-line function" 1 \
	"transport/verbs/long.c:8: function too_long: 101 lines (limit 100)" --enforce core transport
fresh
{ func in_header 101; } > "$t/src/core/x.h"
expect "101-line function in a header" 1 "core/x.h:3: function in_header: 101 lines (limit 100)" \
	--enforce core

# One line over: a 1,001-line file.
fresh
{ func short 10; pad $((1001 - 12)); } > "$t/src/core/big.c"
expect "1,001-line file" 1 "core/big.c: 1001 lines (limit 1000)" --enforce core
expect "1,001-line file, nothing else" 1 "FAIL: 1 finding(s)" --enforce core

# The same findings under --info: printed, exit 0.
fresh
{ func too_long 101; pad 1000; } > "$t/src/api/src/big.c"
expect "info only: function" 0 "info: api/src/big.c:3: function too_long: 101 lines" \
	--enforce core --info api/src
expect "info only: file" 0 "info: api/src/big.c: 1103 lines (limit 1000)" \
	--enforce core --info api/src
expect "info only: counted" 0 "check-size: OK: no finding in enforced directories; 2 for information" \
	--enforce core --info api/src
expect "default: every library directory enforced" 1 "api/src/big.c: 1103 lines (limit 1000)"

# A body the rule cannot measure fails rather than passing unseen.
fresh
printf 'int f(void)\n{\n\treturn 0;\n' > "$t/src/core/open.c"
expect "unclosed body" 1 "core/open.c:2: body opened here is not closed" --enforce core

exit $bad
