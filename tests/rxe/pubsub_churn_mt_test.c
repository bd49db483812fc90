/* SPDX-License-Identifier: MIT */
/*
 * A node whose peers and subscribers come and go while a stream runs
 * through it: the progress thread's per-peer round walks the node's peers
 * and subscribers with no node lock (RCU: they are freed after a grace
 * period), while the application creates and destroys subscribers and the
 * conductor reaps the peers that left. Run under ASan and TSan as well (a
 * *_mt_test).
 *
 * Three kinds of context in this process: "feed" publishes one ORDERED
 * stream to "hub" from its own thread while the cycles run; each cycle a new
 * context "visitor" connects to hub. Right after the handshake (while
 * hub's SUBs to the visitor may still be pending in the per-peer round),
 * hub subscribes to a topic of the cycle, and the visitor's publisher on it
 * must see that subscriber: a SUB lost between vb_sub_create() and the
 * round fails the test. The visitor publishes a short stream, every
 * message of which arrives once and in order. Then even cycles destroy the
 * subscriber before the visitor leaves; odd ones let the visitor leave
 * first (hub's conductor reaps the peer with its receive streams while the
 * subscriber lives), and the next cycle destroys the subscriber once that
 * peer is reaped. Every visitor also publishes to one topic hub subscribes
 * to for the whole run ("churn.all"): its stream is added to that
 * subscriber's streams by the progress thread (with no node lock for the
 * messages) while the conductor may be unlinking the previous visitor's
 * (the next cycle does not wait for the reap before it publishes). At the
 * end the feed's stream is complete, in order and acknowledged, every
 * visitor's stream on churn.all arrived whole and in order, and hub reaped
 * one peer per cycle. Each cycle also adds a node "side" to hub's context
 * and removes it again while the feed runs: the progress thread's rounds
 * and the FANOUT delivery walk the context's nodes. Side subscribes to the
 * cycle's FANOUT topic; the visitor's datagrams reach hub's context, which
 * delivers them to both nodes' subscribers. And once the last visitor is
 * reaped, the process holds the file descriptors and threads it held after
 * the second cycle, and hub no more lanes: a long-running node gains
 * nothing per connection that came and went.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/held.h"
#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define VISIT_MSGS 50u
#define WAIT_MS 30000u

struct feed {
	vb_pub_t *pub;
	uint64_t n, last_seq;      /* published (feed thread; read after the join) */
	atomic_bool stop;          /* the cycles are done */
	int rc;
};

/* One uint64_t counter from 1 at the start of each message (vbt_count_cb). */
static int publish_counted(vb_pub_t *pub, uint64_t n, uint64_t *seq)
{
	uint64_t t0 = vbt_now_ms();
	uint8_t buf[64];
	int rc;

	memset(buf, 0xa5, sizeof(buf));
	memcpy(buf, &n, sizeof(n));
	while ((rc = vb_publish(pub, buf, sizeof(buf), seq)) == -EAGAIN) {
		if (vbt_now_ms() - t0 > 60000)
			return -ETIMEDOUT;
		usleep(50);
	}
	return rc;
}

/* Until the cycles are done: a stream, not a flood (the cycles get CPU). */
static void *feed_main(void *arg)
{
	struct feed *f = arg;

	while (!atomic_load(&f->stop) && !f->rc) {
		f->rc = publish_counted(f->pub, f->n + 1, &f->last_seq);
		if (!f->rc && ++f->n % 16 == 0)
			usleep(500);
	}
	if (!f->rc && f->n)
		f->rc = vb_pub_wait_acked(f->pub, f->last_seq, 120000);
	return NULL;
}

/* FANOUT: a datagram may be lost (a gap), but what arrives comes in order
 * and once: counters from 1, each above the last. */
struct fan {
	atomic_uint_fast64_t got, bad;
	uint64_t last; /* hub's progress thread */
};

static void fan_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct fan *f = arg;
	uint64_t n;

	(void)sub;
	if (m->len < sizeof(n)) {
		atomic_fetch_add(&f->bad, 1);
		return;
	}
	memcpy(&n, m->data, sizeof(n));
	if (n <= f->last || n > VISIT_MSGS)
		atomic_fetch_add(&f->bad, 1);
	f->last = n;
	atomic_fetch_add(&f->got, 1);
}

/* churn.all: one visitor's stream after another, each counted from 1
 * (hub's progress thread writes session and last). */
struct all {
	atomic_uint_fast64_t got, bad;
	uint32_t session;
	uint64_t last;
};

