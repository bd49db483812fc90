/* SPDX-License-Identifier: MIT */
/*
 * The one QP lifecycle the product runs (issue 16, item 3), through the
 * public API on Soft-RoCE: a subscriber node listens in context S; in
 * context P a publisher node is created, connects, delivers 200 ORDERED
 * messages (exactly once, in order), and is destroyed (BYE, lanes drained),
 * CYCLES times over. Both contexts live on, so a healthy retired lane's QP
 * must come back through RESET to the device's warm pool and serve a later
 * connection: the QP numbers of P's connections repeat across cycles (a
 * fresh QP would get a new number: rxe allocates them cyclically). The
 * counters say the same (vb_stats_t: pool hits, QPs recycled), and the QPs
 * `rdma res` lists, less those parked in the pools, come back to what they
 * were before the first cycle.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define CYCLES 6u
#define NMSG 200u
#define MAXQPN 64u

struct rx {
	uint32_t session;
	uint64_t next, got, bad;
};
static struct rx rx;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)arg;
	if (m->publisher != rx.session) { /* a new cycle's publisher */
		rx.session = m->publisher;
		rx.next = 1;
	}
	if (m->seq != rx.next || m->len != 64)
		rx.bad++;
	rx.next = m->seq + 1;
	__atomic_fetch_add(&rx.got, 1, __ATOMIC_ACQ_REL);
}

/* QP numbers of @node's lanes (vb_node_dump's "lane N MODE QP qpn" lines). */
static unsigned lane_qpns(vb_node_t *node, uint32_t *qpn, unsigned max)
{
	char *buf = NULL, *s;
	size_t len = 0;
	unsigned n = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	assert_int_equal(vb_node_dump(node, f), 0);
	fclose(f);
	for (s = buf; (s = strstr(s, " QP ")) && n < max; s += 4)
		if (strstr(s - 12 > buf ? s - 12 : buf, "lane")) /* not "pending lane" */
			qpn[n++] = (uint32_t)strtoul(s + 4, NULL, 10);
	free(buf);
	return n;
}

/* QPs of this machine's processes (rdma res) less those parked in the
 * pools of @a and @b; *@st gets @b's counters. */
static int live_qps(vb_ctx_t *a, vb_ctx_t *b, vb_stats_t *st)
{
	vb_stats_t sa;

	int all;

	vb_ctx_stats(a, &sa);
	vb_ctx_stats(b, st);
	all = vbt_res_count("qp", 0);
	if (getenv("VERBUS_TEST_VERBOSE"))
		printf("  rdma res: %d QPs, parked %u + %u, lanes %" PRIu64 " + %" PRIu64 "\n", all,
		       sa.qp_pool_parked, st->qp_pool_parked, sa.lanes_created - sa.lanes_retired,
		       st->lanes_created - st->lanes_retired);
	return all - (int)sa.qp_pool_parked - (int)st->qp_pool_parked;
}

static void print_pool(const char *who, const vb_stats_t *s)
{
	printf("%s context: pool hits %" PRIu64 ", misses %" PRIu64 ", recycled %" PRIu64
	       ", destroyed %" PRIu64 ", created %" PRIu64 ", parked %u\n", who, s->qp_pool_hits,
	       s->qp_pool_misses, s->qps_recycled, s->qps_destroyed, s->qps_created,
	       s->qp_pool_parked);
}

