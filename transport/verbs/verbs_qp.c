/* SPDX-License-Identifier: MIT */
/*
 * The verbs backend's queue pairs: create, the QP state validator in front
 * of every ibv_modify_qp (core/qp_fsm: a transition the state machine
 * refuses never reaches the device), query (which resynchronizes the
 * mirror with the device), destroy, and posting send and receive work
 * requests (converted in batches on the stack).
 *
 * Thread-safety: see the synchronization table in transport/transport.h.
 * qp_modify/qp_query take the QP's mutex (never held while calling back
 * into the user or while destroying); posting takes no lock.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/log.h"
#include "transport/verbs/verbs_priv.h"

/* WRs converted per ibv_post_* call (on the stack; longer chains loop). */
#define VBV_POST_BATCH 32

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const enum ibv_qp_type qpt_to_ibv[VB_QPT__COUNT] = {
	[VB_QPT_RC] = IBV_QPT_RC,
	[VB_QPT_UC] = IBV_QPT_UC,
	[VB_QPT_UD] = IBV_QPT_UD,
};

/* ---- QP -------------------------------------------------------------- */

int vbv_qp_create(struct vbt_pd *pd, const struct vbt_qp_init_attr *attr, struct vbt_qp **out)
{
	const struct vbt_dev_caps *c = &pd->dev->caps;
	struct vbv_qp *q;
	struct ibv_qp_init_attr ia;
	int rc;

	*out = NULL;
	if ((unsigned)attr->type >= VB_QPT__COUNT)
		return vbi_err(-EINVAL, "qp_create: unknown QP type %d", (int)attr->type);
	if (!attr->send_cq || !attr->recv_cq)
		return vbi_err(-EINVAL, "qp_create: send and receive CQs are required");
	if (attr->cap.max_send_wr > c->max_qp_wr || attr->cap.max_recv_wr > c->max_qp_wr ||
	    attr->cap.max_send_sge > c->max_sge || attr->cap.max_recv_sge > c->max_sge ||
	    attr->cap.max_inline_data > c->max_inline_data)
		return vbi_err(-EINVAL,
			       "qp_create: asked send_wr %u recv_wr %u send_sge %u recv_sge %u "
			       "inline %u; %s allows wr %u sge %u inline %u",
			       attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
			       attr->cap.max_recv_sge, attr->cap.max_inline_data, c->name,
			       c->max_qp_wr, c->max_sge, c->max_inline_data);
	q = calloc(1, sizeof(*q));
	if (!q)
		return vbi_err(-ENOMEM, "out of memory");
	memset(&ia, 0, sizeof(ia));
	ia.qp_context = q;
	ia.send_cq = to_vcq(attr->send_cq)->cq;
	ia.recv_cq = to_vcq(attr->recv_cq)->cq;
	ia.qp_type = qpt_to_ibv[attr->type];
	ia.sq_sig_all = !!attr->sq_sig_all;
	ia.cap.max_send_wr = attr->cap.max_send_wr;
	ia.cap.max_recv_wr = attr->cap.max_recv_wr;
	ia.cap.max_send_sge = attr->cap.max_send_sge;
	ia.cap.max_recv_sge = attr->cap.max_recv_sge;
	ia.cap.max_inline_data = attr->cap.max_inline_data;
	errno = 0;
	q->qp = ibv_create_qp(to_vpd(pd)->pd, &ia);
	if (!q->qp) {
		rc = vbi_err(vbv_errno_or(ENOMEM), "ibv_create_qp(%s, send_wr %u recv_wr %u): %s",
			     vbi_qp_type_name(attr->type), attr->cap.max_send_wr,
			     attr->cap.max_recv_wr, strerror(errno));
		free(q);
		return rc;
	}
	pthread_mutex_init(&q->lock, NULL);
	vbi_qp_mirror_init(&q->mirror, attr->type);
	q->core.ops = pd->ops;
	q->core.pd = pd;
	q->core.type = attr->type;
	q->core.qpn = q->qp->qp_num;
	q->core.send_cq = attr->send_cq;
	q->core.recv_cq = attr->recv_cq;
	q->core.cap.max_send_wr = ia.cap.max_send_wr;
	q->core.cap.max_recv_wr = ia.cap.max_recv_wr;
	q->core.cap.max_send_sge = ia.cap.max_send_sge;
	q->core.cap.max_recv_sge = ia.cap.max_recv_sge;
	q->core.cap.max_inline_data = ia.cap.max_inline_data;
	q->core.user_ctx = attr->user_ctx;
	q->core.state = VB_QPS_RESET;
	q->core.mirror = &q->mirror;
	__atomic_fetch_add(&to_vdev(pd->dev)->published, 1, __ATOMIC_RELEASE);
	*out = &q->core;
	return 0;
}

