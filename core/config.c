/* SPDX-License-Identifier: MIT */
/*
 * The one configuration table (core/config.h): every VERBUS_* variable of
 * the library, its parsing and range checks, the whole-environment check of
 * the create path, the operators' dump and README.md's table.
 */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/err.h"
#include "core/log.h"
#include "core/mempool.h" /* VBI_MEMPOOL_MAX_ALLOC */
#include "core/path.h"    /* VBI_PATH_MAX_FAILURES */
#include "core/wire.h"    /* VBI_WIRE_HDR_LEN */

extern char **environ;

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define DAY_MS 86400000ull

static const char *const progress_names[] = { "thread", "app", NULL };
static const char *const idle_names[] = { "backoff", "spin", "yield", "block", NULL };
static const char *const slow_names[] = { "cut", "block", NULL };
static const char *const level_names[] = { "error", "warn", "info", "debug", "trace", NULL };

/* A row: [VBI_CFG_x] named VERBUS_x, then its fields. Enum names are in
 * the order of the values they stand for (VB_PROGRESS_*, VB_IDLE_*,
 * VB_SLOW_*, VBI_LOG_*: tests/unit/config_test checks). No '|' in any text:
 * it is a cell of README's table. */
#define ROW(id, ...) [VBI_CFG_##id] = { .name = "VERBUS_" #id, __VA_ARGS__ }

