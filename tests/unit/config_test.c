/* SPDX-License-Identifier: MIT */
/* The one configuration table (core/config.c): every row and its default,
 * each type's parsing and bounds, the environment getters, the
 * whole-environment check of vb_ctx_create (malformed values, unknown and
 * test-harness names), the attr_init functions' defaults and a bad value
 * refused by vb_ctx_create/vb_pub_create (no device needed: the check comes
 * first), the dump, and README.md's table against the table. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/mempool.h"
#include "core/path.h"
#include "transport/transport.h"

#ifndef VERBUS_SOURCE_DIR
#error "VERBUS_SOURCE_DIR (tests/CMakeLists.txt) locates README.md"
#endif

extern char **environ;

#define MS 1000000ull

/* ---- helpers ----------------------------------------------------------------- */

/* The log lines written while capturing (warnings and errors). */
static char logbuf[8192];
static size_t loglen;

static void capture(int level, const char *func, int line, const char *msg, void *arg)
{
	int n = snprintf(logbuf + loglen, sizeof(logbuf) - loglen, "%d %s\n", level, msg);

	if (n > 0 && loglen + (size_t)n < sizeof(logbuf))
		loglen += (size_t)n;
}

static void log_start(void)
{
	loglen = 0;
	logbuf[0] = '\0';
	vbi_log_set_sink(capture, NULL);
}

static void log_stop(void)
{
	vbi_log_set_sink(NULL, NULL);
}

/* Every VERBUS_* variable out of the environment (the harness may have set
 * some: VERBUS_TEST_SCALE, VERBUS_CM_TIMEOUT_MS, ...). */
static int clean_env(void **state)
{
	char name[128];

	for (;;) {
		char **e = environ;

		while (e && *e && strncmp(*e, "VERBUS_", 7))
			e++;
		if (!e || !*e)
			break;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
		unsetenv(name);
	}
	return 0;
}

/* Parse @s as @id: the return code, the value into *@u / @why. */
static int parse(enum vbi_cfg_id id, const char *s, uint64_t *u, char *why, size_t len)
{
	union vbi_cfg_val v = { .u = 12345 };
	int rc = vbi_cfg_parse(id, s, &v, why, len);

	if (u)
		*u = v.u;
	return rc;
}

static uint64_t ok_u(enum vbi_cfg_id id, const char *s)
{
	char why[256] = "";
	uint64_t u;
	int rc = parse(id, s, &u, why, sizeof(why));

	if (rc)
		fail_msg("%s: %s", s, why);
	return u;
}

/* @s is refused; the reason names the variable, the value and @want. */
static void refused(enum vbi_cfg_id id, const char *s, const char *want)
{
	const struct vbi_cfg_var *v = vbi_cfg_var(id);
	char why[256] = "", head[160];

	assert_int_equal(parse(id, s, NULL, why, sizeof(why)), -EINVAL);
	snprintf(head, sizeof(head), "%s=%s: ", v->name, s);
	if (v->type != VBI_CFG_SECRET && strncmp(why, head, strlen(head)))
		fail_msg("'%s' does not start with '%s'", why, head);
	if (!strstr(why, want))
		fail_msg("'%s' does not say '%s'", why, want);
}

/* ---- the table ----------------------------------------------------------------- */

