#!/bin/sh
# SPDX-License-Identifier: MIT
# The two-host tests (label net) of build directory $1 (default build), run
# in both guests of scripts/vm-pair.sh: each guest runs every test in the
# same order, in its own role (VERBUS_NET_ROLE), and the two sides of a test
# meet through $VERBUS_NET_DIR. Extra arguments go to ctest (e.g. -R name).
root=$(cd "$(dirname "$0")/.." && pwd)
d=${1:-build}
[ $# -gt 0 ] && shift
echo "=== net suite: $d, guest $VERBUS_NET_ROLE, $(ibv_devices 2>/dev/null | awk 'NR>2 && NF {printf "%s ", $1}')==="
# Connection set-up between two emulated hosts can take seconds.
export VERBUS_CM_TIMEOUT_MS=${VERBUS_CM_TIMEOUT_MS:-15000}
cd "$root/$d" && exec ctest -L net --output-on-failure -V "$@"
