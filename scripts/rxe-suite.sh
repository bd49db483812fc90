#!/bin/sh
# SPDX-License-Identifier: MIT
# The tests that need a real RDMA device, for one or more build directories,
# in one go (one VM boot). Run by `scripts/verbus test` through vm-run.sh.
#   build       labels rxe and fault (every verbs test)
#   build-asan  label rxe under ASan+UBSan
#   build-tsan  label concurrency among rxe/fault tests, under TSan
root=$(cd "$(dirname "$0")/.." && pwd)
rc=0
for d in "$@"; do
  case "$d" in
    build-asan) sel="-L rxe" ;;
    build-tsan) sel="-L concurrency -L rxe|fault" ;;
    *)          sel="-L rxe|fault" ;;
  esac
  echo "=== rxe suite: $d ($sel) on $(ibv_devices 2>/dev/null | awk 'NR>2 && NF {printf "%s ", $1}')==="
  # shellcheck disable=SC2086
  (cd "$root/$d" && ctest $sel --output-on-failure -V) || rc=1
done
exit $rc
