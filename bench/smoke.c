/* SPDX-License-Identifier: MIT */
#include "bench/smoke.h"

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/err.h"
#include "transport/verbs/verbs_device.h"

#define SMOKE_MSG 4096
#define SMOKE_TIMEOUT_MS 5000

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Prefer an IPv4-mapped RoCE v2 GID (rdma_cm's choice on rxe); else index 0. */
static int pick_gid(struct ibv_context *ctx, int port, int tbl_len, union ibv_gid *gid)
{
	static const uint8_t v4pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	for (int i = 0; i < tbl_len; i++) {
		union ibv_gid g;

		if (ibv_query_gid(ctx, (uint8_t)port, i, &g))
			continue;
		if (!memcmp(g.raw, v4pfx, sizeof(v4pfx))) {
			*gid = g;
			return i;
		}
	}
	if (ibv_query_gid(ctx, (uint8_t)port, 0, gid))
		return -1;
	return 0;
}

static uint32_t rand_psn(void)
{
	uint32_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)now_us();
	return v & 0xffffff;
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	double deadline = now_us() + SMOKE_TIMEOUT_MS * 1000.0;
	int got = 0;

	while (got < want) {
		int n = ibv_poll_cq(cq, want - got, wc + got);

		if (n < 0)
			return vbi_err(-EIO, "ibv_poll_cq failed");
		got += n;
		if (now_us() > deadline)
			return vbi_err(-ETIMEDOUT, "%d of %d completions after %d ms", got, want,
				       SMOKE_TIMEOUT_MS);
	}
	return 0;
}

