/* SPDX-License-Identifier: MIT */
/*
 * Which ORDERED SENDs ask the device for a completion (vb_stats_t.
 * signaled_sends), and that the cork still works.
 *
 * A signaled SEND costs both ends: on Soft-RoCE the completer writes a
 * CQE in the poster's system call, and the progress thread polls it and
 * releases the ring entry under the lane's lock. perftest's ping-pong
 * signals one SEND in a hundred. verbus signals a SEND when none is in
 * flight on its lane, because that completion is what flushes the
 * messages corked behind it (vb_pub_commit); but a SEND that answers one
 * just received (request/response, a ping-pong) has nothing corked
 * behind it, so it goes unsignaled; every quarter send ring one still is,
 * so the ring's entries are released.
 *
 * test_answers_unsignaled: ROUNDS round trips (the pinging context in
 * VB_PROGRESS_APP, driven by this thread; the ponging one answers from its
 * progress thread's callback). Each side may signal at most ROUNDS / 2 of
 * its SENDs; every SEND was signaled before. No answer is held behind a
 * SEND in flight (vb_stats_t.cork_holds stays 0 on both sides): nothing
 * queues behind an answer, so holding it only delays it, and the
 * signaled SEND it would wait for is often one whose completion comes
 * after the next ping (rxe's completer runs after the peer's responder
 * delivered it, and the peer answers at once). It used to be: with send
 * queues of 16 and both sides spinning in vb_progress()
 * (test_answers_small_rings: every fourth SEND signaled), the ponging
 * side held about one answer in four.
 *
 * test_stream_corks: the other half of the rule. A publisher whose
 * context is in VB_PROGRESS_APP, with no vb_progress() call, so nothing
 * polls its completions: its first messages go (the first unsignaled, as
 * it answers the set-up's frames; the next signaled, nothing having come
 * in since), and the rest cork behind that signaled SEND, whose completion
 * nobody reaps until this thread calls vb_progress(). So BURST messages
 * take at most 2 SENDs before the first vb_progress() and few after it,
 * all delivered once, in order. With no SEND signaled when the lane is
 * idle, every publish would post its own.
 *
 * test_flush_burst: what one flush posts beyond a signaled SEND still in
 * flight is bounded (VERBUS_FLUSH_BURST, 32 KiB here: 2 SENDs of 16 KiB).
 * BIG messages of nearly a slot each (one SEND apiece) are published with
 * no progress call: the first goes, signaled, the rest cork behind it.
 * Then every vb_progress() call may post at most 2 SENDs and a control
 * frame, and all of them arrive once, in order. Before, the first flush
 * after that completion posted the whole backlog, as far as credits went,
 * in one call; and a flush into a connection whose peer had failed went on
 * posting as long (Soft-RoCE carries each SEND's whole transfer inside
 * the post, which held the lane's lock for milliseconds in a failover).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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
#define BURST 200u
#define BIG 40u           /* test_flush_burst: messages of */
#define BIG_LEN 15000u    /* bytes (one per 16 KiB SEND) */
#define BIG_PER_CALL 3u   /* 2 SENDs of the 32 KiB burst, and a control frame */
#define WAIT_MS 10000

static vb_ctx_t *ctx_app(void)
{
	vb_ctx_attr_t ca;

	vb_ctx_attr_init(&ca);
	ca.progress = VB_PROGRESS_APP;
	return vbt_ctx_open(&ca);
}

static vb_stats_t stats(vb_ctx_t *c)
{
	vb_stats_t st;

	assert_int_equal(vb_ctx_stats(c, &st), 0);
	return st;
}

/* Run @app's progress (this thread) until @pub (of any context) has a
 * subscriber and @app (the connecting side) its warm standby connection,
 * whose set-up posts a SEND of @app's (its HELLO) that the counts after
 * this must not see; then 50 ms more, so that what the set-up left to send
 * has gone. */
static void settle(vb_ctx_t *app, vb_pub_t *pub)
{
	uint64_t t0;

	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; vb_progress(app))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no subscriber after %d ms", WAIT_MS);
	for (t0 = vbt_now_ms(); stats(app).standbys_warmed < 1; vb_progress(app))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no standby connection after %d ms", WAIT_MS);
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < 50;)
		vb_progress(app);
}

static atomic_bool pong_stop, pong_both, pong_app;
static vb_ctx_t *pong_ctx[2]; /* ponging, pinging */

