/* SPDX-License-Identifier: MIT */
/*
 * A subscriber that leaves right after its last delivery still acknowledges
 * everything it was handed: the publisher's vb_pub_wait_acked() returns 0.
 *
 * Found by net_link_cut_test (standby variant, 2 of 6 runs): every message
 * delivered, the subscriber destroyed at once, the publisher's window never
 * drained. The destroying thread marked the subscriber dead while the
 * progress thread was still returning from the last on_msg; the delivery
 * was then not made owed an ACK, so the final ACK that vb_sub_destroy()
 * sends stopped one short.
 *
 * One context publishes (ORDERED, ack_quorum 1), a second context in the
 * same process subscribes; each round publishes ROUND_MSGS messages and the
 * subscriber goes away at the last one, in the way the case names:
 *   other thread  the last on_msg tells the main thread, which calls
 *                 vb_sub_destroy(); the callback returns only once the main
 *                 thread is inside it (the destroy waits for the running
 *                 callback), so the destroy begins while it runs;
 *   at once       the main thread destroys the subscriber as soon as it
 *                 sees the count, with no hand-shake (the everyday case).
 * After each round the node and context of the subscriber are destroyed,
 * and every published message must be acknowledged within 10 s.
 *
 * test_quorum_after_leave: with ack_quorum 2 and two subscribers, one
 * delivers everything, acknowledges and leaves for good (its context
 * destroyed, its peer reaped by the publisher) before the other
 * acknowledges the last message; when that one does, the message has been
 * delivered by 2, and vb_pub_wait_acked() returns 0. Found by examples_test
 * (md under ASan: three subscribers, quorum 3, each leaving right after it
 * acknowledged; "0 of 3 acknowledgements (0 subscribers)"): the quorum was
 * taken over the subscribers still there only, so one that acknowledged
 * and left was forgotten.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define TOPIC "ca.orders"
#define ROUND_MSGS 300u
#define ROUNDS 4
#define WAIT_MS 10000

enum how { OTHER_THREAD, AT_ONCE, N_HOW };

static const char *const how_name[] = { "other thread", "at once" };

/* Written by the subscriber's progress thread (on_msg), read by the main
 * thread. */
struct rx {
	enum how how;
	uint64_t first, last; /* the round's sequence numbers */
	uint64_t got, bad;
	int last_seen;         /* the last on_msg began (OTHER_THREAD: tells main) */
	int destroying;        /* main is about to call vb_sub_destroy() */
};

static struct rx rx;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	/* first and last are stored (atomically) by main after the connect */
	uint64_t expect = __atomic_load_n(&r->first, __ATOMIC_ACQUIRE) +
			  __atomic_load_n(&r->got, __ATOMIC_RELAXED);

	if (m->seq != expect && __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED) < 5)
		fprintf(stderr, "seq %" PRIu64 ", expected %" PRIu64 "\n", m->seq, expect);
	__atomic_fetch_add(&r->got, 1, __ATOMIC_RELEASE);
	(void)sub;
	if (m->seq != __atomic_load_n(&r->last, __ATOMIC_ACQUIRE) || r->how != OTHER_THREAD)
		return;
	__atomic_store_n(&r->last_seen, 1, __ATOMIC_RELEASE);
	/* return only once the main thread is about to destroy: the destroy
	 * then starts while this callback is still running (it waits for it) */
	for (uint64_t t0 = vbt_now_ms(); !__atomic_load_n(&r->destroying, __ATOMIC_ACQUIRE);)
		if (vbt_now_ms() - t0 > WAIT_MS)
			return;
	usleep(50000); /* vb_sub_destroy() marks it dead first thing */
}

static vb_ctx_t *pub_ctx;

static void ctx_attr(vb_ctx_attr_t *ca)
{
	vb_ctx_attr_init(ca);
	ca->ip = vbt_test_ip();
}

