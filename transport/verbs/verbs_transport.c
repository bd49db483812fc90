/* SPDX-License-Identifier: MIT */
/*
 * The verbs backend of struct vbt_ops: libibverbs objects behind core-side
 * types. This file holds the ops table, the checks that the core-side
 * constants equal libibverbs' (they cross the boundary unconverted), and the
 * small objects: protection domains, memory regions, address handles and
 * the address-vector conversions. The rest of the backend, by object:
 * verbs_dev.c (devices, async events), verbs_cq.c (completion queues),
 * verbs_qp.c (queue pairs: state validator, posting), verbs_cm.c
 * (connection set-up), verbs_mcast.c (multicast).
 *
 * Thread-safety: see the synchronization table in transport/transport.h.
 * Nothing in this file takes a lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "transport/verbs/verbs_priv.h"

/* The core-side constants cross the boundary unconverted. */
_Static_assert(VB_QPS_RESET == (int)IBV_QPS_RESET && VB_QPS_INIT == (int)IBV_QPS_INIT &&
		       VB_QPS_RTR == (int)IBV_QPS_RTR && VB_QPS_RTS == (int)IBV_QPS_RTS &&
		       VB_QPS_SQD == (int)IBV_QPS_SQD && VB_QPS_SQE == (int)IBV_QPS_SQE &&
		       VB_QPS_ERR == (int)IBV_QPS_ERR,
	       "qp states");
_Static_assert(VB_QP_STATE == (int)IBV_QP_STATE && VB_QP_CUR_STATE == (int)IBV_QP_CUR_STATE &&
		       VB_QP_EN_SQD_ASYNC_NOTIFY == (int)IBV_QP_EN_SQD_ASYNC_NOTIFY &&
		       VB_QP_ACCESS_FLAGS == (int)IBV_QP_ACCESS_FLAGS &&
		       VB_QP_PKEY_INDEX == (int)IBV_QP_PKEY_INDEX && VB_QP_PORT == (int)IBV_QP_PORT &&
		       VB_QP_QKEY == (int)IBV_QP_QKEY && VB_QP_AV == (int)IBV_QP_AV &&
		       VB_QP_PATH_MTU == (int)IBV_QP_PATH_MTU && VB_QP_TIMEOUT == (int)IBV_QP_TIMEOUT &&
		       VB_QP_RETRY_CNT == (int)IBV_QP_RETRY_CNT &&
		       VB_QP_RNR_RETRY == (int)IBV_QP_RNR_RETRY && VB_QP_RQ_PSN == (int)IBV_QP_RQ_PSN &&
		       VB_QP_MAX_QP_RD_ATOMIC == (int)IBV_QP_MAX_QP_RD_ATOMIC &&
		       VB_QP_ALT_PATH == (int)IBV_QP_ALT_PATH &&
		       VB_QP_MIN_RNR_TIMER == (int)IBV_QP_MIN_RNR_TIMER &&
		       VB_QP_SQ_PSN == (int)IBV_QP_SQ_PSN &&
		       VB_QP_MAX_DEST_RD_ATOMIC == (int)IBV_QP_MAX_DEST_RD_ATOMIC &&
		       VB_QP_PATH_MIG_STATE == (int)IBV_QP_PATH_MIG_STATE && VB_QP_CAP == (int)IBV_QP_CAP &&
		       VB_QP_DEST_QPN == (int)IBV_QP_DEST_QPN &&
		       VB_QP_RATE_LIMIT == (int)IBV_QP_RATE_LIMIT,
	       "qp attr mask bits");
_Static_assert((int)VBT_ACCESS_LOCAL_WRITE == (int)IBV_ACCESS_LOCAL_WRITE &&
		       (int)VBT_ACCESS_REMOTE_WRITE == (int)IBV_ACCESS_REMOTE_WRITE &&
		       (int)VBT_ACCESS_REMOTE_READ == (int)IBV_ACCESS_REMOTE_READ &&
		       (int)VBT_ACCESS_REMOTE_ATOMIC == (int)IBV_ACCESS_REMOTE_ATOMIC,
	       "access flags");
