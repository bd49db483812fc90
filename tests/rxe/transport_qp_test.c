/* SPDX-License-Identifier: MIT */
/*
 * QP modify through the verbs transport on rxe:
 *  - the validator refuses an illegal transition or a wrong mask before the
 *    kernel sees it (the device still reports the old state; the mirror
 *    recorded nothing; the message names the pair and the bits);
 *  - RTS -> SQD (with EN_SQD_ASYNC_NOTIFY) while sends are in flight, wait
 *    for SQD (vbt_qp_wait_state) and for SQ_DRAINED if the driver raises it,
 *    SQD -> RTS, traffic again; the mirror records each transition;
 *  - vbt_qp_wait_state times out naming the state it last saw;
 *  - ERR by hand flushes posted receives with WR_FLUSH_ERR.
 * After each test `rdma res show` lists no QP/CQ/MR/PD of this process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/rxe/transport_harness.h"

static struct vbt_dev *dev;
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cond = PTHREAD_COND_INITIALIZER;
static unsigned ev_count[VBT_EV__COUNT];
static void *ev_last_ctx[VBT_EV__COUNT];

static void on_event(const struct vbt_event *ev, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&ev_lock);
	ev_count[ev->type]++;
	ev_last_ctx[ev->type] = ev->qp_ctx;
	pthread_cond_broadcast(&ev_cond);
	pthread_mutex_unlock(&ev_lock);
}

/* Wait until ev_count[t] > seen, up to ms: 1 when it happened. */
static int wait_event(enum vbt_event_type t, unsigned seen, int ms)
{
	struct timespec dl;
	int ok;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&ev_lock);
	while (ev_count[t] <= seen)
		if (pthread_cond_timedwait(&ev_cond, &ev_lock, &dl))
			break;
	ok = ev_count[t] > seen;
	pthread_mutex_unlock(&ev_lock);
	return ok;
}

static unsigned ev_seen(enum vbt_event_type t)
{
	unsigned n;

	pthread_mutex_lock(&ev_lock);
	n = ev_count[t];
	pthread_mutex_unlock(&ev_lock);
	return n;
}

static enum vb_qp_state device_state(struct vbt_qp *qp)
{
	struct vbt_qp_attr a;

	assert_int_equal(qp->ops->qp_query(qp, &a, VB_QP_STATE), 0);
	return a.qp_state;
}

