/* SPDX-License-Identifier: MIT */
/*
 * The pre-warmed, recycling pool of transport QPs that the lanes run on
 * (docs/lifecycle.md): one pool per device (PD, CQ) and queue capacities,
 * with one parked stack per QP type (RC, UC, UD). A parked QP is in INIT:
 * created, given its port, P_Key index and access flags (UD: a random
 * non-default Q_Key), so the transport's accept/connect only has INIT->RTR->
 * RTS left. vbi_qpool_get() takes a parked one (a hit) or creates and parks
 * one (a miss); vbi_qpool_put() of a drained, healthy QP resets it
 * (->RESET: the device forgets PSNs, the peer and every WR) and parks it
 * again (recycled: same qp_num, no create cost); an errored QP, or one the
 * pool has no room for, is destroyed. A recycled QP waits quarantine_ms
 * before get hands it out: the remote end's connection manager keeps the
 * QP number of the old connection until it has processed the disconnect,
 * and rejects a new connection that reuses it as stale (IB CM reject
 * reason 10). Refill counts only the QPs that may be handed out now.
 * vbi_qpool_refill() creates QPs ahead
 * of demand up to each type's low watermark; the library calls it from the
 * maintenance thread, never from a publisher.
 *
 * Synchronization table:
 *   vbi_qpool_get, _put, _refill, _stats, _close  any thread, concurrently
 *                                       on one pool (a mutex guards the
 *                                       stacks and counters; QP creation,
 *                                       modifies and destruction run
 *                                       outside it).
 *   vbi_qpool_put(qp)                   qp has no outstanding WR and no
 *                                       thread can reach it any more (the
 *                                       caller drained it and waited for a
 *                                       grace period: engine/lane.c).
 *   vbi_qpool_destroy                   alone, after every other call
 *                                       returned.
 * Ownership: parked QPs are the pool's (their user_ctx is NULL); a QP from
 * get is the caller's until put. PD and CQ outlive the pool.
 * Return codes: 0 or negative errno (vb_errmsg() set), unless stated.
 */
#ifndef VERBUS_ENGINE_QPOOL_H
#define VERBUS_ENGINE_QPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/transport.h"

#define VBI_QPOOL_TYPES 3 /* VB_QPT_RC, VB_QPT_UC, VB_QPT_UD */

struct vbi_qpool;

struct vbi_qpool_attr {
	struct vbt_pd *pd;
	struct vbt_cq *cq;              /* send and receive CQ of every QP */
	struct vbt_qp_cap cap;          /* asked for at creation */
	struct vbt_conn_param param;    /* RESET->INIT: access flags */
	unsigned low[VBI_QPOOL_TYPES];  /* refill keeps at least this many parked */
	unsigned max;                   /* parked QPs kept at most, per type (>= low) */
	unsigned quarantine_ms;         /* a recycled QP is not handed out sooner */
};

struct vbi_qpool_stats {
	uint64_t hits;      /* get served by a parked QP */
	uint64_t misses;    /* get had to create one */
	uint64_t recycled;  /* put reset and parked the QP again */
	uint64_t destroyed; /* QPs destroyed (errored, pool full, a failed park, close) */
	uint64_t created;   /* QPs created (refill and misses) */
	unsigned parked;    /* now, all types */
};

int vbi_qpool_create(const struct vbi_qpool_attr *attr, struct vbi_qpool **out);

/* A QP of @type in INIT, its user_ctx set to @user_ctx. */
int vbi_qpool_get(struct vbi_qpool *p, enum vb_qp_type type, void *user_ctx,
		  struct vbt_qp **out);

/* Give @qp back. @reuse: drained and no error seen on it; then it is reset
 * and parked when its type's stack has room. Returns 0 when recycled, 1 when
 * destroyed, negative errno when even the destroy failed. */
int vbi_qpool_put(struct vbi_qpool *p, struct vbt_qp *qp, bool reuse);

/* Create and park QPs until every type has its low watermark parked.
 * Returns how many were created, or a negative errno. */
int vbi_qpool_refill(struct vbi_qpool *p);

void vbi_qpool_stats(struct vbi_qpool *p, struct vbi_qpool_stats *st);

/* Destroy every parked QP; from then on get creates (a miss), put and
 * refill park nothing. For a device going away. */
void vbi_qpool_close(struct vbi_qpool *p);

/* Close, then free the pool. NULL is a no-op. */
void vbi_qpool_destroy(struct vbi_qpool *p);

#endif