static void test_qps_recycled(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *sctx, *pctx;
	vb_node_t *snode;
	vb_sub_t *sub;
	uint32_t seen[MAXQPN];
	unsigned nseen = 0, reused = 0;
	uint16_t port;
	vb_stats_t st, ss;
	int base, now;

	(void)state;
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.msg_rate = 2000;
	ca.latency_ms = 1;
	assert_int_equal(vb_ctx_create(&ca, &sctx), 0);
	assert_int_equal(vb_ctx_create(&ca, &pctx), 0);
	vb_node_attr_init(&na);
	na.name = "recycle-sub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(sctx, &na, &snode), 0);
	port = vb_node_port(snode);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(snode, "recycle.orders", VB_ORDERED, &sa, &sub), 0);
	/* the listener prepares its next connection in the background: the
	 * baseline is what stays put for half a second (bounded) */
	base = live_qps(sctx, pctx, &st);
	for (uint64_t t0 = vbt_now_ms(); vbt_now_ms() - t0 < 10000;) {
		usleep(500000);
		now = live_qps(sctx, pctx, &st);
		if (now == base)
			break;
		base = now;
	}
	printf("baseline: %d QPs not parked\n", base);

	for (unsigned c = 0; c < CYCLES; c++) {
		vb_node_t *pnode;
		vb_pub_t *pub;
		uint8_t buf[64];
		uint32_t qpn[8];
		char name[32];
		uint64_t t0, want = LD(&rx.got) + NMSG;
		unsigned n, again = 0;

		vb_node_attr_init(&na);
		snprintf(name, sizeof(name), "recycle-pub-%u", c);
		na.name = name;
		assert_int_equal(vb_node_create(pctx, &na, &pnode), 0);
		assert_int_equal(vb_pub_create(pnode, "recycle.orders", VB_ORDERED, NULL, &pub), 0);
		if (vb_node_connect(pnode, vbt_test_ip(), port))
			fail_msg("cycle %u: connect: %s", c, vb_errmsg());
		for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(1000))
			if (vbt_now_ms() - t0 > 30000)
				fail_msg("cycle %u: no subscriber", c);
		for (uint64_t i = 0; i < NMSG;) {
			memset(buf, (int)i, sizeof(buf));
			if (vb_publish(pub, buf, sizeof(buf), NULL) == 0)
				i++;
			else
				usleep(100);
		}
		for (t0 = vbt_now_ms(); LD(&rx.got) < want; usleep(1000))
			if (vbt_now_ms() - t0 > 30000)
				fail_msg("cycle %u: %" PRIu64 " of %" PRIu64 " delivered", c, LD(&rx.got),
					 want);
		n = lane_qpns(pnode, qpn, 8);
		assert_true(n >= 1);
		for (unsigned i = 0; i < n; i++) {
			bool old = false;

			for (unsigned j = 0; j < nseen; j++)
				old |= seen[j] == qpn[i];
			if (old)
				again++;
			else if (nseen < MAXQPN)
				seen[nseen++] = qpn[i];
		}
		reused += again;
		printf("cycle %u: %u lane(s), QPs", c, n);
		for (unsigned i = 0; i < n; i++)
			printf(" %u", qpn[i]);
		printf(", %u of them used in an earlier cycle\n", again);
		assert_int_equal(vb_pub_destroy(pub), 0);
		assert_int_equal(vb_node_destroy(pnode), 0);
		for (t0 = vbt_now_ms(); vb_node_peers(snode) > 0; usleep(10000))
			if (vbt_now_ms() - t0 > 30000)
				fail_msg("cycle %u: the subscriber still has its peer", c);
		usleep(600000); /* past the recycled QPs' quarantine (500 ms) */
	}
	assert_int_equal(rx.bad, 0);
	printf("%u QP numbers in all, %u connections' QPs were recycled ones\n", nseen, reused);
	for (uint64_t t0 = vbt_now_ms(); (now = live_qps(sctx, pctx, &st)) != base; usleep(20000))
		if (vbt_now_ms() - t0 > 10000)
			break;
	if (now != base) {
		/* Seen once in a full run (the suite's cm_timeout_ms is 30 s),
		 * after cycles whose publisher was destroyed with its standby
		 * half built. Suspected, not confirmed: a connection the
		 * subscriber accepted half-way, which stays pending until
		 * cm_timeout_ms unless an event ends it sooner (pending_dropped).
		 * Wait that long too, and print what is waited for. */
		const char *e = getenv("VERBUS_CM_TIMEOUT_MS");
		uint64_t cm = e && atoi(e) > 0 ? (uint64_t)atoi(e) : 5000, t0 = vbt_now_ms();

		vb_ctx_stats(sctx, &ss);
		printf("QPs not parked after 10 s: %d (baseline %d); subscriber lanes live %" PRIu64
		       ", pending_dropped %" PRIu64 "; waiting up to cm_timeout_ms %" PRIu64
		       " + 5 s\n", now, base, ss.lanes_created - ss.lanes_retired,
		       ss.pending_dropped, cm);
		while ((now = live_qps(sctx, pctx, &st)) != base && vbt_now_ms() - t0 < cm + 5000)
			usleep(50000);
		vb_ctx_stats(sctx, &ss);
		printf("after %" PRIu64 " ms more: %d; subscriber pending_dropped %" PRIu64 "\n",
		       vbt_now_ms() - t0, now, ss.pending_dropped);
	}
	vb_ctx_stats(sctx, &ss);
	print_pool("publisher", &st);
	print_pool("subscriber", &ss);
	printf("QPs not parked: %d (baseline %d)\n", now, base);
	assert_true(reused > 0);
	assert_true(st.qp_pool_hits > 0 && st.qps_recycled > 0);
	assert_true(ss.qp_pool_hits > 0 && ss.qps_recycled > 0);
	/* every QP is a lane's, parked, or was destroyed */
	assert_int_equal(st.qps_created, st.qps_destroyed + st.qp_pool_parked +
			 (st.lanes_created - st.lanes_retired));
	assert_int_equal(now, base);

	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(snode), 0);
	assert_int_equal(vb_ctx_destroy(pctx), 0);
	assert_int_equal(vb_ctx_destroy(sctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_qps_recycled),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