static void test_every_row(void **state)
{
	char range[128];

	for (unsigned i = 0; i < VBI_CFG__COUNT; i++) {
		const struct vbi_cfg_var *v = vbi_cfg_var((enum vbi_cfg_id)i);
		const char *texts[] = { v->name, v->doc, v->field, v->dflt, v->unset };
		union vbi_cfg_val x;
		char why[256] = "";

		assert_non_null(v->name);
		assert_non_null(vbi_cfg_range(v, range, sizeof(range)));
		assert_int_equal(strncmp(v->name, "VERBUS_", 7), 0);
		assert_ptr_equal(vbi_cfg_find(v->name, strlen(v->name)), v);
		assert_true(v->type < VBI_CFG__TYPES);
		assert_non_null(v->doc);
		assert_non_null(v->field);
		/* a README cell each: no '|' */
		for (unsigned t = 0; t < 5; t++)
			assert_true(!texts[t] || !strchr(texts[t], '|'));
		/* test hooks are marked, and are VERBUS_TEST_* */
		assert_int_equal(!!(v->flags & VBI_CFG_F_TEST), !strncmp(v->name, "VERBUS_TEST_", 12));
		if (v->type == VBI_CFG_GONE)
			continue;
		if (v->dflt) {
			if (vbi_cfg_parse((enum vbi_cfg_id)i, v->dflt, &x, why, sizeof(why)))
				fail_msg("%s: its default does not parse: %s", v->name, why);
		} else {
			assert_non_null(v->unset);
		}
		if (v->type == VBI_CFG_UINT || v->type == VBI_CFG_SIZE || v->type == VBI_CFG_MS) {
			assert_true(v->min <= v->max);
			assert_true(v->max <= UINT_MAX || v->type == VBI_CFG_SIZE);
		}
		if (v->type == VBI_CFG_DOUBLE)
			assert_true(v->dmin < v->dmax);
		if (v->type == VBI_CFG_ENUM)
			assert_non_null(v->names[0]);
	}
	assert_null(vbi_cfg_var(VBI_CFG__COUNT));
	assert_null(vbi_cfg_find("VERBUS_NOPE", 11));
	assert_string_equal(vbi_cfg_type_name(VBI_CFG__TYPES), "?");
}

/* ---- each type ------------------------------------------------------------------ */

static void test_unsigned(void **state)
{
	assert_int_equal(ok_u(VBI_CFG_WINDOW, "16"), 16);
	assert_int_equal(ok_u(VBI_CFG_WINDOW, "1048576"), 1048576);
	refused(VBI_CFG_WINDOW, "15", "out of range (unsigned 16..1048576)");
	refused(VBI_CFG_WINDOW, "1048577", "out of range");
	assert_int_equal(ok_u(VBI_CFG_WINDOW, "4k"), 4096);  /* accepted before too */
	assert_int_equal(ok_u(VBI_CFG_WINDOW, "0x1000"), 4096);
	assert_int_equal(ok_u(VBI_CFG_WINDOW, " 32 "), 32);
	assert_int_equal(ok_u(VBI_CFG_WINDOW, "0100"), 100); /* decimal, not octal */
	refused(VBI_CFG_WINDOW, "abc", "not a number");
	refused(VBI_CFG_WINDOW, "-1", "not a number");
	refused(VBI_CFG_WINDOW, "16x", "not a number");
	refused(VBI_CFG_WINDOW, "0x", "not a number");
	refused(VBI_CFG_WINDOW, "", "empty");
	refused(VBI_CFG_WINDOW, "99999999999999999999", "out of range");
	refused(VBI_CFG_WINDOW, "17179869184g", "out of range");
	/* a range starting at 0, and the transport's 0..7 */
	assert_int_equal(ok_u(VBI_CFG_IDLE_SPIN_US, "0"), 0);
	assert_int_equal(ok_u(VBI_CFG_QP_RETRY_CNT, "7"), 7);
	refused(VBI_CFG_QP_RETRY_CNT, "8", "0..7");
	assert_int_equal(ok_u(VBI_CFG_DEGRADE_FAILURES, "64"), 64);
	refused(VBI_CFG_DEGRADE_FAILURES, "65", "1..64");
	refused(VBI_CFG_DEGRADE_FAILURES, "0", "1..64");
	assert_int_equal(ok_u(VBI_CFG_TEST_DROP_EVERY, "100"), 100);
}