/* The ponging context's progress when it is in VB_PROGRESS_APP
 * (pong_app), spinning as vb_bench lat's does; once the round trips are
 * done (pong_both), the pinging context's too. A publisher's destroy runs
 * its own context's progress while it waits for the other side's ACKs,
 * and only that: the pong publisher's would wait in vain for the ACKs of
 * the last pongs, which the pinging context (VB_PROGRESS_APP) sends
 * alone only from a round of its own once they are owed ACK_DELAY_MS
 * (seen once in a full run under ASan: "3 messages not acknowledged").
 * So whatever mode the ponging context is in, this thread runs the
 * pinging context's rounds from then on. */
static void *pong_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&pong_stop)) {
		bool any = false;

		if (atomic_load(&pong_app)) {
			vb_progress(pong_ctx[0]);
			any = true;
		}
		if (atomic_load(&pong_both)) {
			vb_progress(pong_ctx[1]);
			any = true;
		}
		if (!any)
			usleep(100);
	}
	return NULL;
}

/* ROUNDS round trips between a pinging context in VB_PROGRESS_APP and a
 * ponging one answering from its callback, both with @msg_rate (0: the
 * default), which sizes their queues. The ponging context runs its own
 * progress thread, or with @app_ponger a thread of this test spins on its
 * vb_progress(); after the round trips that thread runs the pinging
 * context's too, for the teardown (pong_main). */
