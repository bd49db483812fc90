/* SPDX-License-Identifier: MIT */
/*
 * No memory registration inside a progress round: an accepted connection's
 * buffers come from memory the pool registered beforehand, on another
 * thread.
 *
 * Found by the message-rate benchmark (vb_bench bw, 20,000 messages): the
 * publisher registered 5 of its 11 pool chunks while the stream ran. An
 * accepted connection holds two receive slots until its HELLO is valid
 * (vbi_lane_commit then adds the rest and the send ring's buffers), and
 * that HELLO is handled by the progress thread, with the node lock held
 * for writing: when the pool had no room, the progress thread registered
 * a 2 MiB chunk (ibv_reg_mr, the kernel clearing its pages) and every
 * delivery of the context waited for it.
 *
 * Two contexts in one process (progress threads). The subscriber connects
 * (its primary and then a standby: two accepted connections on the
 * publisher) and the publisher streams ORDERED messages; then FAULTS times
 * the subscriber's active QP is moved to ERR, each time after a standby is
 * warm, so the publisher accepts a fresh standby after each failover.
 * Checked on both sides: vb_stats_t.pool_registrations_progress is 0, and
 * every message arrived once, in order.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define TOPIC "hot.orders"
#define MSGS 2000u /* per phase, scaled by VERBUS_TEST_SCALE */
#define FAULTS 2
#define WAIT_MS 20000

/* The subscriber's progress thread writes, main reads. */
static uint64_t got, bad;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	uint64_t expect = __atomic_load_n(&got, __ATOMIC_RELAXED) + 1;

	(void)sub;
	(void)arg;
	if (m->seq != expect && __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED) < 5)
		fprintf(stderr, "seq %" PRIu64 ", expected %" PRIu64 "\n", m->seq, expect);
	__atomic_fetch_add(&got, 1, __ATOMIC_RELEASE);
}

static vb_ctx_t *new_ctx(void)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *ctx;

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("ctx: %s", vb_errmsg());
	return ctx;
}

static vb_stats_t stats(vb_ctx_t *ctx)
{
	vb_stats_t st;

	vb_ctx_stats(ctx, &st);
	return st;
}

static void wait_for(const char *what, vb_ctx_t *ctx, size_t field_off, uint64_t want)
{
	for (uint64_t t0 = vbt_now_ms();; usleep(2000)) {
		vb_stats_t st = stats(ctx);
		uint64_t v;

		memcpy(&v, (const char *)&st + field_off, sizeof(v));
		if (v >= want)
			return;
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%s: %" PRIu64 " of %" PRIu64 " after %d ms", what, v, want, WAIT_MS);
	}
}

/* Publish messages @from..@to (each 64 bytes) and wait until delivered. */
static void stream(vb_pub_t *pub, uint64_t from, uint64_t to)
{
	uint8_t buf[64];
	uint64_t seq = 0, t0;
	int rc;

	for (uint64_t i = from; i <= to; i++) {
		memset(buf, (int)i, sizeof(buf));
		for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, sizeof(buf), &seq)) == -EAGAIN;
		     sched_yield())
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("publish %" PRIu64 ": -EAGAIN for %d ms: %s", i, WAIT_MS,
					 vb_errmsg());
		if (rc)
			fail_msg("publish %" PRIu64 ": %s", i, vb_errmsg());
		assert_int_equal(seq, i);
	}
	for (t0 = vbt_now_ms(); __atomic_load_n(&got, __ATOMIC_ACQUIRE) < to; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %" PRIu64 " delivered after %d ms",
				 __atomic_load_n(&got, __ATOMIC_ACQUIRE), to, WAIT_MS);
}

static void test_hot_reg(void **state)
{
	vb_ctx_t *pctx = new_ctx(), *sctx = new_ctx();
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_node_t *pnode, *snode;
	vb_pub_t *pub;
	vb_sub_t *sub;
	vb_stats_t ps, ss;
	uint64_t n = vbt_scaled(MSGS), last = 0;
	unsigned faults = 0;

	(void)state;
	vb_node_attr_init(&na);
	na.name = "hot-pub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(pctx, &na, &pnode), 0);
	assert_int_equal(vb_pub_create(pnode, TOPIC, VB_ORDERED, NULL, &pub), 0);
	vb_node_attr_init(&na);
	na.name = "hot-sub";
	assert_int_equal(vb_node_create(sctx, &na, &snode), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(snode, TOPIC, VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(snode, vbt_test_ip(), vb_node_port(pnode)))
		fail_msg("connect: %s", vb_errmsg());
	for (uint64_t t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no subscriber after %d ms", WAIT_MS);

	/* the stream starts at once: the standby is built meanwhile */
	stream(pub, 1, n);
	last = n;
	for (faults = 0; faults < FAULTS; faults++) {
		wait_for("standbys warmed", sctx, offsetof(vb_stats_t, standbys_warmed),
			 faults + 1);
		if (vb_node_inject_fault(snode, NULL, VB_FAULT_QP_ERR))
			fail_msg("fault %u: %s", faults + 1, vb_errmsg());
		stream(pub, last + 1, last + n);
		last += n;
	}
	/* the last standby warm too (its HELLO handled by the publisher) */
	wait_for("standbys warmed", sctx, offsetof(vb_stats_t, standbys_warmed), FAULTS + 1);
	ps = stats(pctx);
	ss = stats(sctx);
	printf("%" PRIu64 " delivered in order (%" PRIu64 " wrong), %u faults (failovers %" PRIu64
	       " + %" PRIu64 "); pool registrations: publisher %" PRIu64 " (%" PRIu64
	       " in a progress round), subscriber %" PRIu64 " (%" PRIu64 " in a progress round)\n",
	       got, bad, faults, ps.failovers, ss.failovers, ps.pool_registrations,
	       ps.pool_registrations_progress, ss.pool_registrations,
	       ss.pool_registrations_progress);

	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(snode), 0);
	assert_int_equal(vb_node_destroy(pnode), 0);
	assert_int_equal(vb_ctx_destroy(sctx), 0);
	assert_int_equal(vb_ctx_destroy(pctx), 0);

	assert_int_equal(got, last);
	assert_int_equal(bad, 0);
	assert_true(ps.failovers + ss.failovers >= 1);
	if (ps.pool_registrations_progress || ss.pool_registrations_progress)
		fail_msg("memory registered inside a progress round: publisher %" PRIu64
			 ", subscriber %" PRIu64 " of %" PRIu64 " / %" PRIu64 " registrations",
			 ps.pool_registrations_progress, ss.pool_registrations_progress,
			 ps.pool_registrations, ss.pool_registrations);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hot_reg),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
