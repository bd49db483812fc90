/* SPDX-License-Identifier: MIT */
/*
 * Backend-independent helpers on top of struct vbt_ops: connection knobs,
 * local parameters, the explicit RESET->INIT->RTR->RTS transitions and the
 * wait-for-state loop. Thread-safety: as the ops they call (qp_modify is
 * serialized per QP by the backend); no state of their own.
 */
#include "transport/transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/mempool.h"
#include "core/qp_fsm.h"

/* The pool registers with VB_ACCESS_* through mr_reg (VBT_ACCESS_*). */
_Static_assert(VB_ACCESS_LOCAL_WRITE == VBT_ACCESS_LOCAL_WRITE &&
		       VB_ACCESS_REMOTE_WRITE == VBT_ACCESS_REMOTE_WRITE &&
		       VB_ACCESS_REMOTE_READ == VBT_ACCESS_REMOTE_READ &&
		       VB_ACCESS_REMOTE_ATOMIC == VBT_ACCESS_REMOTE_ATOMIC,
	       "mempool and transport access bits differ");

/* rdma_cm's default UD Q_Key (RDMA_UDP_QKEY): never ours. */
#define VBT_DEFAULT_QKEY 0x01234567u

/* A uint8_t knob of the table (its range fits). */
static void env_u8(enum vbi_cfg_id id, uint8_t *out)
{
	unsigned v = 0;

	vbi_cfg_unsigned(id, &v);
	*out = (uint8_t)v;
}

void vbt_conn_param_init(struct vbt_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	/* 4.096 us x 2^14 = 67 ms per try, 4 tries: a dead peer is reported
	 * after ~268 ms on hardware (rxe rounds the timer to jiffies); the
	 * defaults are the table's (core/config.c). */
	env_u8(VBI_CFG_QP_TIMEOUT, &p->timeout);
	env_u8(VBI_CFG_QP_RETRY_CNT, &p->retry_cnt);
	env_u8(VBI_CFG_QP_RNR_RETRY, &p->rnr_retry);
	env_u8(VBI_CFG_QP_MIN_RNR_TIMER, &p->min_rnr_timer);
	p->max_rd_atomic = 1;
	p->max_dest_rd_atomic = 1;
	vbi_cfg_unsigned(VBI_CFG_UD_QKEY, &p->qkey);
	vbi_cfg_int(VBI_CFG_CM_TIMEOUT_MS, &p->cm_timeout_ms);
}

uint64_t vbt_conn_param_detect_us(const struct vbt_conn_param *p)
{
	if (p->retry_cnt >= 7)
		return UINT64_MAX;
	/* 4.096 us = 4096 ns; timeout 0 means "infinite" in IB too. */
	if (p->timeout == 0)
		return UINT64_MAX;
	return (4096ull << p->timeout) * (p->retry_cnt + 1u) / 1000u;
}

static uint32_t rand32(void)
{
	uint32_t v;
	struct timespec ts;

	if (getrandom(&v, sizeof(v), 0) == (ssize_t)sizeof(v))
		return v;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)(ts.tv_nsec ^ (ts.tv_sec * 2654435761u));
}

int vbt_qp_local_peer(struct vbt_qp *qp, uint32_t qkey, struct vbt_peer *out)
{
	const struct vbt_dev *dev = qp->pd->dev;

	memset(out, 0, sizeof(*out));
	out->qpn = qp->qpn;
	out->psn = rand32() & 0xffffff;
	if (!qkey && qp->type == VB_QPT_UD && vbt_qp_state(qp) != VB_QPS_RESET) {
		/* Past RESET (e.g. parked in a pool) the Q_Key is already set. */
		struct vbt_qp_attr a;
		int rc = qp->ops->qp_query(qp, &a, VB_QP_QKEY);

		if (rc)
			return rc;
		qkey = a.qkey;
	}
	if (!qkey) {
		/* MSB set = controlled Q_Key (privileged): keep it clear. */
		do
			qkey = rand32() & 0x7fffffff;
		while (!qkey || qkey == VBT_DEFAULT_QKEY);
	}
	out->qkey = qkey;
	memcpy(out->gid, dev->caps.gid, sizeof(out->gid));
	out->mtu = dev->caps.active_mtu;
	out->type = (uint8_t)qp->type;
	return 0;
}