static void test_size(void **state)
{
	assert_int_equal(ok_u(VBI_CFG_SLOT_SIZE, "1k"), 1024);
	assert_int_equal(ok_u(VBI_CFG_SLOT_SIZE, "1K"), 1024);
	assert_int_equal(ok_u(VBI_CFG_SLOT_SIZE, "1m"), 1 << 20);
	assert_int_equal(ok_u(VBI_CFG_SLOT_SIZE, "1088"), 1088);
	refused(VBI_CFG_SLOT_SIZE, "1023", "out of range (size 1k..1m, a multiple of 64)");
	refused(VBI_CFG_SLOT_SIZE, "1048640", "out of range");
	refused(VBI_CFG_SLOT_SIZE, "1030", "not a multiple");
	refused(VBI_CFG_SLOT_SIZE, "16kb", "not a number");
	assert_int_equal(ok_u(VBI_CFG_MEMPOOL_CAP, "8m"), 8 << 20);
	assert_int_equal(ok_u(VBI_CFG_POOL_CAP, "1g"), 1ull << 30);
	assert_int_equal(ok_u(VBI_CFG_POOL_CAP, "1024g"), 1ull << 40);
	refused(VBI_CFG_POOL_CAP, "1025g", "2m..1024g");
	refused(VBI_CFG_MEMPOOL_CAP, "lots", "not a number");
	refused(VBI_CFG_MEMPOOL_CHUNK, "3m", "a multiple of 2m");
	assert_int_equal(ok_u(VBI_CFG_MEMPOOL_CHUNK, "4194304"), 4 << 20);
	assert_int_equal(ok_u(VBI_CFG_RETAIN_BYTES, "0"), 0);
}

static void test_ms(void **state)
{
	assert_int_equal(ok_u(VBI_CFG_CM_TIMEOUT_MS, "5000"), 5000);
	assert_int_equal(ok_u(VBI_CFG_CM_TIMEOUT_MS, "5000ms"), 5000);
	assert_int_equal(ok_u(VBI_CFG_CM_TIMEOUT_MS, "30000MS"), 30000);
	assert_int_equal(ok_u(VBI_CFG_CM_TIMEOUT_MS, "600000"), 600000);
	refused(VBI_CFG_CM_TIMEOUT_MS, "600001", "out of range (ms 1..600000)");
	refused(VBI_CFG_CM_TIMEOUT_MS, "0", "1..600000");
	refused(VBI_CFG_CM_TIMEOUT_MS, "1k", "not a number"); /* no size suffix on a duration */
	refused(VBI_CFG_CM_TIMEOUT_MS, "5s", "not a number");
	assert_int_equal(ok_u(VBI_CFG_KEEPALIVE_MS, "0"), 0); /* 0: off */
	assert_int_equal(ok_u(VBI_CFG_SLOW_SUB_MS, "10"), 10);
	refused(VBI_CFG_SLOW_SUB_MS, "9", "10..3600000");
	refused(VBI_CFG_SLOW_SUB_MS, "3600001", "10..3600000");
	refused(VBI_CFG_RTO_MS, "0", "1..60000");
}

static void test_double(void **state)
{
	union vbi_cfg_val v;
	char why[256];

	assert_int_equal(vbi_cfg_parse(VBI_CFG_MSG_RATE, "1e5", &v, why, sizeof(why)), 0);
	assert_true(v.d == 1e5);
	assert_int_equal(vbi_cfg_parse(VBI_CFG_MSG_RATE, "1e9", &v, why, sizeof(why)), 0);
	assert_int_equal(vbi_cfg_parse(VBI_CFG_LATENCY_MS, " 0.25 ", &v, why, sizeof(why)), 0);
	assert_true(v.d == 0.25);
	refused(VBI_CFG_MSG_RATE, "0", "out of range (double > 0, <= 1e+09)");
	refused(VBI_CFG_MSG_RATE, "-5", "out of range");
	refused(VBI_CFG_MSG_RATE, "1.1e9", "out of range");
	refused(VBI_CFG_MSG_RATE, "nan", "not a number");
	refused(VBI_CFG_MSG_RATE, "inf", "not a number");
	refused(VBI_CFG_MSG_RATE, "12abc", "not a number");
}

