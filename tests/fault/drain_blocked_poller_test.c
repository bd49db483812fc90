/* SPDX-License-Identifier: MIT */
/*
 * A failed lane is not freed while its completions may still be polled.
 *
 * The subscriber's node (this process, VB_PROGRESS_THREAD) gets its QP
 * moved to ERR while an ORDERED stream flows. Its progress thread fails
 * over to the standby and reports VB_EV_FAILOVER, and the test's event
 * callback holds the progress thread there: the flushed completions of
 * the failed lane's 250-odd receives stay in the completion queue,
 * unpolled, pointing into the lane. The conductor retires the lane
 * meanwhile; its drain gives up after 10 s. It used to free the lane
 * then (vb_stats_t.lanes_retired moved while the poller was held), and
 * the progress thread, released, read the freed lane for every flushed
 * completion it polled (TSan in CI, failover_mt_test: heap-use-after-free
 * in lane_wc_error; ASan here). The lane may go only once the poller has
 * swept its CQ after its QP is in RESET. After the release the lane is
 * freed and the stream goes on over the standby.
 *
 * The publisher runs in a child process, publishing a small ORDERED
 * message every millisecond until it is killed; it does not cut the held
 * subscriber (slow_sub_ms 60 s).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define TOPIC "drain.blocked"
#define WAIT_MS 30000
#define HOLD_MS 15000 /* longer than the drain's 10 s bound */

static int port_pipe[2];
static pid_t child = -1;

static int publisher(void *unused)
{
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_attr_t pa;
	vb_pub_t *pub;
	uint16_t port;
	uint64_t n = 0;

	(void)unused;
	ctx = vbt_ctx_open(NULL);
	node = vbt_node_open(ctx, "pub", true);
	/* The held subscriber acknowledges nothing for HOLD_MS: with the
	 * default 2 s cut its stream would end there, and what it gets after
	 * the release would be only what the publisher had framed to it
	 * within its receive credits (~255 messages, fewer the more of them
	 * were duplicates): "the stream goes on" must not hang on that. */
	vb_pub_attr_init(&pa);
	pa.slow_sub_ms = VBT_NO_SLOW_CUT_MS;
	if (vb_pub_create(node, TOPIC, VB_ORDERED, &pa, &pub))
		return 11;
	port = vb_node_port(node);
	if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port))
		return 12;
	for (;;) {
		uint64_t seq;

		if (vb_publish(pub, &n, sizeof(n), &seq) == 0)
			n++;
		usleep(1000);
	}
	return 0;
}

/* ---- the subscriber (this process) ------------------------------------------------------ */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool armed, held, released;
static atomic_uint_fast64_t delivered;

/* The progress thread: the first VB_EV_FAILOVER after arming is held
 * until the test releases it (bounded). */
static void on_event(const vb_event_t *ev, void *arg)
{
	struct timespec until;

	(void)arg;
	printf("  [sub] event %d peer '%s': %s\n", (int)ev->type, ev->peer, ev->detail);
	if (ev->type != VB_EV_FAILOVER)
		return;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2 * WAIT_MS / 1000;
	pthread_mutex_lock(&mu);
	if (armed && !held) {
		held = true;
		pthread_cond_broadcast(&cv);
		while (!released && pthread_cond_timedwait(&cv, &mu, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&mu);
}

static void on_msg(vb_sub_t *sub, const vb_msg_t *msg, void *arg)
{
	(void)sub;
	(void)msg;
	(void)arg;
	atomic_fetch_add(&delivered, 1);
}

static vb_stats_t stats(vb_ctx_t *ctx)
{
	vb_stats_t st;

	assert_int_equal(vb_ctx_stats(ctx, &st), 0);
	return st;
}

/* Wait up to @ms for @n messages more than @from: true if they came. */
static bool wait_delivered(uint64_t from, uint64_t n, unsigned ms)
{
	for (uint64_t t0 = vbt_now_ms(); vbt_now_ms() - t0 < ms; usleep(2000))
		if (atomic_load(&delivered) >= from + n)
			return true;
	return false;
}

static void test_no_free_while_polled(void **state)
{
	vb_ctx_attr_t ca;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	uint16_t port;
	uint64_t retired0, t0, d;
	bool freed_while_held = false, was_held;

	(void)state;
	vbt_require_device();
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(publisher, NULL);
	assert_int_equal(read(port_pipe[0], &port, sizeof(port)), (ssize_t)sizeof(port));

	vb_ctx_attr_init(&ca);
	ca.on_event = on_event;
	ctx = vbt_ctx_open(&ca);
	node = vbt_node_open(ctx, "sub", false);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(node, TOPIC, VB_ORDERED, &sa, &sub), 0);
	assert_int_equal(vb_node_connect(node, vbt_test_ip(), port), 0);
	assert_true(wait_delivered(0, 200, WAIT_MS));
	for (t0 = vbt_now_ms(); stats(ctx).standbys_warmed < 1; usleep(2000))
		assert_true(vbt_now_ms() - t0 < WAIT_MS);
	printf("stream up: %" PRIu64 " delivered, standby warm\n", atomic_load(&delivered));

	retired0 = stats(ctx).lanes_retired;
	pthread_mutex_lock(&mu);
	armed = true;
	pthread_mutex_unlock(&mu);
	assert_int_equal(vb_node_inject_fault(node, NULL, VB_FAULT_QP_ERR), 0);
	pthread_mutex_lock(&mu);
	for (t0 = vbt_now_ms(); !held && vbt_now_ms() - t0 < WAIT_MS;) {
		pthread_mutex_unlock(&mu);
		usleep(2000);
		pthread_mutex_lock(&mu);
	}
	was_held = held;
	pthread_mutex_unlock(&mu);
	assert_true(was_held); /* the failover was reported: its callback holds the poller */
	printf("progress thread held in the failover callback; lanes retired %" PRIu64 "\n",
	       retired0);

	/* while the poller is held, no lane may be freed (within HOLD_MS,
	 * past the drain's 10 s bound) */
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < HOLD_MS; usleep(10000))
		if (stats(ctx).lanes_retired != retired0) {
			freed_while_held = true;
			break;
		}
	printf("after %" PRIu64 " ms held: lanes retired %" PRIu64 "%s\n", vbt_now_ms() - t0,
	       stats(ctx).lanes_retired,
	       freed_while_held ? " (freed while its completions were unpolled)" : "");

	pthread_mutex_lock(&mu);
	released = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	d = atomic_load(&delivered);
	assert_false(freed_while_held);
	/* released: the poller sweeps the CQ, the lane goes, the stream goes on */
	for (t0 = vbt_now_ms(); stats(ctx).lanes_retired == retired0; usleep(2000))
		assert_true(vbt_now_ms() - t0 < WAIT_MS);
	assert_true(wait_delivered(d, 200, WAIT_MS));
	printf("released: lanes retired %" PRIu64 ", %" PRIu64 " delivered\n",
	       stats(ctx).lanes_retired, atomic_load(&delivered));

	vbt_reap(&child);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_no_free_while_polled) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
