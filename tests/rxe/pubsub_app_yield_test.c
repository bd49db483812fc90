/* SPDX-License-Identifier: MIT */
/*
 * VB_PROGRESS_APP: a thread spinning on vb_progress() keeps its CPU while
 * its context is busy, and gives it away (sched_yield()) only once nothing
 * has completed for idle_spin_us (vb_ctx_attr_t, VERBUS_IDLE_SPIN_US).
 *
 * test_busy_keeps_cpu: a ping-pong between two APP-mode contexts, each
 * driven by its own thread spinning on vb_progress(), the pinging side
 * publishing the next ping as soon as the pong is in. It counts the round
 * trips during which a vb_progress() call of either thread yielded. The
 * library used to yield on every 64th empty call whatever the traffic:
 * the side waiting for the answer did so in about every other round trip
 * of `vb_bench lat`, each yield a system call and a pass through the
 * scheduler while the answer may already be there. idle_spin_us is set to
 * 20 ms here so that no round trip of a slow VM (or of an ASan build)
 * comes near it: at most a twentieth of the round trips may see a yield.
 *
 * test_idle_yields: a context with nothing to do (no node) still yields
 * (idle_spin_us 1 ms here): a spin that never enters the kernel could
 * otherwise hold a shared core from the very kernel work it waits for
 * until the next scheduler tick.
 *
 * The test counts the yields by defining sched_yield() itself: the
 * library's calls resolve to it, and it counts those made inside the
 * test's vb_progress() calls only (a thread-local flag), then yields.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define ROUNDS 2000u
#define WAIT_MS 10000

static _Thread_local bool in_progress;
static atomic_uint_fast64_t yields; /* inside vb_progress(), every thread */

int sched_yield(void)
{
	if (in_progress)
		atomic_fetch_add(&yields, 1);
	return (int)syscall(SYS_sched_yield);
}

/* vb_progress() with its yields counted; <0 fails the test */
static int progress(vb_ctx_t *ctx)
{
	int n;

	in_progress = true;
	n = vb_progress(ctx);
	in_progress = false;
	if (n < 0)
		fail_msg("vb_progress: %d (%s)", n, vb_errmsg());
	return n;
}

static vb_ctx_t *app_ctx(void)
{
	vb_ctx_attr_t ca;

	vb_ctx_attr_init(&ca);
	ca.progress = VB_PROGRESS_APP;
	return vbt_ctx_open(&ca);
}

/* The answering side: its callback publishes the message back (-EAGAIN
 * retried by spinning, not yielding: only the library's yields count). */
struct pong {
	vb_pub_t *pub;
	atomic_uint_fast64_t got, failed;
};

static void pong_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct pong *p = arg;
	int rc;

	(void)sub;
	while ((rc = vb_publish(p->pub, m->data, m->len, NULL)) == -EAGAIN)
		;
	if (rc)
		atomic_fetch_add(&p->failed, 1);
	atomic_fetch_add(&p->got, 1);
}

/* A thread spinning on one context's vb_progress() until told to stop. */
struct poller {
	vb_ctx_t *ctx;
	atomic_bool stop;
	pthread_t th;
};

static void *poller_main(void *arg)
{
	struct poller *g = arg;

	while (!atomic_load(&g->stop))
		progress(g->ctx);
	return NULL;
}

static void poller_start(struct poller *g, vb_ctx_t *ctx)
{
	g->ctx = ctx;
	atomic_store(&g->stop, false);
	assert_int_equal(pthread_create(&g->th, NULL, poller_main, g), 0);
}

static void poller_stop(struct poller *g)
{
	atomic_store(&g->stop, true);
	assert_int_equal(pthread_join(g->th, NULL), 0);
}