static void test_bool(void **state)
{
	static const char *const no[] = { "0", "off", "OFF", "no", "No", "false", "FALSE" };
	static const char *const yes[] = { "1", "on", "On", "yes", "YES", "true", "True" };

	for (unsigned i = 0; i < 7; i++) {
		assert_int_equal(ok_u(VBI_CFG_STANDBY, no[i]), 0);
		assert_int_equal(ok_u(VBI_CFG_MCAST, yes[i]), 1);
	}
	refused(VBI_CFG_BATCH, "2", "not a boolean (bool 0, 1");
	refused(VBI_CFG_PROMOTE_DIRECT, "maybe", "not a boolean");
}

static void test_enum(void **state)
{
	assert_int_equal(ok_u(VBI_CFG_PROGRESS, "thread"), VB_PROGRESS_THREAD);
	assert_int_equal(ok_u(VBI_CFG_PROGRESS, "APP"), VB_PROGRESS_APP);
	assert_int_equal(ok_u(VBI_CFG_IDLE, "backoff"), VB_IDLE_BACKOFF);
	assert_int_equal(ok_u(VBI_CFG_IDLE, "Spin"), VB_IDLE_SPIN);
	assert_int_equal(ok_u(VBI_CFG_IDLE, "yield"), VB_IDLE_YIELD);
	assert_int_equal(ok_u(VBI_CFG_IDLE, "BLOCK"), VB_IDLE_BLOCK);
	assert_int_equal(ok_u(VBI_CFG_SLOW_SUB, "cut"), VB_SLOW_CUT);
	assert_int_equal(ok_u(VBI_CFG_SLOW_SUB, "Block"), VB_SLOW_BLOCK);
	for (int l = VBI_LOG_ERROR; l <= VBI_LOG_TRACE; l++)
		assert_int_equal(ok_u(VBI_CFG_LOG_LEVEL, vbi_log_level_name(l)), l);
	refused(VBI_CFG_IDLE, "busy", "not one of the names (enum backoff, spin, yield, block)");
	refused(VBI_CFG_PROGRESS, "threads", "thread, app");
}

static void test_strings_and_secrets(void **state)
{
	union vbi_cfg_val v;
	char why[256];

	assert_int_equal(vbi_cfg_parse(VBI_CFG_NODE_NAME, "pub-1", &v, why, sizeof(why)), 0);
	assert_string_equal(v.s, "pub-1");
	refused(VBI_CFG_AUTH_KEY, "", "empty");
	assert_non_null(strstr((parse(VBI_CFG_AUTH_KEY, "", NULL, why, sizeof(why)), why),
			       "VERBUS_AUTH_KEY=(secret)"));
	refused(VBI_CFG_BATCH_US, "5", "no longer read");
}

/* ---- the environment ------------------------------------------------------------- */

static void test_getters(void **state)
{
	unsigned w = 1;
	const char *s = NULL;
	size_t z = 0;

	assert_int_equal(vbi_cfg_unsigned(VBI_CFG_WINDOW, &w), 1); /* unset: the default */
	assert_int_equal(w, 4096);
	setenv("VERBUS_WINDOW", "", 1); /* empty is unset */
	assert_int_equal(vbi_cfg_unsigned(VBI_CFG_WINDOW, &w), 1);
	setenv("VERBUS_WINDOW", "8192", 1);
	assert_int_equal(vbi_cfg_unsigned(VBI_CFG_WINDOW, &w), 0);
	assert_int_equal(w, 8192);
	log_start();
	setenv("VERBUS_WINDOW", "x", 1);
	assert_int_equal(vbi_cfg_unsigned(VBI_CFG_WINDOW, &w), -EINVAL);
	log_stop();
	assert_int_equal(w, 4096); /* the default, and an error logged and set */
	assert_non_null(strstr(vb_errmsg(), "VERBUS_WINDOW=x: not a number"));
	assert_non_null(strstr(logbuf, "VERBUS_WINDOW=x"));
	assert_int_equal(vbi_cfg_check(VBI_CFG_WINDOW), -EINVAL);
	unsetenv("VERBUS_WINDOW");
	assert_int_equal(vbi_cfg_check(VBI_CFG_WINDOW), 0);
	/* no default in the row: untouched when unset */
	assert_int_equal(vbi_cfg_str(VBI_CFG_DEVICE, &s), 1);
	assert_null(s);
	w = 77;
	assert_int_equal(vbi_cfg_unsigned(VBI_CFG_RECOVERY_QUEUE, &w), 1);
	assert_int_equal(w, 77);
	setenv("VERBUS_DEVICE", "mlx5_0", 1);
	assert_int_equal(vbi_cfg_str(VBI_CFG_DEVICE, &s), 0);
	assert_string_equal(s, "mlx5_0");
	unsetenv("VERBUS_DEVICE");
	assert_int_equal(vbi_cfg_size(VBI_CFG_RETAIN_BYTES, &z), 1);
	assert_int_equal(z, 64 << 20);
}

