/* SPDX-License-Identifier: MIT */
/*
 * Queue sizing: rate x latency x 1.5 arithmetic, power-of-two rounding,
 * floors, clamping to device limits with the clamp reported (flag, warn log
 * line, describe text), CQ sums, and bad input.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/err.h"
#include "core/log.h"
#include "core/sizing.h"

/* Captures log lines so the test can assert a clamp is reported. */
static struct {
	int warn, info;
	char last[1024];
} logcap;

static void cap_sink(int level, const char *func, int line, const char *msg, void *arg)
{
	(void)func;
	(void)line;
	(void)arg;
	if (level == VBI_LOG_WARN)
		logcap.warn++;
	if (level == VBI_LOG_INFO)
		logcap.info++;
	snprintf(logcap.last, sizeof(logcap.last), "%s", msg);
}

static int setup(void **state)
{
	memset(&logcap, 0, sizeof(logcap));
	vbi_log_set_sink(cap_sink, NULL);
	vbi_log_set_level(VBI_LOG_INFO);
	return 0;
}

static int teardown(void **state)
{
	vbi_log_set_sink(NULL, NULL);
	vbi_log_set_level(VBI_LOG_WARN);
	return 0;
}

/* A roomy device: limits of the order rxe reports. */
static struct vbi_sizing_in dev_in(double rate, double lat_ms)
{
	struct vbi_sizing_in in = {
		.msg_rate_per_sec = rate,
		.latency_ms = lat_ms,
		.max_qp_wr = 16384,
		.max_cqe = 32767,
		.max_inline_data = 256,
	};
	return in;
}

static void test_pow2(void **state)
{
	assert_int_equal(vbi_pow2_roundup(0), 1);
	assert_int_equal(vbi_pow2_roundup(1), 1);
	assert_int_equal(vbi_pow2_roundup(3), 4);
	assert_int_equal(vbi_pow2_roundup(750), 1024);
	assert_int_equal(vbi_pow2_roundup(1024), 1024);
	assert_int_equal(vbi_pow2_roundup(1025), 2048);
	assert_true(vbi_pow2_roundup((uint64_t)1 << 63) == (uint64_t)1 << 63);
	assert_int_equal(vbi_pow2_roundup(((uint64_t)1 << 63) + 1), 0);
}

/* The seed article's two QPs: market data at 1024, orders at 512. */
static void test_article_examples(void **state)
{
	struct vbi_sizing_out o;
	struct vbi_sizing_in md = dev_in(100000, 5); /* 100k ticks/s, 5 ms */
	struct vbi_sizing_in ord = dev_in(50000, 5); /* 50k orders/s, 5 ms */

	assert_int_equal(vbi_sizing_compute(&md, &o), 0);
	assert_int_equal(o.sq_need, 750); /* 100000 x 5 / 1000 x 1.5 */
	assert_int_equal(o.sq_wanted, 1024);
	assert_int_equal(o.sq_depth, 1024);
	assert_int_equal(o.rq_depth, 1024);
	assert_int_equal(o.cq_depth, 2048);
	assert_int_equal(o.flags, 0);
	assert_int_equal(logcap.warn, 0);
	assert_int_equal(logcap.info, 1);
	assert_non_null(strstr(logcap.last, "SQ 1024 (need 750 = 100000 msg/s x 5 ms x 1.5"));

	assert_int_equal(vbi_sizing_compute(&ord, &o), 0);
	assert_int_equal(o.sq_need, 375);
	assert_int_equal(o.sq_depth, 512);
	assert_int_equal(o.cq_depth, 1024);

	/* the article's formula truncates; ceil matters at the edge:
	 * 1000/s x 256 ms x 2 = 512 exactly -> 512, a hair more -> 1024 */
	struct vbi_sizing_in edge = dev_in(1000, 256);

	edge.headroom = 2.0;
	assert_int_equal(vbi_sizing_compute(&edge, &o), 0);
	assert_int_equal(o.sq_need, 512);
	assert_int_equal(o.sq_depth, 512);
	edge.latency_ms = 256.001;
	assert_int_equal(vbi_sizing_compute(&edge, &o), 0);
	assert_int_equal(o.sq_need, 513);
	assert_int_equal(o.sq_depth, 1024);

	/* 1e5 x 0.3 ms is 30000.000000000004 in doubles: still need 45 */
	struct vbi_sizing_in fp = dev_in(1e5, 0.3);

	assert_int_equal(vbi_sizing_compute(&fp, &o), 0);
	assert_int_equal(o.sq_need, 45);
	assert_int_equal(o.sq_depth, 64);
}

