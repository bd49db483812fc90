/* SPDX-License-Identifier: MIT */
/*
 * What verbus.h promises, through the public API on a real device (issue
 * "a node that runs for weeks", item 6; also run under ASan+UBSan):
 *  - every failed vb_ctx_create() (bad device, bad ip, pool_cap 1, a bad
 *    standby) returns an error with a message, and tears down cleanly;
 *  - a claim is committed (or aborted) only on the publisher that made it;
 *  - vb_ctx_stats() writes no more than the caller's struct holds;
 *  - callbacks run with no verbus lock held: from inside on_msg and
 *    on_event the application creates a subscriber and a publisher,
 *    publishes, reads stats and destroys what it created, and a blocking
 *    call (connect, wait_acked) says -EDEADLK instead of hanging;
 *  - a connection refused (max_peers reached) is -ECONNREFUSED with the
 *    refusing node's reason, and the slot comes back when a peer goes;
 *  - max_peers is supported up to what it accepts: 70 subscribers (more
 *    than the 64 some paths stopped at) all get every ORDERED and FANOUT
 *    message.
 */
#include <errno.h>
#include <inttypes.h>
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

#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static void small_ctx_attr(vb_ctx_attr_t *a)
{
	vb_ctx_attr_init(a);
	a->ip = vbt_test_ip();
	/* small queues and pools: many connections fit the VM */
	a->msg_rate = 2000;
	a->latency_ms = 1;
	a->slot_size = 4096;
	a->window = 256;
}

/* Wait (bounded) until *@v >= @want. */
static int wait_for(const unsigned *v, unsigned want, unsigned ms)
{
	uint64_t t0 = vbt_now_ms();

	while (LD(v) < want) {
		if (vbt_now_ms() - t0 > ms)
			return -ETIMEDOUT;
		usleep(1000);
	}
	return 0;
}

/* ---- failed creates ---------------------------------------------------------------------- */

static void expect_create_fails(vb_ctx_attr_t *a, const char *what)
{
	vb_ctx_t *ctx = (vb_ctx_t *)(uintptr_t)1;
	int rc = vb_ctx_create(a, &ctx);

	printf("vb_ctx_create with %s: %d %s: %s\n", what, rc, vb_strerror(rc), vb_errmsg());
	assert_true(rc < 0);
	assert_null(ctx);
	assert_true(strlen(vb_errmsg()) > 0);
	assert_null(strstr(vb_strerror(rc), "see strerror"));
}

static void test_failed_creates(void **state)
{
	vb_ctx_attr_t a;

	(void)state;
	vb_ctx_attr_init(&a);
	a.device = "no_such_device";
	expect_create_fails(&a, "an unknown device");
	vb_ctx_attr_init(&a);
	a.ip = "not-an-ip";
	expect_create_fails(&a, "an unparsable ip");
	vb_ctx_attr_init(&a);
	a.ip = "10.99.99.99";
	expect_create_fails(&a, "an ip on no device");
	vb_ctx_attr_init(&a);
	a.ip = vbt_test_ip();
	a.pool_cap = 1;
	expect_create_fails(&a, "pool_cap 1");
	vb_ctx_attr_init(&a);
	a.ip = vbt_test_ip();
	a.standby_ip = "10.99.99.98";
	expect_create_fails(&a, "a bad standby ip");
	vb_ctx_attr_init(&a);
	a.ip = vbt_test_ip();
	a.standby_device = "no_such_standby";
	expect_create_fails(&a, "a bad standby device");
	vb_ctx_attr_init(&a);
	a.ip = vbt_test_ip();
	a.max_peers = 1025;
	expect_create_fails(&a, "max_peers 1025");
	vb_ctx_attr_init(&a);
	a.ip = vbt_test_ip();
	a.max_peers = 0;
	expect_create_fails(&a, "max_peers 0");
	vb_ctx_attr_init(&a);
	a.ip = vbt_test_ip();
	a.batch = 2;
	expect_create_fails(&a, "batch 2");
}

/* ---- claims and stats ---------------------------------------------------------------------- */

