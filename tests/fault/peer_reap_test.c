/* SPDX-License-Identifier: MIT */
/*
 * A long-lived subscriber node while publishers come and go (issue "a node
 * that runs for weeks", item 1). One subscriber process (this one, default
 * max_peers 16) listens; 50 publisher processes (VERBUS_TEST_SCALE scales
 * it, at least 6) connect one after the other, publish 1,000 ORDERED
 * messages, and leave: even cycles by a clean exit (vb_pub_destroy's
 * linger, vb_node_destroy's BYE), odd ones by SIGKILL once half the stream
 * arrived. After each cycle the subscriber must be back at its baseline:
 * no peer, no lane (lanes_created == lanes_retired), the QPs (less those
 * parked in the warm pool) and CQs of this process as `rdma res` lists
 * them as before the first cycle,
 * registered memory in use and MRs no higher than after the first two
 * cycles, one clean and one killed (the pool keeps the chunks it
 * registered, by design: its high water) plus a small tolerance. Every
 * clean cycle delivered exactly 1,000 messages once and in order; a killed one nothing twice and nothing out of order. Then one
 * more publisher connects (more cycles than max_peers: only live peers
 * count).
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define NMSG 1000u
#define MR_SLACK 4            /* MRs above the warm pool's */
#define INUSE_SLACK (4u << 20) /* registered bytes in use above the first cycle's */

struct shared {
	uint16_t port;
	int published;
};
static struct shared *sh;
static pid_t kid = -1;

/* ---- publisher process ------------------------------------------------------------------- */

static int publisher(void *arg)
{
	unsigned cycle = (unsigned)(uintptr_t)arg;
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint8_t buf[64];
	char name[32];
	uint64_t t0;

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	snprintf(name, sizeof(name), "reap-pub-%u", cycle);
	vb_node_attr_init(&na);
	na.name = name;
	if (vb_ctx_create(&ca, &ctx) || vb_node_create(ctx, &na, &node) ||
	    vb_pub_create(node, "reap.orders", VB_ORDERED, NULL, &pub)) {
		fprintf(stderr, "publisher %u: %s\n", cycle, vb_errmsg());
		return 2;
	}
	if (vb_node_connect(node, vbt_test_ip(), LD(&sh->port))) {
		fprintf(stderr, "publisher %u: connect: %s\n", cycle, vb_errmsg());
		return 3;
	}
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(1000))
		if (vbt_now_ms() - t0 > 30000)
			return 4;
	for (uint64_t i = 0; i < NMSG;) {
		size_t len = vbt_msg_len(1, i, 8, sizeof(buf));

		vbt_msg_fill(buf, len, 1, i);
		if (vb_publish(pub, buf, len, NULL) == 0) {
			ST(&sh->published, (int)++i);
			if (i % 50 == 0)
				usleep(1000); /* a stream, not one burst */
		} else {
			usleep(100);
		}
		if (vbt_now_ms() - t0 > 60000)
			return 5;
	}
	if (vb_pub_destroy(pub)) { /* lingers until everything is acknowledged */
		fprintf(stderr, "publisher %u: destroy: %s\n", cycle, vb_errmsg());
		return 6;
	}
	if (vb_node_destroy(node) || vb_ctx_destroy(ctx))
		return 7;
	return 0;
}

/* ---- subscriber (this process) ----------------------------------------------------------- */

struct rx {
	uint32_t session;
	uint64_t next, got, bad;
};
static struct rx rx;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	const char *why = "?";

	(void)sub;
	(void)arg;
	if (m->publisher != LD(&rx.session)) { /* this cycle's publisher */
		ST(&rx.session, m->publisher);
		rx.next = 1;
	}
	if (m->seq != rx.next || m->len != vbt_msg_len(1, m->seq - 1, 8, 64) ||
	    vbt_msg_verify(m->data, m->len, 1, m->seq - 1, &why)) {
		if (rx.bad++ < 5)
			fprintf(stderr, "sub: seq %" PRIu64 " (expected %" PRIu64 "): %s\n", m->seq,
				rx.next, why);
	}
	rx.next = m->seq + 1;
	__atomic_fetch_add(&rx.got, 1, __ATOMIC_ACQ_REL);
}

struct counts {
	int qp, cq, mr, peers;
	size_t in_use;
	uint64_t lanes;
};

static void take(vb_ctx_t *ctx, vb_node_t *node, struct counts *c)
{
	vb_stats_t s;

	/* every user object on the machine (rdma res names the creating
	 * thread's id, and the library creates objects on several threads);
	 * the publisher of the cycle has exited by now */
	vb_ctx_stats(ctx, &s);
	/* QPs parked in the warm pool are the library's, not a peer's: a
	 * clean cycle's QP comes back to it (recycled), a killed one's is
	 * destroyed, so the parked count moves and the rest must not */
	c->qp = vbt_res_count("qp", 0) - (int)s.qp_pool_parked;
	c->cq = vbt_res_count("cq", 0);
	c->mr = vbt_res_count("mr", 0);
	c->in_use = s.pool_in_use;
	c->lanes = s.lanes_created - s.lanes_retired;
	c->peers = vb_node_peers(node);
}

static bool at_baseline(const struct counts *c, const struct counts *base,
			const struct counts *warm)
{
	return c->peers == 0 && c->lanes == base->lanes && c->qp == base->qp &&
	       c->cq == base->cq && c->mr <= warm->mr + MR_SLACK &&
	       c->in_use <= warm->in_use + INUSE_SLACK;
}

