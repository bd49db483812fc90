#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What a user of the installed library does (ctest install_test, label
# unit): `cmake --install BUILD --prefix DIR`, the tree moved elsewhere
# (relocated), then five consumers of <verbus/verbus.h> built against the
# moved tree and run (each prints vb_version(), which must match the
# package's version):
#   1. pkg-config, shared library, with no other pkg-config module visible
#      (verbus.pc must not require the library's private dependencies);
#   2. pkg-config --static, the static library;
#   3. CMake find_package(verbus), verbus::verbus, with no pkg-config at all;
#   4. CMake find_package(verbus COMPONENTS static), verbus::verbus_static;
#   5. dlopen("libverbus.so.0"), with GLIBC_TUNABLES giving it static TLS
#      room (README, "Using verbus from another project").
#
#   tests/unit/install_test.sh BUILD_DIR C_COMPILER VERSION [SANITIZE]
#   tests/unit/install_test.sh --tree PREFIX C_COMPILER VERSION
# --tree: no install; the consumers are built against the tree already
# under PREFIX (tests/package/package_test.sh: the Debian packages
# unpacked into a scratch root, PREFIX = ROOT/usr).
set -uo pipefail

tree=
if [ "${1:-}" = --tree ]; then
	tree=$2
	shift
fi
build=$1 cc=$2 version=$3 san=${4:-}
flags=()
[ -n "$san" ] && flags=(-fsanitize="$san")
t=$(mktemp -d "${TMPDIR:-/tmp}/verbus-install-test.XXXXXX")
trap 'rm -rf "$t"' EXIT
bad=0

fail() { echo "install_test: FAIL: $*"; bad=1; }
# run NAME PROGRAM: it must print the version
run() {
	local out
	if ! out=$(LD_LIBRARY_PATH="$lib" "$2" 2>&1); then
		fail "$1: the program failed: $out"
	elif [ "$out" != "$version" ]; then
		fail "$1: printed '$out', expected '$version'"
	else
		echo "install_test: ok: $1"
	fi
}

if [ -n "$tree" ]; then
	prefix=$(cd "$tree" && pwd)
elif ! cmake --install "$build" --prefix "$t/staged" > "$t/install.log" 2>&1; then
	cat "$t/install.log"
	echo "install_test: FAIL: cmake --install"
	exit 1
else
	mv "$t/staged" "$t/moved"
	prefix=$t/moved
fi
pc=$(find "$prefix" -name verbus.pc)
if [ -z "$pc" ]; then
	echo "install_test: FAIL: no verbus.pc installed"
	exit 1
fi
pcdir=$(dirname "$pc")
lib=$(dirname "$pcdir")
if grep -q "$t/staged" "$pc"; then
	fail "verbus.pc names the install directory: $(grep "$t/staged" "$pc")"
fi
# The static library holds machine code only: GCC's intermediate code
# (cmake/VerbusLto.cmake) would make a consumer's link run the link-time
# pass, and fail under another GCC version
if [ ! -f "$lib/libverbus.a" ]; then
	fail "no libverbus.a installed"
else
	n=$(readelf -S -W "$lib/libverbus.a" | grep -c '\.gnu\.lto_')
	[ "$n" = 0 ] || fail "libverbus.a holds link-time intermediate code ($n sections)"
fi

cat > "$t/use.c" <<'C'
#include <stdio.h>
#include <verbus/verbus.h>
int main(void)
{
	printf("%s\n", vb_version());
	return 0;
}
C

# 1. pkg-config, shared; PKG_CONFIG_LIBDIR hides every other module
if ! pcflags=$(PKG_CONFIG_LIBDIR="$pcdir" PKG_CONFIG_PATH= pkg-config --cflags --libs verbus 2>&1); then
	fail "pkg-config verbus, with only verbus.pc visible: $pcflags"
elif ! "$cc" "${flags[@]}" "$t/use.c" $pcflags -o "$t/use_pc" 2> "$t/cc.log"; then
	fail "pkg-config consumer does not build ($pcflags): $(cat "$t/cc.log")"
else
	run "pkg-config, shared" "$t/use_pc"
	[ "$(PKG_CONFIG_LIBDIR="$pcdir" pkg-config --modversion verbus)" = "$version" ] \
		|| fail "pkg-config --modversion is not $version"
fi

# 2. pkg-config --static: the archive and Libs.private
if ! stflags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --static --cflags --libs verbus 2>&1); then
	fail "pkg-config --static verbus: $stflags"
else
	stflags=${stflags/-lverbus/$lib/libverbus.a}
	if ! "$cc" "${flags[@]}" "$t/use.c" $stflags -o "$t/use_static" 2> "$t/cc.log"; then
		fail "static pkg-config consumer does not link ($stflags): $(cat "$t/cc.log")"
	else
		run "pkg-config --static" "$t/use_static"
	fi
fi

# 3 and 4. CMake packages
cmake_consumer() { # NAME FIND_ARGS TARGET [PKG_CONFIG_EXECUTABLE]
	local d="$t/cm_$1"
	mkdir -p "$d"
	cp "$t/use.c" "$d/"
	cat > "$d/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.16)
project(use_$1 C)
find_package(verbus REQUIRED $2)
add_executable(use use.c)
target_link_libraries(use PRIVATE $3)
CM
	if ! cmake -S "$d" -B "$d/b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
		-DCMAKE_C_FLAGS="${flags[*]}" ${4:+-DPKG_CONFIG_EXECUTABLE=$4} > "$d/log" 2>&1 ||
		! cmake --build "$d/b" >> "$d/log" 2>&1; then
		fail "CMake consumer $1 ($3): $(tail -n 20 "$d/log")"
	else
		run "CMake $3" "$d/b/use"
	fi
}
cmake_consumer shared "" verbus::verbus /nonexistent/pkg-config
cmake_consumer static "COMPONENTS static" verbus::verbus_static

# 5. dlopen(), with the static TLS room the README gives it: libjemalloc's
# thread-locals and the library's own are initial-exec
# (cmake/VerbusCodegen.cmake); a thread-local made initial-exec past that
# room fails here
cat > "$t/use_dl.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(void)
{
	void *h = dlopen("libverbus.so.0", RTLD_NOW | RTLD_LOCAL);
	const char *(*version)(void);

	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	*(void **)&version = dlsym(h, "vb_version");
	if (!version) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	printf("%s\n", version());
	return 0;
}
C
if ! "$cc" "${flags[@]}" "$t/use_dl.c" -ldl -o "$t/use_dl" 2> "$t/cc.log"; then
	fail "dlopen consumer does not build: $(cat "$t/cc.log")"
else
	GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 run "dlopen" "$t/use_dl"
fi

[ "$bad" = 0 ] && echo "install_test: all consumers built against ${tree:-the moved tree} and ran"
exit "$bad"