int vb_smoke_rc(const char *device, FILE *log, struct vb_smoke_result *res,
		int (*before_teardown)(const struct vb_smoke_result *, void *), void *arg)
{
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr[2] = { NULL, NULL };
	struct ibv_qp *qp[2] = { NULL, NULL };
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	uint32_t psn[2] = { rand_psn(), rand_psn() };
	char *buf[2] = { NULL, NULL };
	double t;
	int rc, i;

	memset(res, 0, sizeof(*res));
	rc = vbi_verbs_open_device(device, &ctx);
	if (rc)
		return rc;
	snprintf(res->device, sizeof(res->device), "%s", ibv_get_device_name(ctx->device));
	if (ibv_query_port(ctx, 1, &pattr)) {
		rc = vbi_err(-EIO, "ibv_query_port(%s, 1) failed", res->device);
		goto out;
	}
	res->gid_index = pick_gid(ctx, 1, pattr.gid_tbl_len, &gid);
	if (res->gid_index < 0) {
		rc = vbi_err(-EIO, "no usable GID on %s port 1", res->device);
		goto out;
	}
	res->path_mtu = pattr.active_mtu < IBV_MTU_1024 ? pattr.active_mtu : IBV_MTU_1024;
	if (log)
		fprintf(log, "smoke: device %s port 1 state %s, gid index %d, active MTU %d\n",
			res->device, ibv_port_state_str(pattr.state), res->gid_index,
			128 << pattr.active_mtu);

	t = now_us();
	pd = ibv_alloc_pd(ctx);
	cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!pd || !cq) {
		rc = vbi_err(-ENOMEM, "ibv_alloc_pd/ibv_create_cq failed on %s", res->device);
		goto out;
	}
	for (i = 0; i < 2; i++) {
		struct ibv_qp_init_attr qia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};

		buf[i] = aligned_alloc(4096, SMOKE_MSG);
		if (!buf[i]) {
			rc = vbi_err(-ENOMEM, "buffer allocation failed");
			goto out;
		}
		memset(buf[i], 0, SMOKE_MSG);
		/* SEND/RECV buffers: local write only, no remote access. */
		mr[i] = ibv_reg_mr(pd, buf[i], SMOKE_MSG, IBV_ACCESS_LOCAL_WRITE);
		qp[i] = mr[i] ? ibv_create_qp(pd, &qia) : NULL;
		if (!mr[i] || !qp[i]) {
			rc = vbi_err(-(errno ? errno : ENOMEM), "ibv_reg_mr/ibv_create_qp: %s",
				     strerror(errno));
			goto out;
		}
		res->qpn[i] = qp[i]->qp_num;
	}
	res->us_create = now_us() - t;

	t = now_us();
	for (i = 0; i < 2; i++) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
					 .qp_access_flags = 0 };

		if ((rc = ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
							 IBV_QP_ACCESS_FLAGS))) {
			rc = vbi_err(-rc, "QP %u RESET->INIT: %s", qp[i]->qp_num, strerror(rc));
			goto out;
		}
	}
	res->us_init = (now_us() - t) / 2;

	t = now_us();
	for (i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = (enum ibv_mtu)res->path_mtu,
			.dest_qp_num = qp[1 - i]->qp_num, .rq_psn = psn[1 - i],
			.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = gid, .sgid_index = (uint8_t)res->gid_index,
					      .hop_limit = 1 } },
		};

		if ((rc = ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
							 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
							 IBV_QP_MAX_DEST_RD_ATOMIC |
							 IBV_QP_MIN_RNR_TIMER))) {
			rc = vbi_err(-rc, "QP %u INIT->RTR: %s", qp[i]->qp_num, strerror(rc));
			goto out;
		}
	}
	res->us_rtr = (now_us() - t) / 2;

	t = now_us();
	for (i = 0; i < 2; i++) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 3,
					 .rnr_retry = 3, .sq_psn = psn[i], .max_rd_atomic = 1 };

		if ((rc = ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
							 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
							 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))) {
			rc = vbi_err(-rc, "QP %u RTR->RTS: %s", qp[i]->qp_num, strerror(rc));
			goto out;
		}
	}
	res->us_rts = (now_us() - t) / 2;

	/* Exchange: B posts a receive, A sends a patterned 4 KiB message. */
	for (i = 0; i < SMOKE_MSG; i++)
		buf[0][i] = (char)(i * 7 + 3);
	t = now_us();
	{
		struct ibv_sge rs = { (uintptr_t)buf[1], SMOKE_MSG, mr[1]->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *rbad;
		struct ibv_sge ss = { (uintptr_t)buf[0], SMOKE_MSG, mr[0]->lkey };
		struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &ss, .num_sge = 1,
					   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *sbad;
		struct ibv_wc wc[2];

		if ((rc = ibv_post_recv(qp[1], &rwr, &rbad))) {
			rc = vbi_err(-rc, "ibv_post_recv: %s", strerror(rc));
			goto out;
		}
		if ((rc = ibv_post_send(qp[0], &swr, &sbad))) {
			rc = vbi_err(-rc, "ibv_post_send: %s", strerror(rc));
			goto out;
		}
		if ((rc = poll_n(cq, wc, 2)))
			goto out;
		for (i = 0; i < 2; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				rc = vbi_err(-EIO, "completion wr_id %llu: %s",
					     (unsigned long long)wc[i].wr_id,
					     ibv_wc_status_str(wc[i].status));
				goto out;
			}
			if (wc[i].wr_id == 2) {
				if (wc[i].qp_num != qp[1]->qp_num || wc[i].byte_len != SMOKE_MSG) {
					rc = vbi_err(-EIO, "receive on QP %u of %u bytes, expected QP %u, %d bytes",
						     wc[i].qp_num, wc[i].byte_len, qp[1]->qp_num, SMOKE_MSG);
					goto out;
				}
				res->bytes = wc[i].byte_len;
			}
		}
		if (memcmp(buf[0], buf[1], SMOKE_MSG)) {
			rc = vbi_err(-EIO, "payload received differs from payload sent");
			goto out;
		}
	}
	res->us_exchange = now_us() - t;
	if (log)
		fprintf(log,
			"smoke: RC QP %u <-> QP %u on %s: create %.0f us, RESET->INIT %.0f us, "
			"INIT->RTR %.0f us, RTR->RTS %.0f us; %u-byte SEND received intact in %.0f us\n",
			res->qpn[0], res->qpn[1], res->device, res->us_create, res->us_init,
			res->us_rtr, res->us_rts, res->bytes, res->us_exchange);
	if (before_teardown && (rc = before_teardown(res, arg)))
		goto out;
	rc = 0;
out:
	for (i = 0; i < 2; i++) {
		if (qp[i] && ibv_destroy_qp(qp[i]) && !rc)
			rc = vbi_err(-EBUSY, "ibv_destroy_qp failed");
		if (mr[i] && ibv_dereg_mr(mr[i]) && !rc)
			rc = vbi_err(-EBUSY, "ibv_dereg_mr failed");
		free(buf[i]);
	}
	if (cq && ibv_destroy_cq(cq) && !rc)
		rc = vbi_err(-EBUSY, "ibv_destroy_cq failed");
	if (pd && ibv_dealloc_pd(pd) && !rc)
		rc = vbi_err(-EBUSY, "ibv_dealloc_pd failed");
	if (ctx)
		ibv_close_device(ctx);
	return rc;
}