static void attr_to_ibv(const struct vbt_qp_attr *a, struct ibv_qp_attr *o)
{
	memset(o, 0, sizeof(*o));
	o->qp_state = (enum ibv_qp_state)a->qp_state;
	o->cur_qp_state = (enum ibv_qp_state)a->cur_qp_state;
	o->en_sqd_async_notify = a->en_sqd_async_notify;
	o->qp_access_flags = a->access;
	o->pkey_index = a->pkey_index;
	o->port_num = a->port_num;
	o->qkey = a->qkey;
	vbv_ah_to_ibv(&a->ah, &o->ah_attr);
	o->path_mtu = (enum ibv_mtu)a->path_mtu;
	o->timeout = a->timeout;
	o->retry_cnt = a->retry_cnt;
	o->rnr_retry = a->rnr_retry;
	o->rq_psn = a->rq_psn;
	o->max_rd_atomic = a->max_rd_atomic;
	o->min_rnr_timer = a->min_rnr_timer;
	o->sq_psn = a->sq_psn;
	o->max_dest_rd_atomic = a->max_dest_rd_atomic;
	o->cap.max_send_wr = a->cap.max_send_wr;
	o->cap.max_recv_wr = a->cap.max_recv_wr;
	o->cap.max_send_sge = a->cap.max_send_sge;
	o->cap.max_recv_sge = a->cap.max_recv_sge;
	o->cap.max_inline_data = a->cap.max_inline_data;
	o->dest_qp_num = a->dest_qp_num;
}

static void attr_from_ibv(const struct ibv_qp_attr *a, struct vbt_qp_attr *o)
{
	memset(o, 0, sizeof(*o));
	o->qp_state = (enum vb_qp_state)a->qp_state;
	o->cur_qp_state = (enum vb_qp_state)a->cur_qp_state;
	o->en_sqd_async_notify = a->en_sqd_async_notify;
	o->sq_draining = a->sq_draining;
	o->access = (unsigned)a->qp_access_flags;
	o->pkey_index = a->pkey_index;
	o->port_num = a->port_num;
	o->qkey = a->qkey;
	vbv_ah_from_ibv(&a->ah_attr, &o->ah);
	o->path_mtu = (uint8_t)a->path_mtu;
	o->timeout = a->timeout;
	o->retry_cnt = a->retry_cnt;
	o->rnr_retry = a->rnr_retry;
	o->rq_psn = a->rq_psn;
	o->max_rd_atomic = a->max_rd_atomic;
	o->min_rnr_timer = a->min_rnr_timer;
	o->sq_psn = a->sq_psn;
	o->max_dest_rd_atomic = a->max_dest_rd_atomic;
	o->cap.max_send_wr = a->cap.max_send_wr;
	o->cap.max_recv_wr = a->cap.max_recv_wr;
	o->cap.max_send_sge = a->cap.max_send_sge;
	o->cap.max_recv_sge = a->cap.max_recv_sge;
	o->cap.max_inline_data = a->cap.max_inline_data;
	o->dest_qp_num = a->dest_qp_num;
}

