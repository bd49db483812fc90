/* SPDX-License-Identifier: MIT */
/*
 * VB_PROGRESS_APP: every callback runs on an application thread, also while
 * the library's own threads retire and rebuild connections.
 *
 * verbus.h promises that in VB_PROGRESS_APP mode callbacks (vb_msg_fn,
 * vb_ack_fn, vb_event_fn) run inside vb_progress() (or another call the
 * application made that drives progress), on the thread calling it. The
 * maintenance thread drains a retired connection, and it waited for the
 * drain by running progress rounds itself when no application thread was
 * inside vb_progress() at that moment: the deliveries and events of those
 * rounds ran on "vb-maint".
 *
 * One process, two contexts, both VB_PROGRESS_APP, each polled by a thread
 * of the test (which, as an application would, does some other work now
 * and then: a short sleep every 32 polls). The subscriber connects; the
 * main thread publishes ORDERED messages (ack_quorum 1, so on_ack runs
 * too) and, at its own counts, moves the subscriber's active QP to ERR
 * FAULTS times, each after a standby is warm again: every fault is a
 * failover and a lane the maintenance thread retires. Checked: every
 * message delivered once, in order; the last one acknowledged; at least
 * one failover; and no callback of either context ran on a thread the test
 * did not create.
 */
#define _GNU_SOURCE /* pthread_getname_np */
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
#include "tests/common/rxe_env.h"

#define TOPIC "app.orders"
#define MSGS 3000u  /* scaled by VERBUS_TEST_SCALE */
#define FAULTS 4
#define WAIT_MS 20000

/* Set on each thread the test creates (and main): an application thread. */
static _Thread_local int app_thread;

/* Callbacks that ran off the application's threads, by kind (any thread
 * writes, main reads at the end); the name of the first such thread. */
enum cb_kind { CB_MSG, CB_ACK, CB_EVENT, CB_N };
static const char *const cb_name[CB_N] = { "on_msg", "on_ack", "on_event" };
static unsigned long off_app[CB_N], ran[CB_N];
static char first_off[32];

static void note_cb(enum cb_kind k)
{
	__atomic_fetch_add(&ran[k], 1, __ATOMIC_RELAXED);
	if (app_thread)
		return;
	if (__atomic_fetch_add(&off_app[k], 1, __ATOMIC_RELAXED) == 0 && !first_off[0]) {
		char name[16] = "?";

		pthread_getname_np(pthread_self(), name, sizeof(name));
		snprintf(first_off, sizeof(first_off), "%s", name);
	}
}

/* Subscriber state: written by the callbacks (whichever thread runs them:
 * one at a time per context), read by main. */
static uint64_t got, bad, last_acked;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	uint64_t expect = __atomic_load_n(&got, __ATOMIC_RELAXED) + 1;
	const char *why = NULL;

	(void)sub;
	(void)arg;
	note_cb(CB_MSG);
	if ((m->seq != expect || vbt_msg_verify(m->data, m->len, 1, m->seq, &why)) &&
	    __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED) < 5)
		fprintf(stderr, "seq %" PRIu64 " (expected %" PRIu64 "): %s\n", m->seq, expect,
			why ? why : "out of order");
	__atomic_fetch_add(&got, 1, __ATOMIC_RELEASE);
}

static void on_ack(vb_pub_t *pub, uint64_t acked, void *arg)
{
	(void)pub;
	(void)arg;
	note_cb(CB_ACK);
	__atomic_store_n(&last_acked, acked, __ATOMIC_RELEASE);
}

static void on_event(const vb_event_t *ev, void *arg)
{
	(void)ev;
	(void)arg;
	note_cb(CB_EVENT);
}

/* A polling application thread: vb_progress() until told to stop. */
struct poller {
	vb_ctx_t *ctx;
	pthread_t t;
	int stop;
};

static void *poll_main(void *arg)
{
	struct poller *p = arg;
	unsigned n = 0;

	app_thread = 1;
	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		int rc = vb_progress(p->ctx);

		if (rc < 0) {
			fprintf(stderr, "vb_progress: %s\n", vb_errmsg());
			break;
		}
		if (!(++n & 31))
			usleep(100); /* the application's own work */
	}
	return NULL;
}

static void poller_start(struct poller *p, vb_ctx_t *ctx)
{
	p->ctx = ctx;
	p->stop = 0;
	assert_int_equal(pthread_create(&p->t, NULL, poll_main, p), 0);
}

static void poller_stop(struct poller *p)
{
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
	pthread_join(p->t, NULL);
}

static vb_ctx_t *app_ctx(void)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *ctx;

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.progress = VB_PROGRESS_APP;
	ca.on_event = on_event;
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("ctx: %s", vb_errmsg());
	return ctx;
}

static uint64_t warmed(vb_ctx_t *ctx)
{
	vb_stats_t st;

	vb_ctx_stats(ctx, &st);
	return st.standbys_warmed;
}