static void all_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct all *a = arg;
	uint64_t n;

	(void)sub;
	if (m->len < sizeof(n)) {
		atomic_fetch_add(&a->bad, 1);
		return;
	}
	memcpy(&n, m->data, sizeof(n));
	if (m->publisher != a->session) { /* the next visitor's stream */
		a->session = m->publisher;
		a->last = 0;
	}
	if (n != a->last + 1)
		atomic_fetch_add(&a->bad, 1);
	a->last = n;
	atomic_fetch_add(&a->got, 1);
}

/* An odd cycle's subscriber, left for the next cycle to destroy once the
 * visitor that published to it is reaped. */
struct left {
	vb_sub_t *sub;
	struct vbt_count cnt;
};

static uint64_t reaped(vb_ctx_t *ctx)
{
	vb_stats_t st;

	assert_int_equal(vb_ctx_stats(ctx, &st), 0);
	return st.peers_reaped;
}

static bool wait_reaped(vb_ctx_t *ctx, uint64_t n)
{
	uint64_t t0 = vbt_now_ms();

	while (reaped(ctx) < n && vbt_now_ms() - t0 < WAIT_MS)
		usleep(5000);
	return reaped(ctx) >= n;
}

/* The subscriber the previous cycle left (if any), once its visitor (and
 * so every visitor before @i) is reaped: nothing more arrived on it. */
static void left_drop(vb_ctx_t *ctx_hub, struct left *lf, unsigned i)
{
	if (!wait_reaped(ctx_hub, i))
		fail_msg("cycle %u: hub reaped %" PRIu64 " peers, not %u", i, reaped(ctx_hub), i);
	if (!lf->sub)
		return;
	/* its streams from the visitor went with the peer */
	assert_int_equal(vb_sub_destroy(lf->sub), 0);
	lf->sub = NULL;
	assert_int_equal(atomic_load(&lf->cnt.got), VISIT_MSGS);
	assert_int_equal(atomic_load(&lf->cnt.bad), 0);
}

/* Cycle @i: a visitor connects to @hub, hub subscribes, the visitor
 * publishes VISIT_MSGS messages to it and to @all_pub's topic, and both go
 * (in the order @i's parity says). An odd cycle leaves its subscriber in
 * @lf; the previous one's is destroyed here, after the visitor published
 * to churn.all (so the reaper's unlinking of the last visitor's streams
 * may run meanwhile). */