static void test_claim_on_other_publisher(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *p1, *p2;
	vb_claim_t c;
	uint64_t seq = 0;
	vb_stats_t st[2];

	(void)state;
	small_ctx_attr(&ca);
	assert_int_equal(vb_ctx_create(&ca, &ctx), 0);
	vb_node_attr_init(&na);
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	assert_int_equal(vb_pub_create(node, "claim.a", VB_ORDERED, NULL, &p1), 0);
	assert_int_equal(vb_pub_create(node, "claim.b", VB_ORDERED, NULL, &p2), 0);
	assert_int_equal(vb_pub_claim(p1, 16, &c), 0);
	memset(c.data, 7, 16);
	assert_int_equal(vb_pub_commit(p2, &c, 16, &seq), -EINVAL);
	assert_non_null(strstr(vb_errmsg(), "another publisher"));
	assert_int_equal(vb_pub_abort(p2, &c), -EINVAL);
	assert_non_null(c.priv_); /* still p1's */
	assert_int_equal(vb_pub_commit(p1, &c, 16, &seq), 0);
	assert_int_equal(seq, 1);
	assert_int_equal(vb_pub_claim(p2, 8, &c), 0);
	assert_int_equal(vb_pub_abort(p1, &c), -EINVAL);
	assert_int_equal(vb_pub_abort(p2, &c), 0);

	/* stats: never more than the caller's struct */
	memset(st, 0xa5, sizeof(st));
	assert_int_equal(vb_ctx_stats_size(ctx, &st[0], offsetof(vb_stats_t, failovers)), 0);
	assert_int_equal(st[0].published, 1);
	for (size_t i = offsetof(vb_stats_t, failovers); i < sizeof(st); i++)
		assert_int_equal(((uint8_t *)st)[i], 0xa5);
	assert_int_equal(vb_ctx_stats_size(ctx, &st[0], 0), -EINVAL);
	assert_int_equal(vb_ctx_stats(ctx, &st[0]), 0);
	assert_int_equal(st[0].published, 1);
	for (size_t i = sizeof(vb_stats_t); i < sizeof(st); i++)
		assert_int_equal(((uint8_t *)st)[i], 0xa5);

	assert_int_equal(vb_pub_destroy(p1), 0);
	assert_int_equal(vb_pub_destroy(p2), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
}

/* ---- callbacks with no lock held ------------------------------------------------------------ */

struct cbs {
	vb_ctx_t *ctx;
	vb_node_t *pub_node, *sub_node;
	uint16_t port;
	unsigned got, inner_got, done, ev_done, ev_ok;
	int connect_rc, wait_rc, sub_rc, pub_rc, publish_rc, stats_rc, destroy_rc;
	vb_sub_t *inner_sub;
	vb_pub_t *inner_pub;
};
static struct cbs cb;

static void inner_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	(void)arg;
	__atomic_fetch_add(&cb.inner_got, 1, __ATOMIC_ACQ_REL);
}

static void outer_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	vb_sub_attr_t sa;
	vb_pub_attr_t pa;
	vb_stats_t st;

	(void)sub;
	(void)arg;
	if (m->seq != 1) {
		__atomic_fetch_add(&cb.got, 1, __ATOMIC_ACQ_REL);
		return;
	}
	/* the node's lock was held here before: each of these deadlocked */
	vb_sub_attr_init(&sa);
	sa.on_msg = inner_msg;
	cb.sub_rc = vb_sub_create(cb.sub_node, "cb.inner", VB_ORDERED, &sa, &cb.inner_sub);
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	cb.pub_rc = vb_pub_create(cb.pub_node, "cb.inner", VB_ORDERED, &pa, &cb.inner_pub);
	cb.stats_rc = vb_ctx_stats(cb.ctx, &st);
	/* waits for work this thread does: refused, at once */
	cb.connect_rc = vb_node_connect(cb.sub_node, vbt_test_ip(), cb.port);
	cb.wait_rc = vb_pub_wait_acked(cb.inner_pub, 1, 100);
	__atomic_fetch_add(&cb.got, 1, __ATOMIC_ACQ_REL);
	ST(&cb.done, 1);
}

