/* SPDX-License-Identifier: MIT */
/*
 * FANOUT over IB multicast: one publisher process, three subscriber
 * processes and a fourth subscriber in the publisher's own context (a
 * second node connected to the first: a node subscribed to its own topic
 * on the same device, which receives the group datagram rxe loops back).
 * 20,000 messages (VERBUS_TEST_SCALE multiplies), one in ten larger than a
 * datagram and fragmented. Every delivered message is checked byte for
 * byte and in order; for every subscriber delivered + reported-lost ==
 * published and nothing is delivered twice.
 *
 * With multicast (VERBUS_MCAST=1) the publisher posts one datagram per
 * fragment for all four subscribers: its datagram count lies between the
 * fragments of the fragmented messages (D_frag) and D_frag + the number of
 * small messages (batching may put several in one datagram), and every one
 * went to the group. With VERBUS_MCAST=0 the same run (a quarter of the
 * messages, to keep the VM time down) proves the unicast fallback: at least
 * 4 x D_frag datagrams, none to a group.
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
#include "transport/transport.h"

#define NSUBS 3
#define TOPIC "md.mcast"

static uint64_t n_msgs;     /* this run's */
static uint64_t n_full;     /* the multicast run's (the fallback run: a quarter) */
static uint32_t ud_mtu;    /* datagram bytes on the test device */
static int mcast_on;       /* this run's VERBUS_MCAST (children inherit it) */
static int port_pipe[NSUBS][2];
static int result_pipe[2];

static size_t msg_len(uint64_t i)
{
	if (i % 10 == 7)
		return vbt_msg_len(11, i, 1, 4096); /* mostly fragmented (MTU 1024) */
	return vbt_msg_len(11, i, 1, 512);
}

/* Datagrams message @i needs (40-byte frame header in each). */
static uint64_t nfrag(uint64_t i)
{
	uint32_t fmax = ud_mtu - 40;
	size_t len = msg_len(i);

	return len ? (len + fmax - 1) / fmax : 1;
}

struct rx {
	uint64_t delivered, lost_cb, gaps_cb, errors, last_seq;
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why;
	uint64_t i = m->seq - 1;

	(void)sub;
	if (m->seq <= r->last_seq || m->len != msg_len(i) ||
	    vbt_msg_verify(m->data, m->len, 11, i, &why)) {
		if (r->errors++ < 5)
			fprintf(stderr, "mcast sub: bad message seq %llu (last %llu) len %zu\n",
				(unsigned long long)m->seq, (unsigned long long)r->last_seq, m->len);
	}
	r->last_seq = m->seq;
	__atomic_fetch_add(&r->delivered, 1, __ATOMIC_RELAXED);
}

static void on_gap(vb_sub_t *sub, uint32_t publisher, uint64_t lost, uint64_t next, void *arg)
{
	struct rx *r = arg;

	(void)sub;
	(void)publisher;
	(void)next;
	__atomic_fetch_add(&r->lost_cb, lost, __ATOMIC_RELAXED);
	__atomic_fetch_add(&r->gaps_cb, 1, __ATOMIC_RELAXED);
}

/* Until every message is accounted for and every gap counted has reached
 * on_gap (a gap is counted when it is found, its callback runs after, and
 * vb_sub_destroy drops one still queued), or 60 s without progress. */
static void wait_accounted(vb_sub_t *sub, vb_sub_stats_t *st, const struct rx *r)
{
	uint64_t t0 = vbt_now_ms(), seen = 0;

	for (;;) {
		vb_sub_stats(sub, st);
		if (st->delivered + st->lost >= n_msgs &&
		    st->lost == __atomic_load_n(&r->lost_cb, __ATOMIC_RELAXED) &&
		    st->gaps == __atomic_load_n(&r->gaps_cb, __ATOMIC_RELAXED))
			break;
		if (st->delivered + st->lost != seen) {
			seen = st->delivered + st->lost;
			t0 = vbt_now_ms();
		} else if (vbt_now_ms() - t0 > 60000) {
			break;
		}
		usleep(20000);
	}
	vb_sub_stats(sub, st);
}

