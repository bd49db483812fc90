#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs inside the Soft-RoCE VM (PID 1, after switch_root onto the host's root
# filesystem). Brings up rxe0/rxe1, runs the command that vm-run.sh (or
# vm-pair.sh) left in the run directory, records its exit status, powers off.
# One VM (vm-run.sh): rxe0/rxe1 on dummy interfaces d0/d1 (10.77.0.1,
# 10.77.1.1). One of two VMs (vm-pair.sh, verbus.net=a|b on the command
# line): rxe0/rxe1 on the virtio NICs of two links to the other VM, found by
# MAC (52:54:00:77:0L:0R, L link 1|2, R 1 for a, 2 for b) and named eth0
# (10.77.9.R/24) and eth1 (10.77.10.R/24).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
run="" net=""
for w in $(cat /proc/cmdline); do
  case "$w" in
    verbus.run=*) run=${w#verbus.run=} ;;
    verbus.net=*) net=${w#verbus.net=} ;;
  esac
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
# Two-VM mode: the NICs of links 1 and 2 become eth0 and eth1 (by MAC, so
# PCI order does not matter), addressed on their link; rxe0/rxe1 on them.
setup_rxe_net() {
  local r i n dev mac
  case "$net" in a) r=1 ;; b) r=2 ;; *) return 1 ;; esac
  modprobe virtio_net || return 1
  modprobe sch_netem || return 1
  modprobe rdma_rxe || return 1
  modprobe ib_uverbs || return 1
  modprobe rdma_ucm || return 1
  for i in 1 2; do
    mac="52:54:00:77:0$i:0$r"
    dev=""
    for n in /sys/class/net/*; do
      [ "$(cat "$n/address" 2>/dev/null)" = "$mac" ] && dev=${n##*/}
    done
    [ -n "$dev" ] || { echo "guest: no NIC with MAC $mac"; return 1; }
    n=eth$((i - 1))
    if [ "$dev" != "$n" ]; then
      ip link set "$dev" name "tmp$i" && dev="tmp$i"
    fi
    eval "nic$i=$dev"
  done
  for i in 1 2; do
    eval "dev=\$nic$i"
    n=eth$((i - 1))
    [ "$dev" = "$n" ] || ip link set "$dev" name "$n" || return 1
    ip addr add 10.77.$((8 + i)).$r/24 dev "$n" || return 1
    ip link set "$n" up || return 1
    rdma link add rxe$((i - 1)) type rxe netdev "$n" || return 1
  done
}
if [ -n "$net" ]; then setup=setup_rxe_net; else setup=setup_rxe; fi
if ! $setup; then
  echo "guest: Soft-RoCE set-up failed"
  echo 125 > "$run/rc"; off
fi
echo "guest${net:+ $net}: $(uname -r), Soft-RoCE up: $(rdma link show | awk '{print $2"("$NF")"}' | tr '\n' ' ')"

[ -r "$run/env" ] && . "$run/env"
export VERBUS_IN_VM=1
[ -n "$net" ] && export VERBUS_NET_ROLE=$net
cd "$(cat "$run/cwd")" || { echo 125 > "$run/rc"; off; }
timeout -k 5 "$(cat "$run/timeout")" sh -c "$(cat "$run/cmd")"
echo $? > "$run/rc"
off