static void test_floor(void **state)
{
	struct vbi_sizing_out o;
	struct vbi_sizing_in in = dev_in(100, 1); /* 0.15 -> 1 */

	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_int_equal(o.sq_need, 1);
	assert_int_equal(o.sq_depth, VBI_SIZING_FLOOR_DEFAULT);
	assert_int_equal(o.rq_depth, VBI_SIZING_FLOOR_DEFAULT);
	assert_true(o.flags & VBI_SIZING_SQ_FLOORED);
	assert_true(o.flags & VBI_SIZING_RQ_FLOORED);
	assert_false(o.flags & VBI_SIZING_ANY_CLAMPED);

	in.floor = 20; /* configurable, and rounded up like any depth */
	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_int_equal(o.sq_depth, 32);
	assert_int_equal(o.floor, 20);
	assert_non_null(strstr(logcap.last, "floor 20"));

	in = dev_in(100000, 5); /* above the floor: no flag */
	in.floor = 20;
	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_false(o.flags & VBI_SIZING_SQ_FLOORED);
}

static void test_rq_and_cq(void **state)
{
	struct vbi_sizing_out o;
	struct vbi_sizing_in in = dev_in(100000, 5);

	in.recv_rate_per_sec = 10000; /* 75 -> 128 */
	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_int_equal(o.sq_depth, 1024);
	assert_int_equal(o.rq_need, 75);
	assert_int_equal(o.rq_depth, 128);
	assert_int_equal(o.cq_wanted, 1024 + 128);
	assert_int_equal(o.cq_depth, 1152);

	in.no_rq = true;
	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_int_equal(o.rq_depth, 0);
	assert_int_equal(o.cq_depth, 1024);
	assert_non_null(strstr(logcap.last, "no RQ"));

	/* CQ shared by several QPs */
	struct vbi_cq_sizing cq;
	const uint32_t qs[] = { 1024, 1024, 512, 512 };

	assert_int_equal(vbi_sizing_cq(qs, 4, 32767, &cq), 0);
	assert_int_equal(cq.wanted, 3072);
	assert_int_equal(cq.depth, 3072);
	assert_false(cq.clamped);
	int warn0 = logcap.warn;

	assert_int_equal(vbi_sizing_cq(qs, 4, 2000, &cq), 0);
	assert_int_equal(cq.wanted, 3072);
	assert_int_equal(cq.depth, 2000);
	assert_true(cq.clamped);
	assert_int_equal(logcap.warn, warn0 + 1);
	assert_non_null(strstr(logcap.last, "3072 entries > max_cqe 2000"));
	/* sums beyond 32 bits are still a (clamped) answer */
	const uint32_t huge[] = { UINT32_MAX, UINT32_MAX };

	assert_int_equal(vbi_sizing_cq(huge, 2, 4194303, &cq), 0);
	assert_true(cq.wanted == 2ull * UINT32_MAX);
	assert_int_equal(cq.depth, 4194303);
}

