/* SPDX-License-Identifier: MIT */
/*
 * ORDERED back-pressure: a subscriber process that stops reading, with the
 * publisher's slow-subscriber policy VB_SLOW_BLOCK (the default, VB_SLOW_CUT,
 * would cut it after slow_sub_ms: pubsub_slow_sub_test).
 *
 * The publisher streams self-checking messages (1 B..2 KiB) to one
 * subscriber process. After a warm-up, the test SIGSTOPs the subscriber for
 * 2 s while the publisher keeps publishing as fast as it can, then SIGCONTs
 * it and publishes the rest. Asserted:
 *  - while the subscriber is stopped the publisher gets -EAGAIN, and
 *    vb_errmsg() gives the reason (the retransmit window is full);
 *  - the window is bounded: every -EAGAIN reports at most `window`
 *    unacknowledged messages, and once the subscriber is frozen exactly
 *    `window` are outstanding (published seq - acknowledged seq);
 *  - registered memory stays bounded: pool_registered never exceeds what
 *    the context held after warm-up plus the window's worth of messages
 *    (window x the size class of the largest message), rounded up to the
 *    2 MiB registration chunk, plus one chunk;
 *  - vb_pub_destroy()'s linger: a second publisher destroyed while the
 *    subscriber is stopped waits linger_ms, then returns -ETIMEDOUT, says
 *    how many messages were unacknowledged and counts them
 *    (unacked_on_close);
 *  - after SIGCONT every message arrives exactly once, in order, intact
 *    (checked by the subscriber with msgcheck), and vb_pub_destroy() of the
 *    main publisher, right after the last publish, returns 0 only once the
 *    last one is acknowledged.
 * Volumes scale with VERBUS_TEST_SCALE.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/mempool.h"
#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define WINDOW 256u            /* power of two: the window is exactly this */
#define MAX_LEN 2048u
#define STOP_MS 2000
#define TOPIC "bp.orders"
#define LINGER_TOPIC "bp.linger"
#define LINGER_N 10
#define CHUNK ((size_t)2 << 20) /* mempool registration unit (default) */

static uint64_t n_total, n_warm;

static size_t msg_len(uint64_t i)
{
	return vbt_msg_len(3, i, 1, MAX_LEN);
}

/* Shared with the subscriber process (mapped before fork). */
struct shared {
	uint64_t got, errors, linger_got;
};
static struct shared *sh;
static int port_pipe[2];
static pid_t child = -1; /* killed by teardown if a check failed */

static void ctx_attr(vb_ctx_attr_t *ca)
{
	vb_ctx_attr_init(ca);
	ca->ip = vbt_test_ip();
	ca->window = WINDOW;
	ca->progress_spin = 200; /* two processes on two vCPUs */
}

/* ---- subscriber process ---------------------------------------------------------- */

struct rx {
	uint64_t next_seq;
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why = "length";
	uint64_t i = m->seq - 1;

	if (m->seq != r->next_seq) {
		if (__atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "sub: seq %" PRIu64 ", expected %" PRIu64 "\n", m->seq,
				r->next_seq);
		r->next_seq = m->seq + 1;
		return;
	}
	r->next_seq++;
	if (m->len != msg_len(i) || vbt_msg_verify(m->data, m->len, 3, i, &why)) {
		if (__atomic_fetch_add(&sh->errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "sub: seq %" PRIu64 " len %zu: %s\n", m->seq, m->len, why);
		return;
	}
	__atomic_fetch_add(&sh->got, 1, __ATOMIC_RELAXED);
}

static void on_linger_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	__atomic_fetch_add(&sh->linger_got, 1, __ATOMIC_RELAXED);
}