_Static_assert(VBT_MTU_256 == (int)IBV_MTU_256 && VBT_MTU_4096 == (int)IBV_MTU_4096, "mtu");
_Static_assert(VBT_PORT_DOWN == (int)IBV_PORT_DOWN && VBT_PORT_ACTIVE == (int)IBV_PORT_ACTIVE,
	       "port state");
_Static_assert(VBT_WC_SUCCESS == (int)IBV_WC_SUCCESS &&
		       VBT_WC_WR_FLUSH_ERR == (int)IBV_WC_WR_FLUSH_ERR &&
		       VBT_WC_RETRY_EXC_ERR == (int)IBV_WC_RETRY_EXC_ERR &&
		       VBT_WC_RNR_RETRY_EXC_ERR == (int)IBV_WC_RNR_RETRY_EXC_ERR &&
		       VBT_WC_GENERAL_ERR == (int)IBV_WC_GENERAL_ERR,
	       "wc status");
_Static_assert((int)VBT_SEND_FENCE == (int)IBV_SEND_FENCE && (int)VBT_SEND_SIGNALED == (int)IBV_SEND_SIGNALED &&
		       (int)VBT_SEND_SOLICITED == (int)IBV_SEND_SOLICITED && (int)VBT_SEND_INLINE == (int)IBV_SEND_INLINE,
	       "send flags");
_Static_assert(sizeof(struct vbt_sge) == sizeof(struct ibv_sge) &&
		       offsetof(struct vbt_sge, addr) == offsetof(struct ibv_sge, addr) &&
		       offsetof(struct vbt_sge, length) == offsetof(struct ibv_sge, length) &&
		       offsetof(struct vbt_sge, lkey) == offsetof(struct ibv_sge, lkey),
	       "sge layout");

/* WRs converted per ibv_post_* call (on the stack; longer chains loop). */

/* ---- PD, MR ---------------------------------------------------------- */

static int v_pd_alloc(struct vbt_dev *dev, struct vbt_pd **out)
{
	struct vbv_pd *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p)
		return vbi_err(-ENOMEM, "out of memory");
	errno = 0;
	p->pd = ibv_alloc_pd(to_vdev(dev)->ctx);
	if (!p->pd) {
		int rc = vbv_errno_or(ENOMEM);

		free(p);
		return vbi_err(rc, "ibv_alloc_pd(%s): %s", dev->caps.name, strerror(-rc));
	}
	p->core.ops = dev->ops;
	p->core.dev = dev;
	*out = &p->core;
	return 0;
}

static int v_pd_free(struct vbt_pd *pd)
{
	struct vbv_pd *p = to_vpd(pd);
	int rc = ibv_dealloc_pd(p->pd);

	if (rc)
		return vbi_err(-rc, "ibv_dealloc_pd: %s (objects still use it?)", strerror(rc));
	free(p);
	return 0;
}

static int v_mr_reg(struct vbt_pd *pd, void *addr, size_t len, unsigned access,
		    struct vbt_mr **out)
{
	struct vbv_mr *m;

	*out = NULL;
	if (!addr || !len)
		return vbi_err(-EINVAL, "mr_reg: empty range");
	if (access & ~(unsigned)(VBT_ACCESS_LOCAL_WRITE | VBT_ACCESS_REMOTE_WRITE |
				 VBT_ACCESS_REMOTE_READ | VBT_ACCESS_REMOTE_ATOMIC))
		return vbi_err(-EINVAL, "mr_reg: unknown access bits 0x%x", access);
	m = calloc(1, sizeof(*m));
	if (!m)
		return vbi_err(-ENOMEM, "out of memory");
	errno = 0;
	m->mr = ibv_reg_mr(to_vpd(pd)->pd, addr, len, (int)access);
	if (!m->mr) {
		int rc = vbv_errno_or(ENOMEM);

		free(m);
		return vbi_err(rc, "ibv_reg_mr(%p, %zu, 0x%x): %s", addr, len, access,
			       strerror(-rc));
	}
	m->core.ops = pd->ops;
	m->core.pd = pd;
	m->core.addr = addr;
	m->core.length = len;
	m->core.lkey = m->mr->lkey;
	m->core.rkey = m->mr->rkey;
	m->core.access = access;
	*out = &m->core;
	return 0;
}