/* At least @want standbys warmed so far on the subscriber's side (it
 * connects, so it builds the lanes): bounded by WAIT_MS. */
static void wait_standby(vb_ctx_t *ctx, uint64_t want)
{
	for (uint64_t t0 = vbt_now_ms(); warmed(ctx) < want; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no standby warmed within %d ms (%" PRIu64 " so far)", WAIT_MS,
				 warmed(ctx));
}

static void publish_one(vb_pub_t *pub, uint64_t i)
{
	uint8_t buf[256];
	size_t len = vbt_msg_len(1, i, VBT_MSG_MIN, sizeof(buf));
	uint64_t seq = 0, t0 = vbt_now_ms();
	int rc;

	vbt_msg_fill(buf, len, 1, i);
	while ((rc = vb_publish(pub, buf, len, &seq)) == -EAGAIN) {
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("publish %" PRIu64 ": -EAGAIN for %d ms: %s", i, WAIT_MS,
				 vb_errmsg());
		sched_yield();
	}
	if (rc)
		fail_msg("publish %" PRIu64 ": %s", i, vb_errmsg());
	assert_int_equal(seq, i);
}

static void test_app_mode(void **state)
{
	struct poller pp, sp;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_ctx_t *pctx, *sctx;
	vb_node_t *pnode, *snode;
	vb_pub_t *pub;
	vb_sub_t *sub;
	vb_stats_t pst, sst;
	uint64_t n = vbt_scaled(MSGS), t0;
	unsigned faults = 0;

	(void)state;
	app_thread = 1;
	pctx = app_ctx();
	sctx = app_ctx();
	poller_start(&pp, pctx);
	poller_start(&sp, sctx);

	vb_node_attr_init(&na);
	na.name = "app-pub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(pctx, &na, &pnode), 0);
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	pa.on_ack = on_ack;
	pa.slow_policy = VB_SLOW_BLOCK;
	assert_int_equal(vb_pub_create(pnode, TOPIC, VB_ORDERED, &pa, &pub), 0);

	vb_node_attr_init(&na);
	na.name = "app-sub";
	assert_int_equal(vb_node_create(sctx, &na, &snode), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(snode, TOPIC, VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(snode, vbt_test_ip(), vb_node_port(pnode)))
		fail_msg("connect: %s", vb_errmsg());
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no subscriber after %d ms", WAIT_MS);

	for (uint64_t i = 1; i <= n; i++) {
		if (faults < FAULTS && i == n * (faults + 1) / (FAULTS + 1)) {
			/* a warm standby to fail over to (one more for each
			 * fault), then the fault */
			wait_standby(sctx, faults + 1);
			if (vb_node_inject_fault(snode, NULL, VB_FAULT_QP_ERR) == 0)
				faults++;
			else
				fprintf(stderr, "fault %u at %" PRIu64 ": %s\n", faults + 1, i,
					vb_errmsg());
		}
		publish_one(pub, i);
	}
	for (t0 = vbt_now_ms(); __atomic_load_n(&got, __ATOMIC_ACQUIRE) < n; usleep(2000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %" PRIu64 " delivered after %d ms",
				 __atomic_load_n(&got, __ATOMIC_ACQUIRE), n, WAIT_MS);
	if (vb_pub_wait_acked(pub, n, WAIT_MS))
		fail_msg("last message not acknowledged: %s", vb_errmsg());
	vb_ctx_stats(pctx, &pst);
	vb_ctx_stats(sctx, &sst);

	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(snode), 0);
	assert_int_equal(vb_node_destroy(pnode), 0);
	poller_stop(&sp);
	poller_stop(&pp);
	assert_int_equal(vb_ctx_destroy(sctx), 0);
	assert_int_equal(vb_ctx_destroy(pctx), 0);

	printf("%" PRIu64 " of %" PRIu64 " delivered in order (%" PRIu64 " wrong), %u faults, "
	       "failovers %" PRIu64 " + %" PRIu64 ", lanes retired %" PRIu64 " + %" PRIu64
	       "; callbacks: on_msg %lu, on_ack %lu, on_event %lu; off the application's "
	       "threads: %lu, %lu, %lu (first on '%s')\n", got, n, bad, faults, pst.failovers,
	       sst.failovers, pst.lanes_retired, sst.lanes_retired, ran[CB_MSG], ran[CB_ACK],
	       ran[CB_EVENT], off_app[CB_MSG], off_app[CB_ACK], off_app[CB_EVENT],
	       first_off[0] ? first_off : "-");
	assert_int_equal(got, n);
	assert_int_equal(bad, 0);
	assert_true(faults >= 1);
	assert_true(pst.failovers + sst.failovers >= 1);
	assert_true(last_acked >= 1);
	for (int k = 0; k < CB_N; k++)
		if (off_app[k])
			fail_msg("%lu of %lu %s callbacks ran on a library thread (the first on "
				 "'%s'): VB_PROGRESS_APP runs them inside vb_progress()",
				 off_app[k], ran[k], cb_name[k], first_off);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_app_mode),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