static void cycle(vb_ctx_t *ctx_hub, vb_node_t *hub, unsigned i, struct left *lf)
{
	struct vbt_count cnt_own = { 0 }, *cntp = &cnt_own;
	struct fan fcnt = { 0 };
	vb_sub_attr_t sa, fsa;
	vb_pub_attr_t pa, fpa;
	struct fan scnt = { 0 };
	vb_pub_t *fpub, *apub;
	vb_sub_t *fsub, *ssub;
	vb_node_t *side = vbt_node_open(ctx_hub, "side", false);
	vb_ctx_t *vctx = vbt_ctx_open(NULL);
	vb_node_t *vnode = vbt_node_open(vctx, "visitor", false);
	vb_pub_t *pub;
	vb_sub_t *sub;
	char topic[32], ftopic[32];
	uint64_t seq = 0, t0;

	snprintf(topic, sizeof(topic), "churn.%u", i);
	snprintf(ftopic, sizeof(ftopic), "churnf.%u", i);
	if (vb_node_connect(vnode, vbt_test_ip(), vb_node_port(hub)))
		fail_msg("cycle %u: connect: %s", i, vb_errmsg());
	if (i % 2) { /* it outlives this cycle: left_drop of the next one reads it */
		cntp = &lf->cnt;
		memset(cntp, 0, sizeof(*cntp));
	}
	vb_sub_attr_init(&sa);
	sa.on_msg = vbt_count_cb;
	sa.arg = cntp;
	if (vb_sub_create(hub, topic, VB_ORDERED, &sa, &sub))
		fail_msg("cycle %u: hub subscribes: %s", i, vb_errmsg());
	fsa = sa;
	fsa.on_msg = fan_cb;
	fsa.arg = &fcnt;
	if (vb_sub_create(hub, ftopic, VB_FANOUT, &fsa, &fsub))
		fail_msg("cycle %u: hub subscribes (FANOUT): %s", i, vb_errmsg());
	fsa.arg = &scnt;
	if (vb_sub_create(side, ftopic, VB_FANOUT, &fsa, &ssub))
		fail_msg("cycle %u: side subscribes (FANOUT): %s", i, vb_errmsg());
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	if (vb_pub_create(vnode, topic, VB_ORDERED, &pa, &pub))
		fail_msg("cycle %u: visitor publishes: %s", i, vb_errmsg());
	if (vb_pub_create(vnode, "churn.all", VB_ORDERED, &pa, &apub))
		fail_msg("cycle %u: visitor publishes to churn.all: %s", i, vb_errmsg());
	vb_pub_attr_init(&fpa);
	if (vb_pub_create(vnode, ftopic, VB_FANOUT, &fpa, &fpub))
		fail_msg("cycle %u: visitor publishes (FANOUT): %s", i, vb_errmsg());
	if (!vbt_wait_subscribers(pub, 1, WAIT_MS) || !vbt_wait_subscribers(fpub, 1, WAIT_MS) ||
	    !vbt_wait_subscribers(apub, 1, WAIT_MS))
		fail_msg("cycle %u: a visitor's publisher never saw hub's subscriber to '%s', "
			 "'%s' or churn.all (a SUB lost)", i, topic, ftopic);
	/* churn.all first: a new stream in hub's subscriber, while the last
	 * visitor may be being reaped */
	for (uint64_t n = 1; n <= VISIT_MSGS; n++)
		assert_int_equal(publish_counted(apub, n, &seq), 0);
	assert_int_equal(vb_pub_wait_acked(apub, seq, (int)WAIT_MS), 0);
	left_drop(ctx_hub, lf, i);
	/* FANOUT: datagrams, the publisher's heartbeats then follow while it
	 * idles (the progress thread's rounds over the publishers) */
	for (uint64_t n = 1; n <= VISIT_MSGS; n++)
		assert_int_equal(publish_counted(fpub, n, NULL), 0);
	for (uint64_t n = 1; n <= VISIT_MSGS; n++)
		assert_int_equal(publish_counted(pub, n, &seq), 0);
	assert_int_equal(vb_pub_wait_acked(pub, seq, (int)WAIT_MS), 0);
	t0 = vbt_now_ms();
	while (atomic_load(&cntp->got) < VISIT_MSGS && vbt_now_ms() - t0 < WAIT_MS)
		usleep(1000);
	if (atomic_load(&cntp->got) != VISIT_MSGS || atomic_load(&cntp->bad))
		fail_msg("cycle %u: hub got %" PRIu64 " of %u (%" PRIu64 " out of order)", i,
			 (uint64_t)atomic_load(&cntp->got), VISIT_MSGS,
			 (uint64_t)atomic_load(&cntp->bad));
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_pub_destroy(apub), 0);
	assert_int_equal(vb_pub_destroy(fpub), 0);
	/* what arrived of the FANOUT stream: in order, nothing twice */
	assert_true(atomic_load(&fcnt.got) <= VISIT_MSGS);
	assert_int_equal(atomic_load(&fcnt.bad), 0);
	assert_int_equal(vb_sub_destroy(fsub), 0);
	printf("churn: cycle %u: FANOUT %" PRIu64 " to hub, %" PRIu64 " to side\n", i,
	       (uint64_t)atomic_load(&fcnt.got), (uint64_t)atomic_load(&scnt.got));
	assert_true(atomic_load(&scnt.got) <= VISIT_MSGS);
	assert_int_equal(atomic_load(&scnt.bad), 0);
	assert_int_equal(vb_sub_destroy(ssub), 0);
	assert_int_equal(vb_node_destroy(side), 0);
	if (i % 2 == 0)
		assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(vnode), 0);
	assert_int_equal(vb_ctx_destroy(vctx), 0);
	if (i % 2) { /* reaped during the next cycle, the subscriber alive */
		lf->sub = sub;
		return;
	}
	/* nothing more arrived, nothing twice */
	assert_int_equal(atomic_load(&cnt_own.got), VISIT_MSGS);
}

/* What this process holds (tests/common/held.h; hub's context counts its
 * lanes) once it is back to @before, or after WAIT_MS (a lane of the last
 * visitor may still drain, a thread still end). @before is sampled after
 * cycle 1: the contexts open some resources on first use (a FANOUT
 * subscriber's multicast channel). */
static struct vbt_held held_settled(vb_ctx_t *ctx_hub, const struct vbt_held *before)
{
	uint64_t t0 = vbt_now_ms();
	struct vbt_held h;

	for (;;) {
		assert_int_equal(vbt_held_now(ctx_hub, &h), 0);
		if ((h.fds == before->fds && h.threads == before->threads &&
		     h.live_lanes <= before->live_lanes + 1) || vbt_now_ms() - t0 > WAIT_MS)
			return h;
		usleep(10000);
	}
}

/* A long-running node gains nothing per connection that came and went: the
 * same descriptors and threads (the visitors' contexts were in this
 * process too), and no more of hub's lanes than after cycle 1 (which may
 * still count that cycle's visitor's; one being replaced may count twice). */