static void run_round(vb_pub_t *pub, uint16_t port, enum how how, int round)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	uint8_t buf[64];
	char name[32];
	uint64_t seq = 0, t0;
	vb_stats_t sst, pst;
	int rc;

	ctx_attr(&ca);
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("sub ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	snprintf(name, sizeof(name), "ca-sub-%d", round);
	na.name = name;
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	memset(&rx, 0, sizeof(rx));
	rx.how = how;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &rx;
	assert_int_equal(vb_sub_create(node, TOPIC, VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(node, vbt_test_ip(), port))
		fail_msg("connect: %s", vb_errmsg());
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%s: no subscriber after %d ms", how_name[how], WAIT_MS);

	/* the publisher numbers its messages 1, 2, ... across the rounds; set
	 * before the first publish (its delivery may come before it returns) */
	__atomic_store_n(&rx.first, (uint64_t)round * ROUND_MSGS + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&rx.last, rx.first + ROUND_MSGS - 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < ROUND_MSGS; i++) {
		memset(buf, (int)i, sizeof(buf));
		for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, sizeof(buf), &seq)) == -EAGAIN;
		     sched_yield())
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("publish: -EAGAIN for %d ms: %s", WAIT_MS, vb_errmsg());
		assert_int_equal(rc, 0);
		assert_int_equal(seq, rx.first + i);
	}
	assert_int_equal(seq, rx.last);

	/* the subscriber leaves at its last delivery */
	for (t0 = vbt_now_ms();; sched_yield()) {
		if (how == OTHER_THREAD ? __atomic_load_n(&rx.last_seen, __ATOMIC_ACQUIRE)
					: __atomic_load_n(&rx.got, __ATOMIC_ACQUIRE) == ROUND_MSGS)
			break;
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%s: %" PRIu64 " of %u delivered after %d ms", how_name[how],
				 __atomic_load_n(&rx.got, __ATOMIC_ACQUIRE), ROUND_MSGS, WAIT_MS);
	}
	__atomic_store_n(&rx.destroying, 1, __ATOMIC_RELEASE);
	assert_int_equal(vb_sub_destroy(sub), 0);
	vb_ctx_stats(ctx, &sst);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(rx.got, ROUND_MSGS);
	assert_int_equal(rx.bad, 0);

	rc = vb_pub_wait_acked(pub, seq, WAIT_MS);
	vb_ctx_stats(pub_ctx, &pst);
	printf("%s, round %d: %u delivered, sequence %" PRIu64 "..%" PRIu64 ": %s (ACKs: "
	       "subscriber sent %" PRIu64 ", publisher received %" PRIu64 ")\n",
	       how_name[how], round, ROUND_MSGS, rx.first, rx.last,
	       rc ? vb_errmsg() : "all acknowledged", sst.acks_sent, pst.acks_received);
	if (rc)
		fail_msg("%s: the subscriber left at its last delivery and the publisher's "
			 "window did not drain within %d ms: %s", how_name[how], WAIT_MS,
			 vb_errmsg());
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) > 0; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%s: the subscriber still counted %d ms after it left",
				 how_name[how], WAIT_MS);
}

/* test_quorum_after_leave: the slow subscriber's last on_msg holds its
 * progress thread (so it acknowledges nothing) until main says go. */
struct hold {
	uint64_t last, got;
	int held, go;
};