static int subscriber(void *unused)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub, *lsub;
	vb_sub_stats_t st;
	static struct rx r = { .next_seq = 1 };
	uint16_t port;
	uint64_t t0;
	int ok;

	if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port))
		return 10;
	ctx_attr(&ca);
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "sub: ctx: %s\n", vb_errmsg());
		return 11;
	}
	vb_node_attr_init(&na);
	na.name = "bp-sub";
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &r;
	if (vb_node_create(ctx, &na, &node) || vb_sub_create(node, TOPIC, VB_ORDERED, &sa, &sub))
		return 12;
	sa.on_msg = on_linger_msg;
	if (vb_sub_create(node, LINGER_TOPIC, VB_ORDERED, &sa, &lsub))
		return 12;
	if (vb_node_connect(node, vbt_test_ip(), port)) {
		fprintf(stderr, "sub: connect: %s\n", vb_errmsg());
		return 13;
	}
	t0 = vbt_now_ms();
	while (__atomic_load_n(&sh->got, __ATOMIC_RELAXED) +
	       __atomic_load_n(&sh->errors, __ATOMIC_RELAXED) < n_total &&
	       vbt_now_ms() - t0 < 180000)
		usleep(10000);
	vb_sub_stats(sub, &st);
	printf("sub: %" PRIu64 "/%" PRIu64 " messages intact and in order, %" PRIu64
	       " errors, %" PRIu64 " duplicates dropped\n", sh->got, n_total, sh->errors,
	       st.duplicates);
	ok = sh->got == n_total && !sh->errors && st.delivered == n_total;
	usleep(300000); /* let the last acknowledgements leave */
	vb_sub_destroy(lsub);
	vb_sub_destroy(sub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	fflush(stdout); /* vbt_spawn's _exit() does not flush stdio */
	return ok ? 0 : 1;
}

/* ---- publisher -------------------------------------------------------------------- */

static uint64_t acked_seq; /* k-of-n (k = 1) acknowledged, from on_ack */

static void on_ack(vb_pub_t *pub, uint64_t seq, void *arg)
{
	__atomic_store_n(&acked_seq, seq, __ATOMIC_RELEASE);
}

struct bp {
	uint64_t eagain, max_reported, bad_reason;
	size_t max_registered;
	char first_reason[256];
};

/* Parse the unacknowledged count out of the -EAGAIN message. */
static void note_eagain(struct bp *b)
{
	const char *msg = vb_errmsg(), *p = strstr(msg, "window full (");
	unsigned long n;

	if (!b->eagain++)
		snprintf(b->first_reason, sizeof(b->first_reason), "%s", msg);
	if (!p || sscanf(p, "window full (%lu messages", &n) != 1) {
		if (b->bad_reason++ < 3)
			fprintf(stderr, "pub: -EAGAIN with unexpected reason: '%s'\n", msg);
		return;
	}
	if (n > b->max_reported)
		b->max_reported = n;
}

static void sample_pool(vb_ctx_t *ctx, struct bp *b)
{
	vb_stats_t s;

	vb_ctx_stats(ctx, &s);
	if (s.pool_registered > b->max_registered)
		b->max_registered = s.pool_registered;
}

/* Publish message @i once; 0, -EAGAIN (counted), or fail. */
static int try_publish(vb_pub_t *pub, uint8_t *buf, uint64_t i, struct bp *b)
{
	size_t len = msg_len(i);
	uint64_t seq = 0;
	int rc;

	vbt_msg_fill(buf, len, 3, i);
	rc = vb_publish(pub, buf, len, &seq);
	if (rc == -EAGAIN) {
		note_eagain(b);
		return rc;
	}
	if (rc)
		fail_msg("publish %" PRIu64 ": %s", i, vb_errmsg());
	assert_int_equal(seq, i + 1);
	return 0;
}

