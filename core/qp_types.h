/* SPDX-License-Identifier: MIT */
/*
 * QP types, states and attribute-mask bits as core sees them, and the
 * work-completion statuses and async-event codes the transport reports
 * (core/errpolicy classifies them). core never includes
 * <infiniband/verbs.h> nor transport/transport.h (which includes this
 * header); these values are numerically identical to libibverbs' (IBV_QPT_*
 * differ: see vb_qp_type; async events are converted), and transport/verbs
 * checks that with _Static_assert, so a state, mask or status crosses the
 * boundary as is. The two transport codes keep their vbt_ names: the
 * backends produce them, core only reads them.
 */
#ifndef VERBUS_CORE_QP_TYPES_H
#define VERBUS_CORE_QP_TYPES_H

#include <stdint.h>

/* Service types verbus uses. Dense 0..2 for tables (IBV_QPT_RC=2, UC=3, UD=4). */
enum vb_qp_type {
	VB_QPT_RC = 0,
	VB_QPT_UC = 1,
	VB_QPT_UD = 2,
	VB_QPT__COUNT
};

/* == enum ibv_qp_state */
enum vb_qp_state {
	VB_QPS_RESET = 0,
	VB_QPS_INIT = 1,
	VB_QPS_RTR = 2,
	VB_QPS_RTS = 3,
	VB_QPS_SQD = 4,
	VB_QPS_SQE = 5,
	VB_QPS_ERR = 6,
	VB_QPS__COUNT
};

/* == enum ibv_qp_attr_mask */
enum vb_qp_attr_mask {
	VB_QP_STATE = 1 << 0,
	VB_QP_CUR_STATE = 1 << 1,
	VB_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
	VB_QP_ACCESS_FLAGS = 1 << 3,
	VB_QP_PKEY_INDEX = 1 << 4,
	VB_QP_PORT = 1 << 5,
	VB_QP_QKEY = 1 << 6,
	VB_QP_AV = 1 << 7,
	VB_QP_PATH_MTU = 1 << 8,
	VB_QP_TIMEOUT = 1 << 9,
	VB_QP_RETRY_CNT = 1 << 10,
	VB_QP_RNR_RETRY = 1 << 11,
	VB_QP_RQ_PSN = 1 << 12,
	VB_QP_MAX_QP_RD_ATOMIC = 1 << 13,
	VB_QP_ALT_PATH = 1 << 14,
	VB_QP_MIN_RNR_TIMER = 1 << 15,
	VB_QP_SQ_PSN = 1 << 16,
	VB_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
	VB_QP_PATH_MIG_STATE = 1 << 18,
	VB_QP_CAP = 1 << 19,
	VB_QP_DEST_QPN = 1 << 20,
	VB_QP_RATE_LIMIT = 1 << 25,
};

/* == enum ibv_wc_status */
enum vbt_wc_status {
	VBT_WC_SUCCESS = 0,
	VBT_WC_LOC_LEN_ERR = 1,
	VBT_WC_LOC_QP_OP_ERR = 2,
	VBT_WC_LOC_EEC_OP_ERR = 3,
	VBT_WC_LOC_PROT_ERR = 4,
	VBT_WC_WR_FLUSH_ERR = 5,
	VBT_WC_MW_BIND_ERR = 6,
	VBT_WC_BAD_RESP_ERR = 7,
	VBT_WC_LOC_ACCESS_ERR = 8,
	VBT_WC_REM_INV_REQ_ERR = 9,
	VBT_WC_REM_ACCESS_ERR = 10,
	VBT_WC_REM_OP_ERR = 11,
	VBT_WC_RETRY_EXC_ERR = 12,
	VBT_WC_RNR_RETRY_EXC_ERR = 13,
	VBT_WC_LOC_RDD_VIOL_ERR = 14,
	VBT_WC_REM_INV_RD_REQ_ERR = 15,
	VBT_WC_REM_ABORT_ERR = 16,
	VBT_WC_INV_EECN_ERR = 17,
	VBT_WC_INV_EEC_STATE_ERR = 18,
	VBT_WC_FATAL_ERR = 19,
	VBT_WC_RESP_TIMEOUT_ERR = 20,
	VBT_WC_GENERAL_ERR = 21,
};

/* Async events, core-side codes (converted from enum ibv_event_type). */
enum vbt_event_type {
	VBT_EV_QP_FATAL = 0,      /* QP went to ERR: catastrophic; recover/destroy */
	VBT_EV_QP_REQ_ERR,        /* QP went to ERR: invalid request from peer */
	VBT_EV_QP_ACCESS_ERR,     /* QP went to ERR: remote access violation */
	VBT_EV_COMM_EST,          /* first packet received while in RTR */
	VBT_EV_SQ_DRAINED,        /* SQD reached with no outstanding sends */
	VBT_EV_PATH_MIG,
	VBT_EV_PATH_MIG_ERR,
	VBT_EV_QP_LAST_WQE_REACHED, /* SRQ-attached QP in ERR: last WQE consumed */
	VBT_EV_CQ_ERR,            /* CQ overrun or other CQ error */
	VBT_EV_SRQ_ERR,
	VBT_EV_SRQ_LIMIT_REACHED,
	VBT_EV_PORT_ACTIVE,
	VBT_EV_PORT_ERR,
	VBT_EV_LID_CHANGE,
	VBT_EV_PKEY_CHANGE,
	VBT_EV_SM_CHANGE,
	VBT_EV_CLIENT_REREGISTER,
	VBT_EV_GID_CHANGE,
	VBT_EV_DEVICE_FATAL,      /* the device is gone: close everything on it */
	VBT_EV_WQ_FATAL,
	VBT_EV_DEVICE_REMOVAL,    /* the device is being unregistered (rdma link delete,
				   * hot-unplug): rdma_cm's DEVICE_REMOVAL, seen on the
				   * device's watch id. The kernel waits until every
				   * object on it is closed: close them (then dev_close) */
	VBT_EV_OTHER,             /* a code this backend does not know (raw set) */
	VBT_EV__COUNT
};

#endif
