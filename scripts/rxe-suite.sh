#!/bin/sh
# SPDX-License-Identifier: MIT
# The tests that need a real RDMA device, for one or more build directories,
# in one go (one VM boot). Run by `scripts/verbus test` through vm-run.sh.
#   build       labels rxe and fault (every verbs test)
#   build-asan  label rxe under ASan+UBSan (volumes x0.2)
#   build-tsan  label concurrency among rxe/fault tests, under TSan (x0.2)
root=$(cd "$(dirname "$0")/.." && pwd)
rc=0
# Connection set-up under emulation (and sanitizers) can take seconds.
export VERBUS_CM_TIMEOUT_MS=${VERBUS_CM_TIMEOUT_MS:-30000}
export TSAN_OPTIONS="suppressions=$root/scripts/tsan.supp ${TSAN_OPTIONS:-}"
for d in "$@"; do
  # Sanitized builds run 3-10x slower: a fifth of the volumes (unless the
  # caller chose a scale), still enough to exercise every path.
  scale=${VERBUS_TEST_SCALE:-1}
  case "$d" in
    build-asan) sel="-L rxe -LE destructive"; scale=${VERBUS_TEST_SCALE:-0.2} ;;
    build-tsan) sel="-L concurrency -L rxe|fault -LE destructive"; scale=${VERBUS_TEST_SCALE:-0.2} ;;
    *)          sel="-L rxe|fault -LE destructive" ;;
  esac
  echo "=== rxe suite: $d ($sel) on $(ibv_devices 2>/dev/null | awk 'NR>2 && NF {printf "%s ", $1}')==="
  # shellcheck disable=SC2086
  (cd "$root/$d" && VERBUS_TEST_SCALE=$scale ctest $sel --output-on-failure -V) || rc=1
done
# Tests that flap the primary link (label "destructive") run last, once, on
# the first build: Soft-RoCE on this kernel does not always answer rdma_cm
# on rxe0 again after a flap under traffic (docs/recovery.md).
d=$1
echo "=== rxe suite: $d (-L destructive, last) ==="
(cd "$root/$d" && VERBUS_TEST_SCALE=${VERBUS_TEST_SCALE:-1} ctest -L destructive --output-on-failure -V) || rc=1
exit $rc
