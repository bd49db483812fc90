/* SPDX-License-Identifier: MIT */
/*
 * Error handling of the QP lifecycle engine on rxe: a QP forced to ERR with
 * 1000 sends outstanding (the peer has no receive posted and rnr_retry is 7,
 * so they stay on the send queue) drains to exactly 1000 completions, all
 * WR_FLUSH_ERR, each delivered once, every buffer back in the mempool; the
 * receive queue drains the same way; both QPs then recover in place (same
 * qp_num) and carry traffic again; UD drains with its loopback-AH marker;
 * destroying a QP with WRs outstanding hands every buffer back; and nothing
 * is left in `rdma res show` afterwards.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/qp_fsm.h"
#include "tests/rxe/lifecycle_env.h"

#define N_OUT 1000
#define DRAIN_MS 20000

static struct lc_env env;
static struct vbt_conn_param param;

static struct vbi_qpe *new_qp(enum vb_qp_type t, uint32_t sq, uint32_t rq)
{
	struct vbi_qpe_attr a = {
		.type = t, .cq = env.cq, .cap = { .max_send_wr = sq, .max_recv_wr = rq },
		.on_complete = lc_on_complete, .cb_arg = &env,
	};
	struct vbi_qpe *q = NULL;

	assert_int_equal(lc_chk(vbi_qpe_create(env.pd, &a, &q), "vbi_qpe_create"), 0);
	assert_int_equal(lc_chk(vbi_qpe_park(q, &param, DRAIN_MS), "park"), 0);
	return q;
}

static void test_forced_err_1000_outstanding(void **state)
{
	struct vbi_qpe *a = new_qp(VB_QPT_RC, N_OUT, 16), *b = new_qp(VB_QPT_RC, 16, N_OUT);
	struct vbi_qpe_stats st;
	uint32_t qpn_a = vbi_qpe_qpn(a), qpn_b = vbi_qpe_qpn(b);
	int rc;

	(void)state;
	assert_int_equal(vbi_qpe_state(a), VB_QPS_INIT);
	assert_int_equal(lc_chk(lc_pair(a, b, &param), "pair"), 0);
	assert_int_equal(vbi_qpe_state(a), VB_QPS_RTS);
	lc_reset_counts(&env);

	/* B has no receive: every send waits for RNR retries (forever). */
	for (unsigned i = 0; i < N_OUT; i++)
		assert_int_equal(lc_chk(lc_send(&env, a, 64, LC_SEND_COOKIE(i), NULL, NULL), "send"), 0);
	/* The queue holds exactly what the user asked for: one more is refused. */
	assert_int_equal(lc_send(&env, a, 64, LC_SEND_COOKIE(N_OUT), NULL, NULL), -EAGAIN);
	vbi_qpe_poll(env.cq, 64);
	usleep(100000);
	vbi_qpe_poll(env.cq, 64);
	printf("before ERR: %u outstanding, %llu completed\n", vbi_qpe_outstanding(a),
	       (unsigned long long)LC_GET(env.cqes));
	assert_int_equal(LC_GET(env.cqes) + vbi_qpe_outstanding(a), N_OUT);
	assert_true(vbi_qpe_outstanding(a) > 0);
	assert_int_equal(lc_bufs_out(&env), (int64_t)vbi_qpe_outstanding(a));

	rc = vbi_qpe_fail(a, DRAIN_MS);
	assert_int_equal(lc_chk(rc, "fail(a)") >= 0, 1);
	vbi_qpe_stats(a, &st);
	printf("drain of QP %u: %d WRs in %.3f ms; ok %llu flush %llu err %llu; markers sq %llu rq %llu\n",
	       qpn_a, rc, st.last_drain_ns / 1e6, (unsigned long long)env.ok,
	       (unsigned long long)env.flush, (unsigned long long)env.err,
	       (unsigned long long)st.sq_markers_seen, (unsigned long long)st.rq_markers_seen);
	assert_int_equal(vbi_qpe_state(a), VB_QPS_ERR);
	assert_int_equal(LC_GET(env.cqes), N_OUT);
	assert_int_equal(env.ok + env.flush + env.err, N_OUT);
	assert_int_equal(env.flush, N_OUT - env.ok); /* nothing failed otherwise */
	assert_true(env.flush > 0);
	assert_int_equal(env.dup, 0);
	for (unsigned i = 0; i < N_OUT; i++)
		assert_int_equal(env.seen[i], 1);
	assert_int_equal(st.outstanding_send, 0);
	assert_int_equal(st.sq_markers_seen, 1);
	assert_int_equal(st.synthetic, 0);
	assert_int_equal(lc_bufs_out(&env), 0);
	assert_int_equal(lc_inflight(&env), 0);
	/* Paused after the drain: posting is back-pressure, not a crash. */
	assert_int_equal(lc_send(&env, a, 64, 1, NULL, NULL), -EAGAIN);
	/* Nothing more arrives for the drained WRs. */
	usleep(50000);
	vbi_qpe_poll(env.cq, 64);
	assert_int_equal(LC_GET(env.cqes), N_OUT);

	/* Receive side: 500 receives on B, B to ERR. */
	lc_reset_counts(&env);
	for (unsigned i = 0; i < 500; i++)
		assert_int_equal(lc_chk(lc_recv(&env, b, LC_MSG, LC_RECV_COOKIE(i)), "recv"), 0);
	rc = vbi_qpe_fail(b, DRAIN_MS);
	assert_int_equal(rc, 500);
	assert_int_equal(env.flush, 500);
	assert_int_equal(lc_bufs_out(&env), 0);

	/* Recovery in place: both sides RESET->INIT (fresh PSNs), then each
	 * RTR->RTS against the other's current parameters. */
	assert_int_equal(lc_chk(vbi_qpe_reset(a, &param, DRAIN_MS), "reset a"), 0);
	assert_int_equal(lc_chk(vbi_qpe_recover(b, &param, vbi_qpe_local(a), DRAIN_MS), "recover b"), 0);
	assert_int_equal(lc_chk(vbi_qpe_connect(a, &param, vbi_qpe_local(b)), "connect a"), 0);
	assert_int_equal(vbi_qpe_qpn(a), qpn_a);
	assert_int_equal(vbi_qpe_qpn(b), qpn_b);
	assert_int_equal(vbi_qpe_state(a), VB_QPS_RTS);
	assert_int_equal(vbi_qpe_state(b), VB_QPS_RTS);
	lc_reset_counts(&env);
	for (unsigned i = 0; i < 100; i++)
		assert_int_equal(lc_chk(lc_recv(&env, b, LC_MSG, LC_RECV_COOKIE(i)), "recv"), 0);
	for (unsigned i = 0; i < 100; i++)
		assert_int_equal(lc_chk(lc_send(&env, a, 128, LC_SEND_COOKIE(i), NULL, NULL), "send"), 0);
	assert_int_equal(lc_poll_until(&env, &env.cqes, 200, 20000), 200);
	assert_int_equal(env.ok, 200);
	assert_int_equal(env.recv_ok, 100);
	assert_int_equal(env.bad_payload, 0);
	vbi_qpe_stats(b, &st);
	assert_int_equal(st.recoveries, 1);
	assert_int_equal(lc_bufs_out(&env), 0);

	/* Destroy with sends outstanding: every buffer still comes back. */
	lc_reset_counts(&env);
	for (unsigned i = 0; i < 300; i++)
		assert_int_equal(lc_chk(lc_send(&env, a, 64, LC_SEND_COOKIE(i), NULL, NULL), "send"), 0);
	assert_int_equal(lc_chk(vbi_qpe_destroy(a, DRAIN_MS), "destroy a"), 0);
	assert_int_equal(LC_GET(env.cqes), 300);
	assert_int_equal(env.dup, 0);
	assert_int_equal(lc_bufs_out(&env), 0);
	assert_int_equal(lc_chk(vbi_qpe_destroy(b, DRAIN_MS), "destroy b"), 0);
	assert_int_equal(lc_inflight(&env), 0);
}