static const struct vbi_cfg_var table[] = {
	ROW(DEVICE, .type = VBI_CFG_STR, .unset = "by ip, else the first device",
	    .field = "vb_ctx_attr_t.device", .doc = "RDMA device name"),
	ROW(IP, .type = VBI_CFG_STR, .unset = "none", .field = "vb_ctx_attr_t.ip",
	    .doc = "local address choosing the device"),
	ROW(PROGRESS, .type = VBI_CFG_ENUM, .dflt = "thread", .names = progress_names,
	    .field = "vb_ctx_attr_t.progress",
	    .doc = "who polls completions: a library thread, or the application (vb_progress)"),
	ROW(PROGRESS_SPIN, .type = VBI_CFG_UINT, .dflt = "64", .min = 0, .max = UINT_MAX,
	    .field = "vb_ctx_attr_t.progress_spin",
	    .doc = "empty polls before the progress thread blocks"),
	ROW(IDLE, .type = VBI_CFG_ENUM, .dflt = "backoff", .names = idle_names,
	    .field = "vb_ctx_attr_t.idle", .doc = "the progress thread's idle strategy"),
	ROW(IDLE_SPIN_US, .type = VBI_CFG_UINT, .dflt = "200", .min = 0, .max = 1000000,
	    .field = "vb_ctx_attr_t.idle_spin_us",
	    .doc = "backoff: microseconds of spinning before blocking; "
		   "APP mode: idle microseconds before vb_progress() yields"),
	ROW(MSG_RATE, .type = VBI_CFG_DOUBLE, .dflt = "100000", .dmin = 0, .dmax = 1e9,
	    .field = "vb_ctx_attr_t.msg_rate",
	    .doc = "expected peak messages/s per connection (queue sizing)"),
	ROW(LATENCY_MS, .type = VBI_CFG_DOUBLE, .dflt = "1", .dmin = 0, .dmax = 60000,
	    .field = "vb_ctx_attr_t.latency_ms",
	    .doc = "expected completion latency in ms (queue sizing)"),
	ROW(MAX_MSG, .type = VBI_CFG_SIZE, .dflt = "1m", .min = 1,
	    .max = VBI_MEMPOOL_MAX_ALLOC - VBI_WIRE_HDR_LEN, .field = "vb_ctx_attr_t.max_msg",
	    .doc = "largest message"),
	ROW(SLOT_SIZE, .type = VBI_CFG_SIZE, .dflt = "16k", .min = KiB, .max = MiB, .mult = 64,
	    .field = "vb_ctx_attr_t.slot_size", .doc = "receive slot (and batch) size"),
	ROW(POOL_CAP, .type = VBI_CFG_SIZE, .dflt = "256m", .min = 2 * MiB, .max = 1024 * GiB,
	    .field = "vb_ctx_attr_t.pool_cap", .doc = "cap on registered bytes per device"),
	ROW(MAX_PEERS, .type = VBI_CFG_UINT, .dflt = "16", .min = 1, .max = 1024,
	    .field = "vb_ctx_attr_t.max_peers", .doc = "connections per context"),
	ROW(WINDOW, .type = VBI_CFG_UINT, .dflt = "4096", .min = 16, .max = 1u << 20,
	    .field = "vb_ctx_attr_t.window",
	    .doc = "unacknowledged ORDERED messages per publisher"),
	ROW(CM_TIMEOUT_MS, .type = VBI_CFG_MS, .dflt = "5000", .min = 1, .max = 600000,
	    .field = "vb_ctx_attr_t.cm_timeout_ms (and vbt_conn_param.cm_timeout_ms)",
	    .doc = "bound on each connection step"),
	ROW(BATCH, .type = VBI_CFG_BOOL, .dflt = "1", .field = "vb_ctx_attr_t.batch",
	    .doc = "cork batching of publishes made while a SEND is in flight"),
	ROW(STANDBY, .type = VBI_CFG_BOOL, .dflt = "1", .field = "vb_ctx_attr_t.standby",
	    .doc = "a warm standby connection per peer (0: rebuild after a failure)"),
	ROW(STANDBY_DEVICE, .type = VBI_CFG_STR, .unset = "none",
	    .field = "vb_ctx_attr_t.standby_device", .doc = "second device for standby connections"),
	ROW(STANDBY_IP, .type = VBI_CFG_STR, .unset = "none", .field = "vb_ctx_attr_t.standby_ip",
	    .doc = "local address on the second device (listening nodes listen there too)"),
	ROW(MCAST, .type = VBI_CFG_BOOL, .dflt = "1", .field = "vb_ctx_attr_t.mcast",
	    .doc = "FANOUT over IB multicast where the device joins groups"),
	ROW(MCAST_PREFIX, .type = VBI_CFG_STR, .dflt = "239.192.0.0/14",
	    .field = "vb_ctx_attr_t.mcast_prefix",
	    .doc = "IPv4 block A.B.C.D/N (N 4..28) the topics' groups come from"),
	ROW(KEEPALIVE_MS, .type = VBI_CFG_MS, .dflt = "100", .min = 0, .max = 3600000,
	    .field = "vb_ctx_attr_t.keepalive_ms",
	    .doc = "an idle connection sends a keepalive after this long (0: off)"),
	ROW(MAX_PENDING, .type = VBI_CFG_UINT, .dflt = "32", .min = 1, .max = 1024,
	    .field = "vb_ctx_attr_t.max_pending",
	    .doc = "accepted connections waiting for their HELLO, per listening node"),
	ROW(AUTH_KEY, .type = VBI_CFG_SECRET, .unset = "none",
	    .field = "vb_ctx_attr_t.auth_key (when NULL)",
	    .doc = "peer authentication key, 16..256 bytes in hex (read at vb_ctx_create)"),
	ROW(AUTH_KEY_FILE, .type = VBI_CFG_SECRET, .unset = "none",
	    .field = "vb_ctx_attr_t.auth_key_file (when NULL)",
	    .doc = "file holding the key in hex (read at vb_ctx_create)"),
	ROW(NODE_NAME, .type = VBI_CFG_STR, .dflt = "verbus", .field = "vb_node_attr_t.name",
	    .doc = "the node's name, shown to peers"),
	ROW(SLOW_SUB, .type = VBI_CFG_ENUM, .dflt = "cut", .names = slow_names,
	    .field = "vb_pub_attr_t.slow_policy",
	    .doc = "ORDERED: cut a slow subscriber, or block the publisher"),
	ROW(SLOW_SUB_MS, .type = VBI_CFG_MS, .dflt = "2000", .min = 10, .max = 3600000,
	    .field = "vb_pub_attr_t.slow_sub_ms",
	    .doc = "cut: how long a subscriber may acknowledge nothing new"),
	ROW(RETAIN_BYTES, .type = VBI_CFG_SIZE, .dflt = "64m", .min = 0, .max = 1024 * GiB,
	    .field = "vb_pub_attr_t.retain_bytes",
	    .doc = "ORDERED: unacknowledged payload bytes kept (0: no byte bound)"),
	ROW(LOG_LEVEL, .type = VBI_CFG_ENUM, .dflt = "warn", .names = level_names,
	    .field = "(internal) the log's level", .doc = "lowest level of the lines logged"),
	ROW(DEGRADE_FAILURES, .type = VBI_CFG_UINT, .dflt = "3", .min = 1,
	    .max = VBI_PATH_MAX_FAILURES, .field = "(internal) vbi_path_cfg.degrade_failures",
	    .doc = "failures within the window that lower a path's mode"),
	ROW(DEGRADE_WINDOW_MS, .type = VBI_CFG_MS, .dflt = "1000", .min = 1, .max = DAY_MS,
	    .field = "(internal) vbi_path_cfg.degrade_window_ns",
	    .doc = "the window of those failures"),
	ROW(PROMOTE_HOLD_MS, .type = VBI_CFG_MS, .dflt = "2000", .min = 0, .max = DAY_MS,
	    .field = "(internal) vbi_path_cfg.promote_hold_ns",
	    .doc = "healthy probing before a promotion"),
	ROW(PROMOTE_HOLD_MAX_MS, .type = VBI_CFG_MS, .dflt = "60000", .min = 0, .max = DAY_MS,
	    .field = "(internal) vbi_path_cfg.promote_hold_max_ns",
	    .doc = "cap of the hold doubled by relapses"),
	ROW(PROMOTE_RELAPSE_MS, .type = VBI_CFG_MS, .dflt = "10000", .min = 0, .max = DAY_MS,
	    .field = "(internal) vbi_path_cfg.relapse_window_ns",
	    .doc = "a degradation this soon after a promotion is a relapse"),
	ROW(PROMOTE_PROBES, .type = VBI_CFG_UINT, .dflt = "3", .min = 1, .max = 1000000,
	    .field = "(internal) vbi_path_cfg.promote_probes",
	    .doc = "successful probes needed within the hold"),
	ROW(PROMOTE_DIRECT, .type = VBI_CFG_BOOL, .dflt = "1",
	    .field = "(internal) vbi_path_cfg.promote_direct",
	    .doc = "promote straight to the best healthy mode (0: one step at a time)"),
	ROW(RECOVERY_QUEUE, .type = VBI_CFG_UINT, .unset = "the context's window", .min = 0,
	    .max = 1u << 30, .field = "(internal) vbi_path_cfg.recovery_queue",
	    .doc = "publishes admitted while a path recovers"),
	ROW(RTO_MS, .type = VBI_CFG_MS, .dflt = "100", .min = 1, .max = 60000,
	    .field = "(internal) the UC/UD lanes' timers",
	    .doc = "retransmission timeout of UC and UD lanes"),
	ROW(ACK_DELAY_MS, .type = VBI_CFG_MS, .dflt = "2", .min = 1, .max = 60000,
	    .field = "(internal) RC acknowledgement coalescing",
	    .doc = "an ORDERED acknowledgement owed this long goes with the next SEND, or alone "
		   "on an idle connection; credits alone go back when nothing arrived for "
		   "that long"),
	ROW(FLUSH_BURST, .type = VBI_CFG_SIZE, .dflt = "64k", .min = 0, .max = 64 * MiB,
	    .field = "(internal) the ORDERED flush",
	    .doc = "batches of small ORDERED messages one flush posts while a signaled SEND is in "
		   "flight, in whole SENDs (at least one); the rest follows its completion (0: "
		   "no bound)"),
	ROW(FAILOVER_QUIET_MS, .type = VBI_CFG_MS, .dflt = "50", .min = 0, .max = 10000,
	    .field = "(internal) the conductor after a switch",
	    .doc = "after a switch of connection, the conductors leave their other work this long "
		   "(retiring, the QP pool, the next standby; 0: off)"),
	ROW(QP_TIMEOUT, .type = VBI_CFG_UINT, .dflt = "14", .min = 0, .max = 31,
	    .field = "(internal) vbt_conn_param.timeout",
	    .doc = "RC local ACK timeout exponent (4.096 us x 2^N)"),
	ROW(QP_RETRY_CNT, .type = VBI_CFG_UINT, .dflt = "3", .min = 0, .max = 7,
	    .field = "(internal) vbt_conn_param.retry_cnt", .doc = "RC transport retries"),
	ROW(QP_RNR_RETRY, .type = VBI_CFG_UINT, .dflt = "3", .min = 0, .max = 7,
	    .field = "(internal) vbt_conn_param.rnr_retry", .doc = "RC RNR retries (7: forever)"),
	ROW(QP_MIN_RNR_TIMER, .type = VBI_CFG_UINT, .dflt = "12", .min = 0, .max = 31,
	    .field = "(internal) vbt_conn_param.min_rnr_timer",
	    .doc = "RNR NAK timer, IB code (12: 0.64 ms)"),
	ROW(UD_QKEY, .type = VBI_CFG_UINT, .dflt = "0", .min = 0, .max = 0x7fffffff,
	    .field = "(internal) vbt_conn_param.qkey", .doc = "UD Q_Key (0: random)"),
	ROW(MEMPOOL_CHUNK, .type = VBI_CFG_SIZE, .dflt = "2m", .min = 2 * MiB, .max = GiB,
	    .mult = 2 * MiB, .field = "(internal) vbi_mempool_attr.chunk_size",
	    .doc = "registered chunk size of the memory pools"),
	ROW(MEMPOOL_CAP, .type = VBI_CFG_SIZE, .dflt = "256m", .min = 2 * MiB, .max = 1024 * GiB,
	    .field = "(internal) vbi_mempool_attr.max_registered",
	    .doc = "registered bytes of a pool outside a context (a context's: VERBUS_POOL_CAP)"),
	ROW(STAT_DIR, .type = VBI_CFG_STR, .dflt = "/dev/shm",
	    .field = "(internal) the counters file's directory",
	    .doc = "where each context's counters file (vb_stat) is created"),
	ROW(STAT_MS, .type = VBI_CFG_MS, .dflt = "1000", .min = 0, .max = 3600000,
	    .field = "(internal) the stat thread's interval",
	    .doc = "the counters file's sampled part is rewritten this often (0: no file, no thread)"),
	ROW(TEST_DROP_EVERY, .type = VBI_CFG_UINT, .dflt = "0", .min = 0, .max = 999999,
	    .flags = VBI_CFG_F_TEST, .field = "(internal) UC/UD lanes' receive path",
	    .doc = "drop every N-th datagram received on UC and UD lanes (0 and 1: off)"),
	ROW(TEST_CBQ_ENOMEM, .type = VBI_CFG_UINT, .dflt = "0", .min = 0, .max = 1000000000,
	    .flags = VBI_CFG_F_TEST, .field = "(internal) the callback queue",
	    .doc = "the N-th callback queue reservation fails once (0: off)"),
	ROW(BATCH_US, .type = VBI_CFG_GONE, .field = "-",
	    .doc = "no longer read: batching is corked (no timer); VERBUS_BATCH=0 turns it off"),
};
_Static_assert(sizeof(table) / sizeof(table[0]) == VBI_CFG__COUNT,
	       "a VBI_CFG_ id without its row in the table");

