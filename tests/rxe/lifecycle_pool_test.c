/* SPDX-License-Identifier: MIT */
/*
 * Pre-warmed QP pool on rxe: prewarm parks QPs in INIT (RC) / RTS (UD); get
 * counts hits and misses; release resets and parks the QP again (the same
 * qp_num comes back on the next get) or destroys it when the pool is full;
 * recycled QPs carry traffic; a release with sends outstanding drains them
 * (every buffer back); the background refill keeps the low watermark; and
 * nothing is left in `rdma res show`.
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

#include "engine/qpool.h"
#include "tests/rxe/lifecycle_env.h"

static struct lc_env env;
static struct vbt_conn_param param;

static void pool_attr(struct vbi_qpool_attr *a, enum vb_qp_type t, unsigned max, unsigned low)
{
	memset(a, 0, sizeof(*a));
	a->pd = env.pd;
	a->cq = env.cq;
	a->type = t;
	a->cap.max_send_wr = 64;
	a->cap.max_recv_wr = 64;
	a->on_complete = lc_on_complete;
	a->cb_arg = &env;
	a->param = param;
	a->max = max;
	a->low = low;
	a->drain_timeout_ms = 20000;
}

static void exchange(struct vbi_qpe *a, struct vbi_qpe *b, unsigned n)
{
	lc_reset_counts(&env);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(lc_chk(lc_recv(&env, b, LC_MSG, LC_RECV_COOKIE(i)), "recv"), 0);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(lc_chk(lc_send(&env, a, 100, LC_SEND_COOKIE(i), NULL, NULL), "send"), 0);
	assert_int_equal(lc_poll_until(&env, &env.cqes, 2 * n, 20000), 2 * n);
	assert_int_equal(env.ok, 2 * n);
	assert_int_equal(env.bad_payload, 0);
}

static void test_rc_pool(void **state)
{
	struct vbi_qpool_attr pa;
	struct vbi_qpool *p;
	struct vbi_qpool_stats st;
	struct vbi_qpe *q[4], *x;
	uint32_t qpn0, qpn[4];

	(void)state;
	pool_attr(&pa, VB_QPT_RC, 4, 0);
	assert_int_equal(vbi_qpool_create(&pa, &p), 0);
	assert_int_equal(lc_chk(vbi_qpool_prewarm(p, 3), "prewarm"), 3);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.created, 3);
	assert_int_equal(st.parked, 3);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(lc_chk(vbi_qpool_get(p, &q[i]), "get"), 0);
		assert_int_equal(vbi_qpe_state(q[i]), VB_QPS_INIT);
		qpn[i] = vbi_qpe_qpn(q[i]);
	}
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.hits, 3);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.created, 4);
	assert_int_equal(st.parked, 0);

	assert_int_equal(lc_chk(lc_pair(q[0], q[1], &param), "pair"), 0);
	exchange(q[0], q[1], 10);

	/* Recycle: back through RESET to INIT, and the next get returns it. */
	qpn0 = vbi_qpe_qpn(q[0]);
	assert_int_equal(lc_chk(vbi_qpool_release(p, q[0]), "release"), 0);
	assert_int_equal(vbi_qpe_state(q[0]), VB_QPS_INIT);
	assert_int_equal(vbi_qpool_get(p, &x), 0);
	assert_ptr_equal(x, q[0]);
	assert_int_equal(vbi_qpe_qpn(x), qpn0);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.hits, 4);
	assert_int_equal(st.recycled, 1);

	/* A recycled QP works: q[1] is recycled too, both reconnected with
	 * fresh PSNs. */
	assert_int_equal(vbi_qpool_release(p, q[1]), 0);
	assert_int_equal(vbi_qpool_get(p, &x), 0);
	assert_ptr_equal(x, q[1]);
	assert_int_equal(lc_chk(lc_pair(q[0], q[1], &param), "pair recycled"), 0);
	exchange(q[0], q[1], 10);

	/* Release with sends outstanding (no receive on the peer, rnr_retry 7):
	 * drained, buffers back, recycled. */
	lc_reset_counts(&env);
	for (unsigned i = 0; i < 50; i++)
		assert_int_equal(lc_send(&env, q[0], 64, LC_SEND_COOKIE(i), NULL, NULL), 0);
	assert_int_equal(lc_chk(vbi_qpool_release(p, q[0]), "release busy"), 0);
	assert_int_equal(LC_GET(env.cqes), 50);
	assert_int_equal(env.flush + env.ok, 50);
	assert_int_equal(lc_bufs_out(&env), 0);

	for (int i = 1; i < 4; i++)
		assert_int_equal(vbi_qpool_release(p, q[i]), 0);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.parked, 4);
	/* Full: the next release destroys. */
	{
		struct vbi_qpe_attr qa = { .type = VB_QPT_RC, .cq = env.cq,
					   .cap = pa.cap, .on_complete = lc_on_complete, .cb_arg = &env };

		assert_int_equal(vbi_qpe_create(env.pd, &qa, &x), 0);
		assert_int_equal(vbi_qpool_release(p, x), 1);
	}
	vbi_qpool_stats(p, &st);
	printf("RC pool: hits %llu misses %llu recycled %llu destroyed %llu created %llu parked %u\n",
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.recycled, (unsigned long long)st.destroyed,
	       (unsigned long long)st.created, st.parked);
	assert_int_equal(st.recycled, 6);
	assert_int_equal(st.destroyed, 1);
	/* All four qp_nums are the ones created at the start. */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(vbi_qpool_get(p, &x), 0);
		int found = 0;

		for (int j = 0; j < 4; j++)
			found |= vbi_qpe_qpn(x) == qpn[j];
		assert_true(found);
		assert_int_equal(vbi_qpool_release(p, x), 0);
	}
	assert_int_equal(lc_chk(vbi_qpool_destroy(p), "pool destroy"), 0);
	assert_int_equal(vbt_res_count("qp", getpid()), 0);
}

