/* SPDX-License-Identifier: MIT */
/*
 * ORDERED over RC between two processes on the RDMA device:
 *  - one publisher: 100,000 messages of 1 B..4 KiB plus 100 of 64 KiB..1 MiB
 *    (VERBUS_TEST_SCALE multiplies), each checked byte for byte, in order,
 *    none missing, none duplicated; the last one acknowledged (k=1);
 *  - 4 publisher threads at once, each with its own publisher, plus 4
 *    threads sharing one publisher: per-thread order and exactly-once.
 */
#include <errno.h>
#include <pthread.h>
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

#define NTHREADS 4

static uint64_t n_small, n_big, n_mt;

/* message i (0-based) of the single-publisher stream */
static size_t msg_len(uint64_t i)
{
	if (i % 1000 == 999 && i / 1000 < n_big)
		return vbt_msg_len(0, i, 64 << 10, 1 << 20);
	return vbt_msg_len(0, i, 1, 4096);
}

static uint64_t total_single(void)
{
	return n_small + (n_big < n_small / 1000 ? n_big : n_small / 1000);
}

/* ---- subscriber process ---------------------------------------------------------- */

struct rx {
	uint64_t got, bytes, errors;
	uint64_t next_seq;            /* single stream: next expected seq */
	uint64_t next_ctr[NTHREADS * 2]; /* per thread stream */
	uint64_t mt_got;
};

static void on_single(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why;
	uint64_t i = m->seq - 1;

	if (m->seq != r->next_seq) {
		if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "single: seq %llu, expected %llu\n",
				(unsigned long long)m->seq, (unsigned long long)r->next_seq);
		r->next_seq = m->seq + 1;
		return;
	}
	r->next_seq++;
	if (m->len != msg_len(i) || vbt_msg_verify(m->data, m->len, 0, i, &why)) {
		if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "single: seq %llu len %zu (want %zu): %s\n",
				(unsigned long long)m->seq, m->len, msg_len(i),
				m->len != msg_len(i) ? "length" : why);
		return;
	}
	__atomic_fetch_add(&r->bytes, m->len, __ATOMIC_RELAXED);
	__atomic_fetch_add(&r->got, 1, __ATOMIC_RELAXED);
}

static void on_mt(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	uint32_t stream;
	uint64_t ctr;
	const char *why = "no header";

	if (vbt_msg_peek(m->data, m->len, &stream, &ctr) || stream < 1 || stream > 2 * NTHREADS ||
	    vbt_msg_verify(m->data, m->len, stream, ctr, &why)) {
		if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "mt '%s': bad message: %s\n", m->topic, why);
		return;
	}
	if (ctr != r->next_ctr[stream - 1]) {
		if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "mt stream %u: counter %llu, expected %llu\n", stream,
				(unsigned long long)ctr, (unsigned long long)r->next_ctr[stream - 1]);
	}
	r->next_ctr[stream - 1] = ctr + 1;
	__atomic_fetch_add(&r->mt_got, 1, __ATOMIC_RELAXED);
}

static int port_pipe[2];

