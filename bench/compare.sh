#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# verbus against raw verbs (perftest) and UCX (ucx_perftest), side by side,
# on one RDMA device in one run (one Soft-RoCE VM boot when the host has none),
# in interleaved rounds: for each figure raw, UCX and verbus run one after the
# other, and that is repeated --rounds times. Method: docs/benchmarks.md.
#
#   bench/compare.sh [--build DIR] [--out DIR] [--scale F] [--rounds R]
#                    [--rounds2 R] [--ip ADDR] [--dev NAME] [--gid N]
#                    [--timeout SECS] [--full]
#
#   --build DIR    build dir holding bench/vb_bench (default build)
#   --out DIR      results dir (default build/bench-results): results.json,
#                  table.txt, latency.png, lat.dat, kv.txt, raw/ (every
#                  tool's output, one file set per step and round)
#   --scale F      multiplies every iteration count (default 1)
#   --rounds R     rounds of the target figures (default 3): ORDERED 64 B
#                  latency and rate, FANOUT 64 B rates, failover
#   --rounds2 R    rounds of the other figures (FANOUT latency, 1 KiB,
#                  64 KiB; default 1, with --full the same as --rounds: on a
#                  loaded 2-core host 3 rounds of them alone take ~4 min)
#   --ip/--dev/--gid  device address, verbs device, GID index
#                  (default 10.77.0.1, rxe0, 1: the Soft-RoCE VM's)
#   --standby-ip ADDR  a second device's address for the failover bench's
#                  standby connections (default: VERBUS_STANDBY_IP; in the
#                  VM 10.77.1.1, rxe1; none: the standby on the same device)
#   --timeout SECS limit for the whole measurement (default 600); steps
#                  not reached are reported as "n/a (cut by the time limit)"
#   --full         also UCX at 1 KiB and 64 KiB, verbus FANOUT to 2
#                  subscribers, and --rounds2 defaults to --rounds
#
# Internal phases (the default runs both): --measure (runs the tools, on the
# device: inside the VM) and --report (parses raw/, prints the table, writes
# results.json and the plot; on the host; can be rerun on an existing out/).
#
# Every tool call is wrapped in `timeout`; a tool that fails or times out is
# reported as "n/a (reason)" in its cell and the run goes on. Progress lines
# go to stderr, the table to stdout.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=build
out=""
scale=1
rounds=3
rounds2=""
ip=${VERBUS_TEST_IP:-10.77.0.1}
dev=${VERBUS_DEVICE:-rxe0}
gid=${VERBUS_GID_INDEX:-1}
standby_ip=${VERBUS_STANDBY_IP:-}
total_timeout=600
full=0
phase=all

while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --rounds2) rounds2=$2; shift 2 ;;
    --ip) ip=$2; shift 2 ;;
    --dev) dev=$2; shift 2 ;;
    --gid) gid=$2; shift 2 ;;
    --standby-ip) standby_ip=$2; shift 2 ;;
    --timeout) total_timeout=$2; shift 2 ;;
    --full) full=1; shift ;;
    --measure) phase=measure; shift ;;
    --report) phase=report; shift ;;
    -h|--help) sed -n '3,38p' "$0"; exit 0 ;;
    *) echo "compare: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare: --rounds needs a positive integer" >&2; exit 2; }
