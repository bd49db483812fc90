/* SPDX-License-Identifier: MIT */
/*
 * An owed ACK never goes alone before VERBUS_ACK_DELAY_MS.
 *
 * A subscriber that delivered a message owes its ACK; when nothing carries
 * it, the per-peer round sends it alone once it has waited
 * VERBUS_ACK_DELAY_MS (2 ms by default), and credits alone once nothing
 * has arrived for that long. Both waits used to be measured on the coarse
 * clock (CLOCK_MONOTONIC_COARSE: one scheduler tick, 4 ms on Debian's
 * kernel), so any tick between the moment the ACK became owed and the next
 * idle round made it look 4 ms old: it went alone at once. In a
 * ping-pong that was about one lone ACK per tick on each side (`vb_bench
 * lat` with VB_BENCH_STATS: 50-60 SENDs besides the 5000 pings), each a
 * SEND the other side had to take for nothing.
 *
 * test_lone_ack_waits: VERBUS_ACK_DELAY_MS=3 (below one tick); ROUNDS
 * times, one message is published, the subscriber delivers it, and the
 * test runs the subscriber's progress until it has sent its lone ACK: that
 * must never come earlier than the delay (2.5 ms allowed: the ACK is owed
 * from its dispatch, a little before the callback the test times from).
 * Each round starts after a pause of 0-2 ms, so the deliveries fall
 * anywhere between two ticks; with the coarse clock about half the lone
 * ACKs then came earlier.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define ROUNDS 20u
#define WAIT_MS 10000
#define DELAY_MS 3u

static atomic_uint_fast64_t delivered;
static uint64_t delivered_ns;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	(void)arg;
	delivered_ns = mono_ns();
	atomic_fetch_add(&delivered, 1);
}

/* SENDs that carried an ACK (credits alone, which may go once nothing has
 * arrived for the delay, are not counted) */
static uint64_t acks(vb_ctx_t *c)
{
	vb_stats_t st;

	assert_int_equal(vb_ctx_stats(c, &st), 0);
	return st.acks_sent;
}

/* The subscriber's context (VB_PROGRESS_APP) is driven by this thread; the
 * publisher's has its progress thread (it answers the connection). */
static void spin(vb_ctx_t *c)
{
	vb_progress(c);
}

static void test_lone_ack_waits(void **state)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *cp, *cs;
	vb_node_t *np, *ns;
	vb_sub_attr_t sa;
	vb_pub_t *pub;
	vb_sub_t *sub;
	uint64_t t0, early = 0, min_us = UINT64_MAX, max_us = 0;

	(void)state;
	vb_ctx_attr_init(&ca);
	ca.keepalive_ms = 0;
	cp = vbt_ctx_open(&ca);
	vb_ctx_attr_init(&ca);
	ca.progress = VB_PROGRESS_APP;
	ca.keepalive_ms = 0;
	cs = vbt_ctx_open(&ca);
	np = vbt_node_open(cp, "tick-pub", true);
	ns = vbt_node_open(cs, "tick-sub", false);
	assert_int_equal(vb_pub_create(np, "tick", VB_ORDERED, NULL, &pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(ns, "tick", VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(ns, vbt_test_ip(), vb_node_port(np)))
		fail_msg("connect: %s", vb_errmsg());
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; spin(cs))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no subscriber after %d ms", WAIT_MS);
	/* whatever the set-up left to send goes first */
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < 50;)
		spin(cs);

	for (uint64_t i = 1; i <= ROUNDS; i++) {
		uint64_t s0, us, t;

		/* a pause of 0-2 ms first, so that the deliveries fall anywhere
		 * between two scheduler ticks (the last ACK left just after
		 * one: without it they would all come just after a tick);
		 * shorter than the delay, or credits could go alone meanwhile */
		for (t = mono_ns(); mono_ns() - t < (i * 1370000ull) % 2000000ull;)
			spin(cs);
		s0 = acks(cs);
		assert_int_equal(vb_publish(pub, &i, sizeof(i), NULL), 0);
		for (t0 = vbt_now_ms(); atomic_load(&delivered) < i; spin(cs))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("message %" PRIu64 " not delivered after %d ms", i, WAIT_MS);
		for (t0 = vbt_now_ms(); acks(cs) == s0; spin(cs))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("message %" PRIu64 ": no ACK after %d ms", i, WAIT_MS);
		us = (mono_ns() - delivered_ns) / 1000;
		if (us < DELAY_MS * 1000 - 500) {
			vb_stats_t st;

			vb_ctx_stats(cs, &st);
			printf("round %" PRIu64 ": its ACK %" PRIu64 " us after the delivery (SENDs %"
			       PRIu64 ", keepalives %" PRIu64 ")\n", i, us, st.sends_posted,
			       st.keepalives);
			early++;
		}
		min_us = us < min_us ? us : min_us;
		max_us = us > max_us ? us : max_us;
	}
	printf("%u lone ACKs, VERBUS_ACK_DELAY_MS=%u: %" PRIu64 "-%" PRIu64 " us after the "
	       "delivery, %" PRIu64 " before %u us\n", ROUNDS, DELAY_MS, min_us, max_us, early,
	       DELAY_MS * 1000 - 500);
	if (early)
		fail_msg("%" PRIu64 " of %u lone ACKs went before VERBUS_ACK_DELAY_MS (%u ms): "
			 "the first after %" PRIu64 " us", early, ROUNDS, DELAY_MS, min_us);

	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(ns), 0);
	assert_int_equal(vb_node_destroy(np), 0);
	assert_int_equal(vb_ctx_destroy(cs), 0);
	assert_int_equal(vb_ctx_destroy(cp), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lone_ack_waits),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("VERBUS_ACK_DELAY_MS", "3", 1); /* DELAY_MS */ /* before any context: read once */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