static int sub_ok(const char *who, const vb_sub_stats_t *st, const struct rx *r)
{
	printf("%s: delivered %llu + lost %llu = %llu of %llu (%llu gaps; callback %llu lost in "
	       "%llu gaps), %llu duplicates, %llu bad\n", who, (unsigned long long)st->delivered,
	       (unsigned long long)st->lost, (unsigned long long)(st->delivered + st->lost),
	       (unsigned long long)n_msgs, (unsigned long long)st->gaps,
	       (unsigned long long)r->lost_cb, (unsigned long long)r->gaps_cb,
	       (unsigned long long)st->duplicates, (unsigned long long)r->errors);
	return st->delivered + st->lost == n_msgs && r->lost_cb == st->lost &&
	       r->gaps_cb == st->gaps && st->delivered == r->delivered && !r->errors &&
	       !st->duplicates && st->delivered > 0;
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
	vb_stats_t cs;
	static struct rx r;
	char who[32];
	uint16_t port;
	int ok;

	if (read(port_pipe[idx][0], &port, sizeof(port)) != sizeof(port))
		return 10;
	vb_ctx_attr_init(&ca);
	if (ca.mcast != mcast_on)
		return 14; /* VERBUS_MCAST did not reach the attribute */
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200; /* five processes share two vCPUs */
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "sub %d: %s\n", idx, vb_errmsg());
		return 11;
	}
	vb_node_attr_init(&na);
	na.name = "mc-sub";
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.on_gap = on_gap;
	sa.arg = &r;
	if (vb_node_create(ctx, &na, &node) || vb_sub_create(node, TOPIC, VB_FANOUT, &sa, &sub))
		return 12;
	vb_ctx_stats(ctx, &cs);
	if (cs.mcast_joins != (mcast_on ? 1u : 0u) || cs.mcast_join_failures ||
	    cs.mcast_groups != (mcast_on ? 1u : 0u)) {
		fprintf(stderr, "sub %d: %llu joins, %llu failures, %u groups\n", idx,
			(unsigned long long)cs.mcast_joins,
			(unsigned long long)cs.mcast_join_failures, cs.mcast_groups);
		return 15;
	}
	if (vb_node_connect(node, vbt_test_ip(), port)) {
		fprintf(stderr, "sub %d: connect: %s\n", idx, vb_errmsg());
		return 13;
	}
	wait_accounted(sub, &st, &r);
	vb_sub_destroy(sub); /* no callback runs after it: r is final */
	snprintf(who, sizeof(who), "sub %d", idx);
	ok = sub_ok(who, &st, &r);
	vb_ctx_stats(ctx, &cs);
	ok = ok && cs.mcast_groups == 0; /* the last subscriber left the group */
	{
		uint64_t res[2] = { st.delivered, st.lost };

		if (write(result_pipe[1], res, sizeof(res)) != sizeof(res))
			ok = 0;
	}
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return ok ? 0 : 1;
}

