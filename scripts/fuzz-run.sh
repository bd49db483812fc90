#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One bounded libFuzzer run (ctest label "fuzz", docs/testing.md):
#
#   scripts/fuzz-run.sh BINARY CORPUS_DIR DICT FINDINGS_DIR [libFuzzer args...]
#
# Fuzzes for VERBUS_FUZZ_SECONDS (default 30; read now, so no rebuild is
# needed to change it) on a temporary copy of CORPUS_DIR: the repository's
# corpus is never written. A crash, leak, timeout or broken invariant fails
# the run; the input is left in FINDINGS_DIR and its path printed (add it to
# CORPUS_DIR as a regression once fixed). At the end: executions, coverage
# (also written to FINDINGS_DIR.summary).
set -uo pipefail

bin=$1 corpus=$2 dict=$3 findings=$4
shift 4
secs=${VERBUS_FUZZ_SECONDS:-30}
name=$(basename "$bin")
work=$(mktemp -d "${TMPDIR:-/tmp}/verbus-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$findings"
cp -r "$corpus/." "$work/corpus/" 2>/dev/null || true

"$bin" -max_total_time="$secs" -dict="$dict" -artifact_prefix="$findings/" \
  -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  "$@" "$work/corpus" > "$work/log" 2>&1
rc=$?

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
last=$(grep -E '^#[0-9]+' "$work/log" | tail -1)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
if [ "$rc" -ne 0 ]; then
  tail -60 "$work/log"
  msg="fuzz $name: FAILED (exit $rc) after ${execs:-?} executions"
  for f in "$findings"/*; do
    [ -e "$f" ] && msg+=$'\n'"fuzz $name: failing input: $f"
  done
  echo "$msg" | tee "$findings.summary"
  exit 1
fi
echo "fuzz $name: ${execs:-?} executions in ${secs}s, coverage ${cov:-?} edges," \
  "${ft:-?} features, corpus ${corp:-?} inputs (from $(ls "$corpus" | wc -l) committed)" \
  | tee "$findings.summary"