/*
 * Read by the test harness only (tests/, scripts/, bench/compare.sh; see
 * docs/testing.md), never by the library: vbi_cfg_check_env() does not warn
 * about them. A name ending in '_' is a prefix. A new harness variable goes
 * here, or every vb_ctx_create() of a test run warns about it.
 */
static const char *const harness[] = {
	"VERBUS_TEST_SCALE", "VERBUS_TEST_IP", "VERBUS_TEST_SMALL", "VERBUS_TEST_NETDEV",
	"VERBUS_TEST_VERBOSE", "VERBUS_TEST_STANDBY_IP", "VERBUS_IN_VM", "VERBUS_REQUIRE_RDMA",
	"VERBUS_FORCE_VM", "VERBUS_JOBS", "VERBUS_GID_INDEX", "VERBUS_VM_", "VERBUS_SKIP_",
	"VERBUS_NET_", "VERBUS_FUZZ_", "VERBUS_BENCH_",
};

static const char *const type_names[VBI_CFG__TYPES] = {
	[VBI_CFG_STR] = "string", [VBI_CFG_SECRET] = "secret", [VBI_CFG_UINT] = "unsigned",
	[VBI_CFG_SIZE] = "size",  [VBI_CFG_MS] = "ms",         [VBI_CFG_DOUBLE] = "double",
	[VBI_CFG_BOOL] = "bool",  [VBI_CFG_ENUM] = "enum",     [VBI_CFG_GONE] = "removed",
};