static void test_peers_reaped(void **state)
{
	unsigned cycles = (unsigned)vbt_scaled(50);
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	struct counts base, warm = { 0 }, now = { 0 };
	unsigned chunks = 0;
	vb_stats_t s;

	(void)state;
	if (cycles < 6)
		cycles = 6;
	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.max_peers = 16;
	/* the accepting side gives a killed peer up after 3 x cm_timeout_ms */
	ca.cm_timeout_ms = 1000;
	assert_int_equal(vb_ctx_create(&ca, &ctx), 0);
	vb_node_attr_init(&na);
	na.name = "reap-sub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	ST(&sh->port, vb_node_port(node));
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(node, "reap.orders", VB_ORDERED, &sa, &sub), 0);
	/* the listeners prepare their next connection in the background:
	 * the baseline is what stays put for a second (bounded) */
	take(ctx, node, &base);
	for (uint64_t t0 = vbt_now_ms(); vbt_now_ms() - t0 < 15000;) {
		usleep(1000000);
		take(ctx, node, &now);
		if (!memcmp(&now, &base, sizeof(now)))
			break;
		base = now;
	}
	printf("baseline: QPs %d, CQs %d, MRs %d, in use %zu bytes, lanes %" PRIu64 "\n", base.qp,
	       base.cq, base.mr, base.in_use, base.lanes);

	for (unsigned c = 0; c <= cycles; c++) {
		bool killed = c % 2 == 1 && c < cycles;
		uint64_t t0;
		int st;

		ST(&sh->published, 0);
		ST(&rx.got, 0);
		ST(&rx.session, 0);
		kid = vbt_spawn(publisher, (void *)(uintptr_t)c);
		assert_true(kid > 0);
		for (t0 = vbt_now_ms(); LD(&rx.got) < (killed ? NMSG / 2 : NMSG); usleep(1000))
			if (vbt_now_ms() - t0 > 90000)
				fail_msg("cycle %u: %" PRIu64 " messages of %u arrived", c, LD(&rx.got),
					 NMSG);
		if (killed)
			assert_int_equal(kill(kid, SIGKILL), 0);
		st = vbt_wait(kid, 60);
		kid = -1;
		assert_int_equal(st, killed ? 128 + SIGKILL : 0);
		if (!killed)
			assert_int_equal(LD(&rx.got), NMSG); /* exactly once */
		assert_int_equal(rx.bad, 0);
		if (c == cycles)
			break; /* the one past max_peers connected and delivered */
		/* back to the baseline, bounded */
		for (t0 = vbt_now_ms();; usleep(20000)) {
			take(ctx, node, &now);
			if (c <= 1) {
				/* the pool keeps what it registered, chunks registered
				 * ahead for a connection and its standby included
				 * (vbi_lane_commit_prepare): the warm level is the high
				 * water of one clean and one killed cycle (a clean one
				 * alone sometimes stops lower) */
				if (now.peers == 0 && now.lanes == base.lanes && now.qp == base.qp) {
					if (now.mr > warm.mr)
						warm.mr = now.mr;
					if (now.in_use > warm.in_use)
						warm.in_use = now.in_use;
					break;
				}
			} else if (at_baseline(&now, &base, &warm)) {
				break;
			}
			if (vbt_now_ms() - t0 > 30000) {
				vb_ctx_stats(ctx, &s);
				fprintf(stderr, "stats: lanes created %" PRIu64 ", retired %" PRIu64
					", peers reaped %" PRIu64 ", pool chunks %u, registered %zu\n",
					s.lanes_created, s.lanes_retired, s.peers_reaped, s.pool_chunks,
					s.pool_registered);
				vb_node_dump(node, stderr);
				fail_msg("cycle %u (%s): not back at the baseline after 30 s: peers %d, "
					 "lanes %" PRIu64 " (base %" PRIu64 "), QPs %d (%d), CQs %d (%d), "
					 "MRs %d (warm %d), in use %zu (warm %zu)", c,
					 killed ? "SIGKILL" : "clean", now.peers, now.lanes, base.lanes,
					 now.qp, base.qp, now.cq, base.cq, now.mr,
					 c > 1 ? warm.mr : base.mr, now.in_use,
					 c > 1 ? warm.in_use : base.in_use);
			}
		}
		vb_ctx_stats(ctx, &s);
		if (s.pool_chunks != chunks) /* where the registered memory grew */
			printf("cycle %u (%s): pool chunks %u -> %u (%zu bytes registered)\n", c,
			       killed ? "SIGKILL" : "clean", chunks, s.pool_chunks, s.pool_registered);
		chunks = s.pool_chunks;
		if (c % 10 == 0 || c + 1 == cycles)
			printf("cycle %u (%s): back at the baseline: QPs %d, CQs %d, MRs %d, in use "
			       "%zu bytes, lanes %" PRIu64 "\n", c, killed ? "SIGKILL" : "clean", now.qp,
			       now.cq, now.mr, now.in_use, now.lanes);
	}
	vb_ctx_stats(ctx, &s);
	printf("%u cycles and one more: peers reaped %" PRIu64 ", lanes created %" PRIu64
	       ", retired %" PRIu64 "\n", cycles, s.peers_reaped, s.lanes_created, s.lanes_retired);
	assert_true(s.peers_reaped >= cycles);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	munmap(sh, sizeof(*sh));
}

static int teardown(void **state)
{
	(void)state;
	vbt_reap(&kid);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_peers_reaped, teardown),
	};

	vbt_require_device();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
