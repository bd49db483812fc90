#!/bin/sh
# SPDX-License-Identifier: MIT
# Re-create this guest's rxe devices on their links (run by ctest as
# net_rxe_reset, in both guests, after the test that flaps links). After a
# link flap under traffic, Soft-RoCE on Debian 12's 6.1 kernel receives no
# RoCEv2/IPv4 packet on the flapped device again (rdma_cm cannot connect
# over it, either way) until the device is re-created (docs/testing.md). It
# must run in a process of its own: `rdma link delete` waits until every
# process has closed the device, and librdmacm keeps it open until exit.
set -u
[ -n "${VERBUS_NET_ROLE:-}" ] || { echo "not in a pair of hosts: skipping"; exit 77; }
rc=0
for i in 0 1; do
  dev=rxe$i net=eth$i
  timeout 60 rdma link delete "$dev" || { echo "rdma link delete $dev failed"; rc=1; continue; }
  timeout 30 rdma link add "$dev" type rxe netdev "$net" || { echo "rdma link add $dev failed"; rc=1; continue; }
  n=0
  while [ "$(cat /sys/class/infiniband/$dev/ports/1/state 2>/dev/null)" != "4: ACTIVE" ] && [ $n -lt 100 ]; do
    sleep 0.1; n=$((n + 1))
  done
  echo "$dev on $net: $(cat /sys/class/infiniband/$dev/ports/1/state 2>/dev/null)"
  [ $n -lt 100 ] || rc=1
done
exit $rc
