#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The layer check (ctest layers_test, docs/architecture.md "Layers and how
# they are checked"): dependencies point down only,
#
#   core 0  <  transport 1  <  engine 2  <  proto 3  <  api 4
#
# The public header (api/include/verbus/verbus.h) is the contract the
# library implements (its types: attributes, messages, statistics, events;
# it includes nothing of ours): it ranks with engine (layer 2), so engine,
# proto and api may include it, core and transport may not. The functions
# it declares are the facade's (api/src): a call to one from below is an
# upward call (2.).
#   scripts/check-layers.sh SRC_DIR [BUILD_DIR]
#
# 1. includes: every #include "..." (and #include <verbus/...>, the public
#    header) in core/, transport/, engine/, proto/, api/src/, api/include/ is
#    resolved (next to the including file, then from SRC_DIR, then
#    api/include/); a file that includes a header of a higher layer, or one
#    that resolves to nothing or to a file outside those directories, fails.
# 2. calls (with BUILD_DIR): BUILD_DIR/layers/<layer>.objects lists each
#    layer target's object files (written by CMakeLists.txt from
#    $<TARGET_OBJECTS:verbus_<layer>>); a symbol an object leaves undefined
#    (nm) that an object of a higher layer defines fails.
# 3. cycles: an include cycle between directories (e.g. transport <->
#    transport/verbs) fails too; one between layers always has an upward
#    edge, so 1. already names it.
# Every problem is printed; the exit status is 1 if there was any, 2 on bad
# usage. No allow-list: a dependency that must go up is a design change.
set -uo pipefail