static void pingpong(double msg_rate, bool app_ponger)
{
	pthread_t pong_thread;
	vb_ctx_attr_t cat;
	vb_ctx_t *ca, *cb;
	vb_node_t *na, *nb;
	static struct vbt_echo po;
	static struct vbt_count pi;
	vb_sub_attr_t sa;
	vb_pub_t *ping;
	vb_sub_t *sa_sub, *sb_sub;
	vb_stats_t a0, b0, a1, b1;
	uint64_t t0, sig_a, sig_b, held_a, held_b;

	vb_ctx_attr_init(&cat);
	cat.progress = VB_PROGRESS_APP;
	if (msg_rate > 0)
		cat.msg_rate = msg_rate;
	ca = vbt_ctx_open(&cat);
	cat.progress = app_ponger ? VB_PROGRESS_APP : VB_PROGRESS_THREAD;
	cb = vbt_ctx_open(&cat);
	atomic_store(&pong_stop, false);
	atomic_store(&pong_both, false);
	atomic_store(&pong_app, app_ponger);
	pong_ctx[0] = cb;
	pong_ctx[1] = ca;
	assert_int_equal(pthread_create(&pong_thread, NULL, pong_main, NULL), 0);
	na = vbt_node_open(ca, "sig-a", false);
	nb = vbt_node_open(cb, "sig-b", true);
	memset(&po, 0, sizeof(po));
	memset(&pi, 0, sizeof(pi));
	assert_int_equal(vb_pub_create(na, "sig.ping", VB_ORDERED, NULL, &ping), 0);
	assert_int_equal(vb_pub_create(nb, "sig.pong", VB_ORDERED, NULL, &po.pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = vbt_count_cb;
	sa.arg = &pi;
	assert_int_equal(vb_sub_create(na, "sig.pong", VB_ORDERED, &sa, &sa_sub), 0);
	sa.on_msg = vbt_echo_cb;
	sa.arg = &po;
	assert_int_equal(vb_sub_create(nb, "sig.ping", VB_ORDERED, &sa, &sb_sub), 0);
	/* the context in VB_PROGRESS_APP connects: vb_node_connect() runs its
	 * progress while it waits (a listening one would not get the HELLO) */
	if (vb_node_connect(na, vbt_test_ip(), vb_node_port(nb)))
		fail_msg("connect: %s", vb_errmsg());
	settle(ca, po.pub); /* our SUB goes in a round of ours */
	settle(ca, ping);

	a0 = stats(ca);
	b0 = stats(cb);
	/* every quarter send ring a SEND is signaled whatever it is: the
	 * bound below needs a ring of 8 or more */
	if (a0.sq_depth < 8 || b0.sq_depth < 8)
		fail_msg("send queues of %" PRIu64 " / %" PRIu64 ": too small for this test",
			 (uint64_t)a0.sq_depth, (uint64_t)b0.sq_depth);
	for (uint64_t i = 1; i <= ROUNDS; i++) {
		int rc;

		for (t0 = vbt_now_ms(); (rc = vb_publish(ping, &i, sizeof(i), NULL)) == -EAGAIN;
		     vb_progress(ca))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("ping %" PRIu64 ": -EAGAIN for %d ms", i, WAIT_MS);
		assert_int_equal(rc, 0);
		for (t0 = vbt_now_ms(); atomic_load(&pi.got) < i; vb_progress(ca))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("pong %" PRIu64 " not back after %d ms", i, WAIT_MS);
	}
	atomic_store(&pong_both, true);
	a1 = stats(ca);
	b1 = stats(cb);
	sig_a = a1.signaled_sends - a0.signaled_sends;
	sig_b = b1.signaled_sends - b0.signaled_sends;
	held_a = a1.cork_holds - a0.cork_holds;
	held_b = b1.cork_holds - b0.cork_holds;
	printf("%u round trips: pinging side %" PRIu64 " SENDs, %" PRIu64
	       " signaled, %" PRIu64 " held; ponging side %" PRIu64 " SENDs, %" PRIu64
	       " signaled, %" PRIu64 " held (send queues %" PRIu64 " / %" PRIu64 ")\n",
	       ROUNDS, a1.sends_posted - a0.sends_posted, sig_a, held_a,
	       b1.sends_posted - b0.sends_posted, sig_b, held_b, (uint64_t)a0.sq_depth,
	       (uint64_t)b0.sq_depth);
	assert_int_equal(atomic_load(&pi.bad), 0);
	assert_int_equal(atomic_load(&po.failed), 0);
	assert_int_equal(atomic_load(&po.got), ROUNDS);
	if (sig_a > ROUNDS / 2 || sig_b > ROUNDS / 2)
		fail_msg("%" PRIu64 " and %" PRIu64 " signaled SENDs for %u round trips: the "
			 "answers asked for completions (at most %u each)",
			 sig_a, sig_b, ROUNDS, ROUNDS / 2);
	if (held_a || held_b)
		fail_msg("%" PRIu64 " pings and %" PRIu64 " pongs held behind a SEND in flight: "
			 "an answer waited for a completion", held_a, held_b);

	if (vb_pub_destroy(ping) || vb_pub_destroy(po.pub))
		fail_msg("publisher destroy: %s", vb_errmsg());
	assert_int_equal(vb_sub_destroy(sa_sub), 0);
	assert_int_equal(vb_sub_destroy(sb_sub), 0);
	assert_int_equal(vb_node_destroy(nb), 0);
	assert_int_equal(vb_node_destroy(na), 0);
	atomic_store(&pong_stop, true);
	assert_int_equal(pthread_join(pong_thread, NULL), 0);
	assert_int_equal(vb_ctx_destroy(cb), 0);
	assert_int_equal(vb_ctx_destroy(ca), 0);
}

static void test_answers_unsignaled(void **state)
{
	(void)state;
	pingpong(0, false);
}

/* queues of 16 (the floor): every fourth SEND is signaled; both sides
 * spin in vb_progress(), as vb_bench lat does */
static void test_answers_small_rings(void **state)
{
	(void)state;
	pingpong(1000, true);
}

/* A stream from a publishing context in VB_PROGRESS_APP (driven by this
 * thread) to a subscribing one with its progress thread, connected and
 * settled; @got counts the deliveries. */
struct stream {
	vb_ctx_t *cp, *cs;
	vb_node_t *np, *ns;
	vb_pub_t *pub;
	vb_sub_t *sub;
};

static void stream_open(struct stream *x, const char *topic, struct vbt_count *got)
{
	vb_sub_attr_t sa;

	x->cp = ctx_app();
	x->cs = vbt_ctx_open(NULL);
	x->np = vbt_node_open(x->cp, "stream-pub", false);
	x->ns = vbt_node_open(x->cs, "stream-sub", true);
	memset(got, 0, sizeof(*got));
	assert_int_equal(vb_pub_create(x->np, topic, VB_ORDERED, NULL, &x->pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = vbt_count_cb;
	sa.arg = got;
	assert_int_equal(vb_sub_create(x->ns, topic, VB_ORDERED, &sa, &x->sub), 0);
	if (vb_node_connect(x->np, vbt_test_ip(), vb_node_port(x->ns)))
		fail_msg("connect: %s", vb_errmsg());
	settle(x->cp, x->pub);
}

static void stream_close(struct stream *x)
{
	assert_int_equal(vb_pub_destroy(x->pub), 0);
	assert_int_equal(vb_sub_destroy(x->sub), 0);
	assert_int_equal(vb_node_destroy(x->ns), 0);
	assert_int_equal(vb_node_destroy(x->np), 0);
	assert_int_equal(vb_ctx_destroy(x->cs), 0);
	assert_int_equal(vb_ctx_destroy(x->cp), 0);
}

static void test_stream_corks(void **state)
{
	static struct vbt_count got;
	struct stream x;
	uint8_t msg[64] = { 0 };
	vb_ctx_t *cp;
	vb_pub_t *pub;
	vb_stats_t s0, s1, s2;
	uint64_t t0, early, sends;

	(void)state;
	stream_open(&x, "cork", &got);
	cp = x.cp;
	pub = x.pub;

	s0 = stats(cp);
	for (uint64_t i = 1; i <= BURST; i++) {
		memcpy(msg, &i, sizeof(i));
		if (vb_publish(pub, msg, sizeof(msg), NULL))
			fail_msg("publish %" PRIu64 ": %s", i, vb_errmsg());
	}
	s1 = stats(cp);
	for (t0 = vbt_now_ms(); atomic_load(&got.got) < BURST; vb_progress(cp))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %u delivered after %d ms",
				 (uint64_t)atomic_load(&got.got), BURST, WAIT_MS);
	s2 = stats(cp);
	early = s1.sends_posted - s0.sends_posted;
	sends = s2.sends_posted - s0.sends_posted;
	printf("%u messages published with no progress call: %" PRIu64 " SENDs (%" PRIu64
	       " signaled), %" PRIu64 " held, before the first vb_progress(), %" PRIu64 " (%" PRIu64
	       " signaled) in all, %" PRIu64 " batched frames\n",
	       BURST, early, s1.signaled_sends - s0.signaled_sends,
	       s1.cork_holds - s0.cork_holds, sends,
	       s2.signaled_sends - s0.signaled_sends, s2.batched_frames - s0.batched_frames);
	assert_int_equal(atomic_load(&got.bad), 0);
	assert_int_equal(atomic_load(&got.got), BURST);
	/* every publish before the first progress call either posted or was
	 * held behind the signaled SEND */
	if (s1.cork_holds - s0.cork_holds + early < BURST)
		fail_msg("%" PRIu64 " publishes counted as held (cork_holds) and %" PRIu64
			 " SENDs for %u publishes", s1.cork_holds - s0.cork_holds, early, BURST);
	if (early > 2 || sends > BURST / 4)
		fail_msg("%" PRIu64 " SENDs before the first progress call (at most 2), %" PRIu64
			 " in all (at most %u): the burst was not corked behind a signaled SEND",
			 early, sends, BURST / 4);
	stream_close(&x);
}

static void test_flush_burst(void **state)
{
	static struct vbt_count got;
	static uint8_t msg[BIG_LEN];
	struct stream x;
	vb_ctx_t *cp;
	vb_pub_t *pub;
	vb_stats_t s0, s1;
	uint64_t t0, calls = 0, most = 0, sends = 0;

	(void)state;
	/* read at vb_ctx_create(): this stream's two contexts only */
	assert_int_equal(setenv("VERBUS_FLUSH_BURST", "32k", 1), 0);
	stream_open(&x, "burst", &got);
	assert_int_equal(unsetenv("VERBUS_FLUSH_BURST"), 0);
	cp = x.cp;
	pub = x.pub;

	s0 = stats(cp);
	for (uint64_t i = 1; i <= BIG; i++) {
		memcpy(msg, &i, sizeof(i));
		if (vb_publish(pub, msg, sizeof(msg), NULL))
			fail_msg("publish %" PRIu64 ": %s", i, vb_errmsg());
	}
	s1 = stats(cp);
	if (s1.sends_posted - s0.sends_posted > 2)
		fail_msg("%" PRIu64 " SENDs before the first progress call (at most 2): the "
			 "messages were not corked", s1.sends_posted - s0.sends_posted);
	for (t0 = vbt_now_ms(); atomic_load(&got.got) < BIG; calls++) {
		uint64_t before = s1.sends_posted;

		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %u delivered after %d ms",
				 (uint64_t)atomic_load(&got.got), BIG, WAIT_MS);
		vb_progress(cp);
		s1 = stats(cp);
		if (s1.sends_posted - before > most)
			most = s1.sends_posted - before;
	}
	sends = s1.sends_posted - s0.sends_posted;
	printf("%u messages of %u bytes: %" PRIu64 " SENDs over %" PRIu64
	       " progress calls, at most %" PRIu64 " in one\n",
	       BIG, BIG_LEN, sends, calls, most);
	assert_int_equal(atomic_load(&got.bad), 0);
	assert_int_equal(atomic_load(&got.got), BIG);
	if (most > BIG_PER_CALL)
		fail_msg("%" PRIu64 " SENDs posted in one vb_progress() call (at most %u): the "
			 "flush was not bounded by VERBUS_FLUSH_BURST", most, BIG_PER_CALL);
	stream_close(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answers_unsignaled),
		cmocka_unit_test(test_answers_small_rings),
		cmocka_unit_test(test_stream_corks),
		cmocka_unit_test(test_flush_burst),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
