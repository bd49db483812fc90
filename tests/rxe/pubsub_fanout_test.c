/* SPDX-License-Identifier: MIT */
/*
 * FANOUT over UD: one publisher process, three subscriber processes,
 * 100,000 messages (VERBUS_TEST_SCALE multiplies) of which about one in ten
 * is larger than a datagram and goes out fragmented. Every message that is
 * delivered is checked byte for byte; for each subscriber
 * delivered + reported-lost == published, with the gap callback's counts
 * agreeing with the counters.
 */
#include <errno.h>
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

#define NSUBS 3

static uint64_t n_msgs;
static int port_pipe[NSUBS][2];
static int result_pipe[2];

static size_t msg_len(uint64_t i)
{
	if (i % 10 == 7)
		return vbt_msg_len(9, i, 1, 4096); /* often fragmented (MTU 1024) */
	return vbt_msg_len(9, i, 1, 512);
}

struct rx {
	uint64_t delivered, lost_cb, gaps_cb, errors, last_seq;
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why;
	uint64_t i = m->seq - 1;

	if (m->seq <= r->last_seq || m->len != msg_len(i) ||
	    vbt_msg_verify(m->data, m->len, 9, i, &why)) {
		if (r->errors++ < 5)
			fprintf(stderr, "fanout sub: bad message seq %llu (last %llu) len %zu\n",
				(unsigned long long)m->seq, (unsigned long long)r->last_seq, m->len);
	}
	r->last_seq = m->seq;
	__atomic_fetch_add(&r->delivered, 1, __ATOMIC_RELAXED);
}

static void on_gap(vb_sub_t *sub, uint32_t publisher, uint64_t lost, uint64_t next, void *arg)
{
	struct rx *r = arg;

	__atomic_fetch_add(&r->lost_cb, lost, __ATOMIC_RELAXED);
	__atomic_fetch_add(&r->gaps_cb, 1, __ATOMIC_RELAXED);
}

static int subscriber(void *arg)
{
	int idx = (int)(intptr_t)arg;
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	vb_sub_stats_t st;
	static struct rx r;
	uint16_t port;
	uint64_t t0;
	int ok;

	if (read(port_pipe[idx][0], &port, sizeof(port)) != sizeof(port))
		return 10;
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200; /* four processes share two vCPUs */
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "sub %d: %s\n", idx, vb_errmsg());
		return 11;
	}
	vb_node_attr_init(&na);
	na.name = "md-sub";
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.on_gap = on_gap;
	sa.arg = &r;
	if (vb_node_create(ctx, &na, &node) || vb_sub_create(node, "md.quotes", VB_FANOUT, &sa, &sub))
		return 12;
	if (vb_node_connect(node, vbt_test_ip(), port)) {
		fprintf(stderr, "sub %d: connect: %s\n", idx, vb_errmsg());
		return 13;
	}
	/* until everything is accounted for and every gap counted has reached
	 * on_gap (a gap is counted when it is found, its callback runs after:
	 * vb_sub_destroy drops one still queued), or 60 s without progress */
	t0 = vbt_now_ms();
	for (uint64_t seen = 0;;) {
		vb_sub_stats(sub, &st);
		if (st.delivered + st.lost >= n_msgs &&
		    st.lost == __atomic_load_n(&r.lost_cb, __ATOMIC_RELAXED) &&
		    st.gaps == __atomic_load_n(&r.gaps_cb, __ATOMIC_RELAXED))
			break;
		if (st.delivered + st.lost != seen) {
			seen = st.delivered + st.lost;
			t0 = vbt_now_ms();
		} else if (vbt_now_ms() - t0 > 60000) {
			break;
		}
		usleep(20000);
	}
	vb_sub_stats(sub, &st);
	vb_sub_destroy(sub); /* no callback runs after it: r is final */
	printf("sub %d: delivered %llu + lost %llu = %llu of %llu published (%llu gaps; callback "
	       "saw %llu lost in %llu gaps), %llu bad\n", idx, (unsigned long long)st.delivered,
	       (unsigned long long)st.lost, (unsigned long long)(st.delivered + st.lost),
	       (unsigned long long)n_msgs, (unsigned long long)st.gaps,
	       (unsigned long long)r.lost_cb, (unsigned long long)r.gaps_cb,
	       (unsigned long long)r.errors);
	ok = st.delivered + st.lost == n_msgs && r.lost_cb == st.lost && r.gaps_cb == st.gaps &&
	     st.delivered == r.delivered && !r.errors && st.delivered > 0;
	{
		uint64_t res[2] = { st.delivered, st.lost };

		if (write(result_pipe[1], res, sizeof(res)) != sizeof(res))
			ok = 0;
	}
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return ok ? 0 : 1;
}

