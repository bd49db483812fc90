#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clang static analyzer over the library (core/ transport/ engine/ proto/ api/; tests,
# bench and examples are not built): a fresh build-scan/ under scan-build,
# so every file is analyzed. Fails on any finding not explained in
# scripts/scan-build.supp (each entry is explained in docs/testing.md,
# "Static analysis"). The HTML report stays in build-scan/report.
#
#   scripts/scan-build.sh [BUILD_DIR]      (VERBUS_JOBS: parallel jobs)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build-scan}
jobs=${VERBUS_JOBS:-$(nproc)}
supp=$root/scripts/scan-build.supp

rm -rf "$dir"
scan-build cmake -S "$root" -B "$dir" -DVERBUS_TESTS=OFF -DVERBUS_BENCH=OFF \
  -DVERBUS_EXAMPLES=OFF -DVERBUS_LTO=OFF > "$dir.cmake.log" 2>&1 || { cat "$dir.cmake.log"; exit 1; }
scan-build -o "$dir/report" cmake --build "$dir" -j "$jobs" > "$dir/scan.log" 2>&1 \
  || { tail -40 "$dir/scan.log"; echo "scan-build: the build failed"; exit 1; }

# findings: "path:line:col: warning: text [checker]"; an entry of the
# suppression file is "path-relative-to-the-repo checker" (# comments)
mapfile -t found < <(grep -E '^/.*: warning: .*\[[a-zA-Z.]+\]$' "$dir/scan.log" | sort -u)
unexplained=0
for f in "${found[@]}"; do
  # a header is named by the link it was reached through,
  # build-scan/layer-include/<layer>/<layer>/... (cmake/VerbusLayers.cmake):
  # name it by its place in the tree
  file=$(realpath -- "${f%%:*}" 2>/dev/null || echo "${f%%:*}")
  file=${file#"$root"/}
  where=$file:${f#*:}
  checker=${f##*[}
  checker=${checker%]}
  if grep -qxF "$file $checker" <(grep -v '^#' "$supp" | sed 's/[[:space:]]*$//'); then
    echo "scan-build: explained (docs/testing.md): $where"
  else
    echo "scan-build: UNEXPLAINED: $where"
    unexplained=$((unexplained + 1))
  fi
done
echo "scan-build: ${#found[@]} finding(s), $unexplained unexplained; report: $dir/report"
[ "$unexplained" -eq 0 ]