int vbv_qp_modify(struct vbt_qp *qp, const struct vbt_qp_attr *attr, uint32_t mask)
{
	struct vbv_qp *q = to_vqp(qp);
	struct ibv_qp_attr ia;
	enum vb_qp_state from, to;
	uint64_t t0, dt;
	char mstr[256];
	int rc;

	if (mask & (VB_QP_ALT_PATH | VB_QP_PATH_MIG_STATE | VB_QP_RATE_LIMIT)) {
		vbi_qp_mask_str(mask & (VB_QP_ALT_PATH | VB_QP_PATH_MIG_STATE | VB_QP_RATE_LIMIT),
				mstr, sizeof(mstr));
		return vbi_err(-EOPNOTSUPP, "QP %u: attributes %s are not carried by verbus",
			       qp->qpn, mstr);
	}
	pthread_mutex_lock(&q->lock);
	from = q->mirror.state;
	to = (mask & VB_QP_STATE) ? attr->qp_state : from;
	rc = vbi_qp_fsm_check(qp->type, from, to, mask);
	if (rc) {
		pthread_mutex_unlock(&q->lock);
		return vbi_err_prefix(rc, "QP %u: refused before the device saw it", qp->qpn);
	}
	attr_to_ibv(attr, &ia);
	t0 = now_ns();
	rc = ibv_modify_qp(q->qp, &ia, (int)mask);
	dt = now_ns() - t0;
	if (rc) {
		/* Positive errno by contract; some providers return -1 + errno. */
		rc = rc > 0 ? -rc : vbv_errno_or(EIO);
		pthread_mutex_unlock(&q->lock);
		vbi_qp_mask_str(mask, mstr, sizeof(mstr));
		return vbi_err(rc, "QP %u (%s) %s->%s, mask %s: ibv_modify_qp: %s", qp->qpn,
			       vbi_qp_type_name(qp->type), vbi_qp_state_name(from),
			       vbi_qp_state_name(to), mstr, strerror(-rc));
	}
	if (vbi_qp_mirror_record(&q->mirror, from, to, dt))
		vbi_qp_mirror_set(&q->mirror, to); /* validated above: cannot happen */
	if (qp->pd->dev->qp_timing)
		vbi_qp_timing_record(qp->pd->dev->qp_timing, from, to, dt);
	__atomic_store_n(&qp->state, to, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q->lock);
	vbi_debug("QP %u %s->%s in %.1f us", qp->qpn, vbi_qp_state_name(from),
		  vbi_qp_state_name(to), dt / 1e3);
	return 0;
}