static int v_mr_dereg(struct vbt_mr *mr)
{
	struct vbv_mr *m = to_vmr(mr);
	int rc = ibv_dereg_mr(m->mr);

	if (rc)
		return vbi_err(-rc, "ibv_dereg_mr: %s", strerror(rc));
	free(m);
	return 0;
}

/* ---- AH -------------------------------------------------------------- */

void vbv_ah_to_ibv(const struct vbt_ah_attr *a, struct ibv_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->grh.dgid.raw, a->dgid, 16);
	o->grh.flow_label = a->flow_label;
	o->grh.sgid_index = a->sgid_index;
	o->grh.hop_limit = a->hop_limit;
	o->grh.traffic_class = a->traffic_class;
	o->is_global = a->is_global;
	o->dlid = a->dlid;
	o->sl = a->sl;
	o->src_path_bits = a->src_path_bits;
	o->static_rate = a->static_rate;
	o->port_num = a->port_num;
}

void vbv_ah_from_ibv(const struct ibv_ah_attr *a, struct vbt_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->dgid, a->grh.dgid.raw, 16);
	o->flow_label = a->grh.flow_label;
	o->sgid_index = a->grh.sgid_index;
	o->hop_limit = a->grh.hop_limit;
	o->traffic_class = a->grh.traffic_class;
	o->is_global = a->is_global;
	o->dlid = a->dlid;
	o->sl = a->sl;
	o->src_path_bits = a->src_path_bits;
	o->static_rate = a->static_rate;
	o->port_num = a->port_num;
}

static int v_ah_create(struct vbt_pd *pd, const struct vbt_ah_attr *attr, struct vbt_ah **out)
{
	struct vbv_ah *a = calloc(1, sizeof(*a));
	struct ibv_ah_attr ia;

	*out = NULL;
	if (!a)
		return vbi_err(-ENOMEM, "out of memory");
	vbv_ah_to_ibv(attr, &ia);
	errno = 0;
	a->ah = ibv_create_ah(to_vpd(pd)->pd, &ia);
	if (!a->ah) {
		int rc = vbv_errno_or(EINVAL);

		free(a);
		return vbi_err(rc, "ibv_create_ah(sgid index %u): %s", attr->sgid_index,
			       strerror(-rc));
	}
	a->core.ops = pd->ops;
	a->core.pd = pd;
	*out = &a->core;
	return 0;
}

static int v_ah_destroy(struct vbt_ah *ah)
{
	struct vbv_ah *a = to_vah(ah);
	int rc = ibv_destroy_ah(a->ah);

	if (rc)
		return vbi_err(rc > 0 ? -rc : -EIO, "ibv_destroy_ah: %s", strerror(rc > 0 ? rc : EIO));
	free(a);
	return 0;
}

const struct vbt_ops vbt_verbs_ops = {
	.name = "verbs",
	.dev_open = vbv_dev_open,
	.dev_close = vbv_dev_close,
	.dev_query = vbv_dev_query,
	.pd_alloc = v_pd_alloc,
	.pd_free = v_pd_free,
	.mr_reg = v_mr_reg,
	.mr_dereg = v_mr_dereg,
	.cq_create = vbv_cq_create,
	.cq_destroy = vbv_cq_destroy,
	.cq_poll = vbv_cq_poll,
	.cq_arm = vbv_cq_arm,
	.cq_wait = vbv_cq_wait,
	.cq_wait_any = vbv_cq_wait_any,
	.qp_create = vbv_qp_create,
	.qp_modify = vbv_qp_modify,
	.qp_query = vbv_qp_query,
	.qp_destroy = vbv_qp_destroy,
	.post_send = vbv_post_send,
	.post_recv = vbv_post_recv,
	.ah_create = v_ah_create,
	.ah_destroy = v_ah_destroy,
	.listen = vbv_listen,
	.listener_close = vbv_listener_close,
	.accept = vbv_accept,
	.connect = vbv_connect,
	.conn_close = vbv_conn_close,
	.listener_fd = vbv_listener_fd,
	.accept_start = vbv_accept_start,
	.connect_start = vbv_connect_start,
	.conn_step = vbv_conn_step,
	.conn_fd = vbv_conn_fd,
	.mcast_join = vbv_mcast_join,
	.mcast_leave = vbv_mcast_leave,
};