/* vbi_cfg_u64_once: the first call's value for the process, per row. */
static void test_read_once(void **state)
{
	(void)state;
	setenv("VERBUS_RTO_MS", "250", 1);
	assert_int_equal(vbi_cfg_u64_once(VBI_CFG_RTO_MS), 250);
	setenv("VERBUS_RTO_MS", "10", 1); /* too late: read already */
	assert_int_equal(vbi_cfg_u64_once(VBI_CFG_RTO_MS), 250);
	unsetenv("VERBUS_RTO_MS");
	assert_int_equal(vbi_cfg_u64_once(VBI_CFG_RTO_MS), 250);
	/* another row has its own; 0 is a value, not "not read yet" */
	setenv("VERBUS_TEST_DROP_EVERY", "0", 1);
	assert_int_equal(vbi_cfg_u64_once(VBI_CFG_TEST_DROP_EVERY), 0);
	setenv("VERBUS_TEST_DROP_EVERY", "7", 1);
	assert_int_equal(vbi_cfg_u64_once(VBI_CFG_TEST_DROP_EVERY), 0);
	unsetenv("VERBUS_TEST_DROP_EVERY");
	/* unset at the first call: the row's default */
	assert_int_equal(vbi_cfg_u64_once(VBI_CFG_ACK_DELAY_MS), 2);
}

static void test_check_env(void **state)
{
	static const char *const harness[] = {
		"VERBUS_TEST_SCALE", "VERBUS_TEST_IP", "VERBUS_VM_MEM", "VERBUS_SKIP_NET",
		"VERBUS_FUZZ_SECONDS", "VERBUS_BENCH_SCALE", "VERBUS_JOBS", "VERBUS_NET_ROLE",
		"VERBUS_IN_VM", "VERBUS_REQUIRE_RDMA",
	};

	/* nothing set, then valid values: 0 and no warning */
	log_start();
	assert_int_equal(vbi_cfg_check_env(), 0);
	setenv("VERBUS_WINDOW", "8192", 1);
	setenv("VERBUS_CM_TIMEOUT_MS", "30000", 1);
	for (unsigned i = 0; i < sizeof(harness) / sizeof(harness[0]); i++)
		setenv(harness[i], "1", 1);
	assert_int_equal(vbi_cfg_check_env(), 0);
	log_stop();
	assert_string_equal(logbuf, "");

	/* a malformed value: the error names it, its value and the range */
	setenv("VERBUS_MAX_PENDING", "2000", 1);
	assert_int_equal(vbi_cfg_check_env(), -EINVAL);
	assert_non_null(strstr(vb_errmsg(), "VERBUS_MAX_PENDING=2000: out of range (unsigned 1..1024)"));
	setenv("VERBUS_IDLE", "fast", 1);
	assert_int_equal(vbi_cfg_check_env(), -EINVAL);
	assert_non_null(strstr(vb_errmsg(), "also malformed: VERBUS_"));
	unsetenv("VERBUS_MAX_PENDING");
	unsetenv("VERBUS_IDLE");

	/* an unknown VERBUS_ name: a warning with the closest name; no error */
	log_start();
	setenv("VERBUS_WINDOWS", "5", 1);
	setenv("VERBUS_BATCH_US", "20", 1);
	setenv("VERBUS_ZZZ", "1", 1);
	assert_int_equal(vbi_cfg_check_env(), 0);
	log_stop();
	print_message("      %s", logbuf);
	assert_non_null(strstr(logbuf, "VERBUS_WINDOWS is not a verbus variable: ignored (did you "
				       "mean VERBUS_WINDOW?)"));
	assert_non_null(strstr(logbuf, "VERBUS_ZZZ is not a verbus variable: ignored\n"));
	assert_non_null(strstr(logbuf, "VERBUS_BATCH_US is no longer read"));
	for (unsigned i = 0; i < sizeof(harness) / sizeof(harness[0]); i++)
		assert_null(strstr(logbuf, harness[i]));
	clean_env(state);
}