static void test_busy_keeps_cpu(void **state)
{
	vb_ctx_t *ca = app_ctx(), *cb = app_ctx();
	vb_node_t *na = vbt_node_open(ca, "yield-a", true), *nb = vbt_node_open(cb, "yield-b", false);
	static struct pong po;
	static struct vbt_count pi;
	struct poller gp, gb; /* the pinging side's during the set-up; the ponging side's */
	vb_sub_t *sa_sub, *sb_sub;
	vb_sub_attr_t sa;
	vb_stats_t st;
	vb_pub_t *ping;
	unsigned yielded = 0;
	uint64_t t0, y0;

	(void)state;
	memset(&po, 0, sizeof(po));
	memset(&pi, 0, sizeof(pi));
	assert_int_equal(vb_pub_create(na, "yield.ping", VB_ORDERED, NULL, &ping), 0);
	assert_int_equal(vb_pub_create(nb, "yield.pong", VB_ORDERED, NULL, &po.pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = vbt_count_cb;
	sa.arg = &pi;
	assert_int_equal(vb_sub_create(na, "yield.pong", VB_ORDERED, &sa, &sa_sub), 0);
	sa.on_msg = pong_cb;
	sa.arg = &po;
	assert_int_equal(vb_sub_create(nb, "yield.ping", VB_ORDERED, &sa, &sb_sub), 0);
	poller_start(&gp, ca);
	poller_start(&gb, cb);
	if (vb_node_connect(nb, vbt_test_ip(), vb_node_port(na)))
		fail_msg("connect: %s", vb_errmsg());
	if (!vbt_wait_subscribers(ping, 1, WAIT_MS) || !vbt_wait_subscribers(po.pub, 1, WAIT_MS))
		fail_msg("no subscriber after %d ms", WAIT_MS);
	/* the standby connection is built after the first (vb_ctx_attr_t.standby):
	 * the round trips start once it is warm, as vb_bench lat's do */
	for (t0 = vbt_now_ms(); vb_ctx_stats(ca, &st) == 0 && !st.standbys_warmed &&
				vb_ctx_stats(cb, &st) == 0 && !st.standbys_warmed;
	     usleep(1000))
		if (vbt_now_ms() - t0 > WAIT_MS) {
			printf("no warm standby after %d ms: timing anyway\n", WAIT_MS);
			break;
		}
	poller_stop(&gp); /* from here this thread polls the pinging side */
	y0 = atomic_load(&yields);

	for (uint64_t i = 1; i <= ROUNDS; i++) {
		uint64_t before = atomic_load(&yields);
		int rc;

		for (t0 = vbt_now_ms(); (rc = vb_publish(ping, &i, sizeof(i), NULL)) == -EAGAIN;
		     progress(ca))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("ping %" PRIu64 ": -EAGAIN for %d ms", i, WAIT_MS);
		assert_int_equal(rc, 0);
		for (t0 = vbt_now_ms(); atomic_load(&pi.got) < i; progress(ca))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("pong %" PRIu64 " not back after %d ms", i, WAIT_MS);
		yielded += atomic_load(&yields) != before;
	}
	printf("%u round trips: %u saw a yield inside vb_progress() (%" PRIu64 " yields)\n",
	       ROUNDS, yielded, (uint64_t)atomic_load(&yields) - y0);
	assert_int_equal(atomic_load(&pi.bad), 0);
	assert_int_equal(atomic_load(&po.failed), 0);
	assert_int_equal(atomic_load(&po.got), ROUNDS);
	if (yielded > ROUNDS / 20)
		fail_msg("%u of %u round trips saw vb_progress() yield while the contexts were "
			 "busy (at most %u)", yielded, ROUNDS, ROUNDS / 20);

	/* both sides polled again while the publishers linger for their ACKs */
	poller_start(&gp, ca);
	assert_int_equal(vb_pub_destroy(ping), 0);
	assert_int_equal(vb_pub_destroy(po.pub), 0);
	assert_int_equal(vb_sub_destroy(sa_sub), 0);
	assert_int_equal(vb_sub_destroy(sb_sub), 0);
	assert_int_equal(vb_node_destroy(nb), 0);
	assert_int_equal(vb_node_destroy(na), 0);
	poller_stop(&gb);
	poller_stop(&gp);
	assert_int_equal(vb_ctx_destroy(cb), 0);
	assert_int_equal(vb_ctx_destroy(ca), 0);
}

static void test_idle_yields(void **state)
{
	vb_ctx_t *ca;
	uint64_t t0;

	(void)state;
	setenv("VERBUS_IDLE_SPIN_US", "1000", 1);
	ca = app_ctx();
	setenv("VERBUS_IDLE_SPIN_US", "20000", 1);
	atomic_store(&yields, 0);
	for (t0 = vbt_now_ms(); !atomic_load(&yields); progress(ca))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("an idle vb_progress() spin did not yield in %d ms", WAIT_MS);
	assert_int_equal(vb_ctx_destroy(ca), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_busy_keeps_cpu),
		cmocka_unit_test(test_idle_yields),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	setenv("VERBUS_IDLE_SPIN_US", "20000", 1); /* read by each vb_ctx_create() */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