static void test_ud_pool_refill(void **state)
{
	struct vbi_qpool_attr pa;
	struct vbi_qpool *p;
	struct vbi_qpool_stats st;
	struct vbi_qpe *a, *b;
	struct vbt_ah_attr aha;
	struct vbt_ah *ah;
	uint64_t end;

	(void)state;
	pool_attr(&pa, VB_QPT_UD, 4, 2);
	assert_int_equal(vbi_qpool_create(&pa, &p), 0);
	end = lc_now_ms() + 20000;
	do {
		usleep(10000);
		vbi_qpool_stats(p, &st);
	} while (st.parked < 2 && lc_now_ms() < end);
	assert_int_equal(st.parked, 2);
	assert_int_equal(st.refilled, 2);
	assert_int_equal(vbi_qpool_get(p, &a), 0);
	assert_int_equal(vbi_qpool_get(p, &b), 0);
	assert_int_equal(vbi_qpe_state(a), VB_QPS_RTS);
	assert_int_equal(vbi_qpe_state(b), VB_QPS_RTS);
	/* UD from the pool sends at once. */
	vbt_ah_attr_from_peer(env.dev, vbi_qpe_local(b), &aha);
	assert_int_equal(env.pd->ops->ah_create(env.pd, &aha, &ah), 0);
	lc_reset_counts(&env);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(lc_recv(&env, b, LC_MSG + 40, LC_RECV_COOKIE(i)), 0);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(lc_send(&env, a, 64, LC_SEND_COOKIE(i), ah, vbi_qpe_local(b)), 0);
	assert_int_equal(lc_poll_until(&env, &env.ok, 16, 20000), 16);
	assert_int_equal(env.recv_ok, 8);
	assert_int_equal(env.bad_payload, 0);
	assert_int_equal(env.pd->ops->ah_destroy(ah), 0);
	/* The refill thread brings the pool back to its low watermark. */
	end = lc_now_ms() + 20000;
	do {
		usleep(10000);
		vbi_qpool_stats(p, &st);
	} while (st.parked < 2 && lc_now_ms() < end);
	assert_int_equal(st.parked, 2);
	assert_int_equal(vbi_qpool_release(p, a), 0);
	assert_int_equal(vbi_qpool_release(p, b), 0);
	vbi_qpool_stats(p, &st);
	printf("UD pool: hits %llu misses %llu recycled %llu refilled %llu parked %u\n",
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.recycled, (unsigned long long)st.refilled, st.parked);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.recycled, 2);
	assert_int_equal(st.parked, 4);
	assert_int_equal(lc_bufs_out(&env), 0);
	assert_int_equal(vbi_qpool_destroy(p), 0);
}

static void test_no_leaks(void **state)
{
	(void)state;
	lc_env_close(&env);
	assert_int_equal(lc_leaks(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rc_pool),
		cmocka_unit_test(test_ud_pool_refill),
		cmocka_unit_test(test_no_leaks),
	};
	int rc;

	vbi_rcu_register_thread();
	if (lc_env_open(&env, 4096))
		return 1;
	vbt_conn_param_init(&param);
	param.rnr_retry = 7;
	param.min_rnr_timer = 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	vbi_rcu_unregister_thread();
	return rc;
}