[ -n "$rounds2" ] || { if [ "$full" = 1 ]; then rounds2=$rounds; else rounds2=1; fi; }
[[ "$rounds2" =~ ^[1-9][0-9]*$ ]] || { echo "compare: --rounds2 needs a positive integer" >&2; exit 2; }
case "$build" in /*) ;; *) build="$root/$build" ;; esac
[ -n "$out" ] || out="$build/bench-results"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
vb="$build/bench/vb_bench"
t_start=$(date +%s)
# the Soft-RoCE VM has a second device (rxe1 on 10.77.1.1) for standbys
[ -n "$standby_ip" ] || [ "$ip" != 10.77.0.1 ] || standby_ip=10.77.1.1

progress() { printf '[compare %4ss] %s\n' $(( $(date +%s) - t_start )) "$*" >&2; }
n() { awk -v a="$1" -v s="$scale" 'BEGIN { v = int(a * s); if (v < 10) v = 10; print v }'; }

# ---------------------------------------------------------------- measure --
# Iteration counts at --scale 1. perftest, ucx_perftest and vb_bench get the
# same counts. Under TCG each tool call costs 2-9 s of start-up (libraries
# over 9p, device open), more than the measurement at these counts.
LAT_N=5000       # ping-pongs at 64 B (UCX: split over its percentile ladder)
LAT1K_N=2000     # ping-pongs at 1 KiB
LAT64K_N=200     # ping-pongs at 64 KiB
LAT_SECS=15      # vb_bench lat --max-secs: a round stuck in the ~4 ms tick
                 # mode stops after this long (samples say how many it got)
BW64_N=20000     # one-way messages at 64 B
BW1K_N=5000
BW64K_N=500      # (verbus runs 1 KiB and 64 KiB in one call with this count)
FAN_N=10000      # messages published per FANOUT run (each subscriber gets them all)
FO_FAULTS=7      # faults per failover round
UCX_RANKS="10 25 50 75 90 95 99 99.9"  # ucx_perftest -R ladder (one run per rank)

waitport() { # PORT SECS: until something listens on TCP PORT
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.2
  done
  return 1
}

reap() { # PID SECS: let a server finish, then stop it
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.2
  done
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# server/client pair: NAME PORT SECS -- COMMAND... (the client adds $ip)
pair() {
  local name=$1 port=$2 secs=$3 spid rc
  shift 4
  echo "${pre[*]:1} $* $ip" > "$out/raw/$name.cmd"
  "${pre[@]}" timeout -k 5 "$secs" "$@" > "$out/raw/$name.srv" 2>&1 &
  spid=$!
  if waitport "$port" 30; then
    "${pre[@]}" timeout -k 5 "$secs" "$@" "$ip" > "$out/raw/$name.out" 2>&1
    rc=$?
  else
    echo "server did not listen on port $port within 30 s" > "$out/raw/$name.out"
    rc=1
  fi
  echo "$rc" > "$out/raw/$name.rc"
  reap "$spid" 10
  return 0
}

pt_lat() { # rc|ud SIZE ITERS ROUND: ib_send_lat, every sample printed (-H)
  local it; it=$(n "$3")
  progress "round $4: perftest ib_send_lat ${1^^} $2 B x $it"
  pair "pt_lat_$1_$2.r$4" $((++port)) 90 -- ib_send_lat -d "$dev" -x "$gid" -p "$port" \
    -c "${1^^}" -s "$2" -n "$it" -H
}

pt_bw() { # rc|ud SIZE ITERS ROUND: ib_send_bw
  local it; it=$(n "$3")
  progress "round $4: perftest ib_send_bw ${1^^} $2 B x $it"
  pair "pt_bw_$1_$2.r$4" $((++port)) 60 -- ib_send_bw -d "$dev" -x "$gid" -p "$port" \
    -c "${1^^}" -s "$2" -n "$it"
}

ucx_env() { # rc|ud
  if [ "$1" = rc ]; then
    pre=(env UCX_TLS=rc_verbs,ud_verbs:aux)  # rc_verbs needs ud for its handshake
  else
    pre=(env UCX_TLS=ud_verbs)
  fi
  pre+=(UCX_NET_DEVICES="$dev:1" UCX_UD_VERBS_ETH_DGID_CHECK=n)
}

ucx_lat() { # rc|ud SIZE ITERS ROUND: tag_lat once per rank of the -R ladder, one process
  # ucx_perftest prints one percentile per run (over its last 2048
  # samples), so a batch file (-b) runs the ladder in one process pair,
  # ITERS split over the ranks
  local name="ucx_$1_lat_$2.r$4" per r nr
  nr=$(echo $UCX_RANKS | wc -w)
  per=$(( $(n "$3") / nr )); [ $per -ge 50 ] || per=50
  : > "$out/raw/$name.batch"
  for r in $UCX_RANKS; do
    echo "r$r -t tag_lat -s $2 -n $per -w 50 -R $r" >> "$out/raw/$name.batch"
  done
  ucx_env "$1"
  progress "round $4: ucx_perftest $1_verbs tag_lat $2 B, ranks $UCX_RANKS x $per"
  pair "$name" $((++port)) 120 -- ucx_perftest -p "$port" -b "$out/raw/$name.batch" -f -v
  pre=()
}

ucx_bw() { # rc|ud SIZE ITERS ROUND: tag_bw
  local it; it=$(n "$3")
  ucx_env "$1"
  progress "round $4: ucx_perftest $1_verbs tag_bw $2 B x $it"
  pair "ucx_$1_bw_$2.r$4" $((++port)) 90 -- ucx_perftest -p "$port" -t tag_bw -s "$2" \
    -n "$it" -w 1000 -f -v
  pre=()
}

vbrun() { # NAME SECS ARGS...: vb_bench, its JSON lines into raw/NAME.json
  local name=$1 secs=$2
  shift 2
  progress "round ${name##*.r}: vb_bench $*"
  echo "vb_bench $*" > "$out/raw/$name.cmd"
  timeout -k 5 "$secs" stdbuf -oL "$vb" "$@" --ip "$ip" --json "$out/raw/$name.json" \
    > "$out/raw/$name.out" 2>&1
  echo $? > "$out/raw/$name.rc"
}

# One round of each figure group: raw, UCX, verbus one after the other.
g_lat64() {
  pt_lat rc 64 "$LAT_N" "$1"
  ucx_lat rc 64 "$LAT_N" "$1"
  vbrun "vb_lat_ordered_64.r$1" 150 lat --class ordered --size 64 --count "$(n $LAT_N)" \
    --max-secs "$(n $LAT_SECS)"
}
g_bw64() {
  pt_bw rc 64 "$BW64_N" "$1"
  ucx_bw rc 64 "$BW64_N" "$1"
  vbrun "vb_bw_ordered_64.r$1" 120 bw --class ordered --size 64 --count "$(n $BW64_N)"
}
g_fanout() {
  pt_bw ud 64 "$BW64_N" "$1"
  ucx_bw ud 64 "$BW64_N" "$1"
  vbrun "vb_bw_fanout_64.r$1" 120 bw --class fanout --size 64 --count "$(n $BW64_N)"
  vbrun "vb_fanout_4p.r$1" 150 fanout --class fanout --size 64 --subs 4 --count "$(n $FAN_N)"
  vbrun "vb_fanout_4in1.r$1" 150 fanout --class fanout --size 64 --subs 4 --sub-procs 1 \
    --count "$(n $FAN_N)"
}
g_failover() {
  # fault -> first delivery vs a fresh RC connection (measured by the same
  # call); the standby on the second device when there is one (rxe1)
  if [ -n "$standby_ip" ]; then
    vbrun "vb_failover.r$1" 200 failover --faults "$FO_FAULTS" --standby-ip "$standby_ip"
  else
    vbrun "vb_failover.r$1" 200 failover --faults "$FO_FAULTS" --one-device
  fi
}
g_fanout_lat() {
  pt_lat ud 64 "$LAT_N" "$1"
  ucx_lat ud 64 "$LAT_N" "$1"
  vbrun "vb_lat_fanout_64.r$1" 150 lat --class fanout --size 64 --count "$(n $LAT_N)" \
    --max-secs "$(n $LAT_SECS)"
}
g_lat1k() {
  pt_lat rc 1024 "$LAT1K_N" "$1"
  [ "$full" = 1 ] && ucx_lat rc 1024 "$LAT1K_N" "$1"
  vbrun "vb_lat_ordered_1k.r$1" 120 lat --class ordered --size 1024 --count "$(n $LAT1K_N)" \
    --max-secs "$(n $LAT_SECS)"
}
g_big() {
  pt_lat rc 65536 "$LAT64K_N" "$1"
  [ "$full" = 1 ] && ucx_lat rc 65536 "$LAT64K_N" "$1"
  vbrun "vb_lat_ordered_64k.r$1" 120 lat --class ordered --size 65536 --count "$(n $LAT64K_N)" \
    --max-secs "$(n $LAT_SECS)"
  pt_bw rc 1024 "$BW1K_N" "$1"
  pt_bw rc 65536 "$BW64K_N" "$1"
  [ "$full" = 1 ] && ucx_bw rc 65536 "$BW64K_N" "$1"
  vbrun "vb_bw_ordered_big.r$1" 120 bw --class ordered --size 1024,65536 --count "$(n $BW64K_N)"
  [ "$full" = 1 ] && vbrun "vb_fanout_2p.r$1" 150 fanout --class fanout --size 64 --subs 2 \
    --count "$(n $FAN_N)"
}

measure() {
  local g k
  mkdir -p "$out/raw"
  rm -f "$out"/raw/*
  port=18500
  {
    echo "kernel=$(uname -r)"
    echo "device=$dev"
    echo "ip=$ip"
    echo "gid_index=$gid"
    echo "mtu=$(ibv_devinfo -d "$dev" 2>/dev/null | awk '/active_mtu/ {print $2; exit}')"
    echo "ncpu=$(nproc)"
    echo "clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "scale=$scale"
    echo "rounds=$rounds"
    echo "rounds2=$rounds2"
    echo "full=$full"
    echo "counts=lat64:$(n $LAT_N) lat1k:$(n $LAT1K_N) lat64k:$(n $LAT64K_N) bw64:$(n $BW64_N) bw1k:$(n $BW1K_N) bw64k:$(n $BW64K_N) fanout:$(n $FAN_N) failover_faults:$FO_FAULTS lat_max_secs:$(n $LAT_SECS)"
  } > "$out/raw/meta"
  pre=()

  # Groups in order of importance (the targets first), so that a run cut
  # short by --timeout loses the least important figures; within a group
  # the rounds are interleaved: raw, UCX, verbus, raw, UCX, verbus, ...
  for g in g_lat64 g_bw64 g_fanout g_failover; do
    for ((k = 1; k <= rounds; k++)); do "$g" "$k"; done
  done
  for g in g_fanout_lat g_lat1k g_big; do
    for ((k = 1; k <= rounds2; k++)); do "$g" "$k"; done
  done

  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/raw/meta"
  echo "measure_s=$(( $(date +%s) - t_start ))" >> "$out/raw/meta"
  progress "measurements done"
}

# ----------------------------------------------------------------- report --
# Parsers: every tool's output -> "STEP.rK.FIELD VALUE" lines (kv.txt).
# Latency in us one-way, failover in ms, rates in msg/s and MB/s; "tick" is
# the share of samples above 1 ms in %, "fast50" the p50 of the samples at or
# below 1 ms.
TICK_US=1000

parse_perftest_lat() { # FILE (ib_send_lat -H: "i, usec" per sample)
  # Both sides print the samples of the same ping-pong. The client's are
  # used; when they are not numbers (perftest printed "inf": its cycle
  # counter calibration failed under load) the server's are used instead.
  local b f=$1 side=client; b=$(basename "$1" .out)
  if [ "$(grep -cE '^[0-9]+, *[0-9.]+$' "$f")" -lt 5 ] && [ -s "${1%.out}.srv" ]; then
    f="${1%.out}.srv"; side=server
  fi
  echo "$b.side $side"
  awk -F', *' '/^[0-9]+, *[0-9.]+$/ { print $2 }' "$f" | sort -g | awk -v b="$b" -v t="$TICK_US" '
    function rk(p, n,   k) { k = int(p / 100 * n + 0.999999); if (k < 1) k = 1; return v[k] }
    { v[NR] = $1; if ($1 <= t) nf++ }
    END {
      if (NR < 5) exit
      printf "%s.p50 %s\n%s.p90 %s\n%s.p99 %s\n%s.p999 %s\n%s.max %s\n%s.samples %d\n", b, rk(50, NR),
        b, rk(90, NR), b, rk(99, NR), b, rk(99.9, NR), b, v[NR], b, NR
      printf "%s.tick %.3f\n", b, 100 * (NR - nf) / NR
      if (nf) printf "%s.fast50 %s\n", b, rk(50, nf)
    }'
}

parse_perftest_bw() { # FILE.srv: the server's (receiver's) figure; the client's if none
  local b size f mpps=""
  b=$(basename "$1" .srv); size=${b%.r*}; size=${size##*_}
  for f in "$1" "${1%.srv}.out"; do
    [ -s "$f" ] || continue
    mpps=$(awk -v s="$size" '$1 == s && NF >= 5 && $5 ~ /^[0-9.]+/ { v = $5 + 0 } END { if (v != "") print v }' "$f")
    [ -n "$mpps" ] && break
  done
  [ -n "$mpps" ] || return
  awk -v b="$b" -v m="$mpps" -v s="$size" 'BEGIN { printf "%s.msgs %.0f\n%s.mbs %.2f\n", b, m * 1e6, b, m * s }'
}

parse_ucx_bw() { # FILE: -v CSV "iterations,pctile,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr"
  local b size; b=$(basename "$1" .out); size=${b%.r*}; size=${size##*_}
  awk -F, -v b="$b" -v s="$size" '{ n = NF; ok = n >= 8
      for (i = n - 7; ok && i <= n; i++) if ($i !~ /^ *[0-9.]+ *$/) ok = 0
      if (ok) m = $n }
    END { if (m != "") printf "%s.msgs %.0f\n%s.mbs %.2f\n", b, m, b, m * s / 1e6 }' "$1"
}

parse_ucx_lat() { # FILE: one CSV line per rank of the ladder, "rR,iterations,pctile,..."
  # p50 and p99 are the runs at those ranks. The tick-mode share is bounded
  # by the ladder: above 100 - (highest rank whose value is <= 1 ms); it is
  # reported as that upper bound (ranks.ucx: the whole ladder). The
  # fast-mode p50 is the ladder read (linear in rank) at 50 x (1 - share).
  local b; b=$(basename "$1" .out)
  awk -F, -v b="$b" -v t="$TICK_US" '
    $1 ~ /^r[0-9.]+$/ && $3 ~ /^ *[0-9.]+ *$/ { r = substr($1, 2) + 0; rank[++n] = r; val[n] = $3 + 0 }
    END {
      if (!n) exit
      lo = 0
      for (i = 1; i <= n; i++) {
        printf "%s.R%s %s\n", b, rank[i], val[i]
        if (rank[i] == 50) printf "%s.p50 %s\n", b, val[i]
        if (rank[i] == 99) printf "%s.p99 %s\n", b, val[i]
        if (val[i] <= t && rank[i] > lo) lo = rank[i]
      }
      share = 100 - lo
      printf "%s.tick %.3f\n", b, share
      q = 50 * (1 - share / 100)
      # the ladder read at rank q (ranks ascending as written)
      f = ""
      for (i = 1; i <= n; i++) {
        if (rank[i] >= q) {
          if (i == 1 || rank[i] == q) f = val[i]
          else f = val[i-1] + (val[i] - val[i-1]) * (q - rank[i-1]) / (rank[i] - rank[i-1])
          break
        }
      }
      if (f != "" && f <= t) printf "%s.fast50 %.2f\n", b, f
    }' "$1"
}

parse_verbus() { # FILE: vb_bench --json lines
  local b; b=$(basename "$1" .json)
  awk -v b="$b" '
    function num(k,   r) { if (match($0, "\"" k "\":[0-9.]+")) { r = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", r); return r } return "" }
    function str(k,   r) { if (match($0, "\"" k "\":\"[^\"]*\"")) { r = substr($0, RSTART, RLENGTH); sub(/^[^:]*:"/, "", r); sub(/"$/, "", r); return r } return "" }
    {
      bn = str("bench"); s = num("size")
      if (bn == "failover") {
        printf "%s.p50 %.3f\n%s.p99 %.3f\n%s.max %.3f\n%s.cold %.3f\n%s.audit_ok %s\n",
          b, num("p50_ns") / 1e6, b, num("p99_ns") / 1e6, b, num("max_ns") / 1e6, b, num("cold_connect_ns") / 1e6,
          b, ($0 ~ /"audit_ok":true/) ? 1 : 0
      } else if (bn == "lat") {
        k = b "." s
        printf "%s.p50 %.2f\n%s.p90 %.2f\n%s.p99 %.2f\n%s.p999 %.2f\n%s.max %.2f\n%s.samples %s\n",
          k, num("p50") / 1e3, k, num("p90") / 1e3, k, num("p99") / 1e3, k, num("p999") / 1e3,
          k, num("max") / 1e3, k, num("count")
        printf "%s.tick %.3f\n", k, 100 * num("tick_share")
        if (num("fast_p50") > 0) printf "%s.fast50 %.2f\n", k, num("fast_p50") / 1e3
      } else {
        k = b "." s
        printf "%s.msgs %s\n%s.mbs %s\n%s.p99 %.2f\n%s.lost %s\n%s.delivered %s\n%s.busy %s\n", k,
          num("agg_deliveries_per_s"), k, num("mb_per_s"), k, num("worst_sub_p99_ns") / 1e3,
          k, num("lost"), k, num("delivered"), k, num("busy_threads")
      }
    }' "$1"
}

parse_all() {
  local f
  for f in "$out"/raw/pt_lat_*.out; do [ -e "$f" ] && parse_perftest_lat "$f"; done
  for f in "$out"/raw/pt_bw_*.srv; do [ -e "$f" ] && parse_perftest_bw "$f"; done
  for f in "$out"/raw/ucx_*_bw_*.out; do [ -s "$f" ] && parse_ucx_bw "$f"; done
  for f in "$out"/raw/ucx_*_lat_*.out; do [ -s "$f" ] && parse_ucx_lat "$f"; done
  for f in "$out"/raw/vb_*.json; do [ -s "$f" ] && parse_verbus "$f"; done
  return 0
}

# why a step has no figure: "STEP.rK reason" for every step that ran
why_all() {
  local f name rc last
  for f in "$out"/raw/*.cmd; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .cmd)
    if [ ! -e "$out/raw/$name.rc" ]; then
      echo "$name cut: time limit"
      continue
    fi
    rc=$(cat "$out/raw/$name.rc")
    last=$(grep -iE "unable|fail|error|couldn't|no subscriber|refused|timed out" \
      "$out/raw/$name.out" 2>/dev/null | grep -v 'verbus warn' | tail -1)
    [ -n "$last" ] || last=$(grep -v '^[[:space:]]*$' "$out/raw/$name.out" 2>/dev/null \
      | grep -viE '^(\[compare|bench |-{5}| *#bytes)' | tail -1)
    last=$(echo "$last" | tr -s ' \t' ' ' | sed 's/^ //' | cut -c1-50)
    case "$rc" in
      124|137) echo "$name timeout" ;;
      0) echo "$name no figure in output${last:+: $last}" ;;
      *) echo "$name exit $rc${last:+: $last}" ;;
    esac
  done
}

# figure | unit | group (1: --rounds, 2: --rounds2) | busy threads raw/UCX/verbus |
# raw STEP:FIELD | UCX STEP:FIELD | verbus STEP:FIELD | target id
ROWS='ORDERED 64 B one-way p50|us|1|2/2/2|pt_lat_rc_64:p50|ucx_rc_lat_64:p50|vb_lat_ordered_64:64.p50|p50
ORDERED 64 B one-way p99|us|1|2/2/2|pt_lat_rc_64:p99|ucx_rc_lat_64:p99|vb_lat_ordered_64:64.p99|p99
ORDERED 64 B share of samples > 1 ms|%|1|2/2/2|pt_lat_rc_64:tick|ucx_rc_lat_64:tick|vb_lat_ordered_64:64.tick|
ORDERED 64 B fast-mode p50 (<= 1 ms)|us|1|2/2/2|pt_lat_rc_64:fast50|ucx_rc_lat_64:fast50|vb_lat_ordered_64:64.fast50|
ORDERED 64 B one-way p99.9|us|1|2/2/2|pt_lat_rc_64:p999||vb_lat_ordered_64:64.p999|
ORDERED 64 B msg/s|msg/s|1|2/2/3|pt_bw_rc_64:msgs|ucx_rc_bw_64:msgs|vb_bw_ordered_64:64.msgs|rate
FANOUT 64 B msg/s, 1 sub (raw: UD)|msg/s|1|2/2/3|pt_bw_ud_64:msgs|ucx_ud_bw_64:msgs|vb_bw_fanout_64:64.msgs|fan1
FANOUT 64 B deliv/s, 4 subs in 4 procs|msg/s|1|2/-/6|pt_bw_ud_64:msgs||vb_fanout_4p:64.msgs|fan4p
FANOUT 64 B deliv/s, 4 subs in 1 proc|msg/s|1|2/-/3|pt_bw_ud_64:msgs||vb_fanout_4in1:64.msgs|fan1p
FANOUT 4 subs in 4 procs: worst sub p99|us|1|-/-/6|||vb_fanout_4p:64.p99|
FANOUT 4 subs in 1 proc: worst sub p99|us|1|-/-/3|||vb_fanout_4in1:64.p99|
failover p50 (raw: a new RC connection)|ms|1|-|vb_failover:cold||vb_failover:p50|fo
failover: fault -> 1st delivery p99|ms|1|-|||vb_failover:p99|
FANOUT 64 B one-way p50 (raw: UD)|us|2|2/2/2|pt_lat_ud_64:p50|ucx_ud_lat_64:p50|vb_lat_fanout_64:64.p50|
FANOUT 64 B one-way p99 (raw: UD)|us|2|2/2/2|pt_lat_ud_64:p99|ucx_ud_lat_64:p99|vb_lat_fanout_64:64.p99|
FANOUT 64 B share of samples > 1 ms|%|2|2/2/2|pt_lat_ud_64:tick|ucx_ud_lat_64:tick|vb_lat_fanout_64:64.tick|
FANOUT 64 B fast-mode p50 (<= 1 ms)|us|2|2/2/2|pt_lat_ud_64:fast50|ucx_ud_lat_64:fast50|vb_lat_fanout_64:64.fast50|
ORDERED 1 KiB one-way p50|us|2|2/2/2|pt_lat_rc_1024:p50|ucx_rc_lat_1024:p50|vb_lat_ordered_1k:1024.p50|
ORDERED 1 KiB one-way p99|us|2|2/2/2|pt_lat_rc_1024:p99|ucx_rc_lat_1024:p99|vb_lat_ordered_1k:1024.p99|
ORDERED 1 KiB share of samples > 1 ms|%|2|2/2/2|pt_lat_rc_1024:tick|ucx_rc_lat_1024:tick|vb_lat_ordered_1k:1024.tick|
ORDERED 1 KiB fast-mode p50 (<= 1 ms)|us|2|2/2/2|pt_lat_rc_1024:fast50|ucx_rc_lat_1024:fast50|vb_lat_ordered_1k:1024.fast50|
ORDERED 64 KiB one-way p50|us|2|2/2/2|pt_lat_rc_65536:p50|ucx_rc_lat_65536:p50|vb_lat_ordered_64k:65536.p50|
ORDERED 64 KiB one-way p99|us|2|2/2/2|pt_lat_rc_65536:p99|ucx_rc_lat_65536:p99|vb_lat_ordered_64k:65536.p99|
ORDERED 1 KiB MB/s|MB/s|2|2/-/3|pt_bw_rc_1024:mbs||vb_bw_ordered_big:1024.mbs|
ORDERED 64 KiB MB/s|MB/s|2|2/2/3|pt_bw_rc_65536:mbs|ucx_rc_bw_65536:mbs|vb_bw_ordered_big:65536.mbs|
FANOUT 64 B deliv/s, 2 subs in 2 procs|msg/s|2|2/-/4|pt_bw_ud_64:msgs||vb_fanout_2p:64.msgs|'

# target id | label | test on the median ratio | condition on UCX
TARGETS='p50|floor: ORDERED 64 B one-way p50 <= 1.25x raw and not above UCX|<=1.25|le
p50|aim: ORDERED 64 B one-way p50 <= 1.10x raw and not above UCX|<=1.10|le
p99|floor: ORDERED 64 B one-way p99 <= 2x raw|<=2|
rate|floor: ORDERED 64 B msg/s >= 3x raw and ahead of UCX|>=3|gt
rate|aim: ORDERED 64 B msg/s >= 5x raw and ahead of UCX|>=5|gt
fan1|floor: FANOUT 64 B msg/s to 1 subscriber >= 1.5x raw UD|>=1.5|
fan1p|floor: FANOUT 64 B deliveries/s to 4 subscribers (1 process) >= 2x raw UD|>=2|
fan1p|aim: FANOUT 64 B deliveries/s to 4 subscribers (1 process) >= 4x raw UD|>=4|
fan4p|aim: FANOUT 64 B deliveries/s to 4 subscribers (4 processes) >= 4x raw UD|>=4|
fo|floor: failover fault -> first delivery p50 <= 0.2x a new RC connection|<=0.2|
fo|aim: failover fault -> first delivery p50 <= 0.1x a new RC connection|<=0.1|'

report() {
  [ -d "$out/raw" ] || { echo "compare: no measurements in $out/raw" >&2; return 1; }
  # a --report of an earlier run: the host's load as that run saw it
  if [ -z "${HOST_LOAD:-}" ] && [ -r "$out/host_load" ]; then
    HOST_LOAD=$(sed -n 's/^HOST_LOAD=//p' "$out/host_load")
    HOST_LOAD_END=$(sed -n 's/^HOST_LOAD_END=//p' "$out/host_load")
  fi
  local meta="$out/raw/meta" kvf="$out/kv.txt" whyf="$out/why.txt" tbl="$out/table.txt" json="$out/results.json"
  local m_rounds m_rounds2 m_full m_done
  parse_all > "$kvf"
  why_all > "$whyf"
  m_rounds=$(sed -n 's/^rounds=//p' "$meta"); m_rounds2=$(sed -n 's/^rounds2=//p' "$meta")
  m_full=$(sed -n 's/^full=//p' "$meta"); m_done=$(sed -n 's/^measure_s=//p' "$meta")
  printf '%s\n' "$ROWS" > "$out/rows.txt"
  printf '%s\n' "$TARGETS" > "$out/targets.txt"
  # the commands, one per step (round 1's; the rounds differ only in ports)
  for f in "$out"/raw/*.r1.cmd; do
    [ -e "$f" ] && printf '%s %s\n' "$(basename "$f" .r1.cmd)" "$(tr -d '\n' < "$f")"
  done > "$out/cmds.txt"
  {
    echo "verbus vs raw verbs (perftest) and UCX (ucx_perftest), same device, same run, interleaved rounds"
    echo "device $(sed -n 's/^device=//p' "$meta"), MTU $(sed -n 's/^mtu=//p' "$meta"), kernel $(sed -n 's/^kernel=//p' "$meta"), $(sed -n 's/^ncpu=//p' "$meta") CPU(s), clocksource $(sed -n 's/^clocksource=//p' "$meta"); guest load avg at start: $(sed -n 's/^load_start=//p' "$meta"), at end: $(sed -n 's/^load_end=//p' "$meta")${HOST_LOAD:+; host (shared) load before: $HOST_LOAD, after: ${HOST_LOAD_END:-?}}"
    echo "rounds: ${m_rounds:-?} for the target figures, ${m_rounds2:-?} for the others; counts: $(sed -n 's/^counts=//p' "$meta")"
    echo "cell = median of the rounds (min-max); ratio = verbus median / raw median; latency one-way (RTT/2); rates at the receiver"
  } > "$tbl"
  awk -v rounds="${m_rounds:-1}" -v rounds2="${m_rounds2:-1}" -v full="${m_full:-0}" \
      -v done="$m_done" -v tbl="$tbl" -v json="$json" -v kvf="$kvf" -v whyf="$whyf" \
      -v rowsf="$out/rows.txt" -v tgtf="$out/targets.txt" -v cmdf="$out/cmds.txt" \
      -v gen="$(date -u +%Y-%m-%dT%H:%M:%SZ)" -v metaf="$meta" \
      -v hl="${HOST_LOAD:-}" -v hle="${HOST_LOAD_END:-}" '
  function jstr(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return "\"" s "\"" }
  function jnum(v) { return (v == "") ? "null" : v }
  function fmt(v, u) {
    if (v == "") return ""
    if (u == "%") return sprintf("%.1f%%", v)
    if (v < 10) return sprintf("%.2f", v)
    if (v < 100) return sprintf("%.1f", v)
    return sprintf("%.0f", v)
  }
  # values of STEP:FIELD over R rounds -> vals[1..cnt], sorted; per-round in rv[k]
  function collect(spec, R,   st, fl, k, key, c, i, j, t) {
    delete vals; delete rv; c = 0
    if (spec == "") return 0
    st = spec; sub(/:.*/, "", st); fl = spec; sub(/^[^:]*:/, "", fl)
    for (k = 1; k <= R; k++) {
      key = st ".r" k "." fl
      if (key in kv) { rv[k] = kv[key]; vals[++c] = kv[key] + 0 } else rv[k] = ""
    }
    for (i = 2; i <= c; i++) for (j = i; j > 1 && vals[j-1] > vals[j]; j--) { t = vals[j]; vals[j] = vals[j-1]; vals[j-1] = t }
    return c
  }
  function median(c) { if (!c) return ""; return (c % 2) ? vals[(c + 1) / 2] : (vals[c / 2] + vals[c / 2 + 1]) / 2 }
  function reason(spec, grp,   st, k, r) {
    if (spec == "") return "-"
    st = spec; sub(/:.*/, "", st)
    if (st ~ /^ucx_.*_lat_/ && spec ~ /:fast50$/ && (st ".r1.p50") in kv) return "n/a (ladder: p50 > 1 ms)"
    if ((st ".r1") in why) return "n/a (" why[st ".r1"] ")"
    if (done == "") return "n/a (time limit)"
    if (full != 1 && (st ~ /_(1024|65536)$/ && st ~ /^ucx/ || st ~ /fanout_2p/)) return "n/a (--full only)"
    return "n/a (not measured)"
  }
  BEGIN {
    while ((getline l < kvf) > 0) { split(l, a, " "); kv[a[1]] = a[2] }
    while ((getline l < whyf) > 0) { k = l; sub(/ .*/, "", k); r = l; sub(/^[^ ]* /, "", r); why[k] = r }
    while ((getline l < cmdf) > 0) { k = l; sub(/ .*/, "", k); r = l; sub(/^[^ ]* /, "", r); cmd[k] = r }
    nt = 0
    while ((getline l < tgtf) > 0) { split(l, a, "|"); nt++; tid[nt] = a[1]; tlab[nt] = a[2]; ttest[nt] = a[3]; tucx[nt] = a[4] }
    printf "%-46s | %-24s | %-24s | %-24s | %-8s | %-7s | %s\n", "figure", "raw verbs", "UCX", "verbus", "ratio", "threads", "flag" >> tbl
    printf "%s\n", "-----------------------------------------------+--------------------------+--------------------------+--------------------------+----------+---------+------" >> tbl
    printf "{\n  \"generated\": %s,\n  \"meta\": {\n", jstr(gen) > json
    while ((getline l < metaf) > 0) { k = l; sub(/=.*/, "", k); r = l; sub(/^[^=]*=/, "", r); printf "    %s: %s,\n", jstr(k), jstr(r) >> json }
    printf "    \"host_load_before\": %s,\n    \"host_load_after\": %s\n  },\n  \"figures\": [\n", jstr(hl), jstr(hle) >> json
    nf = 0
    while ((getline l < rowsf) > 0) {
      split(l, a, "|"); fig = a[1]; unit = a[2]; grp = a[3]; thr = a[4]; tg = a[8]
      R = (grp == 1) ? rounds : rounds2
      spec[1] = a[5]; spec[2] = a[6]; spec[3] = a[7]; sname[1] = "raw"; sname[2] = "ucx"; sname[3] = "verbus"
      noisy = ""; jsys = ""
      for (s = 1; s <= 3; s++) {
        c = collect(spec[s], R)
        med[s] = median(c); mn[s] = c ? vals[1] : ""; mx[s] = c ? vals[c] : ""
        for (k = 1; k <= R; k++) rr[s, k] = rv[k]
        if (!c) txt[s] = reason(spec[s], grp)
        else {
          txt[s] = ((s == 2 && unit == "%") ? "<=" : "") fmt(med[s], unit)
          if (c > 1) txt[s] = txt[s] " (" fmt(mn[s], unit) "-" fmt(mx[s], unit) ")"
          if (c < R) txt[s] = txt[s] " [" c "/" R "]"
          if (unit != "%" && c > 1 && mn[s] > 0 && mx[s] / mn[s] > 2) noisy = noisy (noisy == "" ? "" : ",") sname[s]
        }
        st = spec[s]; sub(/:.*/, "", st)
        lst = ""
        for (k = 1; k <= R; k++) lst = lst (k > 1 ? ", " : "") jnum(rr[s, k])
        jsys = jsys sprintf("     %s: {\"cmd\": %s, \"rounds\": [%s], \"median\": %s, \"min\": %s, \"max\": %s%s},\n",
          jstr(sname[s]), (spec[s] != "" && (st in cmd)) ? jstr(cmd[st]) : "null", lst, jnum(med[s]), jnum(mn[s]), jnum(mx[s]),
          (c ? "" : ", \"why\": " jstr(txt[s])))
      }
      ratio = ""; exact = ""; rlist = ""; rmin = ""; rmax = ""
      if (unit != "%" && med[1] != "" && med[3] != "" && med[1] > 0) {
        exact = med[3] / med[1]        # the targets are judged on this,
        ratio = sprintf("%.2f", exact) # not on the rounded table cell
      }
      for (k = 1; k <= R; k++) {
        q = ""
        if (unit != "%" && rr[1, k] != "" && rr[3, k] != "" && rr[1, k] > 0) {
          q = sprintf("%.3f", rr[3, k] / rr[1, k])
          if (rmin == "" || q + 0 < rmin) rmin = q + 0
          if (rmax == "" || q + 0 > rmax) rmax = q + 0
        }
        rlist = rlist (k > 1 ? ", " : "") jnum(q)
      }
      if (rmin != "" && rmin > 0 && rmax / rmin > 2) noisy = noisy (noisy == "" ? "" : ",") "ratio"
      flag = (noisy != "") ? "noisy" : ""
      if (R == 1) flag = flag (flag == "" ? "" : ", ") "1 round"
      if (tg != "") { tratio[tg] = exact; tvb[tg] = med[3]; tucxv[tg] = med[2]; tfig[tg] = fig; tunit[tg] = unit; tnoisy[tg] = noisy }
      printf "%-46s | %-24s | %-24s | %-24s | %-8s | %-7s | %s\n", substr(fig " (" unit ")", 1, 46), substr(txt[1], 1, 24),
        substr(txt[2], 1, 24), substr(txt[3], 1, 24), (ratio == "" ? "-" : ratio "x"), thr, flag >> tbl
      if (nf++) printf "    ,\n" >> json
      printf "    {\"figure\": %s, \"unit\": %s, \"rounds\": %d, \"busy_threads\": %s,\n%s", jstr(fig), jstr(unit), R, jstr(thr), jsys >> json
      printf "     \"ratio_median\": %s, \"ratio_rounds\": [%s], \"noisy\": %s%s}\n", jnum(ratio), rlist,
        (noisy != "") ? "true" : "false", (noisy != "") ? ", \"noisy_why\": " jstr("rounds disagree by more than 2x: " noisy) : "" >> json
    }
    printf "  ],\n  \"targets\": [\n" >> json
    printf "\n" >> tbl
    for (i = 1; i <= nt; i++) {
      t = tid[i]; q = tratio[t]; ucxs = ""; op = substr(ttest[i], 1, 2); lim = substr(ttest[i], 3) + 0
      v = "not measured"
      if (q != "") {
        ok = (op == "<=") ? (q + 0 <= lim) : (q + 0 >= lim)
        q = sprintf("%.3f", q) # shown with 3 decimals: 0.2023 is not printed as 0.20
        ucxs = ""
        if (tucx[i] != "") {
          if (tucxv[t] == "") ucxs = "; UCX not measured"
          else {
            uok = (tucx[i] == "le") ? (tvb[t] <= tucxv[t]) : (tvb[t] > tucxv[t])
            ucxs = sprintf("; verbus %s vs UCX %s %s: %s", fmt(tvb[t], tunit[t]), fmt(tucxv[t], tunit[t]), tunit[t],
              (tucx[i] == "le") ? (uok ? "not above" : "above") : (uok ? "ahead" : "behind"))
            ok = ok && uok
          }
        }
        v = ok ? "met" : "MISSED"
        if (tnoisy[t] != "") v = v " (noisy row: " tnoisy[t] " rounds disagree by >2x)"
      }
      printf "target: %-70s measured %-7s -> %s%s\n", tlab[i] ":", (q == "" ? "n/a" : q "x"), v, ucxs >> tbl
      printf "    {\"target\": %s, \"figure\": %s, \"test\": %s, \"ratio_median\": %s, \"verdict\": %s, \"noisy\": %s, \"detail\": %s}%s\n",
        jstr(tlab[i]), jstr(tfig[t]), jstr(ttest[i]), jnum(q), jstr(v), (tnoisy[t] != "") ? "true" : "false",
        jstr(substr(ucxs, 3)), (i < nt ? "," : "") >> json
    }
    printf "  ],\n  \"all\": {\n" >> json
    n = 0
    close(kvf)
    while ((getline l < kvf) > 0) {
      split(l, a, " ")
      printf "%s    %s: %s", (n++ ? ",\n" : ""), jstr(a[1]), (a[2] ~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) ? a[2] : jstr(a[2]) >> json
    }
    printf "\n  }\n}\n" >> json
  }'
  {
    echo
    echo "threads: busy (spinning) threads of the row, raw/UCX/verbus: perftest and ucx_perftest busy-poll one thread per side;"
    echo "  verbus lat: the application polls on both sides; bw/fanout: publisher thread + its progress thread + one per subscriber process"
    echo "noisy: the rounds of a cell, or the per-round ratios, disagree by more than 2x (results.json: noisy_why)"
    echo "UCX latency: one ucx_perftest -R run per rank of a ladder ($UCX_RANKS); its '> 1 ms' share is an upper bound read from the ladder, its fast-mode p50 the ladder at that rank"
    echo "results: $json (every round), plot: $out/latency.png, raw outputs: $out/raw/"
  } >> "$tbl"
  cat "$tbl"
  plot
}

