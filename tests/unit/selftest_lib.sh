# SPDX-License-Identifier: MIT
# Sourced by the checkers' self-tests (layers_selftest.sh, size_selftest.sh).
#
# expect_output NAME WANT PATTERN CMD...: run CMD, and pass when it exits
# WANT and its output (stdout and stderr) holds PATTERN, a fixed string.
# Prints one "ok" or "FAIL" line (with the output on a failure) and sets
# bad=1 on a failure.
expect_output() {
	local name=$1 want=$2 pattern=$3 out rc
	shift 3
	out=$("$@" 2>&1); rc=$?
	if [ "$rc" -ne "$want" ] || ! grep -qF -- "$pattern" <<<"$out"; then
		echo "FAIL $name: exit $rc (want $want), output lacks '$pattern':"
		sed 's/^/    /' <<<"$out"
		bad=1
	else
		echo "ok   $name: exit $rc, '$pattern'"
	fi
}
