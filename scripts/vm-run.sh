#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run a command against a real RDMA device.
#
#   scripts/vm-run.sh [--timeout SECS] [--boot-timeout SECS] [--vm] -- CMD [ARG...]
#
# If the host has an RDMA device (ibv_devices lists one) the command runs here.
# Otherwise Debian's kernel boots under qemu (TCG), the host's root filesystem
# is shared over 9p, Soft-RoCE comes up as rxe0 on d0/10.77.0.1 and rxe1 on
# d1/10.77.1.1 (dummy interfaces, the VM has no NIC), and CMD runs in the
# current directory. The guest's output is printed; the exit status is CMD's.
# Exit 124: CMD timed out. Exit 125: the VM itself failed (no boot, crash).
# --vm forces the VM even when the host has a device.
# Environment: VERBUS_VM_MEM (MiB, default 2048), VERBUS_VM_SMP (default 2),
# VERBUS_VM_CACHE (initramfs cache dir, default /var/cache/verbus).
# Variables named VERBUS_*, ASAN_*, UBSAN_*, TSAN_*, LSAN_*, CTEST_* are
# passed into the guest.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cmd_timeout=1500
boot_timeout=120
force_vm=${VERBUS_FORCE_VM:-0}

while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) cmd_timeout=$2; shift 2 ;;
    --boot-timeout) boot_timeout=$2; shift 2 ;;
    --vm) force_vm=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '3,17p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "vm-run: no command given" >&2; exit 2; }

log() { echo "[vm-run] $*" >&2; }

if [ "$force_vm" != 1 ] && command -v ibv_devices >/dev/null 2>&1; then
  devs=$( (ibv_devices 2>/dev/null || true) | awk 'NR>2 && NF {print $1}' | tr '\n' ' ')
  if [ -n "$devs" ]; then
    log "host has RDMA device(s): $devs- running on the host"
    exec timeout --foreground -k 10 "$cmd_timeout" "$@"
  fi
fi

# ---- kernel, initramfs, run directory ------------------------------------
. "$here/vm-lib.sh"
kv=$(vm_kernel) || { log "no kernel with rdma_rxe under /boot + /lib/modules (install linux-image-amd64)"; exit 125; }
command -v qemu-system-x86_64 >/dev/null || { log "qemu-system-x86_64 missing (install qemu-system-x86)"; exit 125; }
initrd=$(vm_initrd "$kv") || exit 125

# per-run directory (not under /tmp: the guest mounts tmpfs there)
run=$(mktemp -d /var/tmp/verbus-vm.XXXXXX)
cleanup() { [ -n "${qpid:-}" ] && kill -9 "$qpid" 2>/dev/null; rm -rf "$run"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
vm_rundir "$run" "$@"

mem=${VERBUS_VM_MEM:-2048}
smp=${VERBUS_VM_SMP:-2}
log "booting $kv under qemu (TCG, ${smp} vCPU, ${mem} MiB); command timeout ${cmd_timeout}s"

start=$(date +%s)
set +e
timeout -k 10 $((boot_timeout + cmd_timeout + 60)) \
  qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m "$mem" -smp "$smp" \
    -nographic -no-reboot -kernel "/boot/vmlinuz-$kv" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=1 verbus.run=$run verbus.guest=$here/vm-guest.sh" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,id=hr,multidevs=remap" \
    -nic none < /dev/null 2>&1 | vm_filter &
qpid=$!
# Boot watchdog: the guest script touches $run/booted as its first action.
while kill -0 "$qpid" 2>/dev/null; do
  if [ ! -e "$run/booted" ] && [ $(( $(date +%s) - start )) -gt "$boot_timeout" ]; then
    log "guest did not boot within ${boot_timeout}s"
    pkill -9 -f "verbus.run=$run" 2>/dev/null
    break
  fi
  sleep 1
done
wait "$qpid"
set -e
qpid=""
elapsed=$(( $(date +%s) - start ))

if [ -s "$run/rc" ]; then
  rc=$(cat "$run/rc")
  log "guest command exited $rc after ${elapsed}s (VM wall time)"
  exit "$rc"
fi
if [ -e "$run/booted" ]; then
  log "VM ended without a command status after ${elapsed}s (guest crash or host timeout)"
else
  log "VM failed to boot (${elapsed}s)"
fi
exit 125
