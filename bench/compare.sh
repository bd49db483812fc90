#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# verbus against raw verbs (perftest) and UCX (ucx_perftest), side by side,
# on one RDMA device in one run (one Soft-RoCE VM boot when the host has none).
#
#   bench/compare.sh [--build DIR] [--out DIR] [--scale F] [--ip ADDR]
#                    [--dev NAME] [--gid N] [--timeout SECS]
#
#   --build DIR    build dir holding bench/vb_bench (default build)
#   --out DIR      results dir (default build/bench-results): results.json,
#                  table.txt, latency.png, lat.dat, raw/ (every tool's output)
#   --scale F      multiplies every iteration count (default 1: short run)
#   --ip/--dev/--gid  device address, verbs device, GID index
#                  (default 10.77.0.1, rxe0, 1: the Soft-RoCE VM's)
#   --standby-ip ADDR  a second device's address for the failover bench's
#                  standby connections (default: VERBUS_STANDBY_IP; in the
#                  VM 10.77.1.1, rxe1; none: the standby on the same device)
#   --timeout SECS limit for the whole measurement (default 600); steps
#                  not reached are reported as "n/a (cut by the time limit)"
#   --full         also UCX at 1 KiB and 64 KiB, and verbus FANOUT to 2 subs
#
# Internal phases (the default runs both): --measure (runs the tools, on the
# device: inside the VM) and --report (parses raw/, prints the table, writes
# results.json and the plot; on the host).
#
# Every tool call is wrapped in `timeout`; a tool that fails or times out is
# reported as "n/a (reason)" in its cell and the run goes on. Progress lines
# go to stderr, the table to stdout.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=build
out=""
scale=1
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
    --ip) ip=$2; shift 2 ;;
    --dev) dev=$2; shift 2 ;;
    --gid) gid=$2; shift 2 ;;
    --standby-ip) standby_ip=$2; shift 2 ;;
    --timeout) total_timeout=$2; shift 2 ;;
    --full) full=1; shift ;;
    --measure) phase=measure; shift ;;
    --report) phase=report; shift ;;
    -h|--help) sed -n '3,28p' "$0"; exit 0 ;;
    *) echo "compare: unknown option $1" >&2; exit 2 ;;
  esac
done
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
# Iteration counts at --scale 1 (short: the whole set fits a few minutes of
# TCG). perftest and ucx_perftest get the same counts as verbus.
LAT_N=1000       # ping-pongs at 64 B and 1 KiB
LAT64K_N=200     # ping-pongs at 64 KiB
BW64_N=10000     # one-way messages at 64 B
BW1K_N=2000
BW64K_N=500      # (verbus runs 1 KiB and 64 KiB in one call with this count)
FAN_N=5000       # messages per fanout run (4 subscribers; 2 with --full)

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

pt_lat() { # rc|ud SIZE ITERS: ib_send_lat, every sample printed (-H)
  local it; it=$(n "$3")
  progress "perftest ib_send_lat ${1^^} $2 B x $it"
  pair "pt_lat_$1_$2" $((++port)) 60 -- ib_send_lat -d "$dev" -x "$gid" -p "$port" \
    -c "${1^^}" -s "$2" -n "$it" -H
}

pt_bw() { # rc|ud SIZE ITERS: ib_send_bw
  local it; it=$(n "$3")
  progress "perftest ib_send_bw ${1^^} $2 B x $it"
  pair "pt_bw_$1_$2" $((++port)) 60 -- ib_send_bw -d "$dev" -x "$gid" -p "$port" \
    -c "${1^^}" -s "$2" -n "$it"
}

ucx() { # rc|ud NAME "TEST ARGS": one ucx_perftest server/client pair
  # tag_lat reports one percentile per run: -R 50 and -R 99 are two runs
  if [ "$1" = rc ]; then
    pre=(env UCX_TLS=rc_verbs,ud_verbs:aux)  # rc_verbs needs ud for its handshake
  else
    pre=(env UCX_TLS=ud_verbs)
  fi
  pre+=(UCX_NET_DEVICES="$dev:1" UCX_UD_VERBS_ETH_DGID_CHECK=n)
  progress "ucx_perftest $1_verbs $3"
  # shellcheck disable=SC2086
  pair "ucx_$1_$2" $((++port)) 90 -- ucx_perftest -p "$port" -t $3 -f -v
  pre=()
}

