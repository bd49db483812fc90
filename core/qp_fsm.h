/* SPDX-License-Identifier: MIT */
/*
 * The InfiniBand QP state machine as data, restricted to RC, UC and UD, and a
 * per-QP mirror of the state with a transition history.
 *
 * The table is the Linux kernel's qp_state_table (drivers/infiniband/core/
 * verbs.c, checked by ib_modify_qp_is_ok(), which rxe, mlx5 and the other
 * drivers call from their modify_qp) and the tables of ibv_modify_qp(3). A
 * transition from -> to is legal when the kernel's table has a row for it;
 * its mask must contain every required bit and nothing outside
 * required | optional. Two details the kernel applies beyond the table:
 *  - VB_QP_CUR_STATE is refused unless the QP is in RTR, RTS, SQD or SQE
 *    (and, with it, the driver trusts the caller's cur_qp_state);
 *  - a mask without VB_QP_STATE is an attribute change in place: the kernel
 *    checks it against the row from -> from (so RTR and SQE, which have no
 *    self row, accept no in-place change at all).
 *  - user-space calls pass through uverbs' modify_qp() (uverbs_cmd.c),
 *    which adds PORT to a mask with AV but no PORT unless the call goes to
 *    RTR; the kernel then judges AV|PORT. In effect UC cannot change its AV
 *    in SQD -> SQD (its row allows AV but not PORT): vbi_qp_fsm_check()
 *    refuses it and vbi_qp_fsm_optional() does not offer AV there.
 * VB_QP_EN_SQD_ASYNC_NOTIFY is only meaningful, hence only accepted, on
 * RTS -> SQD. RESET -> ERR is NOT legal (the kernel's RESET row has only
 * RESET and INIT); every other state may go to RESET or ERR with STATE
 * alone.
 *
 * Not modelled (attribute VALUES, device specific): e.g. the kernel refuses
 * ALT_PATH on RoCE ports (_ib_modify_qp: no APM on RoCE) although the mask
 * allows it; rxe also refuses SQD -> X (X != ERR) while the SQ still drains.
 *
 * Conventions of this API (as in ibv_modify_qp(3)): vbi_qp_fsm_required()
 * includes VB_QP_STATE for a change of state; for from == to, STATE is
 * optional. Illegal pairs have required == optional == 0.
 *
 * Thread-safety: the table functions are pure (constant data) and may be
 * called from any thread at any time. vbi_qp_fsm_check() sets the calling
 * thread's error message on failure (core/err.h). A struct vbi_qp_mirror is
 * NOT synchronized: it belongs to whoever owns the QP it mirrors, and every
 * call on one mirror (record, set, reading its fields) must be serialized by
 * that owner (e.g. under the QP's lock, or by only touching it from the
 * thread that modifies the QP). Different mirrors are independent.
 *
 * Return codes: 0 on success, -EINVAL on an illegal transition, a wrong mask
 * or an out-of-range type/state (with a vbi_err() message).
 */
#ifndef VERBUS_CORE_QP_FSM_H
#define VERBUS_CORE_QP_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/qp_types.h"

/* Every mask bit defined in qp_types.h. */
#define VBI_QP_ALL_BITS                                                                    \
	((uint32_t)(VB_QP_STATE | VB_QP_CUR_STATE | VB_QP_EN_SQD_ASYNC_NOTIFY |            \
		    VB_QP_ACCESS_FLAGS | VB_QP_PKEY_INDEX | VB_QP_PORT | VB_QP_QKEY |      \
		    VB_QP_AV | VB_QP_PATH_MTU | VB_QP_TIMEOUT | VB_QP_RETRY_CNT |          \
		    VB_QP_RNR_RETRY | VB_QP_RQ_PSN | VB_QP_MAX_QP_RD_ATOMIC |              \
		    VB_QP_ALT_PATH | VB_QP_MIN_RNR_TIMER | VB_QP_SQ_PSN |                  \
		    VB_QP_MAX_DEST_RD_ATOMIC | VB_QP_PATH_MIG_STATE | VB_QP_CAP |          \
		    VB_QP_DEST_QPN | VB_QP_RATE_LIMIT))

/* Whether the kernel accepts a QP of type t moving from -> to at all. Out of
 * range arguments give false. */
bool vbi_qp_fsm_legal(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to);

/* Bits ibv_modify_qp must carry for from -> to (VB_QP_STATE included when
 * from != to); 0 for an illegal pair. */
uint32_t vbi_qp_fsm_required(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to);

/* Bits it may carry in addition (VB_QP_STATE included when from == to); 0
 * for an illegal pair. */
uint32_t vbi_qp_fsm_optional(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to);