static void test_fanout(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint8_t buf[4096];
	pid_t kids[NSUBS];
	uint64_t eagain = 0, seq, t0, total_delivered = 0, total_lost = 0;
	uint16_t port;
	vb_stats_t s;

	assert_int_equal(pipe(result_pipe), 0);
	for (int i = 0; i < NSUBS; i++) {
		assert_int_equal(pipe(port_pipe[i]), 0);
		kids[i] = vbt_spawn(subscriber, (void *)(intptr_t)i);
		assert_true(kids[i] > 0);
	}
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200;
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	na.name = "md-feed";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	assert_int_equal(vb_pub_create(node, "md.quotes", VB_FANOUT, NULL, &pub), 0);
	port = vb_node_port(node);
	for (int i = 0; i < NSUBS; i++)
		assert_int_equal(write(port_pipe[i][1], &port, sizeof(port)), sizeof(port));
	t0 = vbt_now_ms();
	while (vb_pub_subscribers(pub) < NSUBS && vbt_now_ms() - t0 < 60000)
		usleep(10000);
	assert_int_equal(vb_pub_subscribers(pub), NSUBS);
	printf("pub: %d subscribers after %llu ms; publishing %llu messages\n", NSUBS,
	       (unsigned long long)(vbt_now_ms() - t0), (unsigned long long)n_msgs);
	t0 = vbt_now_ms();
	for (uint64_t i = 0; i < n_msgs; i++) {
		size_t len = msg_len(i);
		int rc;

		vbt_msg_fill(buf, len, 9, i);
		while ((rc = vb_publish(pub, buf, len, &seq)) == -EAGAIN) {
			eagain++;
			usleep(20);
		}
		if (rc)
			fail_msg("publish %llu: %s", (unsigned long long)i, vb_errmsg());
		assert_int_equal(seq, i + 1);
		if (i % 25000 == 24999)
			fprintf(stderr, "pub: %llu published\n", (unsigned long long)i + 1);
	}
	printf("pub: published %llu in %llu ms (%llu back-pressure retries)\n",
	       (unsigned long long)n_msgs, (unsigned long long)(vbt_now_ms() - t0),
	       (unsigned long long)eagain);
	for (int i = 0; i < NSUBS; i++) {
		uint64_t res[2];

		if (read(result_pipe[0], res, sizeof(res)) == sizeof(res)) {
			total_delivered += res[0];
			total_lost += res[1];
		}
	}
	for (int i = 0; i < NSUBS; i++)
		assert_int_equal(vbt_wait(kids[i], 120), 0);
	vb_ctx_stats(ctx, &s);
	printf("pub: datagrams %llu, inline %llu; subscribers delivered %llu, lost %llu (%.2f%% "
	       "delivered)\n", (unsigned long long)s.sends_posted,
	       (unsigned long long)s.inline_sends, (unsigned long long)total_delivered,
	       (unsigned long long)total_lost,
	       100.0 * (double)total_delivered / (double)(NSUBS * n_msgs));
	assert_int_equal(total_delivered + total_lost, NSUBS * n_msgs);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(vbt_res_count("qp", getpid()), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fanout),
	};

	vbt_require_device();
	n_msgs = vbt_scaled(100000);
	if (getenv("VERBUS_TEST_SMALL"))
		n_msgs = strtoull(getenv("VERBUS_TEST_SMALL"), NULL, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
