/* SPDX-License-Identifier: MIT */
/*
 * The tail of a FANOUT stream: every message is delivered or reported lost
 * (the mission: every FANOUT gap is detected and reported), also at its end.
 *
 * test_tail: tail loss is reported even when the heartbeats that announce
 * the tail are lost too.
 *
 * A subscriber process takes a FANOUT stream. After a warm-up it is
 * SIGSTOPped; the publisher then sends more datagrams than the
 * subscriber's receive queue holds, so the device drops the rest: the
 * tail of the stream. It waits (a condition, bounded) until its context
 * has sent 3 more heartbeats, which land on the same full receive queue
 * and are dropped as well, then SIGCONTs the subscriber. Every message
 * published must end up delivered or reported lost (on_gap), and some
 * must have been lost (else the test did not test).
 *
 * Before the fix a publisher announced its tail 3 times, within ~110 ms
 * of going quiet, and never again: a subscriber that lost those three
 * never learnt its stream's last messages were gone (pubsub_malformed_test
 * failed that way under ASan, in full test runs 11 and 14).
 *
 * test_close_after_burst: a publisher destroyed right after a burst loses
 * nothing. Small messages share a datagram, and a batch waits (corked)
 * while a datagram is in flight; a destroyed publisher sends no heartbeat
 * to announce its tail, so a batch it dropped would be lost without the
 * subscriber ever learning it. CLOSE_ROUNDS publishers in turn publish
 * CLOSE_BURST small messages as fast as they can and are destroyed at
 * once: everything must be delivered (a local link, bursts far below the
 * receive queue), and the publisher's context must count nothing lost.
 * Before the fix vb_pub_destroy dropped the batch it found corked: 1,470
 * of 1,500 delivered at bf55496, no gap reported.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

#define TOPIC "tail.md"
#define TAIL_LEN 700u /* one message per datagram (path MTU 1024 on rxe) */
#define CLOSE_LEN 64u /* up to 14 a datagram */
#define CLOSE_ROUNDS 5
#define CLOSE_BURST 300
#define STREAM 5

static uint32_t msg_len; /* the test's message length (set before the fork) */

/* Shared with the subscriber process (mapped before fork). */
struct shared {
	uint64_t delivered, lost, gaps, errors, rq_depth;
	int ready;
};
static struct shared *sh;
static int port_pipe[2];
static pid_t child = -1;

static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static vb_ctx_t *ctx_open(void)
{
	vb_ctx_attr_t ca;

	vb_ctx_attr_init(&ca);
	ca.progress_spin = 200; /* two processes on two vCPUs */
	return vbt_ctx_open(&ca);
}

/* ---- subscriber process ---------------------------------------------------------- */

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	const char *why = "length";

	(void)sub;
	(void)arg;
	if (m->len != msg_len || vbt_msg_verify(m->data, m->len, STREAM, m->seq - 1, &why)) {
		if (__atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "sub: seq %" PRIu64 ": %s\n", m->seq, why);
		return;
	}
	__atomic_fetch_add(&sh->delivered, 1, __ATOMIC_RELEASE);
}

static void on_gap(vb_sub_t *sub, uint32_t publisher, uint64_t lost, uint64_t next_seq,
		   void *arg)
{
	(void)sub;
	(void)publisher;
	(void)next_seq;
	(void)arg;
	__atomic_fetch_add(&sh->gaps, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&sh->lost, lost, __ATOMIC_RELEASE);
}

static int subscriber(void *unused)
{
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	vb_stats_t st;
	uint16_t port;

	(void)unused;
	if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port))
		return 10;
	ctx = ctx_open();
	node = vbt_node_open(ctx, "tail-sub", false);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.on_gap = on_gap;
	if (vb_sub_create(node, TOPIC, VB_FANOUT, &sa, &sub))
		return 12;
	if (vb_node_connect(node, vbt_test_ip(), port)) {
		fprintf(stderr, "sub: connect: %s\n", vb_errmsg());
		return 13;
	}
	vb_ctx_stats(ctx, &st);
	__atomic_store_n(&sh->rq_depth, st.rq_depth, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	/* until the publisher is done with us (it kills us at the end) */
	while (__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) != 2)
		usleep(10000);
	vb_sub_destroy(sub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return 0;
}

/* ---- publisher -------------------------------------------------------------------- */

static uint64_t heartbeats(vb_ctx_t *ctx)
{
	vb_stats_t s;

	assert_int_equal(vb_ctx_stats(ctx, &s), 0);
	return s.heartbeats_sent;
}

/* Publish message @i (seq i + 1), retrying -EAGAIN (send queue full) for
 * up to 10 s. */
static void publish(vb_pub_t *pub, uint8_t *buf, uint64_t i)
{
	uint64_t t0 = vbt_now_ms(), seq = 0;
	int rc;

	vbt_msg_fill(buf, msg_len, STREAM, i);
	while ((rc = vb_publish(pub, buf, msg_len, &seq)) == -EAGAIN && vbt_now_ms() - t0 < 10000)
		usleep(100);
	if (rc)
		fail_msg("publish %" PRIu64 ": %s", i, vb_errmsg());
	assert_int_equal(seq, i + 1);
}

/* Wait (bounded) until the subscriber has delivered or been told lost
 * @n messages. */
static bool settled(uint64_t n, unsigned ms)
{
	uint64_t t0 = vbt_now_ms();

	while (ld(&sh->delivered) + ld(&sh->lost) < n && vbt_now_ms() - t0 < ms)
		usleep(5000);
	return ld(&sh->delivered) + ld(&sh->lost) == n;
}

