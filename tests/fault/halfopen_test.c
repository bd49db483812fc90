/* SPDX-License-Identifier: MIT */
/*
 * Half-open connections (issue "a node that runs for weeks", item 2): a
 * raw-verbs client completes 50 RDMA CM connections to a listening verbus
 * node and never sends a HELLO. The node must commit no more than a small
 * fixed budget for them (a QP, 2 receive slots and 2 send buffers each, at most
 * max_pending of them: the oldest is dropped past that), let a real peer
 * connect and deliver during the flood, drop every half-open connection
 * after cm_timeout_ms, and be back at its baseline (registered memory in
 * use, connections) once the real peer has gone too.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
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

#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"
#include "transport/transport.h"

#define NRAW 50
#define NMSG 100u

static unsigned got;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	(void)arg;
	__atomic_fetch_add(&got, 1, __ATOMIC_ACQ_REL);
}

static void victim_counts(vb_ctx_t *ctx, size_t *in_use, uint64_t *lanes, uint64_t *dropped)
{
	vb_stats_t s;

	vb_ctx_stats(ctx, &s);
	*in_use = s.pool_in_use;
	*lanes = s.lanes_created - s.lanes_retired;
	if (dropped)
		*dropped = s.pending_dropped;
}

static void test_half_open_flood(void **state)
{
	const struct vbt_ops *ops = &vbt_verbs_ops;
	struct vbt_dev_attr da = { .ip = vbt_test_ip(), .gid_index = -1 };
	struct vbt_cq_attr cqa = { .cqe = 64 };
	struct vbt_dev *dev;
	struct vbt_pd *pd;
	struct vbt_cq *cq;
	struct vbt_qp *qp[NRAW] = { 0 };
	struct vbt_conn *conn[NRAW] = { 0 };
	struct vbt_conn_param cp;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa_;
	vb_ctx_t *vctx, *pctx;
	vb_node_t *vnode, *pnode;
	vb_sub_t *sub;
	vb_pub_t *pub;
	size_t base_use, use, budget;
	uint64_t base_lanes, lanes, dropped = 0, t0;
	unsigned connected = 0;

	(void)state;
	/* the victim */
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.cm_timeout_ms = 3000;
	assert_int_equal(vb_ctx_create(&ca, &vctx), 0);
	vb_node_attr_init(&na);
	na.name = "ho-victim";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(vctx, &na, &vnode), 0);
	vb_sub_attr_init(&sa_);
	sa_.on_msg = on_msg;
	assert_int_equal(vb_sub_create(vnode, "ho.orders", VB_ORDERED, &sa_, &sub), 0);
	/* the listeners prepare their next connection in the background */
	victim_counts(vctx, &base_use, &base_lanes, NULL);
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < 15000;) {
		usleep(1000000);
		victim_counts(vctx, &use, &lanes, NULL);
		if (use == base_use && lanes == base_lanes)
			break;
		base_use = use;
		base_lanes = lanes;
	}
	/* each pending one: 2 receive slots, 2 send buffers and the send ring's
	 * headers (64 bytes an entry); max_pending of them, 4 being replaced,
	 * and 1 MiB */
	budget = (size_t)(ca.max_pending + 4) * (4 * ca.slot_size + 64 * 1024) + (1u << 20);
	printf("victim baseline: %zu bytes in use, %" PRIu64 " connections; budget for pending "
	       "ones %zu bytes (max_pending %u)\n", base_use, base_lanes, budget, ca.max_pending);

	/* the flood: CM handshakes completed, no HELLO ever */
	assert_int_equal(ops->dev_open(&da, &dev), 0);
	assert_int_equal(ops->pd_alloc(dev, &pd), 0);
	assert_int_equal(ops->cq_create(dev, &cqa, &cq), 0);
	vbt_conn_param_init(&cp);
	cp.cm_timeout_ms = 5000;
	sa.sin_port = htons(vb_node_port(vnode));
	assert_int_equal(inet_pton(AF_INET, vbt_test_ip(), &sa.sin_addr), 1);
	for (unsigned i = 0; i < NRAW; i++) {
		struct vbt_qp_init_attr qa = {
			.type = VB_QPT_RC, .send_cq = cq, .recv_cq = cq,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};
		struct vbt_peer local;

		assert_int_equal(ops->qp_create(pd, &qa, &qp[i]), 0);
		assert_int_equal(vbt_qp_local_peer(qp[i], 0, &local), 0);
		assert_int_equal(vbt_qp_to_init(qp[i], &cp, &local), 0);
		if (ops->connect(dev, qp[i], (struct sockaddr *)&sa, &cp, &conn[i]) == 0)
			connected++;
		else
			fprintf(stderr, "  half-open %u: connect: %s\n", i, vb_errmsg());
		if (i % 10 == 9) {
			victim_counts(vctx, &use, &lanes, &dropped);
			printf("  %u half-open connections: victim %zu bytes in use (+%zu), %" PRIu64
			       " dropped\n", i + 1, use, use - base_use, dropped);
		}
	}
	/* the last accepts may still be settling in the victim's accept thread */
	t0 = vbt_now_ms();
	do {
		usleep(10000);
		victim_counts(vctx, &use, &lanes, &dropped);
	} while (connected > ca.max_pending && dropped < connected - ca.max_pending &&
		 vbt_now_ms() - t0 < 5000);
	printf("flood: %u of %d connected; victim %zu bytes in use (+%zu, budget %zu), %" PRIu64
	       " dropped as past max_pending\n", connected, NRAW, use, use - base_use, budget,
	       dropped);
	assert_true(connected >= NRAW / 2);
	assert_true(use <= base_use + budget);
	assert_true(dropped >= connected - ca.max_pending);

	/* a real peer connects during the flood, and delivers */
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	assert_int_equal(vb_ctx_create(&ca, &pctx), 0);
	vb_node_attr_init(&na);
	na.name = "ho-real";
	assert_int_equal(vb_node_create(pctx, &na, &pnode), 0);
	assert_int_equal(vb_pub_create(pnode, "ho.orders", VB_ORDERED, NULL, &pub), 0);
	if (vb_node_connect(pnode, vbt_test_ip(), vb_node_port(vnode)))
		fail_msg("the real peer could not connect during the flood: %s", vb_errmsg());
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(1000))
		assert_true(vbt_now_ms() - t0 < 30000);
	for (unsigned i = 0; i < NMSG; i++)
		for (t0 = vbt_now_ms(); vb_publish(pub, "real", 4, NULL) == -EAGAIN; usleep(100))
			assert_true(vbt_now_ms() - t0 < 20000);
	for (t0 = vbt_now_ms(); __atomic_load_n(&got, __ATOMIC_ACQUIRE) < NMSG; usleep(1000))
		assert_true(vbt_now_ms() - t0 < 30000);
	printf("the real peer connected during the flood and delivered %u messages\n", NMSG);

	/* no HELLO within cm_timeout_ms: every half-open one dropped */
	for (t0 = vbt_now_ms();; usleep(50000)) {
		victim_counts(vctx, &use, &lanes, &dropped);
		if (dropped >= connected)
			break;
		if (vbt_now_ms() - t0 > 30000)
			fail_msg("only %" PRIu64 " of %u half-open connections dropped after 30 s",
				 dropped, connected);
	}
	printf("all %u half-open connections dropped %.1f s after the flood\n", connected,
	       (vbt_now_ms() - t0) / 1000.0);
	/* and once the real peer has gone, the victim is back at its baseline */
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(pnode), 0);
	assert_int_equal(vb_ctx_destroy(pctx), 0);
	for (t0 = vbt_now_ms();; usleep(50000)) {
		victim_counts(vctx, &use, &lanes, NULL);
		if (lanes == base_lanes && use <= base_use)
			break;
		if (vbt_now_ms() - t0 > 30000)
			fail_msg("victim not back at its baseline: %zu bytes in use (%zu), %" PRIu64
				 " connections (%" PRIu64 ")", use, base_use, lanes, base_lanes);
	}
	printf("victim back at its baseline: %zu bytes in use, %" PRIu64 " connections\n", use,
	       lanes);

	for (unsigned i = 0; i < NRAW; i++) {
		if (conn[i])
			ops->conn_close(conn[i]);
		if (qp[i])
			ops->qp_destroy(qp[i]);
	}
	ops->cq_destroy(cq);
	ops->pd_free(pd);
	ops->dev_close(dev);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(vnode), 0);
	assert_int_equal(vb_ctx_destroy(vctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_half_open_flood) };

	vbt_require_device();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
