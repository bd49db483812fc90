/* SPDX-License-Identifier: MIT */
/*
 * An owed ACK goes alone on a quiet connection once it has waited
 * VERBUS_ACK_DELAY_MS, however often keepalives arrive.
 *
 * A subscriber that delivered a few messages and has nothing to send owes
 * their ACK; nothing will carry it, so the per-peer round sends it alone
 * after the delay. That rule used to count the delay from the last frame
 * received, and a keepalive is a frame: with keepalives closer together
 * than the delay (here 50 ms against 300 ms) the silence never came, and
 * the ACK waited for the next message, or for ever. The publisher's window
 * and retained memory were held meanwhile, and its linger at
 * vb_pub_destroy() ran out with the messages counted unacknowledged.
 *
 * test_owed_ack_goes_alone: 3 messages (fewer than any count rule), then
 * the subscriber's context must send an ACK while the publisher's sends
 * keepalives, and the publisher must then find everything acknowledged
 * when it leaves.
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

#define WAIT_MS 10000
#define ACK_DELAY "300"  /* ms: VERBUS_ACK_DELAY_MS */
#define KEEPALIVE_MS 50u /* a sixth of it */
#define MSGS 3u

static atomic_uint_fast64_t got;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	(void)arg;
	atomic_fetch_add(&got, 1);
}

static vb_ctx_t *ctx_open(void)
{
	vb_ctx_attr_t ca;

	vb_ctx_attr_init(&ca);
	ca.keepalive_ms = KEEPALIVE_MS;
	return vbt_ctx_open(&ca);
}

static void test_owed_ack_goes_alone(void **state)
{
	vb_ctx_t *ca = ctx_open(), *cb = ctx_open();
	vb_node_t *na = vbt_node_open(ca, "ai-a", true), *nb = vbt_node_open(cb, "ai-b", false);
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_pub_t *pub;
	vb_sub_t *sub;
	vb_stats_t sta, stb;
	uint64_t acks0, ka0, t0;

	(void)state;
	vb_pub_attr_init(&pa);
	pa.linger_ms = WAIT_MS;
	assert_int_equal(vb_pub_create(na, "ai.x", VB_ORDERED, &pa, &pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(nb, "ai.x", VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(nb, vbt_test_ip(), vb_node_port(na)))
		fail_msg("connect: %s", vb_errmsg());
	if (!vbt_wait_subscribers(pub, 1, WAIT_MS))
		fail_msg("no subscriber after %d ms", WAIT_MS);

	vb_ctx_stats(cb, &stb);
	acks0 = stb.acks_sent;
	vb_ctx_stats(ca, &sta);
	ka0 = sta.keepalives;
	for (uint64_t i = 1; i <= MSGS; i++)
		assert_int_equal(vb_publish(pub, &i, sizeof(i), NULL), 0);
	for (t0 = vbt_now_ms(); atomic_load(&got) < MSGS; sched_yield())
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %u delivered after %d ms",
				 (uint64_t)atomic_load(&got), MSGS, WAIT_MS);
	/* the subscriber now owes their ACK and has nothing else to send */
	for (t0 = vbt_now_ms();; usleep(10000)) {
		vb_ctx_stats(cb, &stb);
		if (stb.acks_sent > acks0)
			break;
		if (vbt_now_ms() - t0 > WAIT_MS) {
			vb_ctx_stats(ca, &sta);
			fail_msg("no ACK from the subscriber %d ms after %u deliveries (publisher's "
				 "keepalives meanwhile: %" PRIu64 ")", WAIT_MS, MSGS,
				 sta.keepalives - ka0);
		}
	}
	vb_ctx_stats(ca, &sta);
	printf("ACK sent alone after %u deliveries; publisher's keepalives meanwhile: %" PRIu64
	       "\n", MSGS, sta.keepalives - ka0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	vb_ctx_stats(ca, &sta);
	assert_int_equal(sta.unacked_on_close, 0);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(nb), 0);
	assert_int_equal(vb_node_destroy(na), 0);
	assert_int_equal(vb_ctx_destroy(cb), 0);
	assert_int_equal(vb_ctx_destroy(ca), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_owed_ack_goes_alone),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("VERBUS_ACK_DELAY_MS", ACK_DELAY, 1); /* before any context: read once */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
