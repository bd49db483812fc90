/* SPDX-License-Identifier: MIT */
/*
 * Pre-warmed, recycling pool of engine QPs (engine/qp_engine.h) for one key
 * (PD, CQ, QP type, capacities). QPs are created ahead of demand and parked
 * in INIT (RC/UC: ready for INIT->RTR->RTS against a peer) or RTS (UD: ready
 * to send); vbi_qpool_get() takes a parked one (a hit) or creates and parks
 * one (a miss). vbi_qpool_release() drains the QP if needed, resets it
 * (->RESET, new incarnation, new PSN) and parks it again instead of
 * destroying it: no QP creation cost and no QPN churn (the same qp_num comes
 * back). When the pool already holds `max` QPs the released one is
 * destroyed. Parked QPs are handed out last-in first-out.
 *
 * An optional background thread keeps at least `low` QPs parked (woken by
 * get); it is stopped and joined by vbi_qpool_destroy().
 *
 * Synchronization table:
 *   vbi_qpool_get, _release, _prewarm, _stats   any thread, concurrently on
 *                                               the same pool (a mutex guards
 *                                               the parked stack; QP creation
 *                                               and parking run outside it).
 *   vbi_qpool_release(q)                        q must be unreachable by
 *                                               posters: after unpublish + a
 *                                               grace period (qp_handle.h's
 *                                               retire does that). Needs an
 *                                               RCU-registered thread when q
 *                                               still holds WRs (it drains).
 *   vbi_qpool_destroy                           alone, after every get/release
 *                                               returned; QPs handed out stay
 *                                               the caller's (destroy them).
 *
 * Ownership: parked QPs belong to the pool; a QP from get belongs to the
 * caller until released. PD and CQ must outlive the pool.
 *
 * Return codes: 0 or negative errno (vb_errmsg() set).
 */
#ifndef VERBUS_ENGINE_QPOOL_H
#define VERBUS_ENGINE_QPOOL_H

#include "engine/qp_engine.h"

struct vbi_qpool;

struct vbi_qpool_attr {
	struct vbt_pd *pd;
	struct vbt_cq *cq;
	enum vb_qp_type type;
	struct vbt_qp_cap cap;
	vbi_qpe_complete_fn on_complete; /* for every QP of the pool */
	void *cb_arg;
	struct vbt_conn_param param;     /* parking: access, qkey (UD), ... */
	unsigned max;                    /* parked QPs kept at most (>= 1) */
	unsigned low;                    /* background refill keeps >= low
					  * parked; 0 = no thread */
	int drain_timeout_ms;            /* release of a QP with WRs; 0 = 2000 */
};

struct vbi_qpool_stats {
	uint64_t hits;      /* get served by a parked QP */
	uint64_t misses;    /* get had to create one */
	uint64_t recycled;  /* release parked the QP again */
	uint64_t destroyed; /* release (pool full or reset failed) or destroy */
	uint64_t created;   /* QPs created (prewarm, refill, misses) */
	uint64_t refilled;  /* of which by the background thread */
	uint64_t park_failures;
	unsigned parked;    /* now */
};

int vbi_qpool_create(const struct vbi_qpool_attr *attr, struct vbi_qpool **out);

/* Create and park QPs until min(@n, max) are parked. Returns how many are
 * parked, or a negative errno when creating/parking failed. */
int vbi_qpool_prewarm(struct vbi_qpool *p, unsigned n);

/* A parked QP (INIT for RC/UC, RTS for UD). 0 or negative errno. */
int vbi_qpool_get(struct vbi_qpool *p, struct vbi_qpe **out);

/* Reset + park @q and keep it, or destroy it when the pool is full (or @q is
 * not of this pool's CQ/type, or the reset fails). 0 when recycled, 1 when
 * destroyed, negative errno when even the destroy failed. */
int vbi_qpool_release(struct vbi_qpool *p, struct vbi_qpe *q);

void vbi_qpool_stats(struct vbi_qpool *p, struct vbi_qpool_stats *st);

/* Stop the refill thread, destroy the parked QPs (one grace period for all).
 * 0, or the first destroy error. */
int vbi_qpool_destroy(struct vbi_qpool *p);

#endif