static void test_backpressure(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub, *pub2;
	vb_stats_t s0, s;
	struct bp warm = { 0 }, stopped = { 0 }, after = { 0 };
	uint8_t *buf = malloc(MAX_LEN);
	uint64_t i = 0, t0, stop_pub, resumed, inflight_frozen;
	size_t bound;
	uint16_t port;
	int rc, st;

	assert_non_null(buf);
	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(subscriber, NULL);
	assert_true(child > 0);

	ctx_attr(&ca);
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	na.name = "bp-pub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	pa.on_ack = on_ack;
	pa.linger_ms = 120000; /* its destroy waits for the last acknowledgement */
	pa.slow_policy = VB_SLOW_BLOCK; /* back-pressure, never a cut (pubsub_slow_sub_test) */
	assert_int_equal(vb_pub_create(node, TOPIC, VB_ORDERED, &pa, &pub), 0);
	port = vb_node_port(node);
	assert_int_equal(write(port_pipe[1], &port, sizeof(port)), sizeof(port));
	t0 = vbt_now_ms();
	while (vb_pub_subscribers(pub) < 1 && vbt_now_ms() - t0 < 30000)
		usleep(10000);
	assert_int_equal(vb_pub_subscribers(pub), 1);

	/* 1. warm-up: the stream flows, everything acknowledged */
	for (t0 = vbt_now_ms(); i < n_warm;) {
		if (try_publish(pub, buf, i, &warm) == 0)
			i++;
		else
			usleep(50);
		assert_true(vbt_now_ms() - t0 < 120000);
	}
	if (vb_pub_wait_acked(pub, i, 60000))
		fail_msg("warm-up not acknowledged: %s", vb_errmsg());
	/* the steady state: the subscriber's standby connection is warm and
	 * the accept thread has prepared its next connection (3 built) */
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < 30000; usleep(10000)) {
		vb_ctx_stats(ctx, &s0);
		if (s0.standbys_warmed >= 1 && s0.lanes_created >= 3)
			break;
	}
	assert_true(s0.standbys_warmed >= 1);
	usleep(200000); /* the prepared connection's buffers are registered */
	vb_ctx_stats(ctx, &s0);
	bound = s0.pool_registered +
		(((size_t)WINDOW * vbi_mempool_class_size(vbi_mempool_class_of(40 + MAX_LEN)) +
		  CHUNK - 1) / CHUNK) * CHUNK + CHUNK;
	printf("pub: warm-up %" PRIu64 " messages acknowledged (%" PRIu64 " back-pressure "
	       "retries); registered %zu bytes in %u chunks; bound while stopped %zu bytes "
	       "(window %u x %zu-byte class + chunk)\n", i, warm.eagain, s0.pool_registered,
	       s0.pool_chunks, bound, WINDOW,
	       vbi_mempool_class_size(vbi_mempool_class_of(40 + MAX_LEN)));

	/* 2. the subscriber stops reading for STOP_MS; keep publishing */
	assert_int_equal(kill(child, SIGSTOP), 0);
	stop_pub = i;
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < STOP_MS && i < n_total;) {
		if (try_publish(pub, buf, i, &stopped) == 0)
			i++;
		else
			usleep(200);
		sample_pool(ctx, &stopped);
	}
	inflight_frozen = i - __atomic_load_n(&acked_seq, __ATOMIC_ACQUIRE);
	/* one more attempt now that everything is settled: must be refused */
	rc = try_publish(pub, buf, i, &stopped);
	vb_ctx_stats(ctx, &s);
	printf("pub: subscriber stopped %d ms: %" PRIu64 " published, %" PRIu64 " -EAGAIN; "
	       "first reason: '%s'; max reported unacknowledged %" PRIu64 ", frozen in flight "
	       "%" PRIu64 " (acked seq %" PRIu64 "); registered max %zu bytes (%u chunks now), "
	       "back-pressure counter %" PRIu64 "\n", STOP_MS, i - stop_pub, stopped.eagain,
	       stopped.first_reason, stopped.max_reported, inflight_frozen,
	       __atomic_load_n(&acked_seq, __ATOMIC_ACQUIRE), stopped.max_registered,
	       s.pool_chunks, s.backpressure);
	/* a second publisher, destroyed while the subscriber cannot
	 * acknowledge: the linger runs out */
	vb_pub_attr_init(&pa);
	pa.linger_ms = 300;
	pa.slow_policy = VB_SLOW_BLOCK;
	assert_int_equal(vb_pub_create(node, LINGER_TOPIC, VB_ORDERED, &pa, &pub2), 0);
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub2) < 1 && vbt_now_ms() - t0 < 10000;)
		usleep(1000);
	assert_int_equal(vb_pub_subscribers(pub2), 1);
	for (unsigned k = 0; k < LINGER_N; k++)
		assert_int_equal(vb_publish(pub2, "linger", 6, NULL), 0);
	{
		uint64_t l0 = vbt_now_ms();
		int drc = vb_pub_destroy(pub2);
		char want[64];

		snprintf(want, sizeof(want), "%u messages not acknowledged", LINGER_N);
		printf("pub: destroy with the subscriber stopped: %d after %" PRIu64 " ms: %s\n",
		       drc, vbt_now_ms() - l0, vb_errmsg());
		assert_int_equal(drc, -ETIMEDOUT);
		assert_non_null(strstr(vb_errmsg(), want));
		vb_ctx_stats(ctx, &s);
		assert_int_equal(s.unacked_on_close, LINGER_N);
	}
	assert_int_equal(kill(child, SIGCONT), 0);
	assert_int_equal(rc, -EAGAIN);
	assert_true(stopped.eagain > 0);
	assert_int_equal(stopped.bad_reason, 0);
	assert_non_null(strstr(stopped.first_reason, "retransmit window full"));
	assert_true(stopped.max_reported <= WINDOW);
	assert_int_equal(stopped.max_reported, WINDOW);
	assert_int_equal(inflight_frozen, WINDOW);
	assert_true(stopped.max_registered <= bound);
	assert_true(s.backpressure >= stopped.eagain);

	/* 3. resumed: the rest of the stream */
	resumed = i;
	for (t0 = vbt_now_ms(); i < n_total;) {
		if (try_publish(pub, buf, i, &after) == 0)
			i++;
		else
			usleep(50);
		if (!(i & 255))
			sample_pool(ctx, &after);
		assert_true(vbt_now_ms() - t0 < 180000);
	}
	/* no wait_acked: destroy's linger waits for the last ACK */
	if ((rc = vb_pub_destroy(pub)))
		fail_msg("destroy: %s", vb_errmsg());
	assert_int_equal(__atomic_load_n(&acked_seq, __ATOMIC_ACQUIRE), i);
	st = vbt_wait(child, 120);
	child = -1;
	vb_ctx_stats(ctx, &s);
	printf("pub: after SIGCONT %" PRIu64 " more published (%" PRIu64 " retries), all %" PRIu64
	       " acknowledged; registered max %zu bytes; SENDs %" PRIu64 ", frames %" PRIu64
	       " (batched %" PRIu64 "), acks in %" PRIu64 ", malformed %" PRIu64 ", failovers %"
	       PRIu64 ", connections built %" PRIu64 "\n",
	       i - resumed, after.eagain, i,
	       after.max_registered, s.sends_posted, s.frames_sent, s.batched_frames,
	       s.acks_received, s.malformed, s.failovers, s.lanes_created);
	assert_int_equal(st, 0);
	assert_int_equal(sh->got, n_total);
	assert_int_equal(sh->errors, 0);
	assert_int_equal(s.malformed, 0);
	assert_int_equal(s.failovers, 0); /* a stalled reader is not a failed path */
	assert_true(after.max_registered <= bound);
	assert_int_equal(s.unacked_on_close, LINGER_N); /* the main one left none */

	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(vbt_res_count("qp", getpid()), 0);
	assert_int_equal(vbt_res_count("mr", getpid()), 0);
	munmap(sh, sizeof(*sh));
	free(buf);
}

/* A failed check leaves the other process running (or stopped): end it. */
static int teardown(void **state)
{
	(void)state;
	vbt_reap(&child);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backpressure),
	};

	vbt_require_device();
	n_total = vbt_scaled(12000);
	n_warm = vbt_scaled(1500);
	return cmocka_run_group_tests(tests, NULL, teardown);
}
