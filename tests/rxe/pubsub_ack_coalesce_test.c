/* SPDX-License-Identifier: MIT */
/*
 * ORDERED both ways, one message at a time (a ping-pong): the receiver's
 * acknowledgements are coalesced, not sent with every SEND that goes back.
 *
 * Each side delivers a message and at once publishes one the other way.
 * Every such SEND used to carry the ACK of the message before it (a 40-byte
 * frame, framed, posted, parsed and applied to the publisher's window for
 * one message each way): on Soft-RoCE, whose ICRC is computed in software
 * over every byte, that alone was a tenth of the one-way latency. Over an
 * RC lane nothing but the publisher's window (and its memory) waits for an
 * ACK: test_coalesced runs ROUNDS round trips and wants at most a quarter
 * as many ACK-carrying SENDs from each side, and still every message
 * acknowledged when the publishers leave (vb_pub_destroy()'s linger:
 * vb_stats_t.unacked_on_close stays 0), so a coalesced ACK is never lost.
 *
 * An owed ACK also goes once it has waited VERBUS_ACK_DELAY_MS (2 ms by
 * default), with the next SEND or alone on an idle connection: how many do
 * so depends on how fast the round trips are (under ASan in the VM one
 * run sent 255 per 1000), so the test sets 1 s. Each timer then adds at
 * most one ACK a second per side, and the final ACKs still come within
 * the publishers' linger (10 s).
 *
 * test_quorum_urgent: a publisher that asked for acknowledgements
 * (ack_quorum, k-of-n writes) gets one for each message as before: the
 * ping-pong waits for each ping's vb_pub_wait_acked() as well, and the
 * ponging side sends at least one ACK-carrying SEND per ping.
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
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define ROUNDS 1000u
#define WAIT_MS 10000

static void ping_pong(unsigned quorum, uint64_t *acks_a, uint64_t *acks_b)
{
	vb_ctx_t *ca = vbt_ctx_open(NULL), *cb = vbt_ctx_open(NULL);
	vb_node_t *na = vbt_node_open(ca, "ack-a", true), *nb = vbt_node_open(cb, "ack-b", false);
	static struct vbt_echo po;
	static struct vbt_count pi;
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_pub_t *ping;
	vb_sub_t *sa_sub, *sb_sub;
	vb_stats_t st_a, st_b;
	uint64_t t0;

	memset(&po, 0, sizeof(po));
	memset(&pi, 0, sizeof(pi));
	vb_pub_attr_init(&pa);
	pa.ack_quorum = quorum;
	pa.linger_ms = WAIT_MS;
	assert_int_equal(vb_pub_create(na, "ack.ping", VB_ORDERED, &pa, &ping), 0);
	vb_pub_attr_init(&pa);
	pa.linger_ms = WAIT_MS;
	assert_int_equal(vb_pub_create(nb, "ack.pong", VB_ORDERED, &pa, &po.pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = vbt_count_cb;
	sa.arg = &pi;
	assert_int_equal(vb_sub_create(na, "ack.pong", VB_ORDERED, &sa, &sa_sub), 0);
	sa.on_msg = vbt_echo_cb;
	sa.arg = &po;
	assert_int_equal(vb_sub_create(nb, "ack.ping", VB_ORDERED, &sa, &sb_sub), 0);
	if (vb_node_connect(nb, vbt_test_ip(), vb_node_port(na)))
		fail_msg("connect: %s", vb_errmsg());
	if (!vbt_wait_subscribers(ping, 1, WAIT_MS) || !vbt_wait_subscribers(po.pub, 1, WAIT_MS))
		fail_msg("no subscriber after %d ms", WAIT_MS);

	for (uint64_t i = 1; i <= ROUNDS; i++) {
		uint64_t seq;
		int rc;

		for (t0 = vbt_now_ms(); (rc = vb_publish(ping, &i, sizeof(i), &seq)) == -EAGAIN;
		     sched_yield())
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("ping %" PRIu64 ": -EAGAIN for %d ms", i, WAIT_MS);
		assert_int_equal(rc, 0);
		for (t0 = vbt_now_ms(); atomic_load(&pi.got) < i; sched_yield())
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("pong %" PRIu64 " not back after %d ms", i, WAIT_MS);
		if (quorum && (rc = vb_pub_wait_acked(ping, seq, WAIT_MS)))
			fail_msg("ping %" PRIu64 " not acknowledged: %s", i, vb_errmsg());
	}
	assert_int_equal(atomic_load(&pi.bad), 0);
	assert_int_equal(atomic_load(&po.failed), 0);
	assert_int_equal(atomic_load(&po.got), ROUNDS);
	vb_ctx_stats(ca, &st_a);
	vb_ctx_stats(cb, &st_b);
	*acks_a = st_a.acks_sent;
	*acks_b = st_b.acks_sent;

	/* the publishers leave: each waits (linger) for every message to be
	 * acknowledged; what is not is counted in unacked_on_close */
	assert_int_equal(vb_pub_destroy(ping), 0);
	assert_int_equal(vb_pub_destroy(po.pub), 0);
	vb_ctx_stats(ca, &st_a);
	vb_ctx_stats(cb, &st_b);
	printf("%u round trips%s: ACK-carrying SENDs %" PRIu64 " (pinging side), %" PRIu64
	       " (ponging side); unacknowledged at close %" PRIu64 " / %" PRIu64 "\n",
	       ROUNDS, quorum ? " (ack_quorum 1 on the pings)" : "", *acks_a, *acks_b,
	       st_a.unacked_on_close, st_b.unacked_on_close);
	assert_int_equal(st_a.unacked_on_close, 0);
	assert_int_equal(st_b.unacked_on_close, 0);
	assert_int_equal(vb_sub_destroy(sa_sub), 0);
	assert_int_equal(vb_sub_destroy(sb_sub), 0);
	assert_int_equal(vb_node_destroy(nb), 0);
	assert_int_equal(vb_node_destroy(na), 0);
	assert_int_equal(vb_ctx_destroy(cb), 0);
	assert_int_equal(vb_ctx_destroy(ca), 0);
}

static void test_coalesced(void **state)
{
	uint64_t a, b;

	(void)state;
	ping_pong(0, &a, &b);
	if (a > ROUNDS / 4 || b > ROUNDS / 4)
		fail_msg("%" PRIu64 " and %" PRIu64 " ACK-carrying SENDs for %u round trips: "
			 "not coalesced (at most %u each)", a, b, ROUNDS, ROUNDS / 4);
}

static void test_quorum_urgent(void **state)
{
	uint64_t a, b;

	(void)state;
	ping_pong(1, &a, &b);
	if (b < ROUNDS)
		fail_msg("%" PRIu64 " ACK-carrying SENDs for %u pings that asked for one each",
			 b, ROUNDS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_coalesced),
		cmocka_unit_test(test_quorum_urgent),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("VERBUS_ACK_DELAY_MS", "1000", 1); /* before any context: read once */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