static void on_event(const vb_event_t *ev, void *arg)
{
	vb_stats_t st;

	(void)arg;
	if (ev->type != VB_EV_PEER_UP || LD(&cb.ev_done))
		return;
	/* events were raised under the node's or the context's lock */
	if (vb_ctx_stats(cb.ctx, &st) == 0 && cb.pub_node && vb_node_peers(cb.pub_node) >= 0)
		ST(&cb.ev_ok, 1);
	ST(&cb.ev_done, 1);
}

static void test_callbacks_hold_no_lock(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_pub_t *pub;
	vb_sub_t *sub;
	vb_pub_attr_t pa;
	uint64_t t0;

	(void)state;
	memset(&cb, 0, sizeof(cb));
	small_ctx_attr(&ca);
	ca.on_event = on_event;
	assert_int_equal(vb_ctx_create(&ca, &cb.ctx), 0);
	vb_node_attr_init(&na);
	na.name = "cb-pub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(cb.ctx, &na, &cb.pub_node), 0);
	cb.port = vb_node_port(cb.pub_node);
	vb_node_attr_init(&na);
	na.name = "cb-sub";
	assert_int_equal(vb_node_create(cb.ctx, &na, &cb.sub_node), 0);
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	assert_int_equal(vb_pub_create(cb.pub_node, "cb.outer", VB_ORDERED, &pa, &pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = outer_msg;
	assert_int_equal(vb_sub_create(cb.sub_node, "cb.outer", VB_ORDERED, &sa, &sub), 0);
	assert_int_equal(vb_node_connect(cb.sub_node, vbt_test_ip(), cb.port), 0);
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(1000))
		assert_true(vbt_now_ms() - t0 < 30000);
	assert_int_equal(vb_publish(pub, "first", 5, NULL), 0);
	if (wait_for(&cb.done, 1, 20000))
		fail_msg("the callback did not return in 20 s: it is blocked in a verbus call");
	printf("from on_msg: sub_create %d, pub_create %d, stats %d, connect %d (%s), "
	       "wait_acked %d\n", cb.sub_rc, cb.pub_rc, cb.stats_rc, cb.connect_rc,
	       vb_strerror(cb.connect_rc), cb.wait_rc);
	assert_int_equal(cb.sub_rc, 0);
	assert_int_equal(cb.pub_rc, 0);
	assert_int_equal(cb.stats_rc, 0);
	assert_int_equal(cb.connect_rc, -EDEADLK);
	assert_int_equal(cb.wait_rc, -EDEADLK);
	assert_int_equal(wait_for(&cb.ev_done, 1, 5000), 0);
	assert_int_equal(LD(&cb.ev_ok), 1);
	/* the acknowledgement of message 1 came after its callback returned */
	assert_int_equal(vb_pub_wait_acked(pub, 1, 10000), 0);

	/* what the callback created works: its subscription reaches the
	 * publisher it created, and its messages arrive */
	for (t0 = vbt_now_ms(); vb_pub_subscribers(cb.inner_pub) < 1; usleep(1000))
		assert_true(vbt_now_ms() - t0 < 30000);
	for (unsigned i = 0; i < 10; i++)
		while (vb_publish(cb.inner_pub, "inner", 5, NULL) == -EAGAIN)
			usleep(100);
	assert_int_equal(wait_for(&cb.inner_got, 10, 20000), 0);
	for (unsigned i = 0; i < 10; i++)
		while (vb_publish(pub, "more", 4, NULL) == -EAGAIN)
			usleep(100);
	assert_int_equal(wait_for(&cb.got, 11, 20000), 0);

	assert_int_equal(vb_sub_destroy(cb.inner_sub), 0);
	assert_int_equal(vb_pub_destroy(cb.inner_pub), 0);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(cb.sub_node), 0);
	assert_int_equal(vb_node_destroy(cb.pub_node), 0);
	assert_int_equal(vb_ctx_destroy(cb.ctx), 0);
}

/* ---- a refusal says why ------------------------------------------------------------------ */

