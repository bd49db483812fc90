/* SPDX-License-Identifier: MIT */
/*
 * QP types, states and attribute-mask bits as core sees them. core never
 * includes <infiniband/verbs.h>; these values are numerically identical to
 * libibverbs' (IBV_QPT_* differ: see vb_qp_type), and transport/verbs checks
 * that with _Static_assert, so a state or mask crosses the boundary as is.
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

#endif
