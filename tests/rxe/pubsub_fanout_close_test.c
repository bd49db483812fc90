/* SPDX-License-Identifier: MIT */
/*
 * A FANOUT publisher destroyed right after a burst loses nothing: what it
 * had batched goes out before it goes (vb_pub_destroy).
 *
 * Small FANOUT messages share a datagram, and a batch waits (corked) while
 * a datagram is in flight. A publisher destroyed then has no heartbeat
 * left to announce its tail, so a batch it dropped would be lost without
 * the subscriber ever learning it. Here a subscriber process takes ROUNDS
 * publishers in turn on one topic; each publishes BURST messages as fast
 * as it can and is destroyed at once. Every message must be delivered
 * (the link is local and the bursts are far below the receive queue), and
 * the publisher's context must count nothing lost.
 *
 * Before the fix vb_pub_destroy dropped the batch it found corked: the
 * subscriber was short of up to a datagram's worth of messages per round,
 * with no gap reported.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
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

#define TOPIC "close.md"
#define LEN 64u /* up to 14 messages a datagram (path MTU 1024 on rxe) */
#define STREAM 7
#define ROUNDS 5
#define BURST 300

/* Shared with the subscriber process (mapped before fork). */
struct shared {
	uint64_t delivered, lost, errors;
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
	if (m->len != LEN || vbt_msg_verify(m->data, m->len, STREAM, m->seq - 1, &why)) {
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
	__atomic_fetch_add(&sh->lost, lost, __ATOMIC_RELEASE);
}

static int subscriber(void *unused)
{
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	uint16_t port;

	(void)unused;
	if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port))
		return 10;
	ctx = ctx_open();
	node = vbt_node_open(ctx, "close-sub", false);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.on_gap = on_gap;
	if (vb_sub_create(node, TOPIC, VB_FANOUT, &sa, &sub))
		return 12;
	if (vb_node_connect(node, vbt_test_ip(), port)) {
		fprintf(stderr, "sub: connect: %s\n", vb_errmsg());
		return 13;
	}
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) != 2) /* the publisher is done */
		usleep(10000);
	vb_sub_destroy(sub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return 0;
}

/* ---- publisher -------------------------------------------------------------------- */

/* Publish message @i (seq i + 1), retrying -EAGAIN for up to 10 s. */
static void publish(vb_pub_t *pub, uint8_t *buf, uint64_t i)
{
	uint64_t t0 = vbt_now_ms(), seq = 0;
	int rc;

	vbt_msg_fill(buf, LEN, STREAM, i);
	while ((rc = vb_publish(pub, buf, LEN, &seq)) == -EAGAIN && vbt_now_ms() - t0 < 10000)
		usleep(100);
	if (rc)
		fail_msg("publish %" PRIu64 ": %s", i, vb_errmsg());
	assert_int_equal(seq, i + 1);
}

/* Wait (bounded) until the subscriber has delivered or been told lost @n
 * messages in all. */
static void settle(uint64_t n, unsigned ms)
{
	uint64_t t0 = vbt_now_ms();

	while (ld(&sh->delivered) + ld(&sh->lost) < n && vbt_now_ms() - t0 < ms)
		usleep(5000);
}

static void test_close_after_burst(void **state)
{
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_stats_t st;
	uint8_t buf[LEN];
	uint64_t t0;
	uint16_t port;
	int rc;

	(void)state;
	vbt_require_device();
	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(subscriber, NULL);
	assert_true(child > 0);

	ctx = ctx_open();
	node = vbt_node_open(ctx, "close-pub", true);
	port = vb_node_port(node);
	assert_int_equal(write(port_pipe[1], &port, sizeof(port)), sizeof(port));
	for (t0 = vbt_now_ms(); !__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) &&
				vbt_now_ms() - t0 < 30000;)
		usleep(5000);
	assert_int_equal(__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE), 1);

	for (unsigned r = 0; r < ROUNDS; r++) {
		vb_pub_t *pub;

		assert_int_equal(vb_pub_create(node, TOPIC, VB_FANOUT, NULL, &pub), 0);
		assert_true(vbt_wait_subscribers(pub, 1, 30000));
		for (uint64_t i = 0; i < BURST; i++)
			publish(pub, buf, i);
		assert_int_equal(vb_pub_destroy(pub), 0);
		settle((uint64_t)(r + 1) * BURST, 10000);
		printf("close: round %u: %" PRIu64 " delivered, %" PRIu64 " reported lost of %u\n",
		       r, ld(&sh->delivered), ld(&sh->lost), (r + 1) * BURST);
	}
	assert_int_equal(vb_ctx_stats(ctx, &st), 0);
	printf("close: publisher: %" PRIu64 " datagrams for %u messages, %" PRIu64 " lost\n",
	       (uint64_t)st.sends_posted, ROUNDS * BURST, (uint64_t)st.lost);
	assert_int_equal(ld(&sh->errors), 0);
	assert_int_equal(ld(&sh->lost), 0);
	assert_int_equal(ld(&sh->delivered), ROUNDS * BURST);
	assert_int_equal(st.lost, 0);

	__atomic_store_n(&sh->ready, 2, __ATOMIC_RELEASE);
	rc = vbt_wait(child, 60);
	child = -1;
	assert_int_equal(rc, 0);
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
		cmocka_unit_test_teardown(test_close_after_burst, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