vbrun() { # NAME SECS ARGS...: vb_bench, JSON lines into verbus.jsonl
  local name=$1 secs=$2
  shift 2
  progress "vb_bench $*"
  echo "vb_bench $*" > "$out/raw/$name.cmd"
  timeout -k 5 "$secs" stdbuf -oL "$vb" "$@" --ip "$ip" --json "$out/verbus.jsonl" \
    > "$out/raw/$name.out" 2>&1
  echo $? > "$out/raw/$name.rc"
}

measure() {
  mkdir -p "$out/raw"
  rm -f "$out"/raw/* "$out/verbus.jsonl"
  port=18500
  {
    echo "kernel=$(uname -r)"
    echo "device=$dev"
    echo "ip=$ip"
    echo "gid_index=$gid"
    echo "mtu=$(ibv_devinfo -d "$dev" 2>/dev/null | awk '/active_mtu/ {print $2; exit}')"
    echo "ncpu=$(nproc)"
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "scale=$scale"
    echo "full=$full"
  } > "$out/raw/meta"
  pre=()

  # Steps in order of importance (the issue's targets first), so that a run
  # cut short by --timeout loses the least important figures.
  pt_lat rc 64 "$LAT_N"
  pt_bw rc 64 "$BW64_N"
  pt_bw ud 64 "$BW64_N"
  pt_lat ud 64 "$LAT_N"
  vbrun vb_lat_ordered 120 lat --class ordered --size 64,1024 --count "$(n $LAT_N)"
  vbrun vb_bw_ordered_64 120 bw --class ordered --size 64 --count "$(n $BW64_N)"
  vbrun vb_fanout_4 150 fanout --class fanout --size 64 --subs 4 --count "$(n $FAN_N)"
  ucx rc lat_64_p50 "tag_lat -s 64 -n $(n $LAT_N) -w 100 -R 50"
  ucx rc lat_64_p99 "tag_lat -s 64 -n $(n $LAT_N) -w 100 -R 99"
  ucx rc bw_64 "tag_bw -s 64 -n $(n $BW64_N) -w 1000"
  ucx ud lat_64_p50 "tag_lat -s 64 -n $(n $LAT_N) -w 100 -R 50"
  ucx ud bw_64 "tag_bw -s 64 -n $(n $BW64_N) -w 1000"
  pt_lat rc 1024 "$LAT_N"
  pt_lat rc 65536 "$LAT64K_N"
  pt_bw rc 1024 "$BW1K_N"
  pt_bw rc 65536 "$BW64K_N"
  vbrun vb_lat_ordered_64k 120 lat --class ordered --size 65536 --count "$(n $LAT64K_N)"
  vbrun vb_bw_ordered_big 120 bw --class ordered --size 1024,65536 --count "$(n $BW64K_N)"
  vbrun vb_lat_fanout 120 lat --class fanout --size 64 --count "$(n $LAT_N)"
  vbrun vb_bw_fanout_64 120 bw --class fanout --size 64 --count "$(n $BW64_N)"
  # failover (issue 6): fault -> first delivery vs a fresh RC connection;
  # the standby on the second device when there is one (the VM's rxe1)
  if [ -n "$standby_ip" ]; then
    vbrun vb_failover 300 failover --faults 20 --standby-ip "$standby_ip"
  else
    vbrun vb_failover 300 failover --faults 20 --one-device
  fi
  if [ "$full" = 1 ]; then
    ucx rc lat_1024_p50 "tag_lat -s 1024 -n $(n $LAT_N) -w 100 -R 50"
    ucx rc lat_65536_p50 "tag_lat -s 65536 -n $(n $LAT64K_N) -w 20 -R 50"
    ucx rc bw_65536 "tag_bw -s 65536 -n $(n $BW64K_N) -w 20"
    vbrun vb_fanout_2 150 fanout --class fanout --size 64 --subs 2 --count "$(n $FAN_N)"
  fi

  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/raw/meta"
  echo "measure_s=$(( $(date +%s) - t_start ))" >> "$out/raw/meta"
  progress "measurements done"
}

# ----------------------------------------------------------------- report --
KV=()      # "key=value" pairs collected by the parsers
kv() { KV+=("$1=$2"); }
get() { # KEY: value or empty
  local e
  for e in "${KV[@]}"; do
    [ "${e%%=*}" = "$1" ] && { echo "${e#*=}"; return; }
  done
}

# why a step has no figure: "n/a (reason)"
why() {
  local name=$1 rc last
  if [ ! -e "$out/raw/$name.rc" ]; then
    if [ -e "$out/raw/$name.cmd" ]; then
      echo "n/a (cut by the time limit)"
    elif [ "$(sed -n 's/^full=//p' "$out/raw/meta" 2>/dev/null)" != 1 ] && [ -z "$(sed -n 's/^measure_s=//p' "$out/raw/meta" 2>/dev/null)" ]; then
      echo "n/a (not reached: time limit)"
    else
      echo "n/a (not run; --full)"
    fi
    return
  fi
  rc=$(cat "$out/raw/$name.rc")
  last=$(grep -iE "unable|fail|error|couldn't|no subscriber|refused|timed out" \
    "$out/raw/$name.out" 2>/dev/null | grep -v 'verbus warn' | tail -1)
  [ -n "$last" ] || last=$(grep -v '^[[:space:]]*$' "$out/raw/$name.out" 2>/dev/null \
    | grep -viE '^(\[compare|bench |-{5}| *#bytes)' | tail -1)
  last=$(echo "$last" | tr -s ' \t' ' ' | sed 's/^ //' | cut -c1-50)
  case "$rc" in
    124|137) echo "n/a (timeout)" ;;
    0) echo "n/a (no figure in output${last:+: $last})" ;;
    *) echo "n/a (exit $rc${last:+: $last})" ;;
  esac
}

parse_perftest_lat() { # NAME -> pt.NAME.{p50,p90,p99,p999,max} in us
  local name=$1 f="$out/raw/$1.out" vals
  [ -s "$f" ] || return
  vals=$(awk -F', *' '/^[0-9]+, *[0-9.]+$/ { print $2 }' "$f" | sort -g | awk '
    { v[NR] = $1 }
    END {
      if (NR < 5) exit
      split("50 90 99 99.9", p, " ")
      for (i = 1; i <= 4; i++) { k = int(p[i] / 100 * NR + 0.999999); if (k < 1) k = 1; printf "%s ", v[k] }
      print v[NR], NR
    }')
  [ -n "$vals" ] || return
  set -- $vals
  kv "$name.p50" "$1"; kv "$name.p90" "$2"; kv "$name.p99" "$3"; kv "$name.p999" "$4"
  kv "$name.max" "$5"; kv "$name.samples" "$6"
}

parse_perftest_bw() { # NAME SIZE -> NAME.msgs, NAME.mbs
  # the server's (receiver's) figure, as verbus measures at the receiver;
  # the client's when the server printed none
  local name=$1 size=$2 f mpps=""
  for f in "$out/raw/$1.srv" "$out/raw/$1.out"; do
    [ -s "$f" ] || continue
    mpps=$(awk -v s="$size" '$1 == s && NF >= 5 && $5 ~ /^[0-9.]+/ { v = $5 + 0 } END { if (v != "") print v }' "$f")
    [ -n "$mpps" ] && break
  done
  [ -n "$mpps" ] || return
  kv "$name.msgs" "$(awk -v m="$mpps" 'BEGIN { printf "%.0f", m * 1e6 }')"
  kv "$name.mbs" "$(awk -v m="$mpps" -v s="$size" 'BEGIN { printf "%.2f", m * s }')"
}

parse_ucx() { # NAME SIZE -> NAME.{pct,avg,msgs,mbs}
  local name=$1 size=$2 f="$out/raw/$1.out" line
  [ -s "$f" ] || return
  # -v: "iterations,pctile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr"
  line=$(awk -F, '{ n = NF; ok = n >= 8
         for (i = n - 7; ok && i <= n; i++) if ($i !~ /^ *[0-9.]+ *$/) ok = 0
         if (ok) l = $(n-7) " " $(n-6) " " $(n-5) " " $(n-4) " " $n }
         END { if (l != "") print l }' "$f")
  [ -n "$line" ] || return
  set -- $line
  kv "$name.iters" "$1"; kv "$name.pct" "$2"; kv "$name.avg" "$3"
  kv "$name.msgs" "$(awk -v m="$5" 'BEGIN { printf "%.0f", m }')"
  kv "$name.mbs" "$(awk -v m="$5" -v s="$size" 'BEGIN { printf "%.2f", m * s / 1e6 }')"
}

parse_verbus() { # JSON lines -> vb.<bench>.<class>.<size>[.<subs>].<field>
  local f="$out/verbus.jsonl" line
  [ -s "$f" ] || return
  while IFS= read -r line; do
    KV+=("$line")
  done < <(awk '
    function num(k,   r) { if (match($0, "\"" k "\":[0-9.]+")) { r = substr($0, RSTART, RLENGTH); sub(/^[^:]*:/, "", r); return r } return "" }
    function str(k,   r) { if (match($0, "\"" k "\":\"[^\"]*\"")) { r = substr($0, RSTART, RLENGTH); sub(/^[^:]*:"/, "", r); sub(/"$/, "", r); return r } return "" }
    {
      b = str("bench"); c = tolower(str("class")); s = num("size")
      if (b == "failover") {
        printf "vb.failover.p50=%.3f\nvb.failover.p99=%.3f\nvb.failover.max=%.3f\nvb.failover.cold=%.3f\n",
          num("p50_ns") / 1e6, num("p99_ns") / 1e6, num("max_ns") / 1e6, num("cold_connect_ns") / 1e6
      } else if (b == "lat") {
        k = "vb.lat." c "." s
        printf "%s.p50=%.2f\n%s.p90=%.2f\n%s.p99=%.2f\n%s.p999=%.2f\n%s.max=%.2f\n%s.samples=%s\n",
          k, num("p50") / 1e3, k, num("p90") / 1e3, k, num("p99") / 1e3, k, num("p999") / 1e3,
          k, num("max") / 1e3, k, num("count")
      } else {
        k = "vb." b "." c "." s "." num("subs")
        printf "%s.msgs=%s\n%s.mbs=%s\n%s.p99=%.2f\n%s.lost=%s\n%s.delivered=%s\n", k,
          num("agg_deliveries_per_s"), k, num("mb_per_s"), k, num("worst_sub_p99_ns") / 1e3,
          k, num("lost"), k, num("delivered")
      }
    }' "$f")
}

ROWS=()   # "figure|unit|rawkey|rawstep|ucxkey|ucxstep|vbkey|vbstep|kind|target"
row() { ROWS+=("$1|$2|$3|$4|$5|$6|$7|$8|$9|${10}"); }

cell() { # KEY STEP -> value or n/a (reason)
  local v
  [ -n "$1" ] || { echo "-"; return; }
  v=$(get "$1")
  if [ -n "$v" ]; then echo "$v"; else why "$2"; fi
}
isnum() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
fmt() { # VALUE UNIT
  isnum "$1" || { echo "$1"; return; }
  case "$2" in
    us) awk -v v="$1" 'BEGIN { printf (v < 100 ? "%.1f" : "%.0f"), v }' ;;
    *) awk -v v="$1" 'BEGIN { printf (v < 100 ? "%.2f" : "%.0f"), v }' ;;
  esac
}

report() {
  [ -d "$out/raw" ] || { echo "compare: no measurements in $out/raw" >&2; return 1; }
  local s
  for s in 64 1024 65536; do
    parse_perftest_lat "pt_lat_rc_$s"
    parse_perftest_bw "pt_bw_rc_$s" "$s"
  done
  parse_perftest_lat pt_lat_ud_64
  parse_perftest_bw pt_bw_ud_64 64
  for s in ucx_rc_lat_64_p50 ucx_rc_lat_64_p99 ucx_rc_lat_1024_p50 ucx_rc_lat_65536_p50 \
           ucx_ud_lat_64_p50; do
    parse_ucx "$s" 0
  done
  parse_ucx ucx_rc_bw_64 64
  parse_ucx ucx_rc_bw_65536 65536
  parse_ucx ucx_ud_bw_64 64
  parse_verbus

  # figure | unit | raw | UCX | verbus | kind (lat: lower is better) | target
  row "ORDERED 64 B one-way p50" us pt_lat_rc_64.p50 pt_lat_rc_64 ucx_rc_lat_64_p50.pct ucx_rc_lat_64_p50 \
      vb.lat.ordered.64.p50 vb_lat_ordered lat "<=1.15"
  row "ORDERED 64 B one-way p99" us pt_lat_rc_64.p99 pt_lat_rc_64 ucx_rc_lat_64_p99.pct ucx_rc_lat_64_p99 \
      vb.lat.ordered.64.p99 vb_lat_ordered lat "<=1.3"
  row "ORDERED 64 B one-way p99.9" us pt_lat_rc_64.p999 pt_lat_rc_64 "" "" vb.lat.ordered.64.p999 vb_lat_ordered lat ""
  row "ORDERED 1 KiB one-way p50" us pt_lat_rc_1024.p50 pt_lat_rc_1024 ucx_rc_lat_1024_p50.pct ucx_rc_lat_1024_p50 \
      vb.lat.ordered.1024.p50 vb_lat_ordered lat ""
  row "ORDERED 1 KiB one-way p99" us pt_lat_rc_1024.p99 pt_lat_rc_1024 "" "" vb.lat.ordered.1024.p99 vb_lat_ordered lat ""
  row "ORDERED 64 KiB one-way p50" us pt_lat_rc_65536.p50 pt_lat_rc_65536 ucx_rc_lat_65536_p50.pct ucx_rc_lat_65536_p50 \
      vb.lat.ordered.65536.p50 vb_lat_ordered_64k lat ""
  row "ORDERED 64 KiB one-way p99" us pt_lat_rc_65536.p99 pt_lat_rc_65536 "" "" vb.lat.ordered.65536.p99 vb_lat_ordered_64k lat ""
  row "FANOUT 64 B one-way p50 (raw: UD)" us pt_lat_ud_64.p50 pt_lat_ud_64 ucx_ud_lat_64_p50.pct ucx_ud_lat_64_p50 \
      vb.lat.fanout.64.p50 vb_lat_fanout lat ""
  row "FANOUT 64 B one-way p99 (raw: UD)" us pt_lat_ud_64.p99 pt_lat_ud_64 "" "" vb.lat.fanout.64.p99 vb_lat_fanout lat ""
  row "ORDERED 64 B msg/s" msg/s pt_bw_rc_64.msgs pt_bw_rc_64 ucx_rc_bw_64.msgs ucx_rc_bw_64 \
      vb.bw.ordered.64.1.msgs vb_bw_ordered_64 bw ">=5"
  row "ORDERED 1 KiB MB/s" MB/s pt_bw_rc_1024.mbs pt_bw_rc_1024 "" "" vb.bw.ordered.1024.1.mbs vb_bw_ordered_big bw ""
  row "ORDERED 64 KiB MB/s" MB/s pt_bw_rc_65536.mbs pt_bw_rc_65536 ucx_rc_bw_65536.mbs ucx_rc_bw_65536 \
      vb.bw.ordered.65536.1.mbs vb_bw_ordered_big bw ""
  row "FANOUT 64 B msg/s, 1 sub (raw: UD)" msg/s pt_bw_ud_64.msgs pt_bw_ud_64 ucx_ud_bw_64.msgs ucx_ud_bw_64 \
      vb.bw.fanout.64.1.msgs vb_bw_fanout_64 bw ""
  row "FANOUT 64 B deliveries/s, 2 subs" msg/s pt_bw_ud_64.msgs pt_bw_ud_64 "" "" \
      vb.fanout.fanout.64.2.msgs vb_fanout_2 bw ""
  row "FANOUT 64 B deliveries/s, 4 subs" msg/s pt_bw_ud_64.msgs pt_bw_ud_64 "" "" \
      vb.fanout.fanout.64.4.msgs vb_fanout_4 bw ">=4"
  row "FANOUT 4 subs: worst sub p99" us "" "" "" "" vb.fanout.fanout.64.4.p99 vb_fanout_4 lat ""
  row "failover: fault -> 1st delivery p50 (raw: new RC conn)" ms vb.failover.cold vb_failover "" "" \
      vb.failover.p50 vb_failover lat "<=0.1"
  row "failover: fault -> 1st delivery p99" ms "" "" "" "" vb.failover.p99 vb_failover lat ""

  local meta="$out/raw/meta" load_s load_e tbl="$out/table.txt" json="$out/results.json"
  load_s=$(sed -n 's/^load_start=//p' "$meta"); load_e=$(sed -n 's/^load_end=//p' "$meta")
  {
    echo "verbus vs raw verbs (perftest) and UCX (ucx_perftest), same device, same run"
    echo "device $(sed -n 's/^device=//p' "$meta"), MTU $(sed -n 's/^mtu=//p' "$meta"), kernel $(sed -n 's/^kernel=//p' "$meta"), $(sed -n 's/^ncpu=//p' "$meta") CPU(s); load avg at start: ${load_s:-?}, at end: ${load_e:-?}${HOST_LOAD:+; host (shared) load before: $HOST_LOAD, after: ${HOST_LOAD_END:-?}}"
    echo "latency: one-way (RTT/2) in us; rates at the receiver. ratio = verbus/raw; target from issue 7"
    printf '%-42s | %-22s | %-22s | %-22s | %-10s | %s\n' figure "raw verbs" UCX verbus verbus/raw target
    printf '%s\n' "-------------------------------------------+------------------------+------------------------+------------------------+------------+---------------"
  } > "$tbl"
  local r fig unit rk rs uk us vk vs kind tgt rv uv vv ratio verdict first=1
  {
    echo "{"
    echo "  \"generated\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
    echo "  \"meta\": {"
    sed -e 's/"/\\"/g' -e 's/^\([^=]*\)=\(.*\)$/    "\1": "\2",/' "$meta"
    echo "    \"host_load_before\": \"${HOST_LOAD:-}\","
    echo "    \"host_load_after\": \"${HOST_LOAD_END:-}\","
    echo "    \"counts\": {\"lat\": $(n $LAT_N), \"lat_64k\": $(n $LAT64K_N), \"bw_64\": $(n $BW64_N), \"bw_1k\": $(n $BW1K_N), \"bw_64k\": $(n $BW64K_N), \"fanout\": $(n $FAN_N)}"
    echo "  },"
    echo "  \"figures\": ["
  } > "$json"
  jstr() { local v=${1//\\/\\\\}; v=${v//\"/\\\"}; echo "\"$v\""; }
  jval() { if isnum "$1"; then echo "$1"; else jstr "$1"; fi; }
  jcmd() { [ -n "$1" ] && [ -e "$out/raw/$1.cmd" ] && jstr "$(cat "$out/raw/$1.cmd")" || echo null; }
  for r in "${ROWS[@]}"; do
    IFS='|' read -r fig unit rk rs uk us vk vs kind tgt <<< "$r"
    rv=$(cell "$rk" "$rs"); uv=$(cell "$uk" "$us"); vv=$(cell "$vk" "$vs")
    ratio="-"; verdict=""
    if isnum "$rv" && isnum "$vv" && awk -v r="$rv" 'BEGIN { exit !(r > 0) }'; then
      ratio=$(awk -v r="$rv" -v v="$vv" 'BEGIN { printf "%.2fx", v / r }')
      if [ -n "$tgt" ]; then
        local lim=${tgt#??} op=${tgt%"${tgt#??}"}
        if awk -v q="${ratio%x}" -v l="$lim" -v o="$op" 'BEGIN { exit !((o == "<=") ? q <= l : q >= l) }'; then
          verdict="met ($tgt)"
        else
          verdict="MISSED ($tgt)"
        fi
        if [ "$fig" = "ORDERED 64 B msg/s" ] && isnum "$uv"; then
          awk -v u="$uv" -v v="$vv" 'BEGIN { exit !(v > u) }' && verdict="$verdict, ahead of UCX" \
            || verdict="$verdict, behind UCX"
        fi
      fi
    elif [ -n "$tgt" ]; then
      verdict="not measured ($tgt)"
    fi
    printf '%-42s | %-22s | %-22s | %-22s | %-10s | %s\n' "$fig ($unit)" "$(fmt "$rv" "$unit")" \
      "$(fmt "$uv" "$unit")" "$(fmt "$vv" "$unit")" "$ratio" "$verdict" >> "$tbl"
    [ $first = 1 ] || echo "    ," >> "$json"
    first=0
    {
      echo "    {\"figure\": $(jstr "$fig"), \"unit\": $(jstr "$unit"),"
      echo "     \"raw\": {\"value\": $(jval "$rv"), \"cmd\": $(jcmd "$rs")},"
      echo "     \"ucx\": {\"value\": $(jval "$uv"), \"cmd\": $(jcmd "$us")},"
      echo "     \"verbus\": {\"value\": $(jval "$vv"), \"cmd\": $(jcmd "$vs")},"
      echo "     \"verbus_over_raw\": $(jval "${ratio%x}"), \"target\": $(jstr "$tgt"), \"verdict\": $(jstr "$verdict")}"
    } >> "$json"
  done
  {
    echo "  ],"
    echo "  \"all\": {"
    local i
    for ((i = 0; i < ${#KV[@]}; i++)); do
      printf '    %s: %s%s\n' "$(jstr "${KV[$i]%%=*}")" "$(jval "${KV[$i]#*=}")" \
        "$([ $i -lt $(( ${#KV[@]} - 1 )) ] && echo ,)"
    done
    echo "  }"
    echo "}"
  } >> "$json"
  {
    echo
    echo "UCX: ucx_perftest tag_lat/tag_bw (rc_verbs with ud_verbs:aux; ud_verbs). '-' = not measured by that tool."
    echo "results: $json, plot: $out/latency.png, raw outputs: $out/raw/"
  } >> "$tbl"
  cat "$tbl"
  plot
}

plot() {
  command -v gnuplot >/dev/null || { echo "compare: gnuplot missing, no plot" >&2; return 0; }
  local dat="$out/lat.dat" panel
  # one block per panel; columns: percentile-index label raw ucx verbus
  : > "$dat"
  for panel in "ordered 64 pt_lat_rc_64 ucx_rc_lat_64" "ordered 1024 pt_lat_rc_1024 ucx_rc_lat_1024" \
               "ordered 65536 pt_lat_rc_65536 ucx_rc_lat_65536" "fanout 64 pt_lat_ud_64 ucx_ud_lat_64"; do
    set -- $panel
    echo "# $1 $2" >> "$dat"
    local i=0 p
    for p in p50 p90 p99 p999 max; do
      local rv uv vv
      rv=$(get "$3.$p"); vv=$(get "vb.lat.$1.$2.$p")
      uv=""; case "$p" in p50|p99) uv=$(get "${4}_$p.pct") ;; esac
      echo "$i $p ${rv:-?} ${uv:-?} ${vv:-?}" >> "$dat"
      i=$((i + 1))
    done
    printf '\n\n' >> "$dat"
  done
  timeout 60 gnuplot > "$out/gnuplot.log" 2>&1 <<EOF || echo "compare: gnuplot failed, see $out/gnuplot.log" >&2
set terminal pngcairo size 1400,1000 font "DejaVu Sans,11"
set output "$out/latency.png"
set datafile missing "?"
set logscale y
set grid ytics mytics
set key top left
set ylabel "one-way latency (us, log)"
set xrange [-0.3:4.3]
set xtics ("p50" 0, "p90" 1, "p99" 2, "p99.9" 3, "max" 4)
set multiplot layout 2,2 title "One-way latency percentiles, same device, same run ($(sed -n 's/^device=//p' "$out/raw/meta"); host load avg ${HOST_LOAD:-?})"
titles = "ORDERED_64_B_(raw:_RC) ORDERED_1_KiB_(raw:_RC) ORDERED_64_KiB_(raw:_RC) FANOUT_64_B_(raw:_UD)"
do for [b=0:3] {
  t = word(titles, b+1)
  set title system(sprintf("echo '%s' | tr _ ' '", t))
  plot "$dat" index b using 1:3 with linespoints lw 2 pt 7 title "raw verbs (perftest)", \
       "" index b using 1:4 with points pt 5 ps 2 title "UCX (ucx\\\\_perftest)", \
       "" index b using 1:5 with linespoints lw 2 pt 9 title "verbus"
}
unset multiplot
EOF
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
    progress "one run on the RDMA device (Soft-RoCE VM when the host has none); results in $out"
    "$root/scripts/vm-run.sh" --timeout "$total_timeout" -- "$0" --measure --build "$build" \
      --out "$out" --scale "$scale" --ip "$ip" --dev "$dev" --gid "$gid" \
      ${standby_ip:+--standby-ip "$standby_ip"} "${extra[@]}" >&2
    rc=$?
    HOST_LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
    [ $rc -eq 0 ] || progress "measurement run ended with status $rc: reporting what was measured"
    report
    ;;
esac