/* The subscriber process for messages of @len bytes, and the publisher's
 * context and node (@name). */
static void start(const char *name, uint32_t len, vb_ctx_t **ctx, vb_node_t **node)
{
	vbt_require_device();
	msg_len = len;
	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(subscriber, NULL);
	assert_true(child > 0);
	*ctx = ctx_open();
	*node = vbt_node_open(*ctx, name, true);
}

/* The subscriber connects to @node; wait (bounded) until it has. */
static void sub_connect(vb_node_t *node)
{
	uint16_t port = vb_node_port(node);
	uint64_t t0;

	assert_int_equal(write(port_pipe[1], &port, sizeof(port)), sizeof(port));
	for (t0 = vbt_now_ms(); !__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) &&
				vbt_now_ms() - t0 < 30000;)
		usleep(5000);
	assert_int_equal(__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE), 1);
}

/* The subscriber process leaves and exits cleanly. */
static void sub_finish(void)
{
	int st;

	__atomic_store_n(&sh->ready, 2, __ATOMIC_RELEASE);
	st = vbt_wait(child, 60);
	child = -1;
	assert_int_equal(st, 0);
}

static void test_tail(void **state)
{
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint8_t buf[TAIL_LEN];
	uint64_t i = 0, n_warm = 100, n_total, hb0, t0;

	(void)state;
	start("tail-pub", TAIL_LEN, &ctx, &node);
	assert_int_equal(vb_pub_create(node, TOPIC, VB_FANOUT, NULL, &pub), 0);
	sub_connect(node);
	assert_true(vbt_wait_subscribers(pub, 1, 30000));

	/* 1. warm-up: the stream starts and is complete */
	for (; i < n_warm; i++) {
		publish(pub, buf, i);
		/* paced by delivery, so nothing is lost before the stop */
		for (t0 = vbt_now_ms(); ld(&sh->delivered) + ld(&sh->lost) < i + 1 &&
					vbt_now_ms() - t0 < 10000;)
			usleep(200);
	}
	assert_true(settled(n_warm, 10000));
	assert_int_equal(ld(&sh->lost), 0);

	/* 2. the subscriber stops; eight times its receive queue and more follow
	 * (enough datagrams even if several messages share one), then the publisher goes quiet and announces its tail */
	n_total = n_warm + 8 * ld(&sh->rq_depth) + 200;
	assert_int_equal(kill(child, SIGSTOP), 0);
	for (; i < n_total; i++)
		publish(pub, buf, i);
	hb0 = heartbeats(ctx);
	for (t0 = vbt_now_ms(); heartbeats(ctx) < hb0 + 3 && vbt_now_ms() - t0 < 10000;)
		usleep(5000);
	printf("tail: subscriber (receive queue %" PRIu64 ") stopped for %" PRIu64
	       " messages; %" PRIu64 " heartbeats sent meanwhile\n", ld(&sh->rq_depth),
	       n_total - n_warm, heartbeats(ctx) - hb0);
	assert_true(heartbeats(ctx) >= hb0 + 3);

	/* 3. it resumes: what reached its queue is delivered, the rest must
	 * be reported lost */
	assert_int_equal(kill(child, SIGCONT), 0);
	settled(n_total, 20000);
	printf("tail: %" PRIu64 " published; %" PRIu64 " delivered + %" PRIu64 " lost (%" PRIu64
	       " gap events), %" PRIu64 " errors\n", n_total, ld(&sh->delivered), ld(&sh->lost),
	       ld(&sh->gaps), ld(&sh->errors));
	assert_int_equal(ld(&sh->errors), 0);
	assert_int_equal(ld(&sh->delivered) + ld(&sh->lost), n_total);
	if (!ld(&sh->lost))
		fail_msg("nothing was lost while the subscriber was stopped: not a test of the tail");

	sub_finish();
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
}

static void test_close_after_burst(void **state)
{
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_stats_t st;
	uint8_t buf[CLOSE_LEN];

	(void)state;
	start("close-pub", CLOSE_LEN, &ctx, &node);
	sub_connect(node);
	for (unsigned r = 0; r < CLOSE_ROUNDS; r++) {
		vb_pub_t *pub;

		assert_int_equal(vb_pub_create(node, TOPIC, VB_FANOUT, NULL, &pub), 0);
		assert_true(vbt_wait_subscribers(pub, 1, 30000));
		for (uint64_t i = 0; i < CLOSE_BURST; i++)
			publish(pub, buf, i);
		assert_int_equal(vb_pub_destroy(pub), 0);
		settled((uint64_t)(r + 1) * CLOSE_BURST, 10000);
		printf("close: round %u: %" PRIu64 " delivered, %" PRIu64 " reported lost of %u\n",
		       r, ld(&sh->delivered), ld(&sh->lost), (r + 1) * CLOSE_BURST);
	}
	assert_int_equal(vb_ctx_stats(ctx, &st), 0);
	printf("close: publisher: %" PRIu64 " datagrams for %u messages, %" PRIu64 " lost\n",
	       (uint64_t)st.sends_posted, CLOSE_ROUNDS * CLOSE_BURST, (uint64_t)st.lost);
	assert_int_equal(ld(&sh->errors), 0);
	assert_int_equal(ld(&sh->lost), 0);
	assert_int_equal(ld(&sh->delivered), CLOSE_ROUNDS * CLOSE_BURST);
	assert_int_equal(st.lost, 0);
	sub_finish();
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
}

static int teardown(void **state)
{
	(void)state;
	vbt_reap(&child);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_tail, teardown),
		cmocka_unit_test_teardown(test_close_after_burst, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
