#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The layer check can fail (ctest layers_selftest, label unit):
# scripts/check-layers.sh on tiny synthetic trees, one clean (must pass) and
# one per kind of violation (must exit 1 and name the culprit).
#
#   tests/unit/layers_selftest.sh CHECK_LAYERS_SH [CC]
set -uo pipefail
. "$(dirname "$0")/selftest_lib.sh"

check=$1 cc=${2:-cc}
t=$(mktemp -d "${TMPDIR:-/tmp}/verbus-layers-selftest.XXXXXX")
trap 'rm -rf "$t"' EXIT
bad=0

put() { mkdir -p "$(dirname "$t/src/$1")"; printf '%b' "$2" > "$t/src/$1"; }

# A clean tree: api -> proto -> engine -> transport(/verbs) -> core, each
# call down; proto includes the public header (the contract it implements).
clean_tree() {
	rm -rf "$t/src" "$t/build"
	put core/a.h '#ifndef A_H\n#define A_H\nint a_fn(void);\n#endif\n'
	put core/a.c '#include "core/a.h"\nint a_fn(void) { return 1; }\n'
	put transport/t.h '#ifndef T_H\n#define T_H\n#include "core/a.h"\nint t_fn(void);\n#endif\n'
	put transport/t.c '#include "transport/t.h"\nint t_fn(void) { return a_fn(); }\n'
	put transport/verbs/v.h '#include "transport/t.h"\nint v_fn(void);\n'
	put transport/verbs/v.c '#include "transport/verbs/v.h"\nint v_fn(void) { return t_fn(); }\n'
	put engine/e.h '#include "transport/t.h"\nint e_fn(void);\n'
	put engine/e.c '#include "engine/e.h"\nint e_fn(void) { return t_fn(); }\n'
	put api/include/verbus/verbus.h 'int vb_fn(void);\n'
	put proto/p.h '#include <verbus/verbus.h>\n#include "engine/e.h"\nint p_fn(void);\n'
	put proto/p.c '#include "proto/p.h"\nint p_fn(void) { return e_fn(); }\n'
	put api/src/x.c '#include <verbus/verbus.h>\n#include "proto/p.h"\nint vb_fn(void) { return p_fn(); }\n'
}

# Compile every layer's .c files and write build/layers/<layer>.objects the
# way CMakeLists.txt does.
build_tree() {
	local l f o
	mkdir -p "$t/build/layers"
	for l in core transport engine proto api; do
		: > "$t/build/layers/$l.objects"
		while IFS= read -r f; do
			o=$t/build/$f.o
			mkdir -p "$(dirname "$o")"
			"$cc" -c -I"$t/src" -I"$t/src/api/include" -o "$o" "$t/src/$f" || return 1
			echo "$o" >> "$t/build/layers/$l.objects"
		done < <(cd "$t/src" && find "$l" -name '*.c' | LC_ALL=C sort)
	done
}

# expect NAME RC PATTERN [BUILD]: run the check, compare exit status and output
expect() {
	if [ -n "${4:-}" ]; then
		expect_output "$1" "$2" "$3" "$check" "$t/src" "$t/build"
	else
		expect_output "$1" "$2" "$3" "$check" "$t/src"
	fi
}

clean_tree
build_tree || { echo "FAIL: cannot compile the synthetic tree with $cc"; exit 1; }
expect "clean tree" 0 "check-layers: OK" build

clean_tree
put core/a.h '#ifndef A_H\n#define A_H\n#include "engine/e.h"\nint a_fn(void);\n#endif\n'
expect "upward include" 1 \
	"core/a.h:3: upward include: core (layer 0) includes engine/e.h of engine (layer 2)"

clean_tree
put core/a.c '#include <verbus/verbus.h>\nint a_fn(void) { return 1; }\n'
expect "public header from core" 1 \
	"core/a.c:1: upward include: core (layer 0) includes api/include/verbus/verbus.h of public (layer 2)"

clean_tree
put transport/t.c '#include "transport/t.h"\n#include "../engine/e.h"\nint t_fn(void) { return a_fn(); }\n'
expect "upward include by a relative path" 1 \
	"transport/t.c:2: upward include: transport (layer 1) includes engine/e.h of engine (layer 2)"

clean_tree
put core/a.c '#include "core/a.h"\nint t_fn(void);\nint a_fn(void) { return t_fn(); }\n'
build_tree || { echo "FAIL: cannot compile the synthetic tree with $cc"; exit 1; }
expect "upward call (no include)" 1 \
	"upward call: t_fn in core/a.c.o (core) is defined by transport/t.c.o (transport)" build

clean_tree
put transport/t.c '#include "transport/t.h"\n#include <verbus/verbus.h>\nint t_fn(void) { return a_fn(); }\n'
expect "public header from transport" 1 \
	"transport/t.c:2: upward include: transport (layer 1) includes api/include/verbus/verbus.h of public (layer 2)"

clean_tree
put engine/e.c '#include "engine/e.h"\n#include <verbus/verbus.h>\nint e_fn(void) { return t_fn(); }\n'
build_tree || { echo "FAIL: cannot compile the synthetic tree with $cc"; exit 1; }
expect "public header from engine (allowed)" 0 "check-layers: OK" build

clean_tree
put engine/e.c '#include "engine/e.h"\nint vb_fn(void);\nint e_fn(void) { return vb_fn(); }\n'
build_tree || { echo "FAIL: cannot compile the synthetic tree with $cc"; exit 1; }
expect "engine calls the facade" 1 \
	"upward call: vb_fn in engine/e.c.o (engine) is defined by api/src/x.c.o (api)" build

clean_tree
put proto/p.c '#include "proto/p.h"\nint p_fn(void) { return vb_fn(); }\n'
build_tree || { echo "FAIL: cannot compile the synthetic tree with $cc"; exit 1; }
expect "proto calls the facade" 1 \
	"upward call: vb_fn in proto/p.c.o (proto) is defined by api/src/x.c.o (api)" build

clean_tree
put transport/t.h '#ifndef T_H\n#define T_H\n#include "core/a.h"\n#include "transport/verbs/v.h"\nint t_fn(void);\n#endif\n'
expect "directory cycle" 1 "include cycle between directories:"

clean_tree
put core/a.c '#include "core/missing.h"\nint a_fn(void) { return 1; }\n'
expect "unresolved include" 1 "core/a.c:1: #include \"core/missing.h\" resolves to no file"

clean_tree
put tests/x.h 'int x;\n'
put core/a.c '#include "tests/x.h"\nint a_fn(void) { return 1; }\n'
expect "include outside the layers" 1 "core/a.c:1: core includes tests/x.h, which is in no layer"

clean_tree
build_tree && rm -f "$t/build/layers/engine.objects"
expect "missing object list" 1 "layers/engine.objects: configure" build

exit $bad