usage() { echo "usage: $0 SRC_DIR [BUILD_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
src=$(cd "$1" 2>/dev/null && pwd) || usage
build=${2:-}
if [ -n "$build" ]; then build=$(cd "$build" 2>/dev/null && pwd) || usage; fi

LAYERS="core transport engine proto api"
DIRS="core transport engine proto api/src api/include"
work=$(mktemp -d "${TMPDIR:-/tmp}/verbus-layers.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
problem() { echo "check-layers: $*"; fail=1; }

# layer of a SRC_DIR-relative path, or "" outside the layered directories
layer_of() {
	case $1 in
	core/*) echo core ;; transport/*) echo transport ;; engine/*) echo engine ;;
	proto/*) echo proto ;; api/include/*) echo public ;; api/src/*) echo api ;;
	*) echo "" ;;
	esac
}
rank_of() {
	local i=0 l
	[ "$1" = public ] && set -- engine # the contract ranks with engine
	for l in $LAYERS; do
		[ "$l" = "$1" ] && { echo $i; return; }
		i=$((i + 1))
	done
	echo -1
}

# ---- 1. includes -------------------------------------------------------------
# edges: "file<TAB>line<TAB>included file", all SRC_DIR-relative
cd "$src" || exit 2
files=()
for d in $DIRS; do
	[ -d "$d" ] && while IFS= read -r f; do files+=("$f"); done \
		< <(find "$d" -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort)
done
[ ${#files[@]} -gt 0 ] || { problem "no source files under $src ($DIRS)"; exit 1; }

: > "$work/edges"
for f in "${files[@]}"; do
	# "file:line:#include ..." (grep -H keeps the name with one file)
	grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*("|<verbus/)' "$f"
done | while IFS= read -r hit; do
	f=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
	name=$(sed -E 's/^[^"<]*["<]([^">]+)[">].*/\1/' <<<"$text")
	target=""
	for cand in "$(dirname "$f")/$name" "$name" "api/include/$name"; do
		if [ -f "$cand" ]; then
			target=$(realpath -s -m --relative-to=. "$cand")
			break
		fi
	done
	if [ -z "$target" ]; then
		echo "check-layers: $f:$line: #include \"$name\" resolves to no file in $src"
		continue
	fi
	printf '%s\t%s\t%s\n' "$f" "$line" "$target" >> "$work/edges"
done > "$work/unresolved"
if [ -s "$work/unresolved" ]; then cat "$work/unresolved"; fail=1; fi

while IFS=$'\t' read -r f line target; do
	from=$(layer_of "$f") to=$(layer_of "$target")
	if [ -z "$to" ]; then
		problem "$f:$line: $from includes $target, which is in no layer"
	elif [ "$(rank_of "$to")" -gt "$(rank_of "$from")" ]; then
		problem "$f:$line: upward include: $from (layer $(rank_of "$from")) includes" \
			"$target of $to (layer $(rank_of "$to"))"
	fi
done < "$work/edges"

# ---- 3. include cycles between directories ------------------------------------
# Strongly connected directories (transitive closure over the directory
# graph; a handful of nodes), each cycle printed with one include per edge.
awk -F'\t' '
function dir(p) { sub(/\/[^\/]*$/, "", p); return p }
{
	a = dir($1); b = dir($3)
	if (a == b) next
	if (!((a, b) in e)) { e[a, b] = $1 ":" $2 " includes " $3; n[a] = 1; n[b] = 1 }
}
END {
	for (a in n) for (b in n) r[a, b] = ((a, b) in e)
	for (k in n) for (a in n) if (r[a, k]) for (b in n) if (r[k, b]) r[a, b] = 1
	for (a in n) {
		if (done[a] || !r[a, a]) continue
		msg = ""
		for (b in n) if (r[a, b] && r[b, a]) { done[b] = 1; msg = msg " " b }
		print "check-layers: include cycle between directories:" msg
		for (x in n) for (y in n)
			if (((x, y) in e) && r[a, x] && r[x, a] && r[a, y] && r[y, a])
				print "check-layers:   " x " -> " y ": " e[x, y]
	}
}' "$work/edges" > "$work/cycles"
if [ -s "$work/cycles" ]; then cat "$work/cycles"; fail=1; fi

nedges=$(wc -l < "$work/edges")
echo "check-layers: ${#files[@]} files, $nedges includes checked"

# ---- 2. calls -------------------------------------------------------------------
if [ -n "$build" ]; then
	: > "$work/syms"
	nobj=0
	for l in $LAYERS; do
		list=$build/layers/$l.objects
		if [ ! -f "$list" ]; then
			# a layer with sources must have a target
			if [ -d "$src/$l" ]; then problem "no $list: configure $build with CMake first"; fi
			continue
		fi
		while IFS= read -r o; do
			[ -n "$o" ] || continue
			if [ ! -f "$o" ]; then problem "$o (layer $l) is not built: build $build first"; continue; fi
			nobj=$((nobj + 1))
			# "layer object name type": defined globals and undefined references
			nm -P "$o" | awk -v l="$l" -v o="${o#"$build"/}" \
				'$2 ~ /^[UwABCDGRSTVWiu]$/ { print l, o, $1, $2 }' >> "$work/syms"
		done < "$list"
	done
	awk -v ranks="$LAYERS" '
	BEGIN { n = split(ranks, L, " "); for (i = 1; i <= n; i++) rank[L[i]] = i - 1 }
	$4 == "U" || $4 == "w" { ref[++nref] = $0; next }
	!($3 in def) { def[$3] = $2; deflayer[$3] = $1 }
	END {
		for (i = 1; i <= nref; i++) {
			split(ref[i], f, " ")
			s = f[3]
			if ((s in def) && rank[deflayer[s]] > rank[f[1]])
				printf "check-layers: upward call: %s in %s (%s) is defined by %s (%s)\n",
					s, f[2], f[1], def[s], deflayer[s]
		}
	}' "$work/syms" > "$work/calls"
	if [ -s "$work/calls" ]; then cat "$work/calls"; fail=1; fi
	echo "check-layers: $nobj objects, $(awk '$4 == "U" || $4 == "w"' "$work/syms" | wc -l) undefined references checked"
fi

if [ $fail -ne 0 ]; then
	echo "check-layers: FAILED (dependencies must point down: $LAYERS)"
	exit 1
fi
echo "check-layers: OK"