static void test_validator_refuses(void **state)
{
	static const enum vb_qp_type types[] = { VB_QPT_RC, VB_QPT_UC, VB_QPT_UD };

	for (unsigned k = 0; k < 3; k++) {
		struct th_ep ep;
		struct vbt_qp_attr a = { 0 };
		struct vbt_conn_param p;
		struct vbt_peer local;
		int rc;

		vbt_conn_param_init(&p);
		assert_int_equal(th_ep_open(&ep, dev, types[k], 4, 0, 0), 0);

		/* RESET -> RTS: no such transition */
		a.qp_state = VB_QPS_RTS;
		rc = ep.qp->ops->qp_modify(ep.qp, &a, VB_QP_STATE);
		assert_int_equal(rc, -EINVAL);
		printf("%s RESET->RTS: %s\n", vbi_qp_type_name(types[k]), vbi_errmsg());
		assert_non_null(strstr(vbi_errmsg(), "RESET"));
		assert_non_null(strstr(vbi_errmsg(), "RTS"));
		assert_int_equal(device_state(ep.qp), VB_QPS_RESET);
		assert_int_equal(ep.qp->mirror->transitions, 0);

		/* RESET -> INIT without PORT (required for all three) */
		a.qp_state = VB_QPS_INIT;
		a.pkey_index = 0;
		rc = ep.qp->ops->qp_modify(ep.qp, &a, VB_QP_STATE | VB_QP_PKEY_INDEX);
		assert_int_equal(rc, -EINVAL);
		printf("%s RESET->INIT w/o PORT: %s\n", vbi_qp_type_name(types[k]), vbi_errmsg());
		assert_non_null(strstr(vbi_errmsg(), "PORT"));
		assert_int_equal(device_state(ep.qp), VB_QPS_RESET);

		assert_int_equal(vbt_qp_local_peer(ep.qp, 0, &local), 0);
		assert_int_equal(vbt_qp_to_init(ep.qp, &p, &local), 0);
		assert_int_equal(device_state(ep.qp), VB_QPS_INIT);
		assert_int_equal(ep.qp->mirror->transitions, 1);

		if (types[k] != VB_QPT_UD) {
			/* INIT -> RTR without DEST_QPN: the kernel would say EINVAL
			 * without naming anything; ours names the bit */
			struct vbt_peer remote = local;

			memset(&a, 0, sizeof(a));
			a.qp_state = VB_QPS_RTR;
			a.path_mtu = VBT_MTU_1024;
			a.rq_psn = 1;
			vbt_ah_attr_from_peer(dev, &remote, &a.ah);
			rc = ep.qp->ops->qp_modify(ep.qp, &a, VB_QP_STATE | VB_QP_AV |
								     VB_QP_PATH_MTU | VB_QP_RQ_PSN);
			assert_int_equal(rc, -EINVAL);
			printf("%s INIT->RTR w/o DEST_QPN: %s\n", vbi_qp_type_name(types[k]),
			       vbi_errmsg());
			assert_non_null(strstr(vbi_errmsg(), "DEST_QPN"));
		} else {
			/* UD INIT: ACCESS_FLAGS is not a UD attribute */
			memset(&a, 0, sizeof(a));
			a.access = VBT_ACCESS_REMOTE_WRITE;
			rc = ep.qp->ops->qp_modify(ep.qp, &a, VB_QP_ACCESS_FLAGS);
			assert_int_equal(rc, -EINVAL);
			printf("UD INIT ACCESS_FLAGS: %s\n", vbi_errmsg());
			assert_non_null(strstr(vbi_errmsg(), "ACCESS_FLAGS"));
		}
		assert_int_equal(device_state(ep.qp), VB_QPS_INIT);
		assert_int_equal(ep.qp->mirror->transitions, 1);
		assert_int_equal(vbt_qp_state(ep.qp), VB_QPS_INIT);

		/* wait_state gives up and names the state it saw */
		rc = vbt_qp_wait_state(ep.qp, VB_QPS_RTS, 30);
		assert_int_equal(rc, -ETIMEDOUT);
		assert_non_null(strstr(vbi_errmsg(), "INIT"));
		assert_int_equal(vbt_qp_wait_state(ep.qp, VB_QPS_INIT, 30), 0);

		/* unsupported attributes are refused too */
		memset(&a, 0, sizeof(a));
		assert_int_equal(ep.qp->ops->qp_modify(ep.qp, &a, VB_QP_ALT_PATH), -EOPNOTSUPP);

		/* INIT -> RESET is legal and recorded */
		assert_int_equal(vbt_qp_set_state(ep.qp, VB_QPS_RESET), 0);
		assert_int_equal(device_state(ep.qp), VB_QPS_RESET);
		assert_int_equal(ep.qp->mirror->transitions, 2);
		th_ep_close(&ep);
	}
	assert_int_equal(th_leaks(), 0);
}

