#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Idempotent dependency installer for Debian 12 (apt). Used by both README
# commands and by .ci/run. Installs only what is missing; runs apt-get update
# at most once per call and only when something is missing.
set -euo pipefail

PKGS=(
  # build
  build-essential cmake pkg-config git
  # libraries verbus links against
  libibverbs-dev librdmacm-dev liburcu-dev libjemalloc-dev
  # peer authentication (HMAC-SHA512-256, nonces: README "Dependencies")
  libsodium-dev
  # tests
  libcmocka-dev
  # man pages: pandoc converts docs/man/*.md at build time (VERBUS_MAN);
  # man-db + groff-base render them in ctest man_test
  pandoc man-db groff-base
  # Debian packages (debian/; ctest package_test): dpkg-buildpackage, lintian
  debhelper dpkg-dev fakeroot lintian
  # fuzzing and static analysis (docs/testing.md): clang, libFuzzer and the
  # sanitizer runtimes (libclang-rt-14-dev), scan-build (clang-tools)
  clang clang-tools libclang-rt-14-dev
  # RDMA user space: providers (rxe), tools used by tests (rdma res show)
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils iproute2 perftest
  # Soft-RoCE VM (used when the host has no RDMA device)
  qemu-system-x86 linux-image-amd64 busybox-static cpio gzip kmod
  # benchmarks: UCX peer and plots
  ucx-utils gnuplot-nox
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "[deps] all ${#PKGS[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "[deps] missing packages: ${missing[*]}" >&2
  echo "[deps] run as root (or install them with apt-get) and retry" >&2
  exit 1
fi

echo "[deps] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "[deps] done"