static void test_refused_with_reason(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_ctx_t *lctx, *cctx;
	vb_node_t *lnode, *c1, *c2;
	vb_stats_t st;
	uint64_t t0;
	int rc;

	(void)state;
	small_ctx_attr(&ca);
	ca.max_peers = 1;
	assert_int_equal(vb_ctx_create(&ca, &lctx), 0);
	small_ctx_attr(&ca);
	assert_int_equal(vb_ctx_create(&ca, &cctx), 0);
	vb_node_attr_init(&na);
	na.name = "full-node";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(lctx, &na, &lnode), 0);
	vb_node_attr_init(&na);
	na.name = "first";
	assert_int_equal(vb_node_create(cctx, &na, &c1), 0);
	na.name = "second";
	assert_int_equal(vb_node_create(cctx, &na, &c2), 0);
	assert_int_equal(vb_node_connect(c1, vbt_test_ip(), vb_node_port(lnode)), 0);
	t0 = vbt_now_ms();
	rc = vb_node_connect(c2, vbt_test_ip(), vb_node_port(lnode));
	printf("second connection to a node with max_peers 1: %d (%s) after %" PRIu64 " ms: %s\n",
	       rc, vb_strerror(rc), vbt_now_ms() - t0, vb_errmsg());
	assert_int_equal(rc, -ECONNREFUSED);
	assert_non_null(strstr(vb_errmsg(), "max_peers (1) reached at node 'full-node'"));
	for (t0 = vbt_now_ms();; usleep(1000)) { /* counted by the refusing node's thread */
		vb_ctx_stats(lctx, &st);
		if (st.refused >= 1 || vbt_now_ms() - t0 > 5000)
			break;
	}
	assert_int_equal(st.refused, 1);
	/* the first one is untouched; once it is gone the slot is free again */
	assert_int_equal(vb_node_peers(c1), 1);
	assert_int_equal(vb_node_destroy(c1), 0);
	for (t0 = vbt_now_ms(); (rc = vb_node_connect(c2, vbt_test_ip(), vb_node_port(lnode)));
	     usleep(100000))
		if (vbt_now_ms() - t0 > 20000)
			fail_msg("the freed slot was not given back: %s", vb_errmsg());
	assert_int_equal(vb_node_destroy(c2), 0);
	assert_int_equal(vb_node_destroy(lnode), 0);
	assert_int_equal(vb_ctx_destroy(cctx), 0);
	assert_int_equal(vb_ctx_destroy(lctx), 0);
}

/* ---- more than 64 peers ---------------------------------------------------------------------- */

#define NSUBS 70
#define NMSG 20

struct many {
	unsigned ordered[NSUBS], fanout[NSUBS];
	uint64_t next[NSUBS];
	unsigned bad;
};
static struct many mp;

static void many_ordered(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;

	(void)sub;
	if (m->seq != mp.next[i] + 1)
		mp.bad++;
	mp.next[i] = m->seq;
	__atomic_fetch_add(&mp.ordered[i], 1, __ATOMIC_ACQ_REL);
}

static void many_fanout(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	__atomic_fetch_add(&mp.fanout[(uintptr_t)arg], 1, __ATOMIC_ACQ_REL);
}