/* ---- the attr_init functions and the create path ----------------------------------- */

static void test_defaults_unchanged(void **state)
{
	vb_ctx_attr_t a;
	vb_node_attr_t n;
	vb_pub_attr_t p;
	struct vbi_path_cfg c;
	struct vbt_conn_param cp;
	struct vbi_mempool_attr m;

	log_start();
	vb_ctx_attr_init(&a);
	assert_int_equal(a.size, sizeof(a));
	assert_null(a.device);
	assert_null(a.ip);
	assert_null(a.standby_device);
	assert_null(a.standby_ip);
	assert_int_equal(a.progress, VB_PROGRESS_THREAD);
	assert_int_equal(a.progress_spin, 64);
	assert_int_equal(a.idle, VB_IDLE_BACKOFF);
	assert_int_equal(a.idle_spin_us, 200);
	assert_true(a.msg_rate == 100000 && a.latency_ms == 1.0);
	assert_int_equal(a.max_msg, 1u << 20);
	assert_int_equal(a.slot_size, 16384);
	assert_int_equal(a.pool_cap, 256u << 20);
	assert_int_equal(a.max_peers, 16);
	assert_int_equal(a.window, 4096);
	assert_int_equal(a.cm_timeout_ms, 5000);
	assert_int_equal(a.batch, 1);
	assert_int_equal(a.standby, 1);
	assert_int_equal(a.mcast, 1);
	assert_string_equal(a.mcast_prefix, "239.192.0.0/14");
	assert_int_equal(a.keepalive_ms, 100);
	assert_int_equal(a.max_pending, 32);
	vb_node_attr_init(&n);
	assert_string_equal(n.name, "verbus");
	vb_pub_attr_init(&p);
	assert_int_equal(p.linger_ms, 2000);
	assert_int_equal(p.slow_policy, VB_SLOW_CUT);
	assert_int_equal(p.slow_sub_ms, 2000);
	assert_int_equal(p.retain_bytes, 64u << 20);
	vbi_path_cfg_init(&c);
	assert_int_equal(c.degrade_failures, 3);
	assert_int_equal(c.degrade_window_ns, 1000 * MS);
	assert_int_equal(c.promote_hold_ns, 2000 * MS);
	assert_int_equal(c.promote_hold_max_ns, 60000 * MS);
	assert_int_equal(c.relapse_window_ns, 10000 * MS);
	assert_int_equal(c.promote_probes, 3);
	assert_int_equal(c.promote_direct, 1);
	assert_int_equal(c.recovery_queue, 0);
	vbt_conn_param_init(&cp);
	assert_int_equal(cp.timeout, 14);
	assert_int_equal(cp.retry_cnt, 3);
	assert_int_equal(cp.rnr_retry, 3);
	assert_int_equal(cp.min_rnr_timer, 12);
	assert_int_equal(cp.max_rd_atomic, 1);
	assert_int_equal(cp.qkey, 0);
	assert_int_equal(cp.cm_timeout_ms, 5000);
	vbi_mempool_attr_init(&m);
	assert_int_equal(m.chunk_size, VBI_MEMPOOL_HUGEPAGE);
	assert_int_equal(m.max_registered, 256u << 20);
	log_stop();
	assert_string_equal(logbuf, ""); /* defaults log nothing */

	/* the environment's values reach the fields */
	setenv("VERBUS_PROGRESS", "app", 1);
	setenv("VERBUS_IDLE", "spin", 1);
	setenv("VERBUS_MCAST", "off", 1);
	setenv("VERBUS_SLOT_SIZE", "64k", 1);
	setenv("VERBUS_MSG_RATE", "2.5e5", 1);
	setenv("VERBUS_SLOW_SUB", "block", 1);
	setenv("VERBUS_QP_TIMEOUT", "18", 1);
	vb_ctx_attr_init(&a);
	vb_pub_attr_init(&p);
	vbt_conn_param_init(&cp);
	assert_int_equal(a.progress, VB_PROGRESS_APP);
	assert_int_equal(a.idle, VB_IDLE_SPIN);
	assert_int_equal(a.mcast, 0);
	assert_int_equal(a.slot_size, 65536);
	assert_true(a.msg_rate == 2.5e5);
	assert_int_equal(p.slow_policy, VB_SLOW_BLOCK);
	assert_int_equal(cp.timeout, 18);
	clean_env(state);
}