/* 0 when (from -> to, mask) is what the kernel accepts for type t; else
 * -EINVAL with a message naming the type, the state pair and the missing /
 * unexpected bits by name. A mask without VB_QP_STATE is an attribute change
 * in place and requires from == to. */
int vbi_qp_fsm_check(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to,
		     uint32_t mask);

/* "RESET","INIT","RTR","RTS","SQD","SQE","ERR"; "?" when out of range. */
const char *vbi_qp_state_name(enum vb_qp_state s);
/* "RC","UC","UD"; "?" when out of range. */
const char *vbi_qp_type_name(enum vb_qp_type t);
/* Name of one mask bit without the VB_QP_ prefix ("PKEY_INDEX"), NULL when
 * bit is not exactly one bit defined in qp_types.h. */
const char *vbi_qp_bit_name(uint32_t bit);

/* Writes the mask as "STATE|PKEY_INDEX|PORT" (bits in ascending order,
 * unknown bits as one trailing hex number "0x4000000", an empty mask as "0")
 * into buf, truncating to len - 1 characters and always terminating when
 * len > 0. Returns the length the full string has (like snprintf). */
size_t vbi_qp_mask_str(uint32_t mask, char *buf, size_t len);

/* ---- per-QP mirror --------------------------------------------------- */

#define VBI_QP_MIRROR_RING 16

struct vbi_qp_transition {
	uint8_t from, to;
	uint64_t ns;    /* how long the modify took (as measured by the caller) */
	uint64_t at_ns; /* CLOCK_MONOTONIC when it was recorded */
};

struct vbi_qp_mirror {
	enum vb_qp_type type;
	enum vb_qp_state state;  /* what the library believes the QP is in */
	uint64_t transitions;    /* successful vbi_qp_mirror_record() calls */
	uint64_t refused;        /* record() calls refused (wrong from / illegal) */
	uint64_t resyncs;        /* vbi_qp_mirror_set() calls that changed state */
	uint64_t count[VB_QPS__COUNT][VB_QPS__COUNT];
	uint64_t total_ns[VB_QPS__COUNT][VB_QPS__COUNT];
	uint64_t max_ns[VB_QPS__COUNT][VB_QPS__COUNT];
	/* The last VBI_QP_MIRROR_RING transitions; the newest is at
	 * (transitions - 1) % VBI_QP_MIRROR_RING. */
	struct vbi_qp_transition ring[VBI_QP_MIRROR_RING];
};

/* ---- transition times of every QP of a device ------------------------- */

/* Histogram buckets: 0 is under 1 us, i (1..14) is [2^(i-1), 2^i) us, 15
 * is 16.384 ms and more. */
#define VBI_QPT_HIST 16

/* Per (from, to): how many, their sum, the longest, the last, and the
 * histogram. Accessed with __atomic builtins only (relaxed): recorded by
 * the thread that modified the QP, read by the stat thread; no lock. */
struct vbi_qp_timing {
	struct vbi_qp_timing_cell {
		uint64_t n, total_ns, max_ns, last_ns;
		uint64_t hist[VBI_QPT_HIST];
	} t[VB_QPS__COUNT][VB_QPS__COUNT];
};

/* Bucket of a duration (see VBI_QPT_HIST). */
unsigned vbi_qp_timing_bucket(uint64_t ns);
/* Account a modify from -> to that took @ns (out of range states: none). */
void vbi_qp_timing_record(struct vbi_qp_timing *t, enum vb_qp_state from, enum vb_qp_state to,
			  uint64_t ns);

/* A fresh QP of type t: state RESET, no history. */
void vbi_qp_mirror_init(struct vbi_qp_mirror *m, enum vb_qp_type t);

/* Record a modify that succeeded: from must be the mirrored state and
 * from -> to legal for the type (an in-place attribute change is from == to).
 * On success the state becomes to and dur_ns is accounted. -EINVAL (and
 * m->refused++) otherwise; the mirror is left unchanged. */
int vbi_qp_mirror_record(struct vbi_qp_mirror *m, enum vb_qp_state from, enum vb_qp_state to,
			 uint64_t dur_ns);

/* Resynchronize with the device (after ibv_query_qp, or an async event that
 * moved the QP to ERR/SQE behind the library's back). Out of range s is
 * ignored. Not counted as a transition. */
void vbi_qp_mirror_set(struct vbi_qp_mirror *m, enum vb_qp_state s);

/* i-th most recent transition (0 = newest) into *out; -ENOENT when fewer
 * than i + 1 are kept. */
int vbi_qp_mirror_recent(const struct vbi_qp_mirror *m, unsigned int i,
			 struct vbi_qp_transition *out);

#endif