static int subscriber(void *unused)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *single, *mt[NTHREADS + 1];
	static struct rx r = { .next_seq = 1 };
	uint16_t port;
	uint64_t want_mt = n_mt * 2 * NTHREADS, t0;
	int rc;

	if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port))
		return 10;
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	if ((rc = vb_ctx_create(&ca, &ctx))) {
		fprintf(stderr, "sub: ctx: %s\n", vb_errmsg());
		return 11;
	}
	vb_node_attr_init(&na);
	na.name = "subscriber";
	if (vb_node_create(ctx, &na, &node))
		return 12;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_single;
	sa.arg = &r;
	if (vb_sub_create(node, "orders", VB_ORDERED, &sa, &single))
		return 13;
	sa.on_msg = on_mt;
	for (int t = 0; t <= NTHREADS; t++) {
		char topic[32];

		snprintf(topic, sizeof(topic), "orders.mt.%d", t);
		if (vb_sub_create(node, topic, VB_ORDERED, &sa, &mt[t]))
			return 14;
	}
	if ((rc = vb_node_connect(node, vbt_test_ip(), port))) {
		fprintf(stderr, "sub: connect: %s\n", vb_errmsg());
		return 15;
	}
	/* until everything arrived, or 60 s without progress */
	t0 = vbt_now_ms();
	for (uint64_t seen = 0;;) {
		uint64_t now = __atomic_load_n(&r.got, __ATOMIC_RELAXED) +
			       __atomic_load_n(&r.errors, __ATOMIC_RELAXED) +
			       __atomic_load_n(&r.mt_got, __ATOMIC_RELAXED);

		if (now >= total_single() + want_mt)
			break;
		if (now != seen) {
			seen = now;
			t0 = vbt_now_ms();
		} else if (vbt_now_ms() - t0 > 60000) {
			break;
		}
		usleep(20000);
	}
	/* let the last acknowledgements leave, then stop delivery before
	 * reading the counters without atomics */
	usleep(300000);
	vb_sub_destroy(single);
	for (int t = 0; t <= NTHREADS; t++)
		vb_sub_destroy(mt[t]);
	printf("sub: single stream %llu/%llu messages intact (%llu bytes), multi-thread %llu/%llu, "
	       "%llu errors\n", (unsigned long long)r.got, (unsigned long long)total_single(),
	       (unsigned long long)r.bytes, (unsigned long long)r.mt_got,
	       (unsigned long long)want_mt, (unsigned long long)r.errors);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return r.got == total_single() && r.mt_got == want_mt && !r.errors ? 0 : 1;
}

/* ---- publisher process ------------------------------------------------------------- */

static int publish_retry(vb_pub_t *pub, const void *buf, size_t len, uint64_t *seq,
			 uint64_t *eagain)
{
	uint64_t t0 = vbt_now_ms();
	int rc;

	while ((rc = vb_publish(pub, buf, len, seq)) == -EAGAIN) {
		(*eagain)++;
		if (vbt_now_ms() - t0 > 60000)
			return -ETIMEDOUT;
		usleep(50);
	}
	return rc;
}