plot() {
  command -v gnuplot >/dev/null || { echo "compare: gnuplot missing, no plot" >&2; return 0; }
  local dat="$out/lat.dat" panel
  # one block per panel; columns: percentile-index label raw ucx verbus
  # (medians over the rounds; UCX: its -R ladder at 50/90/99)
  : > "$dat"
  for panel in "ORDERED_64_B_(raw:_RC) pt_lat_rc_64 ucx_rc_lat_64 vb_lat_ordered_64 64" \
               "ORDERED_1_KiB_(raw:_RC) pt_lat_rc_1024 ucx_rc_lat_1024 vb_lat_ordered_1k 1024" \
               "ORDERED_64_KiB_(raw:_RC) pt_lat_rc_65536 ucx_rc_lat_65536 vb_lat_ordered_64k 65536" \
               "FANOUT_64_B_(raw:_UD) pt_lat_ud_64 ucx_ud_lat_64 vb_lat_fanout_64 64"; do
    set -- $panel
    echo "# $1" >> "$dat"
    awk -v r="$2" -v u="$3" -v v="$4" -v s="$5" '
      function med(pre, f,   k, c, i, j, t, x) {
        delete x; c = 0
        for (k in kv) if (index(k, pre ".r") == 1 && substr(k, length(k) - length(f)) == "." f) {
          t = substr(k, length(pre) + 3); sub(/\..*/, "", t)
          if (t ~ /^[0-9]+$/ && k == pre ".r" t "." f) x[++c] = kv[k] + 0
        }
        for (i = 2; i <= c; i++) for (j = i; j > 1 && x[j-1] > x[j]; j--) { t = x[j]; x[j] = x[j-1]; x[j-1] = t }
        if (!c) return "?"
        return (c % 2) ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2
      }
      { kv[$1] = $2 }
      END {
        split("p50 p90 p99 p999 max", p, " "); split("R50 R90 R99 - -", q, " ")
        for (i = 1; i <= 5; i++)
          print i - 1, p[i], med(r, p[i]), (q[i] == "-" ? "?" : med(u, q[i])), med(v, s "." p[i])
      }' "$out/kv.txt" >> "$dat"
    printf '\n\n' >> "$dat"
  done
  # per panel, only the curves that have a point (gnuplot stops on an empty one)
  local b=0 cmds="" col curves t
  for t in "ORDERED 64 B (raw: RC)" "ORDERED 1 KiB (raw: RC)" "ORDERED 64 KiB (raw: RC)" "FANOUT 64 B (raw: UD)"; do
    curves=""
    for col in 3 4 5; do
      awk -v b="$b" -v c="$col" '/^#/ { blk++ } blk == b + 1 && NF >= 5 && $c != "?" { f = 1 } END { exit !f }' "$dat" || continue
      [ -n "$curves" ] && curves="$curves, "
      case $col in
        3) curves="$curves\"$dat\" index $b using 1:3 with linespoints lw 2 pt 7 title \"raw verbs (perftest)\"" ;;
        4) curves="$curves\"$dat\" index $b using 1:4 with points pt 5 ps 2 title \"UCX (ucx_perftest -R ladder)\" noenhanced" ;;
        5) curves="$curves\"$dat\" index $b using 1:5 with linespoints lw 2 pt 9 title \"verbus\"" ;;
      esac
    done
    [ -n "$curves" ] || curves="1 notitle with dots"
    cmds="$cmds