void vbt_ah_attr_from_peer(const struct vbt_dev *dev, const struct vbt_peer *remote,
			   struct vbt_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	memcpy(ah->dgid, remote->gid, sizeof(ah->dgid));
	ah->is_global = 1;
	ah->sgid_index = (uint8_t)dev->caps.gid_index;
	ah->hop_limit = 64;
	ah->port_num = dev->caps.port;
}

int vbt_qp_to_init(struct vbt_qp *qp, const struct vbt_conn_param *p,
		   const struct vbt_peer *local)
{
	struct vbt_qp_attr a = { 0 };
	uint32_t mask = VB_QP_STATE | VB_QP_PKEY_INDEX | VB_QP_PORT;

	a.qp_state = VB_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = qp->pd->dev->caps.port;
	if (qp->type == VB_QPT_UD) {
		a.qkey = local->qkey;
		mask |= VB_QP_QKEY;
	} else {
		a.access = p->access;
		mask |= VB_QP_ACCESS_FLAGS;
	}
	return qp->ops->qp_modify(qp, &a, mask);
}

int vbt_qp_to_rtr(struct vbt_qp *qp, const struct vbt_conn_param *p,
		  const struct vbt_peer *local, const struct vbt_peer *remote)
{
	struct vbt_qp_attr a = { 0 };
	uint32_t mask = VB_QP_STATE;

	a.qp_state = VB_QPS_RTR;
	if (qp->type != VB_QPT_UD) {
		uint8_t mtu = local->mtu < remote->mtu ? local->mtu : remote->mtu;

		if (p->mtu && p->mtu < mtu)
			mtu = p->mtu;
		if (mtu < VBT_MTU_256 || mtu > VBT_MTU_4096)
			return vbi_err(-EINVAL, "QP %u: no usable path MTU (local %u, remote %u)",
				       qp->qpn, local->mtu, remote->mtu);
		vbt_ah_attr_from_peer(qp->pd->dev, remote, &a.ah);
		a.path_mtu = mtu;
		a.dest_qp_num = remote->qpn;
		a.rq_psn = remote->psn;
		mask |= VB_QP_AV | VB_QP_PATH_MTU | VB_QP_DEST_QPN | VB_QP_RQ_PSN;
		if (qp->type == VB_QPT_RC) {
			a.max_dest_rd_atomic = p->max_dest_rd_atomic;
			a.min_rnr_timer = p->min_rnr_timer;
			mask |= VB_QP_MAX_DEST_RD_ATOMIC | VB_QP_MIN_RNR_TIMER;
		}
	}
	return qp->ops->qp_modify(qp, &a, mask);
}

int vbt_qp_to_rts(struct vbt_qp *qp, const struct vbt_conn_param *p,
		  const struct vbt_peer *local)
{
	struct vbt_qp_attr a = { 0 };
	uint32_t mask = VB_QP_STATE | VB_QP_SQ_PSN;

	a.qp_state = VB_QPS_RTS;
	a.sq_psn = local->psn;
	if (qp->type == VB_QPT_RC) {
		a.timeout = p->timeout;
		a.retry_cnt = p->retry_cnt;
		a.rnr_retry = p->rnr_retry;
		a.max_rd_atomic = p->max_rd_atomic;
		mask |= VB_QP_TIMEOUT | VB_QP_RETRY_CNT | VB_QP_RNR_RETRY | VB_QP_MAX_QP_RD_ATOMIC;
	}
	return qp->ops->qp_modify(qp, &a, mask);
}