struct mt_arg {
	vb_pub_t *pub;
	uint32_t stream;
	int rc;
	uint64_t eagain;
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static void *mt_thread(void *p)
{
	struct mt_arg *a = p;
	uint8_t buf[512];

	for (uint64_t i = 0; i < n_mt && !a->rc; i++) {
		size_t len = vbt_msg_len(a->stream, i, VBT_MSG_MIN, sizeof(buf));

		vbt_msg_fill(buf, len, a->stream, i);
		/* threads sharing a publisher: the per-thread counter order is
		 * only defined if fill+publish is atomic per thread */
		if (a->stream > NTHREADS)
			pthread_mutex_lock(&shared_lock);
		a->rc = publish_retry(a->pub, buf, len, NULL, &a->eagain);
		if (a->stream > NTHREADS)
			pthread_mutex_unlock(&shared_lock);
	}
	return NULL;
}

static void test_ordered(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_pub_attr_t pa, mta;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub, *mtpub[NTHREADS + 1];
	uint8_t *buf = malloc(1 << 20);
	uint64_t eagain = 0, seq = 0, t0;
	pthread_t th[2 * NTHREADS];
	struct mt_arg args[2 * NTHREADS];
	uint16_t port;
	pid_t child;
	int rc, st;
	vb_stats_t s;

	assert_non_null(buf);
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(subscriber, NULL);
	assert_true(child > 0);

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	rc = vb_ctx_create(&ca, &ctx);
	if (rc)
		fail_msg("ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	na.name = "publisher";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	port = vb_node_port(node);
	assert_true(port > 0);
	vb_pub_attr_init(&mta);
	mta.slow_sub_ms = VBT_NO_SLOW_CUT_MS;
	pa = mta;
	pa.ack_quorum = 1;
	assert_int_equal(vb_pub_create(node, "orders", VB_ORDERED, &pa, &pub), 0);
	for (int t = 0; t <= NTHREADS; t++) {
		char topic[32];

		snprintf(topic, sizeof(topic), "orders.mt.%d", t);
		assert_int_equal(vb_pub_create(node, topic, VB_ORDERED, &mta, &mtpub[t]), 0);
	}
	assert_int_equal(write(port_pipe[1], &port, sizeof(port)), sizeof(port));

	/* wait until the subscriber is attached to every topic */
	t0 = vbt_now_ms();
	while (vbt_now_ms() - t0 < 30000) {
		int ready = vb_pub_subscribers(pub) == 1;

		for (int t = 0; t <= NTHREADS; t++)
			ready &= vb_pub_subscribers(mtpub[t]) == 1;
		if (ready)
			break;
		usleep(10000);
	}
	assert_int_equal(vb_pub_subscribers(pub), 1);
	printf("pub: subscriber attached after %llu ms; sending %llu + %llu messages\n",
	       (unsigned long long)(vbt_now_ms() - t0), (unsigned long long)n_small,
	       (unsigned long long)(total_single() - n_small));

	t0 = vbt_now_ms();
	for (uint64_t i = 0; i < total_single(); i++) {
		size_t len = msg_len(i);

		vbt_msg_fill(buf, len, 0, i);
		rc = publish_retry(pub, buf, len, &seq, &eagain);
		if (rc)
			fail_msg("publish %llu: %s", (unsigned long long)i, vb_errmsg());
		assert_int_equal(seq, i + 1);
		if (i % 20000 == 19999)
			fprintf(stderr, "pub: %llu messages sent\n", (unsigned long long)i + 1);
	}
	rc = vb_pub_wait_acked(pub, seq, 120000);
	if (rc)
		fail_msg("last message not acknowledged: %s", vb_errmsg());
	printf("pub: single stream done in %llu ms, %llu back-pressure retries\n",
	       (unsigned long long)(vbt_now_ms() - t0), (unsigned long long)eagain);

	/* 4 threads with a publisher each + 4 threads sharing the 5th */
	for (int t = 0; t < 2 * NTHREADS; t++) {
		args[t] = (struct mt_arg){ .pub = t < NTHREADS ? mtpub[t] : mtpub[NTHREADS],
					   .stream = (uint32_t)t + 1 };
		assert_int_equal(pthread_create(&th[t], NULL, mt_thread, &args[t]), 0);
	}
	for (int t = 0; t < 2 * NTHREADS; t++) {
		pthread_join(th[t], NULL);
		if (args[t].rc)
			fail_msg("thread %d: publish failed %d: %s", t, args[t].rc, vb_strerror(args[t].rc));
	}

	st = vbt_wait(child, 300);
	vb_ctx_stats(ctx, &s);
	printf("pub: stats: published %llu, SENDs %llu, frames %llu (batched %llu), inline %llu, "
	       "acks in %llu, back-pressure %llu; SQ %u RQ %u CQ %u; pool %u chunks, %zu bytes "
	       "registered, %llu registrations\n",
	       (unsigned long long)s.published, (unsigned long long)s.sends_posted,
	       (unsigned long long)s.frames_sent, (unsigned long long)s.batched_frames,
	       (unsigned long long)s.inline_sends, (unsigned long long)s.acks_received,
	       (unsigned long long)s.backpressure, s.sq_depth, s.rq_depth, s.cq_depth,
	       s.pool_chunks, s.pool_registered, (unsigned long long)s.pool_registrations);
	assert_int_equal(st, 0);
	assert_int_equal(s.malformed, 0);

	assert_int_equal(vb_pub_destroy(pub), 0);
	for (int t = 0; t <= NTHREADS; t++)
		assert_int_equal(vb_pub_destroy(mtpub[t]), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(vbt_res_count("qp", getpid()), 0);
	assert_int_equal(vbt_res_count("mr", getpid()), 0);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ordered),
	};

	vbt_require_device();
	n_small = vbt_scaled(100000);
	n_big = vbt_scaled(100);
	n_mt = vbt_scaled(5000);
	if (getenv("VERBUS_TEST_SMALL")) { /* quick debugging runs */
		n_small = strtoull(getenv("VERBUS_TEST_SMALL"), NULL, 0);
		n_big = n_small / 1000;
		n_mt = n_small / 10 + 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