static void test_create_refuses_a_bad_value(void **state)
{
	vb_ctx_attr_t a;
	vb_pub_attr_t p;
	vb_ctx_t *ctx = (vb_ctx_t *)&a;
	vb_pub_t *pub = (vb_pub_t *)&a;
	int not_a_node;

	setenv("VERBUS_WINDOW", "8", 1);
	log_start();
	vb_ctx_attr_init(&a); /* cannot fail: keeps the default, logs the error */
	log_stop();
	assert_int_equal(a.window, 4096);
	assert_non_null(strstr(logbuf, "VERBUS_WINDOW=8: out of range"));
	/* the environment is checked before anything (no device is opened) */
	assert_int_equal(vb_ctx_create(&a, &ctx), -EINVAL);
	assert_null(ctx);
	print_message("      vb_errmsg: %s\n", vb_errmsg());
	assert_non_null(strstr(vb_errmsg(), "VERBUS_WINDOW=8: out of range (unsigned 16..1048576)"));
	/* with the attribute set by the program, the variable is still refused */
	a.window = 8192;
	assert_int_equal(vb_ctx_create(&a, &ctx), -EINVAL);
	assert_non_null(strstr(vb_errmsg(), "VERBUS_WINDOW=8"));
	unsetenv("VERBUS_WINDOW");

	/* the publisher's variables: vb_pub_create checks them before it looks
	 * at the node (so a stand-in pointer is never read) */
	setenv("VERBUS_SLOW_SUB_MS", "5", 1);
	log_start();
	vb_pub_attr_init(&p);
	log_stop();
	assert_int_equal(p.slow_sub_ms, 2000);
	assert_int_equal(vb_pub_create((vb_node_t *)&not_a_node, "t", VB_ORDERED, &p, &pub),
			 -EINVAL);
	assert_null(pub);
	assert_non_null(strstr(vb_errmsg(), "VERBUS_SLOW_SUB_MS=5: out of range (ms 10..3600000)"));
	unsetenv("VERBUS_SLOW_SUB_MS");
}

/* ---- the dump and README ------------------------------------------------------------ */

static char *dump(unsigned flags)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	assert_int_equal(vbi_cfg_dump(f, flags), 0);
	fclose(f);
	return buf;
}