set title \"$t\"
plot $curves"
    b=$((b + 1))
  done
  timeout 60 gnuplot > "$out/gnuplot.log" 2>&1 <<GP || echo "compare: gnuplot failed, see $out/gnuplot.log" >&2
set terminal pngcairo size 1400,1000 font "DejaVu Sans,11"
set output "$out/latency.png"
set datafile missing "?"
set logscale y
set grid ytics mytics
set key top left
set ylabel "one-way latency (us, log; median of the rounds)"
set xrange [-0.3:4.3]
set xtics ("p50" 0, "p90" 1, "p99" 2, "p99.9" 3, "max" 4)
set multiplot layout 2,2 title "One-way latency percentiles, same device, same run ($(sed -n 's/^device=//p' "$out/raw/meta"); host load avg ${HOST_LOAD:-?})"
$cmds
unset multiplot
GP
  [ -s "$out/latency.png" ] && echo "plot: $out/latency.png" >&2
  return 0
}

# ------------------------------------------------------------------- main --
case "$phase" in
  measure) measure ;;
  report) report ;;
  all)
    [ -x "$vb" ] || { echo "compare: $vb missing (build first)" >&2; exit 1; }
    mkdir -p "$out"
    extra=()
    [ "$full" = 1 ] && extra=(--full)
    HOST_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
    export HOST_LOAD
    progress "one run on the RDMA device (Soft-RoCE VM when the host has none), $rounds interleaved rounds; results in $out"
    "$root/scripts/vm-run.sh" --timeout "$total_timeout" -- "$0" --measure --build "$build" \
      --out "$out" --scale "$scale" --rounds "$rounds" --rounds2 "$rounds2" --ip "$ip" \
      --dev "$dev" --gid "$gid" ${standby_ip:+--standby-ip "$standby_ip"} "${extra[@]}" >&2
    rc=$?
    HOST_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
    printf 'HOST_LOAD=%s\nHOST_LOAD_END=%s\n' "$HOST_LOAD" "$HOST_LOAD_END" > "$out/host_load"
    [ $rc -eq 0 ] || progress "measurement run ended with status $rc: reporting what was measured"
    report
    ;;
esac