static void run(int mcast)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node, *self;
	vb_pub_t *pub;
	vb_sub_t *selfsub;
	vb_sub_stats_t sst;
	static struct rx selfr;
	uint8_t buf[4096];
	pid_t kids[NSUBS];
	uint64_t eagain = 0, seq, t0, total_delivered = 0, total_lost = 0;
	uint64_t d_frag = 0, n_single = 0, dgrams;
	uint16_t port;
	vb_stats_t s;

	mcast_on = mcast;
	n_msgs = mcast ? n_full : (n_full + 3) / 4;
	setenv("VERBUS_MCAST", mcast ? "1" : "0", 1);
	memset(&selfr, 0, sizeof(selfr));
	for (uint64_t i = 0; i < n_msgs; i++) {
		if (nfrag(i) > 1)
			d_frag += nfrag(i);
		else
			n_single++;
	}
	assert_int_equal(pipe(result_pipe), 0);
	for (int i = 0; i < NSUBS; i++) {
		assert_int_equal(pipe(port_pipe[i]), 0);
		kids[i] = vbt_spawn(subscriber, (void *)(intptr_t)i);
		assert_true(kids[i] > 0);
	}
	vb_ctx_attr_init(&ca);
	assert_int_equal(ca.mcast, mcast);
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200;
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	na.name = "mc-feed";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	assert_int_equal(vb_pub_create(node, TOPIC, VB_FANOUT, NULL, &pub), 0);
	port = vb_node_port(node);

	/* The publisher's own context subscribes too, through a second node. */
	vb_node_attr_init(&na);
	na.name = "mc-self";
	assert_int_equal(vb_node_create(ctx, &na, &self), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.on_gap = on_gap;
	sa.arg = &selfr;
	assert_int_equal(vb_sub_create(self, TOPIC, VB_FANOUT, &sa, &selfsub), 0);
	if (vb_node_connect(self, vbt_test_ip(), port))
		fail_msg("self connect: %s", vb_errmsg());

	for (int i = 0; i < NSUBS; i++)
		assert_int_equal(write(port_pipe[i][1], &port, sizeof(port)), sizeof(port));
	t0 = vbt_now_ms();
	while (vb_pub_subscribers(pub) < NSUBS + 1 && vbt_now_ms() - t0 < 60000)
		usleep(10000);
	assert_int_equal(vb_pub_subscribers(pub), NSUBS + 1);
	vb_ctx_stats(ctx, &s);
	printf("pub (mcast=%d): %d subscribers after %llu ms; %llu joins, %llu join failures, "
	       "%u groups; publishing %llu messages (MTU %u: %llu fragment datagrams, %llu "
	       "small messages)\n", mcast, NSUBS + 1, (unsigned long long)(vbt_now_ms() - t0),
	       (unsigned long long)s.mcast_joins, (unsigned long long)s.mcast_join_failures,
	       s.mcast_groups, (unsigned long long)n_msgs, ud_mtu, (unsigned long long)d_frag,
	       (unsigned long long)n_single);
	/* publisher's join + the self subscriber's */
	assert_int_equal(s.mcast_joins, mcast ? 2 : 0);
	assert_int_equal(s.mcast_join_failures, 0);
	assert_int_equal(s.mcast_groups, mcast ? 2 : 0);

	t0 = vbt_now_ms();
	for (uint64_t i = 0; i < n_msgs; i++) {
		size_t len = msg_len(i);
		int rc;

		vbt_msg_fill(buf, len, 11, i);
		while ((rc = vb_publish(pub, buf, len, &seq)) == -EAGAIN) {
			eagain++;
			usleep(20);
		}
		if (rc)
			fail_msg("publish %llu: %s", (unsigned long long)i, vb_errmsg());
		assert_int_equal(seq, i + 1);
	}
	printf("pub: published %llu in %llu ms (%llu back-pressure retries)\n",
	       (unsigned long long)n_msgs, (unsigned long long)(vbt_now_ms() - t0),
	       (unsigned long long)eagain);

	wait_accounted(selfsub, &sst, &selfr);
	assert_int_equal(vb_sub_destroy(selfsub), 0);
	assert_true(sub_ok("self sub", &sst, &selfr));
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
	printf("pub: sends %llu (ACKs %llu, datagrams to the group %llu), inline %llu: %.2f "
	       "sends per datagram a single receiver needs; subscribers delivered %llu, lost %llu "
	       "(%.2f%% delivered)\n",
	       (unsigned long long)s.sends_posted, (unsigned long long)s.acks_sent,
	       (unsigned long long)s.mcast_datagrams, (unsigned long long)s.inline_sends,
	       (double)(s.sends_posted - s.acks_sent - s.keepalives) / (double)(d_frag + n_single),
	       (unsigned long long)total_delivered, (unsigned long long)total_lost,
	       100.0 * (double)total_delivered / (double)(NSUBS * n_msgs));
	assert_int_equal(total_delivered + total_lost, NSUBS * n_msgs);
	/* sends_posted also counts the RC control SENDs (HELLO, SUB: a few
	 * per connection; ACKs and keepalives: counted apart) */
	assert_true(s.sends_posted >= s.acks_sent + s.keepalives);
	dgrams = s.sends_posted - s.acks_sent - s.keepalives;
	if (mcast) {
		/* one datagram per fragment, whatever the number of subscribers */
		assert_true(dgrams >= s.mcast_datagrams);
		assert_true(dgrams - s.mcast_datagrams <= 4 * (NSUBS + 1));
		assert_true(s.mcast_datagrams >= d_frag);
		assert_true(s.mcast_datagrams <= d_frag + n_single);
	} else {
		assert_int_equal(s.mcast_datagrams, 0);
		assert_true(dgrams >= (NSUBS + 1) * d_frag);
	}
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(self), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	vb_ctx_stats(ctx, &s);
	assert_int_equal(s.mcast_groups, 0); /* the publisher's left once the UD ring drained */
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(vbt_res_count("qp", getpid()), 0);
	close(result_pipe[0]);
	close(result_pipe[1]);
	for (int i = 0; i < NSUBS; i++) {
		close(port_pipe[i][0]);
		close(port_pipe[i][1]);
	}
}

static void test_fanout_multicast(void **state)
{
	(void)state;
	run(1);
}

static void test_fanout_unicast_fallback(void **state)
{
	(void)state;
	run(0);
}

/* The datagram size of the test device, before any process forks. */
static uint32_t device_mtu(void)
{
	struct vbt_dev_attr a = { .ip = vbt_test_ip(), .gid_index = -1 };
	struct vbt_dev *dev;
	uint32_t mtu;

	if (vbt_dev_open(&vbt_verbs_ops, &a, &dev)) {
		fprintf(stderr, "cannot open the device at %s\n", vbt_test_ip());
		exit(1);
	}
	mtu = 128u << dev->caps.active_mtu;
	dev->ops->dev_close(dev);
	return mtu;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fanout_multicast),
		cmocka_unit_test(test_fanout_unicast_fallback),
	};

	vbt_require_device();
	ud_mtu = device_mtu();
	n_full = vbt_scaled(20000);
	if (getenv("VERBUS_TEST_SMALL"))
		n_full = strtoull(getenv("VERBUS_TEST_SMALL"), NULL, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