/* ---- the table ------------------------------------------------------------ */

const struct vbi_cfg_var *vbi_cfg_var(enum vbi_cfg_id id)
{
	return (unsigned)id < VBI_CFG__COUNT ? &table[id] : NULL;
}

const struct vbi_cfg_var *vbi_cfg_find(const char *name, size_t len)
{
	for (unsigned i = 0; i < VBI_CFG__COUNT; i++)
		if (strlen(table[i].name) == len && !memcmp(table[i].name, name, len))
			return &table[i];
	return NULL;
}

const char *vbi_cfg_type_name(enum vbi_cfg_type t)
{
	return (unsigned)t < VBI_CFG__TYPES ? type_names[t] : "?";
}

/* @v bytes as "16k" when a whole number of k, m or g, else decimal. */
static const char *size_text(uint64_t v, char *buf, size_t len)
{
	static const char sfx[] = "gmk";
	int sh = 30;

	for (int i = 0; i < 3; i++, sh -= 10) {
		if (v && !(v & ((1ull << sh) - 1))) {
			snprintf(buf, len, "%llu%c", (unsigned long long)(v >> sh), sfx[i]);
			return buf;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

/* "a, b, c" of an enum's names into @buf. */
static void names_text(const char *const *names, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (unsigned i = 0; names[i] && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", names[i]);
}

char *vbi_cfg_range(const struct vbi_cfg_var *v, char *buf, size_t len)
{
	char lo[32], hi[32];
	int n = 0;

	switch (v->type) {
	case VBI_CFG_UINT:
	case VBI_CFG_MS:
		n = snprintf(buf, len, "%llu..%llu", (unsigned long long)v->min,
			     (unsigned long long)v->max);
		break;
	case VBI_CFG_SIZE:
		n = snprintf(buf, len, "%s..%s", size_text(v->min, lo, sizeof(lo)),
			     size_text(v->max, hi, sizeof(hi)));
		break;
	case VBI_CFG_DOUBLE:
		snprintf(buf, len, "> %g, <= %g", v->dmin, v->dmax);
		return buf;
	case VBI_CFG_BOOL:
		snprintf(buf, len, "0, 1");
		return buf;
	case VBI_CFG_ENUM:
		names_text(v->names, buf, len);
		return buf;
	case VBI_CFG_GONE:
		snprintf(buf, len, "-");
		return buf;
	default:
		snprintf(buf, len, "text");
		return buf;
	}
	if (v->mult > 1 && n > 0 && (size_t)n < len) {
		if (v->type != VBI_CFG_SIZE)
			snprintf(lo, sizeof(lo), "%llu", (unsigned long long)v->mult);
		else
			size_text(v->mult, lo, sizeof(lo));
		snprintf(buf + n, len - (size_t)n, ", a multiple of %s", lo);
	}
	return buf;
}

/* ---- parsing -------------------------------------------------------------- */

/* Decimal or 0x hex, then the suffix the type allows, white space around:
 * 0, -EINVAL (not a number) or -ERANGE (past 2^64). */
static int parse_int(const char *s, enum vbi_cfg_type t, uint64_t *out)
{
	unsigned base = 10, shift = 0;
	uint64_t v = 0;
	int digits = 0;

	while (isspace((unsigned char)*s))
		s++;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	for (;; s++, digits++) {
		int c = tolower((unsigned char)*s);
		unsigned d = isdigit(c) ? (unsigned)(c - '0')
			   : (base == 16 && c >= 'a' && c <= 'f') ? (unsigned)(c - 'a' + 10) : 99;

		if (d >= base)
			break;
		if (v > (UINT64_MAX - d) / base)
			return -ERANGE;
		v = v * base + d;
	}
	if (!digits)
		return -EINVAL;
	if (t == VBI_CFG_MS) {
		if (!strncasecmp(s, "ms", 2))
			s += 2;
	} else {
		switch (tolower((unsigned char)*s)) {
		case 'k': shift = 10; s++; break;
		case 'm': shift = 20; s++; break;
		case 'g': shift = 30; s++; break;
		default: break;
		}
	}
	while (isspace((unsigned char)*s))
		s++;
	if (*s)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

/* 0/off/no/false or 1/on/yes/true, any case: 0 and *@out, or -EINVAL. */
static int parse_bool(const char *s, uint64_t *out)
{
	static const char *const words[] = { "0", "off", "no", "false", "1", "on", "yes", "true" };

	for (unsigned i = 0; i < 8; i++) {
		if (!strcasecmp(s, words[i])) {
			*out = i >= 4;
			return 0;
		}
	}
	return -EINVAL;
}

/* The value as shown in a message: a secret's never, a long one cut. */
static void shown(const struct vbi_cfg_var *v, const char *s, char *buf, size_t len)
{
	if (v->type == VBI_CFG_SECRET)
		snprintf(buf, len, "(secret)");
	else
		snprintf(buf, len, "%.64s%s", s, strlen(s) > 64 ? "..." : "");
}

/* -EINVAL, and the reason into @why (when not NULL): "NAME=value: @what
 * (type range)". */
static int bad(const struct vbi_cfg_var *v, const char *s, const char *what, char *why,
	       size_t len)
{
	char val[72], range[96];

	if (why) {
		shown(v, s, val, sizeof(val));
		snprintf(why, len, "%s=%s: %s (%s %s%s)", v->name, val, what,
			 vbi_cfg_type_name(v->type), vbi_cfg_range(v, range, sizeof(range)),
			 v->type == VBI_CFG_BOOL ? "; also off/on, no/yes, false/true" : "");
	}
	return -EINVAL;
}

/* The numeric types (UINT, SIZE, MS, DOUBLE) with their range checks. */
static int parse_number(const struct vbi_cfg_var *v, const char *s, union vbi_cfg_val *out,
			char *why, size_t len)
{
	char *end;
	uint64_t u;
	double d;
	int rc;

	if (v->type == VBI_CFG_DOUBLE) {
		errno = 0;
		d = strtod(s, &end);
		while (end != s && isspace((unsigned char)*end))
			end++;
		if (end == s || *end || errno == ERANGE || !isfinite(d))
			return bad(v, s, "not a number", why, len);
		if (!(d > v->dmin) || d > v->dmax)
			return bad(v, s, "out of range", why, len);
		out->d = d;
		return 0;
	}
	rc = parse_int(s, v->type, &u);
	if (rc == -EINVAL)
		return bad(v, s, "not a number", why, len);
	if (rc || u < v->min || u > v->max)
		return bad(v, s, "out of range", why, len);
	if (v->mult > 1 && u % v->mult)
		return bad(v, s, "not a multiple", why, len);
	out->u = u;
	return 0;
}

int vbi_cfg_parse(enum vbi_cfg_id id, const char *s, union vbi_cfg_val *out, char *why,
		  size_t len)
{
	const struct vbi_cfg_var *v = vbi_cfg_var(id);
	unsigned i;

	if (!v || !s) {
		if (why)
			snprintf(why, len, "variable %d unknown, or no value", (int)id);
		return -EINVAL;
	}
	if (!*s)
		return bad(v, s, "empty", why, len);
	switch (v->type) {
	case VBI_CFG_STR:
	case VBI_CFG_SECRET:
		out->s = s;
		return 0;
	case VBI_CFG_BOOL:
		return parse_bool(s, &out->u) ? bad(v, s, "not a boolean", why, len) : 0;
	case VBI_CFG_ENUM:
		for (i = 0; v->names[i] && strcasecmp(s, v->names[i]); i++)
			;
		if (!v->names[i])
			return bad(v, s, "not one of the names", why, len);
		out->u = i;
		return 0;
	case VBI_CFG_GONE:
		return bad(v, s, "no longer read", why, len);
	default:
		return parse_number(v, s, out, why, len);
	}
}

int vbi_cfg_read(enum vbi_cfg_id id, union vbi_cfg_val *out, char *why, size_t len)
{
	const struct vbi_cfg_var *v = vbi_cfg_var(id);
	const char *s = v ? getenv(v->name) : NULL;

	if (!s || !*s)
		return 1;
	return vbi_cfg_parse(id, s, out, why, len);
}

/* ---- values in force -------------------------------------------------------- */

int vbi_cfg_get(enum vbi_cfg_id id, union vbi_cfg_val *out)
{
	const struct vbi_cfg_var *v = vbi_cfg_var(id);
	char why[VBI_ERRMSG_MAX];
	int rc = vbi_cfg_read(id, out, why, sizeof(why));

	if (rc < 0) {
		vbi_error("%s; the default is used", why);
		(void)vbi_err(rc, "%s", why);
	}
	if (rc && v && v->dflt && vbi_cfg_parse(id, v->dflt, out, NULL, 0))
		vbi_error("%s: its default '%s' does not parse", v->name, v->dflt);
	return rc;
}

int vbi_cfg_u64(enum vbi_cfg_id id, uint64_t *out)
{
	union vbi_cfg_val x = { .u = *out };
	int rc = vbi_cfg_get(id, &x);

	*out = x.u;
	return rc;
}

int vbi_cfg_unsigned(enum vbi_cfg_id id, unsigned *out)
{
	uint64_t u = *out;
	int rc = vbi_cfg_u64(id, &u);

	*out = (unsigned)u; /* the rows these are for have max <= UINT_MAX */
	return rc;
}

uint64_t vbi_cfg_ms_ns(enum vbi_cfg_id id)
{
	uint64_t ms = 0;

	vbi_cfg_u64(id, &ms);
	return ms * 1000000ull;
}

_Atomic uint64_t vbi_cfg_once_[VBI_CFG__COUNT];

uint64_t vbi_cfg_u64_once_slow(enum vbi_cfg_id id)
{
	uint64_t u = 0;

	vbi_cfg_u64(id, &u);
	atomic_store_explicit(&vbi_cfg_once_[id], u + 1, memory_order_relaxed);
	return u;
}

int vbi_cfg_int(enum vbi_cfg_id id, int *out)
{
	uint64_t u = (uint64_t)*out;
	int rc = vbi_cfg_u64(id, &u);

	*out = (int)u; /* the rows these are for have max <= INT_MAX */
	return rc;
}

int vbi_cfg_size(enum vbi_cfg_id id, size_t *out)
{
	uint64_t u = *out;
	int rc = vbi_cfg_u64(id, &u);

	*out = (size_t)u;
	return rc;
}

int vbi_cfg_double(enum vbi_cfg_id id, double *out)
{
	union vbi_cfg_val x = { .d = *out };
	int rc = vbi_cfg_get(id, &x);

	*out = x.d;
	return rc;
}

int vbi_cfg_str(enum vbi_cfg_id id, const char **out)
{
	union vbi_cfg_val x = { .s = *out };
	int rc = vbi_cfg_get(id, &x);

	*out = x.s;
	return rc;
}

int vbi_cfg_check(enum vbi_cfg_id id)
{
	char why[VBI_ERRMSG_MAX];
	union vbi_cfg_val x;
	int rc = vbi_cfg_read(id, &x, why, sizeof(why));

	return rc < 0 ? vbi_err(rc, "%s", why) : 0;
}

/* ---- the whole environment --------------------------------------------------- */

/* @name (its @len bytes) is one of harness[] or starts with one of its
 * prefixes. */
static bool is_harness(const char *name, size_t len)
{
	for (unsigned i = 0; i < sizeof(harness) / sizeof(harness[0]); i++) {
		size_t n = strlen(harness[i]);

		if (harness[i][n - 1] == '_' ? len >= n && !memcmp(name, harness[i], n)
					     : len == n && !memcmp(name, harness[i], n))
			return true;
	}
	return false;
}

/* Levenshtein distance, case-insensitive (names are upper case). */
static unsigned distance(const char *a, size_t la, const char *b)
{
	unsigned row[64], i, j, diag, up;
	size_t lb = strlen(b);

	if (la >= 64 || lb >= 64)
		return UINT_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			unsigned best = diag + (toupper((unsigned char)a[i - 1]) != b[j - 1]);

			up = row[j];
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* The known name closest to @name, when it is close (a typo: 1 edit, one
 * more per 5 characters after "VERBUS_", at most 3); else NULL. */
static const char *closest(const char *name, size_t len)
{
	unsigned best = 1 + (unsigned)(len > 7 ? (len - 7) / 5 : 0), d;
	const char *hit = NULL;

	if (best > 3)
		best = 3;
	best++; /* the bound, exclusive */

	for (unsigned i = 0; i < VBI_CFG__COUNT; i++) {
		d = distance(name, len, table[i].name);
		if (d < best) {
			best = d;
			hit = table[i].name;
		}
	}
	return hit;
}

/* The warning for a VERBUS_* name the table does not know. */
static void warn_unknown(const char *name, size_t len)
{
	const char *near = closest(name, len);

	vbi_warn("%.*s is not a verbus variable: ignored%s%s%s", (int)len, name,
		 near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
}

/* A VERBUS_* entry of environ: its row (NULL: none), name length and value. */
static const struct vbi_cfg_var *env_entry(const char *e, size_t *len, const char **val)
{
	const char *eq = strchr(e, '=');

	*len = eq ? (size_t)(eq - e) : strlen(e);
	*val = eq ? eq + 1 : "";
	return vbi_cfg_find(e, *len);
}

int vbi_cfg_check_env(void)
{
	char first[VBI_ERRMSG_MAX] = "", others[192] = "";
	size_t olen = 0, len;
	union vbi_cfg_val x;
	const char *val;
	unsigned nbad = 0;

	for (char **e = environ; e && *e; e++) {
		const struct vbi_cfg_var *v;

		if (strncmp(*e, "VERBUS_", 7))
			continue;
		v = env_entry(*e, &len, &val);
		if (!v) {
			if (!is_harness(*e, len))
				warn_unknown(*e, len);
			continue;
		}
		if (v->type == VBI_CFG_GONE) {
			vbi_warn("%s is %s", v->name, v->doc);
			continue;
		}
		if (!*val || !vbi_cfg_parse((enum vbi_cfg_id)(v - table), val, &x,
					    nbad ? NULL : first, sizeof(first)))
			continue;
		if (nbad++ && olen < sizeof(others))
			olen += (size_t)snprintf(others + olen, sizeof(others) - olen, "%s%s",
						 nbad > 2 ? ", " : "", v->name);
	}
	if (!nbad)
		return 0;
	if (nbad == 1)
		return vbi_err(-EINVAL, "%s", first);
	return vbi_err(-EINVAL, "%s; also malformed: %s", first, others);
}

/* ---- the dump and the docs ---------------------------------------------------- */

/* One variable's line: the value in force, where it comes from. */
static void dump_one(FILE *f, const struct vbi_cfg_var *v, unsigned flags)
{
	enum vbi_cfg_id id = (enum vbi_cfg_id)(v - table);
	char why[VBI_ERRMSG_MAX], range[96], line[160];
	const char *env = getenv(v->name), *dflt = v->dflt ? v->dflt : "";
	union vbi_cfg_val x;
	int rc = vbi_cfg_read(id, &x, why, sizeof(why));

	if (v->type == VBI_CFG_GONE && !env)
		return;
	if (flags & VBI_CFG_DUMP_DOC)
		fprintf(f, "# %s%s [%s %s; %s]\n", v->doc,
			v->flags & VBI_CFG_F_TEST ? " (test hook)" : "",
			vbi_cfg_type_name(v->type), vbi_cfg_range(v, range, sizeof(range)), v->field);
	if (v->type == VBI_CFG_GONE) {
		snprintf(line, sizeof(line), "%s=%s", v->name, env);
		fprintf(f, "%-40s # %s\n", line, v->doc);
	} else if (rc == 0) {
		snprintf(line, sizeof(line), "%s=%s", v->name,
			 v->type == VBI_CFG_SECRET ? "(set)" : env);
		fprintf(f, "%-40s # set (default %s)\n", line, v->dflt ? dflt : v->unset);
	} else if (rc == 1) {
		snprintf(line, sizeof(line), "%s=%s", v->name, dflt);
		fprintf(f, "%-40s # default%s%s%s\n", line, v->dflt ? "" : " (",
			v->dflt ? "" : v->unset, v->dflt ? "" : ")");
	} else {
		snprintf(line, sizeof(line), "%s=%s", v->name, dflt);
		fprintf(f, "%-40s # MALFORMED: %s: vb_ctx_create() refuses it\n", line, why);
	}
}

int vbi_cfg_dump(FILE *f, unsigned flags)
{
	const char *val;
	size_t len;

	fprintf(f, "# verbus: every VERBUS_* variable of the library, its value in force and "
		   "its default\n");
	for (unsigned i = 0; i < VBI_CFG__COUNT; i++)
		dump_one(f, &table[i], flags);
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "VERBUS_", 7) || env_entry(*e, &len, &val))
			continue;
		if (is_harness(*e, len)) {
			fprintf(f, "# %.*s: read by the test harness, not by the library\n",
				(int)len, *e);
		} else {
			const char *near = closest(*e, len);

			fprintf(f, "# %.*s: not a verbus variable, ignored%s%s%s\n", (int)len, *e,
				near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
		}
	}
	return fflush(f) || ferror(f) ? -EIO : 0;
}

int vbi_cfg_markdown(FILE *f)
{
	char range[96];

	fprintf(f, "| Variable | Type | Range | Default | Fills | What |\n");
	fprintf(f, "| --- | --- | --- | --- | --- | --- |\n");
	for (unsigned i = 0; i < VBI_CFG__COUNT; i++) {
		const struct vbi_cfg_var *v = &table[i];

		fprintf(f, "| `%s` | %s | %s | ", v->name, vbi_cfg_type_name(v->type),
			vbi_cfg_range(v, range, sizeof(range)));
		if (v->dflt)
			fprintf(f, "`%s`", v->dflt);
		else if (v->type == VBI_CFG_GONE)
			fprintf(f, "-");
		else
			fprintf(f, "(%s)", v->unset);
		fprintf(f, " | %s | %s%s |\n", v->field,
			v->flags & VBI_CFG_F_TEST ? "test hook: " : "", v->doc);
	}
	return fflush(f) || ferror(f) ? -EIO : 0;
}
