/* SPDX-License-Identifier: MIT */
/*
 * The QP pool the lanes run on (engine/qpool.h), on a real device: refill to
 * the low watermark, hits and misses, recycling through RESET (same qp_num,
 * parked in INIT again), the quarantine before a recycled QP is handed out,
 * the max bound (a put beyond it destroys), a put of an errored QP
 * destroys, close destroys what is parked, and nothing is left in `rdma
 * res` after destroy. The public-API side is lifecycle_recycle_test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/qpool.h"
#include "tests/rxe/transport_harness.h"

#define QUARANTINE_MS 300u

static void test_pool(void **state)
{
	const struct vbt_ops *ops = &vbt_verbs_ops;
	struct vbt_dev_attr da = { .gid_index = -1 };
	struct vbt_cq_attr ca = { .cqe = 256 };
	struct vbt_dev *dev;
	struct vbt_pd *pd;
	struct vbt_cq *cq;
	struct vbi_qpool_attr pa = {
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.max = 3,
		.quarantine_ms = QUARANTINE_MS,
	};
	struct vbi_qpool *p;
	struct vbi_qpool_stats st;
	struct vbt_qp *q[4], *x;
	uint32_t qpn[3];
	int tag;

	(void)state;
	da.name = vbt_require_device();
	assert_int_equal(ops->dev_open(&da, &dev), 0);
	assert_int_equal(ops->pd_alloc(dev, &pd), 0);
	assert_int_equal(ops->cq_create(dev, &ca, &cq), 0);
	pa.pd = pd;
	pa.cq = cq;
	vbt_conn_param_init(&pa.param);
	pa.low[VB_QPT_RC] = 2;
	assert_int_equal(vbi_qpool_create(&pa, &p), 0);

	/* refill: two RC QPs parked in INIT, none of the other types */
	assert_int_equal(vbi_qpool_refill(p), 2);
	assert_int_equal(vbi_qpool_refill(p), 0);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.created, 2);
	assert_int_equal(st.parked, 2);

	/* two hits, then a miss; every QP in INIT with its user_ctx */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(vbi_qpool_get(p, VB_QPT_RC, &tag, &q[i]), 0);
		assert_int_equal(vbt_qp_state(q[i]), VB_QPS_INIT);
		assert_ptr_equal(q[i]->user_ctx, &tag);
		qpn[i] = q[i]->qpn;
	}
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.created, 3);

	/* recycled: ERR (as a retired lane is), put -> RESET -> INIT, parked */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(vbt_qp_set_state(q[i], VB_QPS_ERR), 0);
		assert_int_equal(vbi_qpool_put(p, q[i], true), 0);
		assert_int_equal(vbt_qp_state(q[i]), VB_QPS_INIT);
		assert_null(q[i]->user_ctx);
	}
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.recycled, 3);
	assert_int_equal(st.parked, 3);

	/* quarantined: a get now misses (and refill counts them as not ready,
	 * but the pool is at max: it creates nothing) */
	assert_int_equal(vbi_qpool_refill(p), 0);
	assert_int_equal(vbi_qpool_get(p, VB_QPT_RC, NULL, &q[3]), 0);
	for (int i = 0; i < 3; i++)
		assert_int_not_equal(q[3]->qpn, qpn[i]);
	/* the pool holds max already: this one is destroyed */
	assert_int_equal(vbi_qpool_put(p, q[3], true), 1);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.misses, 2);
	assert_int_equal(st.destroyed, 1);

	/* after the quarantine: the same QP numbers come back */
	usleep(QUARANTINE_MS * 1000 + 50000);
	for (int i = 0; i < 3; i++) {
		bool known = false;

		assert_int_equal(vbi_qpool_get(p, VB_QPT_RC, NULL, &q[i]), 0);
		for (int j = 0; j < 3; j++)
			known |= q[i]->qpn == qpn[j];
		assert_true(known);
	}
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.hits, 5);
	assert_int_equal(st.parked, 0);

	/* an errored QP (reuse false) is destroyed; the others go back */
	assert_int_equal(vbi_qpool_put(p, q[0], false), 1);
	assert_int_equal(vbi_qpool_put(p, q[1], true), 0);
	assert_int_equal(vbi_qpool_put(p, q[2], true), 0);
	/* UD: created on demand (low 0), parked in INIT too, recycled */
	assert_int_equal(vbi_qpool_get(p, VB_QPT_UD, NULL, &x), 0);
	assert_int_equal(vbt_qp_state(x), VB_QPS_INIT);
	assert_int_equal(vbi_qpool_put(p, x, true), 0);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.destroyed, 2);
	assert_int_equal(st.parked, 3);
	assert_int_equal(vbt_res_count("qp", 0) >= 3, 1);

	/* close: the parked ones go; a later get creates, a put destroys */
	vbi_qpool_close(p);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.parked, 0);
	assert_int_equal(st.destroyed, 5);
	assert_int_equal(vbi_qpool_get(p, VB_QPT_RC, NULL, &x), 0);
	assert_int_equal(vbi_qpool_put(p, x, true), 1);
	vbi_qpool_stats(p, &st);
	assert_int_equal(st.created, st.destroyed);
	vbi_qpool_destroy(p);

	assert_int_equal(ops->cq_destroy(cq), 0);
	assert_int_equal(ops->pd_free(pd), 0);
	ops->dev_close(dev);
	assert_int_equal(vbt_res_count("qp", getpid()), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