static void on_msg_hold(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct hold *h = arg;

	(void)sub;
	__atomic_fetch_add(&h->got, 1, __ATOMIC_RELEASE);
	if (m->seq != __atomic_load_n(&h->last, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&h->held, 1, __ATOMIC_RELEASE);
	for (uint64_t t0 = vbt_now_ms(); !__atomic_load_n(&h->go, __ATOMIC_ACQUIRE); usleep(1000))
		if (vbt_now_ms() - t0 > 3 * WAIT_MS)
			return;
}

struct subside {
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
};

static void sub_open(struct subside *s, const char *name, uint16_t port, vb_msg_fn fn, void *arg)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;

	ctx_attr(&ca);
	if (vb_ctx_create(&ca, &s->ctx))
		fail_msg("%s ctx: %s", name, vb_errmsg());
	vb_node_attr_init(&na);
	na.name = name;
	assert_int_equal(vb_node_create(s->ctx, &na, &s->node), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = fn;
	sa.arg = arg;
	assert_int_equal(vb_sub_create(s->node, TOPIC, VB_ORDERED, &sa, &s->sub), 0);
	if (vb_node_connect(s->node, vbt_test_ip(), port))
		fail_msg("%s connect: %s", name, vb_errmsg());
}

static void sub_close(struct subside *s)
{
	assert_int_equal(vb_sub_destroy(s->sub), 0);
	assert_int_equal(vb_node_destroy(s->node), 0);
	assert_int_equal(vb_ctx_destroy(s->ctx), 0);
}

static void test_quorum_after_leave(void **state)
{
	static struct hold fast, slow;
	vb_ctx_t *ctx = vbt_ctx_open(NULL);
	vb_node_t *node = vbt_node_open(ctx, "qa-pub", true);
	vb_pub_attr_t pa;
	vb_pub_t *pub;
	struct subside a, b;
	vb_stats_t st;
	uint8_t buf[64] = { 0 };
	uint64_t seq = 0, reaped, t0;
	int rc;

	(void)state;
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1025; /* more than a node's peers: never reached, refused */
	assert_int_equal(vb_pub_create(node, TOPIC, VB_ORDERED, &pa, &pub), -EINVAL);
	pa.ack_quorum = 2;
	pa.slow_sub_ms = VBT_NO_SLOW_CUT_MS; /* the held subscriber is not cut */
	assert_int_equal(vb_pub_create(node, TOPIC, VB_ORDERED, &pa, &pub), 0);
	__atomic_store_n(&fast.last, ROUND_MSGS, __ATOMIC_RELEASE);
	__atomic_store_n(&slow.last, ROUND_MSGS, __ATOMIC_RELEASE);
	__atomic_store_n(&fast.go, 1, __ATOMIC_RELEASE);
	sub_open(&a, "qa-fast", vb_node_port(node), on_msg_hold, &fast);
	sub_open(&b, "qa-slow", vb_node_port(node), on_msg_hold, &slow);
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 2; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%d of 2 subscribers after %d ms", vb_pub_subscribers(pub), WAIT_MS);
	for (unsigned i = 0; i < ROUND_MSGS; i++) {
		for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, sizeof(buf), &seq)) == -EAGAIN;
		     sched_yield())
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("publish: -EAGAIN for %d ms: %s", WAIT_MS, vb_errmsg());
		assert_int_equal(rc, 0);
	}
	assert_int_equal(seq, ROUND_MSGS);
	/* the fast one has everything and acknowledged it (quorum 1 of 2 so
	 * far: the slow one holds its last delivery) */
	for (t0 = vbt_now_ms(); __atomic_load_n(&fast.got, __ATOMIC_ACQUIRE) < ROUND_MSGS ||
				!__atomic_load_n(&slow.held, __ATOMIC_ACQUIRE); usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("fast %" PRIu64 ", slow %" PRIu64 " of %u delivered after %d ms",
				 fast.got, slow.got, ROUND_MSGS, WAIT_MS);
	vb_ctx_stats(ctx, &st);
	reaped = st.peers_reaped;
	sub_close(&a); /* its final ACK goes before its BYE */
	/* gone from the publisher for good: its peer reaped */
	for (t0 = vbt_now_ms();; usleep(2000)) {
		vb_ctx_stats(ctx, &st);
		if (st.peers_reaped > reaped && vb_pub_subscribers(pub) == 1)
			break;
		if (vbt_now_ms() - t0 > 3 * WAIT_MS)
			fail_msg("the fast subscriber not reaped %d ms after it left (subscribers %d)",
				 3 * WAIT_MS, vb_pub_subscribers(pub));
	}
	/* 1 of 2 delivered the last message: not acknowledged yet */
	assert_int_equal(vb_pub_wait_acked(pub, seq, 0), -ETIMEDOUT);
	__atomic_store_n(&slow.go, 1, __ATOMIC_RELEASE);
	rc = vb_pub_wait_acked(pub, seq, WAIT_MS);
	printf("quorum 2: one subscriber acknowledged %u and left, the other acknowledged after: "
	       "%s\n", ROUND_MSGS, rc ? vb_errmsg() : "acknowledged by 2");
	if (rc)
		fail_msg("2 subscribers delivered seq %" PRIu64 ", one of them left before the other "
			 "acknowledged it: %s", seq, vb_errmsg());
	sub_close(&b);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
}

static void test_close_ack(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;

	(void)state;
	ctx_attr(&ca);
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("pub ctx: %s", vb_errmsg());
	pub_ctx = ctx;
	vb_node_attr_init(&na);
	na.name = "ca-pub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	pa.slow_policy = VB_SLOW_BLOCK;
	assert_int_equal(vb_pub_create(node, TOPIC, VB_ORDERED, &pa, &pub), 0);
	for (int r = 0; r < ROUNDS * N_HOW; r++)
		run_round(pub, vb_node_port(node), (enum how)(r % N_HOW), r);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_close_ack),
		cmocka_unit_test(test_quorum_after_leave),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