int vbv_qp_query(struct vbt_qp *qp, struct vbt_qp_attr *attr, uint32_t mask)
{
	struct vbv_qp *q = to_vqp(qp);
	struct ibv_qp_attr ia;
	struct ibv_qp_init_attr init;
	int rc;

	memset(&ia, 0, sizeof(ia));
	pthread_mutex_lock(&q->lock);
	rc = ibv_query_qp(q->qp, &ia, (int)(mask | VB_QP_STATE), &init);
	if (rc) {
		pthread_mutex_unlock(&q->lock);
		rc = rc > 0 ? -rc : vbv_errno_or(EIO);
		return vbi_err(rc, "QP %u: ibv_query_qp: %s", qp->qpn, strerror(-rc));
	}
	if ((enum vb_qp_state)ia.qp_state != q->mirror.state) {
		vbi_debug("QP %u: device reports %s, mirror had %s", qp->qpn,
			  vbi_qp_state_name((enum vb_qp_state)ia.qp_state),
			  vbi_qp_state_name(q->mirror.state));
		vbi_qp_mirror_set(&q->mirror, (enum vb_qp_state)ia.qp_state);
		__atomic_store_n(&qp->state, (enum vb_qp_state)ia.qp_state, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&q->lock);
	attr_from_ibv(&ia, attr);
	return 0;
}

int vbv_qp_destroy(struct vbt_qp *qp)
{
	struct vbv_qp *q = to_vqp(qp);
	/* Not under q->lock: ibv_destroy_qp waits for the acknowledgement of
	 * this QP's async events, and the event thread may need the lock. */
	int rc = ibv_destroy_qp(q->qp);

	if (rc) {
		rc = rc > 0 ? -rc : vbv_errno_or(EIO);
		return vbi_err(rc, "QP %u: ibv_destroy_qp: %s", qp->qpn, strerror(-rc));
	}
	pthread_mutex_destroy(&q->lock);
	free(q);
	return 0;
}

/* ---- posting ---------------------------------------------------------- */

static const enum ibv_wr_opcode wr_op[] = {
	[VBT_WR_SEND] = IBV_WR_SEND,
	[VBT_WR_SEND_WITH_IMM] = IBV_WR_SEND_WITH_IMM,
	[VBT_WR_RDMA_WRITE] = IBV_WR_RDMA_WRITE,
	[VBT_WR_RDMA_WRITE_WITH_IMM] = IBV_WR_RDMA_WRITE_WITH_IMM,
};

static int post_err(struct vbt_qp *qp, int rc, const char *what)
{
	if (rc == ENOMEM)
		return vbi_err(-EAGAIN, "QP %u: %s queue full", qp->qpn, what);
	return vbi_err(rc > 0 ? -rc : -EIO, "QP %u: ibv_post_%s: %s", qp->qpn, what,
		       strerror(rc > 0 ? rc : EIO));
}

int vbv_post_send(struct vbt_qp *qp, const struct vbt_send_wr *wr,
		  const struct vbt_send_wr **bad)
{
	struct ibv_qp *iqp = to_vqp(qp)->qp;
	struct ibv_send_wr w[VBV_POST_BATCH], *ibad = NULL;
	const struct vbt_send_wr *src[VBV_POST_BATCH];

	while (wr) {
		int n = 0, rc;

		for (; wr && n < VBV_POST_BATCH; wr = wr->next, n++) {
			struct ibv_send_wr *o = &w[n];

			if ((unsigned)wr->opcode > VBT_WR_RDMA_WRITE_WITH_IMM ||
			    (qp->type == VB_QPT_UD && (!wr->ah || wr->opcode > VBT_WR_SEND_WITH_IMM))) {
				if (n) {
					w[n - 1].next = NULL;
					if ((rc = ibv_post_send(iqp, w, &ibad))) {
						*bad = src[ibad - w];
						return post_err(qp, rc, "send");
					}
				}
				*bad = wr;
				return vbi_err(-EINVAL, "QP %u (%s): bad send WR (opcode %d, ah %p)",
					       qp->qpn, vbi_qp_type_name(qp->type), (int)wr->opcode,
					       (void *)wr->ah);
			}
			src[n] = wr;
			o->wr_id = wr->wr_id;
			o->next = &w[n + 1];
			o->sg_list = (struct ibv_sge *)wr->sg_list;
			o->num_sge = wr->num_sge;
			o->opcode = wr_op[wr->opcode];
			o->send_flags = wr->flags;
			o->imm_data = htobe32(wr->imm_data);
			if (qp->type == VB_QPT_UD) {
				o->wr.ud.ah = to_vah(wr->ah)->ah;
				o->wr.ud.remote_qpn = wr->remote_qpn;
				o->wr.ud.remote_qkey = wr->remote_qkey;
			} else {
				o->wr.rdma.remote_addr = wr->remote_addr;
				o->wr.rdma.rkey = wr->rkey;
			}
		}
		w[n - 1].next = NULL;
		if ((rc = ibv_post_send(iqp, w, &ibad))) {
			*bad = ibad ? src[ibad - w] : src[0];
			return post_err(qp, rc, "send");
		}
	}
	return 0;
}

int vbv_post_recv(struct vbt_qp *qp, const struct vbt_recv_wr *wr,
		  const struct vbt_recv_wr **bad)
{
	struct ibv_qp *iqp = to_vqp(qp)->qp;
	struct ibv_recv_wr w[VBV_POST_BATCH], *ibad = NULL;
	const struct vbt_recv_wr *src[VBV_POST_BATCH];

	while (wr) {
		int n = 0, rc;

		for (; wr && n < VBV_POST_BATCH; wr = wr->next, n++) {
			src[n] = wr;
			w[n].wr_id = wr->wr_id;
			w[n].next = &w[n + 1];
			w[n].sg_list = (struct ibv_sge *)wr->sg_list;
			w[n].num_sge = wr->num_sge;
		}
		w[n - 1].next = NULL;
		if ((rc = ibv_post_recv(iqp, w, &ibad))) {
			*bad = ibad ? src[ibad - w] : src[0];
			return post_err(qp, rc, "recv");
		}
	}
	return 0;
}

