# SPDX-License-Identifier: MIT
# Shared by vm-run.sh (one Soft-RoCE VM) and vm-pair.sh (two VMs on a
# virtual link): kernel choice, the cached initramfs, the console filter.
# Sourced, not run. Expects $here (the scripts directory) and a log().

# vm_kernel: prints the newest kernel version with rdma_rxe and a
# /boot/vmlinuz; returns 1 when there is none.
vm_kernel() {
  local k
  for k in $(ls -1 /lib/modules 2>/dev/null | sort -rV); do
    if [ -r "/boot/vmlinuz-$k" ] && [ -n "$(find "/lib/modules/$k/kernel/drivers/infiniband/sw/rxe" -name 'rdma_rxe.ko*' 2>/dev/null)" ]; then
      echo "$k"; return 0
    fi
  done
  return 1
}

# vm_initrd KERNEL: prints the path of the initramfs for KERNEL (virtio,
# 9p and vm-initramfs-init), building it into the cache when missing.
vm_initrd() {
  local kv=$1 cache=${VERBUS_VM_CACHE:-/var/cache/verbus}
  local mods="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p"
  local sum initrd bb work m f
  mkdir -p "$cache"
  sum=$( (cat "$here/vm-initramfs-init"; echo "$mods") | sha256sum | cut -c1-12)
  initrd="$cache/initrd-$kv-$sum.gz"
  if [ ! -s "$initrd" ]; then
    log "building initramfs for $kv"
    bb=$(command -v busybox || true)
    [ -n "$bb" ] && file -L "$bb" 2>/dev/null | grep -q 'statically linked' || bb=/bin/busybox
    [ -x "$bb" ] || { log "busybox missing (install busybox-static)"; return 1; }
    work=$(mktemp -d)
    mkdir -p "$work/bin" "$work/mods" "$work/proc" "$work/sys" "$work/dev" "$work/newroot"
    cp "$bb" "$work/bin/busybox"
    for m in $mods; do
      f=$(find "/lib/modules/$kv/kernel" -name "$m.ko*" | head -1)
      [ -n "$f" ] || { log "module $m not found for $kv"; rm -rf "$work"; return 1; }
      case "$f" in
        *.ko.xz) xz -dc "$f" > "$work/mods/$m.ko" ;;
        *.ko.zst) zstd -dcq "$f" > "$work/mods/$m.ko" ;;
        *.ko.gz) gzip -dc "$f" > "$work/mods/$m.ko" ;;
        *) cp "$f" "$work/mods/$m.ko" ;;
      esac
    done
    echo "$mods" > "$work/mods/order"
    cp "$here/vm-initramfs-init" "$work/init"
    chmod +x "$work/init"
    (cd "$work" && find . | cpio -o -H newc --quiet | gzip -9) > "$initrd.tmp"
    mv "$initrd.tmp" "$initrd"
    rm -rf "$work"
  fi
  echo "$initrd"
}

# vm_rundir DIR CMD...: fills a guest's run directory: the command, its
# directory, the /tmp paths the guest binds back (the checkout's root, then
# the command's directory), the timeout ($cmd_timeout) and the environment
# passed in (VERBUS_*, ASAN_*, UBSAN_*, TSAN_*, LSAN_*, CTEST_*).
vm_rundir() {
  local dir=$1; shift
  mkdir -p "$dir"
  printf '%q ' "$@" > "$dir/cmd"
  pwd > "$dir/cwd"
  { (cd "$here/.." && pwd); pwd; } > "$dir/keep"
  echo "$cmd_timeout" > "$dir/timeout"
  env | grep -E '^(VERBUS_|ASAN_|UBSAN_|TSAN_|LSAN_|CTEST_)' | while IFS='=' read -r k v; do
    printf 'export %s=%q\n' "$k" "$v"
  done > "$dir/env" || true
}

# Strip the serial console's escape sequences and the firmware's
# "Booting from ROM.." prefix; keep every line the guest prints. With an
# argument, every line is prefixed with it.
vm_filter() {
  local p=${1:-}
  sed -u -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' -e 's/\r//g' -e 's/^.*Booting from ROM\.*//' \
    | grep --line-buffered -v -E '^(SeaBIOS|iPXE|Booting from|$)' \
    | sed -u -e "s/^/$p/" || true
}
