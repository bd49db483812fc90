#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs inside the Soft-RoCE VM (PID 1, after switch_root onto the host's root
# filesystem). Brings up rxe0/rxe1 on dummy interfaces, runs the command that
# vm-run.sh left in the run directory, records its exit status, powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
run=""
for w in $(cat /proc/cmdline); do
  case "$w" in verbus.run=*) run=${w#verbus.run=} ;; esac
done
# Power off synchronously (reboot(2) via busybox): after a sysrq power-off
# request this shell would keep running while 9p goes away under it.
off() {
  sync
  [ -x /bin/busybox ] && exec /bin/busybox poweroff -f
  echo o > /proc/sysrq-trigger; sleep 10
}
[ -n "$run" ] && [ -d "$run" ] || { echo "guest: no run directory"; off; }
touch "$run/booted"

# A fresh tmpfs on /tmp, but what the command needs from the host's /tmp (a
# checkout there: its root and the command's directory, listed by vm-run.sh
# in $run/keep) is bound back at the same paths.
mkdir -p "$run/hosttmp"
mount --bind /tmp "$run/hosttmp"
mount -t tmpfs tmpfs /tmp
bind_back() { # PATH: from the host's /tmp, unless already under a bound one
  case "$1" in /tmp/*) ;; *) return 0 ;; esac
  [ -n "$bound" ] && case "$1" in "$bound"|"$bound"/*) return 0 ;; esac
  mkdir -p "$1" && mount --bind "$run/hosttmp${1#/tmp}" "$1" && bound=$1 \
    || echo "guest: cannot bind $1 from the host's /tmp"
}
bound=""
{ IFS= read -r k_root; IFS= read -r k_cwd; } < "$run/keep" 2>/dev/null
bind_back "$k_root"
bind_back "$k_cwd"
mount -t tmpfs tmpfs /run
mkdir -p /dev/shm /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
ulimit -l unlimited
ip link set lo up

setup_rxe() {
  modprobe rdma_rxe || return 1
  modprobe ib_uverbs || return 1
  modprobe rdma_ucm || return 1
  for i in 0 1; do
    ip link add d$i type dummy || return 1
    ip addr add 10.77.$i.1/24 dev d$i || return 1
    ip link set d$i up || return 1
    rdma link add rxe$i type rxe netdev d$i || return 1
  done
}
if ! setup_rxe; then
  echo "guest: Soft-RoCE set-up failed"
  echo 125 > "$run/rc"; off
fi
echo "guest: $(uname -r), Soft-RoCE up: $(rdma link show | awk '{print $2"("$NF")"}' | tr '\n' ' ')"

[ -r "$run/env" ] && . "$run/env"
export VERBUS_IN_VM=1
cd "$(cat "$run/cwd")" || { echo 125 > "$run/rc"; off; }
timeout -k 5 "$(cat "$run/timeout")" sh -c "$(cat "$run/cmd")"
echo $? > "$run/rc"
off