int vbt_qp_bring_up(struct vbt_qp *qp, const struct vbt_conn_param *p,
		    const struct vbt_peer *local, const struct vbt_peer *remote)
{
	int rc;

	switch (vbt_qp_state(qp)) {
	case VB_QPS_RESET:
		if ((rc = vbt_qp_to_init(qp, p, local)))
			return rc;
		/* fall through */
	case VB_QPS_INIT:
		if (qp->type != VB_QPT_UD && !remote)
			return vbi_err(-EINVAL, "QP %u: INIT->RTR needs the remote parameters",
				       qp->qpn);
		if ((rc = vbt_qp_to_rtr(qp, p, local, remote)))
			return rc;
		/* fall through */
	case VB_QPS_RTR:
		return vbt_qp_to_rts(qp, p, local);
	case VB_QPS_RTS:
		return 0;
	default:
		return vbi_err(-EINVAL, "QP %u (%s) is in %s: reset it before bringing it up",
			       qp->qpn, vbi_qp_type_name(qp->type),
			       vbi_qp_state_name(vbt_qp_state(qp)));
	}
}

int vbt_qp_set_state(struct vbt_qp *qp, enum vb_qp_state state)
{
	struct vbt_qp_attr a = { 0 };

	a.qp_state = state;
	return qp->ops->qp_modify(qp, &a, VB_QP_STATE);
}

int vbt_qp_wait_state(struct vbt_qp *qp, enum vb_qp_state state, int timeout_ms)
{
	struct timespec start, now, nap = { 0, 1000000 };
	struct vbt_qp_attr a;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		rc = qp->ops->qp_query(qp, &a, VB_QP_STATE);
		if (rc)
			return rc;
		if (a.qp_state == state)
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (ms >= timeout_ms)
			return vbi_err(-ETIMEDOUT, "QP %u still in %s after %d ms (waiting for %s)",
				       qp->qpn, vbi_qp_state_name(a.qp_state), timeout_ms,
				       vbi_qp_state_name(state));
		nanosleep(&nap, NULL);
	}
}

const char *vbt_event_name(enum vbt_event_type t)
{
	static const char *const names[VBT_EV__COUNT] = {
		[VBT_EV_QP_FATAL] = "QP_FATAL",
		[VBT_EV_QP_REQ_ERR] = "QP_REQ_ERR",
		[VBT_EV_QP_ACCESS_ERR] = "QP_ACCESS_ERR",
		[VBT_EV_COMM_EST] = "COMM_EST",
		[VBT_EV_SQ_DRAINED] = "SQ_DRAINED",
		[VBT_EV_PATH_MIG] = "PATH_MIG",
		[VBT_EV_PATH_MIG_ERR] = "PATH_MIG_ERR",
		[VBT_EV_QP_LAST_WQE_REACHED] = "QP_LAST_WQE_REACHED",
		[VBT_EV_CQ_ERR] = "CQ_ERR",
		[VBT_EV_SRQ_ERR] = "SRQ_ERR",
		[VBT_EV_SRQ_LIMIT_REACHED] = "SRQ_LIMIT_REACHED",
		[VBT_EV_PORT_ACTIVE] = "PORT_ACTIVE",
		[VBT_EV_PORT_ERR] = "PORT_ERR",
		[VBT_EV_LID_CHANGE] = "LID_CHANGE",
		[VBT_EV_PKEY_CHANGE] = "PKEY_CHANGE",
		[VBT_EV_SM_CHANGE] = "SM_CHANGE",
		[VBT_EV_CLIENT_REREGISTER] = "CLIENT_REREGISTER",
		[VBT_EV_GID_CHANGE] = "GID_CHANGE",
		[VBT_EV_DEVICE_FATAL] = "DEVICE_FATAL",
		[VBT_EV_WQ_FATAL] = "WQ_FATAL",
		[VBT_EV_DEVICE_REMOVAL] = "DEVICE_REMOVAL",
		[VBT_EV_OTHER] = "OTHER",
	};

	return (unsigned)t < VBT_EV__COUNT && names[t] ? names[t] : "?";
}

const char *vbt_wc_status_str(enum vbt_wc_status s)
{
	static const char *const names[] = {
		"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
		"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR",
		"REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR",
		"RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR",
		"INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
		"GENERAL_ERR",
	};

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

const char *vbt_port_state_str(enum vbt_port_state s)
{
	static const char *const names[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE",
					      "ACTIVE_DEFER" };

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}