static void test_more_than_64_peers(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *pctx, *sctx;
	vb_node_t *pnode, *snode[NSUBS];
	vb_sub_t *so[NSUBS], *sf[NSUBS];
	vb_pub_t *po, *pf;
	uint64_t t0;
	unsigned fan_min = NMSG;

	(void)state;
	memset(&mp, 0, sizeof(mp));
	small_ctx_attr(&ca);
	ca.max_peers = NSUBS + 2;
	ca.standby = 0; /* one QP per connection: 70 of them fit the VM */
	ca.mcast = 0;   /* per-subscriber datagrams: the path that stopped at 64 */
	assert_int_equal(vb_ctx_create(&ca, &pctx), 0);
	assert_int_equal(vb_ctx_create(&ca, &sctx), 0);
	vb_node_attr_init(&na);
	na.name = "many-pub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(pctx, &na, &pnode), 0);
	assert_int_equal(vb_pub_create(pnode, "many.o", VB_ORDERED, NULL, &po), 0);
	assert_int_equal(vb_pub_create(pnode, "many.f", VB_FANOUT, NULL, &pf), 0);
	for (unsigned i = 0; i < NSUBS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "many-sub-%u", i);
		vb_node_attr_init(&na);
		na.name = name;
		assert_int_equal(vb_node_create(sctx, &na, &snode[i]), 0);
		vb_sub_attr_init(&sa);
		sa.on_msg = many_ordered;
		sa.arg = (void *)(uintptr_t)i;
		assert_int_equal(vb_sub_create(snode[i], "many.o", VB_ORDERED, &sa, &so[i]), 0);
		sa.on_msg = many_fanout;
		assert_int_equal(vb_sub_create(snode[i], "many.f", VB_FANOUT, &sa, &sf[i]), 0);
		if (vb_node_connect(snode[i], vbt_test_ip(), vb_node_port(pnode)))
			fail_msg("subscriber %u: connect: %s", i, vb_errmsg());
		if (i % 10 == 9)
			printf("  %u subscribers connected\n", i + 1);
	}
	for (t0 = vbt_now_ms(); vb_pub_subscribers(po) < NSUBS || vb_pub_subscribers(pf) < NSUBS;
	     usleep(2000))
		if (vbt_now_ms() - t0 > 60000)
			fail_msg("subscribers seen by the publishers: ORDERED %d, FANOUT %d of %d",
				 vb_pub_subscribers(po), vb_pub_subscribers(pf), NSUBS);
	for (unsigned k = 0; k < NMSG; k++) {
		char msg[16];

		snprintf(msg, sizeof(msg), "m%u", k);
		for (t0 = vbt_now_ms(); vb_publish(po, msg, strlen(msg), NULL) == -EAGAIN; usleep(200))
			assert_true(vbt_now_ms() - t0 < 20000);
		for (t0 = vbt_now_ms(); vb_publish(pf, msg, strlen(msg), NULL) == -EAGAIN; usleep(200))
			assert_true(vbt_now_ms() - t0 < 20000);
		usleep(5000); /* FANOUT: no receive-queue overrun at the subscribers */
	}
	for (unsigned i = 0; i < NSUBS; i++)
		if (wait_for(&mp.ordered[i], NMSG, 30000))
			fail_msg("ORDERED subscriber %u got %u of %u", i, LD(&mp.ordered[i]), NMSG);
	/* FANOUT is at most once: nearly all of it must arrive everywhere */
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < 10000; usleep(10000)) {
		fan_min = NMSG;
		for (unsigned i = 0; i < NSUBS; i++)
			if (LD(&mp.fanout[i]) < fan_min)
				fan_min = LD(&mp.fanout[i]);
		if (fan_min == NMSG)
			break;
	}
	printf("%u subscribers: every one got %u ORDERED messages in order (bad %u); FANOUT: "
	       "the fewest any got is %u of %u\n", NSUBS, NMSG, mp.bad, fan_min, NMSG);
	assert_int_equal(mp.bad, 0);
	assert_true(fan_min >= NMSG / 2); /* before: subscribers past the 64th got none */
	for (unsigned i = 0; i < NSUBS; i++) {
		assert_int_equal(vb_sub_destroy(so[i]), 0);
		assert_int_equal(vb_sub_destroy(sf[i]), 0);
		assert_int_equal(vb_node_destroy(snode[i]), 0);
	}
	vb_pub_destroy(po);
	assert_int_equal(vb_pub_destroy(pf), 0);
	assert_int_equal(vb_node_destroy(pnode), 0);
	assert_int_equal(vb_ctx_destroy(sctx), 0);
	assert_int_equal(vb_ctx_destroy(pctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_failed_creates),
		cmocka_unit_test(test_claim_on_other_publisher),
		cmocka_unit_test(test_callbacks_hold_no_lock),
		cmocka_unit_test(test_refused_with_reason),
		cmocka_unit_test(test_more_than_64_peers),
	};

	printf("rxe test on RDMA device %s\n", vbt_require_device());
	return cmocka_run_group_tests(tests, NULL, NULL);
}
