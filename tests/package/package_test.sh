#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages (ctest package_test, label package; run once by
# `scripts/verbus test`): the source tree is copied to a scratch directory,
# `dpkg-buildpackage -us -uc -b` builds libverbus0, libverbus-dev,
# verbus-utils and verbus-doc there from debian/, and then
#   - each package holds what it should (and libverbus0 nothing else),
#     and lintian finds no error and no warning in them;
#   - debian/changelog's version is the project's;
#   - the four are unpacked into a scratch root, and the consumers of
#     tests/unit/install_test.sh (pkg-config and find_package, shared and
#     static) are built against ROOT/usr and run;
#   - ROOT/usr/bin/vb_bench runs, and every man page of verbus-doc renders
#     without a warning (man --warnings -l).
# Nothing is installed on the machine.
#
#   tests/package/package_test.sh SOURCE_DIR C_COMPILER VERSION
set -uo pipefail

src=$(cd "$1" && pwd) cc=$2 version=$3
here=$(cd "$(dirname "$0")" && pwd)
for tool in dpkg-buildpackage dpkg-deb dpkg-parsechangelog dh lintian man; do
	command -v "$tool" >/dev/null ||
		{ echo "package_test: FAIL: $tool not found (scripts/install-deps.sh installs it)"; exit 1; }
done
t=$(mktemp -d "${TMPDIR:-/tmp}/verbus-package-test.XXXXXX")
trap 'rm -rf "$t"' EXIT
bad=0
fail() { echo "package_test: FAIL: $*"; bad=1; }

cl=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
[ "${cl%%-*}" = "$version" ] ||
	fail "debian/changelog is at $cl, the project (CMakeLists.txt) at $version: add a changelog entry"

# the tree as committed plus new files not ignored (no build directories)
mkdir -p "$t/src/verbus"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -C "$src" ls-files -z --cached --others --exclude-standard |
		(cd "$src" && xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
		tar -C "$src" --null -T - -cf - | tar -C "$t/src/verbus" -xf -
else
	(cd "$src" && tar --exclude='./build*' -cf - .) | tar -C "$t/src/verbus" -xf -
fi
echo "package_test: dpkg-buildpackage -us -uc -b (log: the last lines are shown on failure)"
if ! (cd "$t/src/verbus" && dpkg-buildpackage -us -uc -b -j"$(nproc)") > "$t/build.log" 2>&1; then
	tail -n 40 "$t/build.log"
	echo "package_test: FAIL: dpkg-buildpackage"
	exit 1
fi
grep -E "^dpkg-deb: building package" "$t/build.log"

arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
deb() { echo "$t/src/${1}_${cl}_${2}.deb"; }
# has PACKAGE ARCH PATH...: every PATH is in the package
has() {
	local p=$1 a=$2 f list
	shift 2
	if [ ! -f "$(deb "$p" "$a")" ]; then
		fail "no package $(basename "$(deb "$p" "$a")")"
		return
	fi
	list=$(dpkg-deb -c "$(deb "$p" "$a")" | awk '{print $6}' | sed 's,^\./,/,')
	for f in "$@"; do
		grep -qx -- "$f" <<< "$list" || fail "$p does not hold $f"
	done
}
lib=/usr/lib/$multiarch
has libverbus0 "$arch" "$lib/libverbus.so.0" "$lib/libverbus.so.$version"
has libverbus-dev "$arch" /usr/include/verbus/verbus.h "$lib/libverbus.so" "$lib/libverbus.a" \
	"$lib/pkgconfig/verbus.pc" "$lib/cmake/verbus/verbus-config.cmake" \
	"$lib/cmake/verbus/verbus-config-version.cmake" "$lib/cmake/verbus/verbusTargets.cmake" \
	"$lib/cmake/verbus/verbusStaticTargets.cmake"
has verbus-utils "$arch" /usr/bin/vb_bench /usr/share/man/man1/vb_bench.1.gz \
	/usr/bin/vb_stat /usr/share/man/man1/vb_stat.1.gz
has verbus-doc all /usr/share/man/man7/verbus.7.gz /usr/share/man/man3/vb_publish.3.gz \
	/usr/share/man/man3/vb_pub_commit.3.gz
# the run-time package: the shared library (and Debian's doc files), no more
if [ -f "$(deb libverbus0 "$arch")" ]; then
	extra=$(dpkg-deb -c "$(deb libverbus0 "$arch")" | awk '$1 !~ /^d/ {print $6}' |
		sed 's,^\./,/,' | grep -v -e "^$lib/libverbus\.so\.0" -e "^/usr/share/doc/libverbus0/")
	[ -z "$extra" ] || fail "libverbus0 holds more than the library: $extra"
fi
# Debian's checks of the packages: no error and no warning
if ! out=$(cd "$t/src" && lintian --fail-on error,warning verbus_"${cl}"_"$arch".changes 2>&1); then
	fail "lintian: $(grep -E '^[EW]: ' <<< "$out" || echo "$out")"
fi
[ "$bad" = 0 ] || exit 1

root=$t/root
for p in "$t"/src/*.deb; do
	case $p in *-dbgsym_*) continue ;; esac
	dpkg-deb -x "$p" "$root" || fail "dpkg-deb -x $(basename "$p")"
done
"$here/../unit/install_test.sh" --tree "$root/usr" "$cc" "$version" || bad=1
out=$("$root/usr/bin/vb_bench" --help 2>&1) && grep -q "usage: vb_bench" <<< "$out" ||
	fail "vb_bench --help from the package: $out"
out=$("$root/usr/bin/vb_stat" --config 2>&1) && grep -q "^VERBUS_STAT_DIR=" <<< "$out" ||
	fail "vb_stat --config from the package: $out"
n=0
for page in "$root"/usr/share/man/man*/*.gz; do
	# a .so link page renders the page it names: from the man directory
	w=$(cd "$root/usr/share/man" && MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
	[ -z "$w" ] || fail "man -l $(basename "$page"): $w"
	n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "verbus-doc has no man page"
[ "$bad" = 0 ] && echo "package_test: 4 packages built; consumers built and ran against them; $n man pages render"
exit "$bad"