static void test_dump(void **state)
{
	char *out;

	setenv("VERBUS_WINDOW", "8192", 1);
	setenv("VERBUS_AUTH_KEY", "00112233445566778899aabbccddeeff", 1);
	setenv("VERBUS_IDLE", "nope", 1);
	setenv("VERBUS_WINDOWS", "1", 1);
	setenv("VERBUS_TEST_SCALE", "1", 1);
	out = dump(VBI_CFG_DUMP_DOC);
	for (unsigned i = 0; i < VBI_CFG__COUNT; i++) {
		const struct vbi_cfg_var *v = vbi_cfg_var((enum vbi_cfg_id)i);
		char line[64];

		snprintf(line, sizeof(line), "\n%s=", v->name);
		if (v->type != VBI_CFG_GONE && !strstr(out, line))
			fail_msg("%s is not in the dump", v->name);
	}
	assert_non_null(strstr(out, "VERBUS_WINDOW=8192"));
	assert_non_null(strstr(out, "# set (default 4096)"));
	assert_non_null(strstr(out, "VERBUS_AUTH_KEY=(set)"));
	assert_null(strstr(out, "00112233")); /* a secret is never printed */
	assert_non_null(strstr(out, "VERBUS_IDLE=backoff"));
	assert_non_null(strstr(out, "MALFORMED: VERBUS_IDLE=nope"));
	assert_non_null(strstr(out, "VERBUS_MAX_PEERS=16"));
	assert_non_null(strstr(out, "# connections per context [unsigned 1..1024; "
				    "vb_ctx_attr_t.max_peers]"));
	assert_non_null(strstr(out, "# VERBUS_WINDOWS: not a verbus variable, ignored (did you mean "
				    "VERBUS_WINDOW?)"));
	assert_non_null(strstr(out, "# VERBUS_TEST_SCALE: read by the test harness"));
	free(out);
	clean_env(state);
}

/* README.md's text between its two markers, or NULL. */
static char *readme_table(void)
{
	static const char begin[] = "<!-- VERBUS_* table:", end[] = "<!-- end of the VERBUS_* table -->";
	FILE *f = fopen(VERBUS_SOURCE_DIR "/README.md", "r");
	char *buf, *b, *e;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	b = strstr(buf, begin);
	e = b ? strstr(b, end) : NULL;
	if (!b || !e || !(b = strchr(b, '\n'))) {
		free(buf);
		return NULL;
	}
	*e = '\0';
	memmove(buf, b + 1, strlen(b + 1) + 1);
	return buf;
}

static void test_readme_matches_the_table(void **state)
{
	char *want = NULL, *have = readme_table();
	size_t len = 0, line = 1;
	FILE *f = open_memstream(&want, &len);

	assert_non_null(f);
	assert_int_equal(vbi_cfg_markdown(f), 0);
	fclose(f);
	if (!have)
		fail_msg("README.md has no table between '<!-- VERBUS_* table:' and '<!-- end of "
			 "the VERBUS_* table -->'");
	if (strcmp(have, want)) {
		size_t i = 0, h, w;

		while (have[i] && have[i] == want[i])
			line += want[i++] == '\n';
		while (i && want[i - 1] != '\n')
			i--;
		h = strcspn(have + i, "\n");
		w = strcspn(want + i, "\n");
		fail_msg("README.md's VERBUS_* table differs from core/config.c's at its line %zu:\n"
			 "  README.md: %.*s\n  the table: %.*s\n"
			 "replace the table with the output of `vb_bench config --markdown`",
			 line, (int)h, have + i, (int)w, want + i);
	}
	free(want);
	free(have);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_every_row, clean_env),
		cmocka_unit_test_setup(test_unsigned, clean_env),
		cmocka_unit_test_setup(test_size, clean_env),
		cmocka_unit_test_setup(test_ms, clean_env),
		cmocka_unit_test_setup(test_double, clean_env),
		cmocka_unit_test_setup(test_bool, clean_env),
		cmocka_unit_test_setup(test_enum, clean_env),
		cmocka_unit_test_setup(test_strings_and_secrets, clean_env),
		cmocka_unit_test_setup(test_getters, clean_env),
		cmocka_unit_test_setup(test_check_env, clean_env),
		cmocka_unit_test_setup(test_defaults_unchanged, clean_env),
		cmocka_unit_test_setup(test_create_refuses_a_bad_value, clean_env),
		cmocka_unit_test_setup(test_dump, clean_env),
		cmocka_unit_test_setup(test_read_once, clean_env),
		cmocka_unit_test_setup(test_readme_matches_the_table, clean_env),
	};
	return cmocka_run_group_tests(tests, clean_env, NULL);
}
