#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run a command on two Soft-RoCE VMs joined by two virtual Ethernet links.
#
#   scripts/vm-pair.sh [--timeout SECS] [--boot-timeout SECS] -- CMD [ARG...]
#
# Boots Debian's kernel twice under qemu (TCG), guests "a" and "b". Each has
# two virtio NICs; NIC i of a and NIC i of b are joined by qemu's socket
# netdev in UDP mode on 127.0.0.1 (nothing leaves the loopback address), so
# RoCE packets really cross a link, where netem and `ip link set down` act.
# In each guest (scripts/vm-guest.sh): eth0 10.77.9.R/24 with rxe0 (link 1),
# eth1 10.77.10.R/24 with rxe1 (link 2), R = 1 for a, 2 for b. Both share the
# host's root over 9p; CMD runs in both, in the current directory, with
#   VERBUS_NET_ROLE  a or b
#   VERBUS_NET_DIR   a directory both guests see (on the host's /var/tmp),
#                    for the two sides to meet and exchange results
#                    (tests/common/netpair.h)
# A guest powers its peer off for real by creating $VERBUS_NET_DIR/poweroff.R
# (R: a or b): this script then kills that guest's qemu, at once, as a power
# cut; the guest counts as having succeeded (the test that asked checks).
# The guests' output is printed with "a| " and "b| " prefixes. Exit status:
# 0 when both commands exited 0; else a's status when it is not 0, else b's.
# 124: a command timed out; 125: a VM failed (no boot, crash).
# Environment: VERBUS_VM_MEM (MiB per guest, default 1536), VERBUS_VM_SMP
# (vCPUs per guest, default 2), VERBUS_VM_CACHE; VERBUS_*, ASAN_*, UBSAN_*,
# TSAN_*, LSAN_*, CTEST_* are passed into both guests.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cmd_timeout=1200
boot_timeout=180

while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) cmd_timeout=$2; shift 2 ;;
    --boot-timeout) boot_timeout=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '3,26p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "vm-pair: no command given" >&2; exit 2; }

log() { echo "[vm-pair] $*" >&2; }

. "$here/vm-lib.sh"
kv=$(vm_kernel) || { log "no kernel with rdma_rxe under /boot + /lib/modules (install linux-image-amd64)"; exit 125; }
command -v qemu-system-x86_64 >/dev/null || { log "qemu-system-x86_64 missing (install qemu-system-x86)"; exit 125; }
initrd=$(vm_initrd "$kv") || exit 125

run=$(mktemp -d /var/tmp/verbus-pair.XXXXXX)
declare -A qpid=()
cleanup() {
  local r
  for r in "${!qpid[@]}"; do pkill -9 -f "verbus.run=$run/$r " 2>/dev/null || true; done
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$run/share"
export VERBUS_NET_DIR=$run/share
vm_rundir "$run/a" "$@"
vm_rundir "$run/b" "$@"

# Four UDP ports on loopback, two per link, none in use now.
free_udp() {
  local p
  while :; do
    p=$(( 20000 + RANDOM % 30000 ))
    ss -Hun "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
  done
}
declare -A port=()
for k in a1 b1 a2 b2; do
  port[$k]=$(free_udp)
done

mem=${VERBUS_VM_MEM:-1536}
smp=${VERBUS_VM_SMP:-2}
log "booting two guests ($kv, TCG, ${smp} vCPU and ${mem} MiB each), links on 127.0.0.1 ports" \
  "${port[a1]}<->${port[b1]} and ${port[a2]}<->${port[b2]}; command timeout ${cmd_timeout}s"

boot() { # ROLE R OTHER
  local r=$1 n=$2 o=$3
  timeout -k 10 $((boot_timeout + cmd_timeout + 60)) \
    qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m "$mem" -smp "$smp" \
      -nographic -no-reboot -kernel "/boot/vmlinuz-$kv" -initrd "$initrd" \
      -append "console=ttyS0 panic=-1 quiet loglevel=1 verbus.run=$run/$r verbus.net=$r verbus.guest=$here/vm-guest.sh" \
      -virtfs "local,path=/,mount_tag=hostroot,security_model=none,id=hr,multidevs=remap" \
      -netdev "socket,id=l1,udp=127.0.0.1:${port[${o}1]},localaddr=127.0.0.1:${port[${r}1]}" \
      -device "virtio-net-pci,netdev=l1,mac=52:54:00:77:01:0$n" \
      -netdev "socket,id=l2,udp=127.0.0.1:${port[${o}2]},localaddr=127.0.0.1:${port[${r}2]}" \
      -device "virtio-net-pci,netdev=l2,mac=52:54:00:77:02:0$n" \
      < /dev/null 2>&1 | vm_filter "$r| " &
  qpid[$r]=$!
}
start=$(date +%s)
set +e
boot a 1 b
boot b 2 a

# Watch both: the boot watchdog, and power-off requests from the tests.
declare -A cut=()
while kill -0 "${qpid[a]}" 2>/dev/null || kill -0 "${qpid[b]}" 2>/dev/null; do
  for r in a b; do
    if [ -e "$run/share/poweroff.$r" ] && [ -z "${cut[$r]:-}" ]; then
      log "powering guest $r off (requested by $(cat "$run/share/poweroff.$r" 2>/dev/null || echo '?'))"
      pkill -9 -f "verbus.run=$run/$r " 2>/dev/null
      cut[$r]=1
    fi
    if [ ! -e "$run/$r/booted" ] && [ $(( $(date +%s) - start )) -gt "$boot_timeout" ] &&
       kill -0 "${qpid[$r]}" 2>/dev/null; then
      log "guest $r did not boot within ${boot_timeout}s"
      pkill -9 -f "verbus.run=$run/$r " 2>/dev/null
    fi
  done
  sleep 0.2
done
wait
set -e
elapsed=$(( $(date +%s) - start ))

status() { # ROLE: its command's exit status, or 125
  local r=$1
  if [ -s "$run/$r/rc" ]; then cat "$run/$r/rc"
  elif [ -n "${cut[$r]:-}" ]; then echo 0
  elif [ -e "$run/$r/booted" ]; then log "guest $r ended without a command status"; echo 125
  else log "guest $r failed to boot"; echo 125
  fi
}
rca=$(status a)
rcb=$(status b)
log "guest a exited $rca, guest b ${cut[b]:+was powered off on request, }exited $rcb, after ${elapsed}s"
[ "$rca" != 0 ] && exit "$rca"
exit "$rcb"