static void test_ud_drain(void **state)
{
	struct vbi_qpe *a = new_qp(VB_QPT_UD, 64, 16), *b = new_qp(VB_QPT_UD, 16, 64);
	struct vbt_ah_attr aha;
	struct vbt_ah *ah;
	struct vbi_qpe_stats st;
	int rc;

	(void)state;
	/* Parked UD QPs are in RTS: usable at once. */
	assert_int_equal(vbi_qpe_state(a), VB_QPS_RTS);
	vbt_ah_attr_from_peer(env.dev, vbi_qpe_local(b), &aha);
	assert_int_equal(lc_chk(env.pd->ops->ah_create(env.pd, &aha, &ah), "ah"), 0);
	lc_reset_counts(&env);
	for (unsigned i = 0; i < 64; i++)
		assert_int_equal(lc_recv(&env, b, LC_MSG + 40, LC_RECV_COOKIE(i)), 0);
	for (unsigned i = 0; i < 10; i++)
		assert_int_equal(lc_chk(lc_send(&env, a, 64, LC_SEND_COOKIE(i), ah, vbi_qpe_local(b)), "ud send"), 0);
	assert_int_equal(lc_poll_until(&env, &env.recv_ok, 10, 20000), 10);
	lc_poll_until(&env, &env.ok, 20, 5000);
	assert_int_equal(env.ok, 20);
	assert_int_equal(env.bad_payload, 0);
	/* 54 receives left on B: ERR flushes them; A's send marker needs an AH. */
	rc = vbi_qpe_fail(b, DRAIN_MS);
	assert_int_equal(rc, 54);
	assert_int_equal(env.flush, 54);
	rc = vbi_qpe_fail(a, DRAIN_MS);
	assert_int_equal(lc_chk(rc, "fail ud a"), 0);
	vbi_qpe_stats(a, &st);
	assert_int_equal(st.sq_markers_seen, 1);
	assert_int_equal(lc_bufs_out(&env), 0);
	/* Recover UD in place: reset parks it back in RTS. */
	assert_int_equal(lc_chk(vbi_qpe_reset(b, &param, DRAIN_MS), "reset ud b"), 0);
	assert_int_equal(vbi_qpe_state(b), VB_QPS_RTS);
	assert_int_equal(env.pd->ops->ah_destroy(ah), 0);
	assert_int_equal(vbi_qpe_destroy(a, DRAIN_MS), 0);
	assert_int_equal(vbi_qpe_destroy(b, DRAIN_MS), 0);
}

static void test_no_leaks(void **state)
{
	struct vbi_qpe_poll_stats ps;

	(void)state;
	vbi_qpe_poll_stats(&ps);
	printf("poll: %llu orphan, %llu stale completions dropped\n",
	       (unsigned long long)ps.orphans, (unsigned long long)ps.stale);
	lc_env_close(&env);
	assert_int_equal(lc_leaks(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forced_err_1000_outstanding),
		cmocka_unit_test(test_ud_drain),
		cmocka_unit_test(test_no_leaks),
	};

	vbi_rcu_register_thread();
	if (lc_env_open(&env, 4096))
		return 1;
	env.nseen = N_OUT + 1;
	env.seen = calloc(env.nseen, 1);
	vbt_conn_param_init(&param);
	/* Sends wait for a receive forever instead of failing: they stay
	 * outstanding until the QP is forced to ERR. */
	param.rnr_retry = 7;
	param.min_rnr_timer = 1;
	int rc = cmocka_run_group_tests(tests, NULL, NULL);

	vbi_rcu_unregister_thread();
	return rc;
}