static void test_clamped_is_reported(void **state)
{
	struct vbi_sizing_out o;
	struct vbi_sizing_in in = dev_in(1e7, 1); /* 15000 -> 16384 */
	char buf[1024];

	in.max_qp_wr = 4096;
	in.max_cqe = 6000;
	in.inline_wanted = 512;
	in.max_inline_data = 64;
	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_int_equal(o.sq_need, 15000);
	assert_int_equal(o.sq_wanted, 16384);
	assert_int_equal(o.sq_depth, 4096);
	assert_int_equal(o.rq_depth, 4096);
	assert_int_equal(o.cq_wanted, 8192);
	assert_int_equal(o.cq_depth, 6000);
	assert_int_equal(o.max_inline, 64);
	assert_int_equal(o.inline_wanted, 512);
	assert_int_equal(o.flags, VBI_SIZING_SQ_CLAMPED | VBI_SIZING_RQ_CLAMPED |
					  VBI_SIZING_CQ_CLAMPED | VBI_SIZING_INLINE_CLAMPED);
	assert_int_equal(logcap.warn, 1);
	assert_int_equal(logcap.info, 0);
	assert_non_null(strstr(logcap.last, "exceeds the device"));

	size_t n = vbi_sizing_describe(&o, buf, sizeof(buf));

	assert_int_equal(n, strlen(buf));
	assert_non_null(strstr(buf, "SQ CLAMPED: wanted 16384 > device max_qp_wr 4096"));
	assert_non_null(strstr(buf, "CQ CLAMPED: wanted 8192 > device max_cqe 6000"));
	assert_non_null(strstr(buf, "INLINE CLAMPED: wanted 512 > device max_inline_data 64"));
	assert_non_null(strstr(buf, "needs more than the device allows"));
	/* truncation keeps the snprintf contract */
	char small[16];

	assert_int_equal(vbi_sizing_describe(&o, small, sizeof(small)), n);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_int_equal(strncmp(small, buf, sizeof(small) - 1), 0);

	/* exactly at the limit is not clamped */
	in = dev_in(1e7, 1);
	in.max_qp_wr = 16384;
	in.inline_wanted = 256;
	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_int_equal(o.sq_depth, 16384);
	assert_int_equal(o.max_inline, 256);
	assert_false(o.flags & (VBI_SIZING_SQ_CLAMPED | VBI_SIZING_INLINE_CLAMPED));
	/* a device max that is not a power of two is used as is */
	in.max_qp_wr = 10000;
	assert_int_equal(vbi_sizing_compute(&in, &o), 0);
	assert_int_equal(o.sq_depth, 10000);
	assert_true(o.flags & VBI_SIZING_SQ_CLAMPED);
}

static void expect_einval(struct vbi_sizing_in in, const char *what)
{
	struct vbi_sizing_out o;

	o.sq_depth = 77;
	vbi_err_clear();
	assert_int_equal(vbi_sizing_compute(&in, &o), -EINVAL);
	if (!strstr(vbi_errmsg(), what))
		fail_msg("message \"%s\" lacks \"%s\"", vbi_errmsg(), what);
	assert_int_equal(o.sq_depth, 0);
}

static void test_bad_input(void **state)
{
	struct vbi_sizing_in in;

	expect_einval(dev_in(0, 5), "message rate 0/s");
	expect_einval(dev_in(-5, 5), "message rate -5/s");
	expect_einval(dev_in(NAN, 5), "message rate nan/s");
	expect_einval(dev_in(INFINITY, 5), "message rate inf/s");
	expect_einval(dev_in(1000, 0), "latency 0 ms");
	expect_einval(dev_in(1000, -1), "latency -1 ms");
	expect_einval(dev_in(1000, NAN), "latency nan ms");
	in = dev_in(1000, 5);
	in.recv_rate_per_sec = -1;
	expect_einval(in, "receive rate -1/s");
	in = dev_in(1000, 5);
	in.headroom = 0.5;
	expect_einval(in, "headroom 0.5");
	in = dev_in(1000, 5);
	in.max_qp_wr = 0;
	expect_einval(in, "device limits missing");
	/* 1e12/s x 1 s x 1.5: more entries than 32 bits hold */
	expect_einval(dev_in(1e12, 1000), "does not fit in 32 bits");
	/* 3e9 fits, but its power of two (2^32) does not */
	expect_einval(dev_in(2e9, 1000), "beyond 32 bits");
	/* rate x latency overflowing a double */
	expect_einval(dev_in(1e300, 1e300), "does not fit in 32 bits");

	struct vbi_cq_sizing cq;
	const uint32_t zero[] = { 16, 0 };

	assert_int_equal(vbi_sizing_cq(NULL, 1, 100, &cq), -EINVAL);
	assert_int_equal(vbi_sizing_cq(zero, 0, 100, &cq), -EINVAL);
	assert_int_equal(vbi_sizing_cq(zero, 2, 100, &cq), -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "queue 1 has depth 0"));
	assert_int_equal(vbi_sizing_cq(zero, 1, 0, &cq), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pow2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_article_examples, setup, teardown),
		cmocka_unit_test_setup_teardown(test_floor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rq_and_cq, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clamped_is_reported, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