static void check_held(const struct vbt_held *before, const struct vbt_held *after,
		       unsigned cycles)
{
	printf("churn: held after cycle 1 / after %u cycles: fds %d / %d, threads %d / %d, "
	       "hub's live lanes %" PRIu64 " / %" PRIu64 "\n", cycles, before->fds, after->fds,
	       before->threads, after->threads, before->live_lanes, after->live_lanes);
	assert_true(before->fds > 0 && before->threads > 0);
	assert_int_equal(after->fds, before->fds);
	assert_int_equal(after->threads, before->threads);
	assert_true(after->live_lanes <= before->live_lanes + 1);
}

static void test_churn(void **state)
{
	struct vbt_count fcnt = { 0 };
	struct feed f = { 0 };
	struct all all = { 0 };
	struct left lf = { 0 };
	vb_ctx_t *cf, *ch;
	vb_node_t *feed, *hub;
	vb_sub_attr_t sa, asa;
	vb_pub_attr_t pa;
	vb_sub_t *fsub, *asub;
	struct vbt_held before = { 0 }, after;
	pthread_t th;
	unsigned cycles = (unsigned)vbt_scaled(48);
	uint64_t t0;

	(void)state;
	vbt_require_device();
	if (cycles < 6)
		cycles = 6;
	ch = vbt_ctx_open(NULL);
	hub = vbt_node_open(ch, "hub", true);
	cf = vbt_ctx_open(NULL);
	feed = vbt_node_open(cf, "feed", false);
	vb_sub_attr_init(&sa);
	sa.on_msg = vbt_count_cb;
	sa.arg = &fcnt;
	if (vb_sub_create(hub, "feed", VB_ORDERED, &sa, &fsub))
		fail_msg("hub subscribes to the feed: %s", vb_errmsg());
	vb_sub_attr_init(&asa);
	asa.on_msg = all_cb;
	asa.arg = &all;
	if (vb_sub_create(hub, "churn.all", VB_ORDERED, &asa, &asub))
		fail_msg("hub subscribes to churn.all: %s", vb_errmsg());
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	pa.slow_policy = VB_SLOW_BLOCK; /* streams, not time, are checked */
	if (vb_pub_create(feed, "feed", VB_ORDERED, &pa, &f.pub))
		fail_msg("feed publisher: %s", vb_errmsg());
	if (vb_node_connect(feed, vbt_test_ip(), vb_node_port(hub)))
		fail_msg("feed connects: %s", vb_errmsg());
	assert_true(vbt_wait_subscribers(f.pub, 1, WAIT_MS));
	assert_int_equal(pthread_create(&th, NULL, feed_main, &f), 0);
	printf("churn: %u visitor cycles while the feed sends\n", cycles);
	t0 = vbt_now_ms();
	for (unsigned i = 0; i < cycles; i++) {
		cycle(ch, hub, i, &lf);
		if (i == 1)
			assert_int_equal(vbt_held_stable(ch, &before), 0);
		printf("churn: cycle %u done after %" PRIu64 " ms, feed at %" PRIu64 "\n", i,
		       vbt_now_ms() - t0, (uint64_t)atomic_load(&fcnt.got));
		fflush(stdout);
	}
	left_drop(ch, &lf, cycles);
	after = held_settled(ch, &before);
	check_held(&before, &after, cycles);
	atomic_store(&f.stop, true);
	pthread_join(th, NULL);
	printf("churn: churn.all got %" PRIu64 " of %u, %" PRIu64 " out of order\n",
	       (uint64_t)atomic_load(&all.got), cycles * VISIT_MSGS,
	       (uint64_t)atomic_load(&all.bad));
	assert_int_equal(atomic_load(&all.got), (uint64_t)cycles * VISIT_MSGS);
	assert_int_equal(atomic_load(&all.bad), 0);
	printf("churn: the feed sent %" PRIu64 " messages\n", f.n);
	if (f.rc)
		fail_msg("feed: %d (%s)", f.rc, vb_errmsg());
	assert_int_equal(atomic_load(&fcnt.bad), 0);
	assert_int_equal(atomic_load(&fcnt.got), f.n); /* acknowledged: delivered */
	assert_int_equal(reaped(ch), cycles);
	assert_int_equal(vb_pub_destroy(f.pub), 0);
	assert_int_equal(vb_sub_destroy(fsub), 0);
	assert_int_equal(vb_sub_destroy(asub), 0);
	assert_int_equal(vb_node_destroy(feed), 0);
	assert_int_equal(vb_node_destroy(hub), 0);
	assert_int_equal(vb_ctx_destroy(cf), 0);
	assert_int_equal(vb_ctx_destroy(ch), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_churn),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