static void test_sqd_and_back(void **state)
{
	struct th_ep srv, cli;
	struct vbt_conn_param p;
	struct vbt_qp_attr a = { 0 };
	struct vbi_qp_transition t;
	struct vbt_wc wc[16];
	unsigned drained0 = ev_seen(VBT_EV_SQ_DRAINED);
	int got, i;

	vbt_conn_param_init(&p);
	p.cm_timeout_ms = 20000;
	assert_int_equal(th_ep_open(&srv, dev, VB_QPT_RC, 16, 0, 0), 0);
	assert_int_equal(th_ep_open(&cli, dev, VB_QPT_RC, 16, 0, 0), 0);
	assert_int_equal(th_pair(dev, &srv, &cli, &p, 12, 0, 0), 0);

	/* sends in flight, then SQD with the async notification */
	for (i = 0; i < 8; i++) {
		memset(th_slot(&cli, (unsigned)i), 'a' + i, 3000);
		assert_int_equal(th_post_send(&cli, (unsigned)i, 3000, VBT_WR_SEND, 0, 0), 0);
	}
	a.qp_state = VB_QPS_SQD;
	a.en_sqd_async_notify = 1;
	assert_int_equal(cli.qp->ops->qp_modify(cli.qp, &a,
						 VB_QP_STATE | VB_QP_EN_SQD_ASYNC_NOTIFY),
			 0);
	assert_int_equal(vbt_qp_state(cli.qp), VB_QPS_SQD);
	assert_int_equal(vbt_qp_wait_state(cli.qp, VB_QPS_SQD, 10000), 0);
	int drained = wait_event(VBT_EV_SQ_DRAINED, drained0, 5000);
	printf("SQD reached; SQ_DRAINED event %s\n",
	       drained ? "delivered" : "not raised by this driver");
	if (drained) {
		pthread_mutex_lock(&ev_lock);
		assert_ptr_equal(ev_last_ctx[VBT_EV_SQ_DRAINED], &cli);
		pthread_mutex_unlock(&ev_lock);
	}
	/* SQD -> RTS is legal with STATE alone; RTS -> RTR never is */
	memset(&a, 0, sizeof(a));
	a.qp_state = VB_QPS_RTR;
	assert_int_equal(cli.qp->ops->qp_modify(cli.qp, &a, VB_QP_STATE), -EINVAL);
	assert_int_equal(vbt_qp_set_state(cli.qp, VB_QPS_RTS), 0);
	assert_int_equal(vbt_qp_wait_state(cli.qp, VB_QPS_RTS, 10000), 0);

	assert_int_equal(vbi_qp_mirror_recent(cli.qp->mirror, 0, &t), 0);
	assert_int_equal(t.from, VB_QPS_SQD);
	assert_int_equal(t.to, VB_QPS_RTS);
	assert_int_equal(vbi_qp_mirror_recent(cli.qp->mirror, 1, &t), 0);
	assert_int_equal(t.from, VB_QPS_RTS);
	assert_int_equal(t.to, VB_QPS_SQD);
	assert_int_equal(cli.qp->mirror->count[VB_QPS_RTS][VB_QPS_SQD], 1);
	assert_int_equal(cli.qp->mirror->count[VB_QPS_SQD][VB_QPS_RTS], 1);
	assert_int_equal(cli.qp->mirror->transitions, 5);
	printf("RTS->SQD took %.1f us, SQD->RTS %.1f us (device time)\n",
	       cli.qp->mirror->total_ns[VB_QPS_RTS][VB_QPS_SQD] / 1e3,
	       cli.qp->mirror->total_ns[VB_QPS_SQD][VB_QPS_RTS] / 1e3);

	/* traffic again after SQD: all 8 + 4 more complete and arrive */
	for (i = 8; i < 12; i++) {
		memset(th_slot(&cli, (unsigned)i), 'a' + i, 3000);
		assert_int_equal(th_post_send(&cli, (unsigned)i, 3000, VBT_WR_SEND, 0, 0), 0);
	}
	got = th_poll(&cli, wc, 12, 20000);
	assert_int_equal(got, 12);
	for (i = 0; i < 12; i++)
		assert_int_equal(wc[i].status, VBT_WC_SUCCESS);
	got = th_poll(&srv, wc, 12, 20000);
	assert_int_equal(got, 12);
	for (i = 0; i < 12; i++) {
		assert_int_equal(wc[i].status, VBT_WC_SUCCESS);
		assert_int_equal(wc[i].byte_len, 3000);
		assert_int_equal((unsigned char)th_slot(&srv, (unsigned)i)[2999], 'a' + i);
	}

	/* ERR by hand: the posted receives flush, each exactly once */
	for (i = 0; i < 4; i++)
		assert_int_equal(th_post_recv(&srv, (unsigned)i), 0);
	assert_int_equal(vbt_qp_set_state(srv.qp, VB_QPS_ERR), 0);
	got = th_poll(&srv, wc, 4, 20000);
	assert_int_equal(got, 4);
	for (i = 0; i < 4; i++) {
		assert_int_equal(wc[i].status, VBT_WC_WR_FLUSH_ERR);
		assert_int_equal(wc[i].wr_id, 1000 + (unsigned)i);
	}
	assert_int_equal(vbt_cq_poll(srv.cq, wc, 4), 0);
	assert_int_equal(vbt_qp_state(srv.qp), VB_QPS_ERR);

	th_ep_close(&cli);
	th_ep_close(&srv);
	assert_int_equal(th_leaks(), 0);
}

static int setup(void **state)
{
	struct vbt_dev_attr a = { .ip = th_ip(), .gid_index = -1, .event_cb = on_event };

	return th_chk(vbt_dev_open(&vbt_verbs_ops, &a, &dev), "dev_open") ? -1 : 0;
}

static int teardown(void **state)
{
	dev->ops->dev_close(dev);
	return th_leaks();
}

int main(void)
{
	vbt_require_device();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_validator_refuses),
		cmocka_unit_test(test_sqd_and_back),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
