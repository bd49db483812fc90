/* SPDX-License-Identifier: MIT */
/*
 * Where the lanes' QPs come from and go to: one pre-warmed, recycling pool
 * per device (engine/qpool.h; docs/lifecycle.md). vbi_lane_new() takes a
 * QP parked in INIT (a hit) or has one created (a miss); a retired lane
 * whose QP drained completely and never reported an error gives it back
 * through RESET (recycled), any other is destroyed. The maintenance thread
 * keeps the low watermark parked (vbi_lanepool_refill), off the publishers'
 * path.
 *
 * Sizing, per device, from the context's attributes (all QPs of a context
 * have the same capacities, ctx->sz: rate x latency x 1.5):
 *   low RC = 1 + standby   the next connection (accepted or made) and the
 *                          next standby to warm after a failover are ready
 *                          before the maintenance thread's next round
 *   low UC = low UD = 0    degraded lanes are rare: created on demand, kept
 *                          when recycled
 *   max    = low RC + min(max_peers, 8)   per type: QPs of peers that left
 *                          are kept up to this, the rest destroyed
 *   quarantine 500 ms      before a recycled QP serves a new connection
 *
 * Threads: get from the accept agent, the maintenance thread and
 * vb_node_connect's caller; put from the maintenance thread and node
 * destruction (after the drain and a grace period: vbi_lane_destroy_now);
 * refill from the maintenance threads; close from the progress thread
 * (device removal) or vb_ctx_destroy. The pool's own mutex serializes them.
 */
#include <errno.h>

#include "engine/lanepool.h"
#include "core/err.h"
#include "core/log.h"

/* A recycled QP's number is not offered to a new connection sooner: the
 * remote connection manager releases it once its application has processed
 * the disconnect (a verbus peer does within a maintenance round, 50 ms,
 * of the BYE or DISCONNECTED); until then it rejects the reuse as stale. */
#define VBI_LANE_QP_QUARANTINE_MS 500u

int vbi_lanepool_init(struct vb_ctx *ctx, struct vbi_devres *dr)
{
	unsigned extra = ctx->attr.max_peers < 8 ? ctx->attr.max_peers : 8;
	struct vbi_qpool_attr pa = {
		.pd = dr->pd,
		.cq = dr->cq,
		.cap = { .max_send_wr = ctx->sz.sq_depth, .max_recv_wr = ctx->sz.rq_depth,
			 .max_send_sge = 2,
			 /* a receive slot's head and the rest (struct vbi_slot) */
			 .max_recv_sge = dr->dev->caps.max_sge >= 2 ? 2 : 1,
			 .max_inline_data = ctx->sz.max_inline },
		.param = ctx->cp,
		.quarantine_ms = VBI_LANE_QP_QUARANTINE_MS,
	};

	pa.low[VB_QPT_RC] = 1 + (ctx->attr.standby ? 1 : 0);
	pa.max = pa.low[VB_QPT_RC] + extra;
	return vbi_qpool_create(&pa, &dr->qpool);
}

/* The device's pool, with the device pinned (dr->nlanes: the removal
 * closes nothing while it is held), or NULL when the device is going away.
 * Release with atomic_fetch_sub(&dr->nlanes, 1). */
static struct vbi_qpool *pin(struct vbi_devres *dr)
{
	atomic_fetch_add(&dr->nlanes, 1);
	if (dr->qpool && !atomic_load(&dr->removed) && !atomic_load(&dr->fatal) &&
	    !atomic_load(&dr->port_down))
		return dr->qpool;
	atomic_fetch_sub(&dr->nlanes, 1);
	return NULL;
}

int vbi_lanepool_refill(struct vb_ctx *ctx)
{
	int made = 0;

	for (unsigned d = 0; d < ctx->ndev; d++) {
		struct vbi_devres *dr = &ctx->dr[d];
		struct vbi_qpool *p = pin(dr);
		int rc;

		if (!p)
			continue;
		if ((rc = vbi_qpool_refill(p)) < 0)
			vbi_info("%s: QP pool not refilled: %s", dr->name, vbi_errmsg());
		else
			made += rc;
		atomic_fetch_sub(&dr->nlanes, 1);
	}
	return made;
}

int vbi_lane_qp_get(struct vbi_lane *l, enum vb_qp_type mode)
{
	return vbi_qpool_get(l->dr->qpool, mode, l, &l->qp);
}

bool vbi_lane_qp_healthy(struct vbi_lane *l)
{
	struct vbt_qp_attr a;

	/* fail_why is kept (fail_act is reset once the failure is handled);
	 * the query catches an error the device found after the lane was
	 * already marked dead (reports are ignored then) */
	if (atomic_load(&l->fail_why) || atomic_load(&l->dr->fatal) ||
	    atomic_load(&l->dr->port_down) || l->qp->ops->qp_query(l->qp, &a, VB_QP_STATE))
		return false;
	/* Connected (past INIT) to something that never sent a valid HELLO:
	 * no verbus peer, maybe a half-open client that never processes the
	 * disconnect, whose connection manager would reject our QP number as
	 * stale as long as it lives. Never connected: nobody knows the number. */
	if (a.qp_state != VB_QPS_INIT && !atomic_load(&l->hello_rcvd))
		return false;
	return a.qp_state != VB_QPS_ERR && a.qp_state != VB_QPS_SQE;
}

void vbi_lane_qp_put(struct vbi_lane *l, bool reuse)
{
	int rc = vbi_qpool_put(l->dr->qpool, l->qp, reuse);

	if (rc < 0)
		vbi_warn("lane %u: QP %u not destroyed: %s", l->id, l->qp->qpn, vbi_errmsg());
	l->qp = NULL;
}

void vbi_lanepool_close(struct vbi_devres *dr)
{
	if (dr->qpool)
		vbi_qpool_close(dr->qpool);
}

void vbi_lanepool_fini(struct vbi_devres *dr)
{
	vbi_qpool_destroy(dr->qpool);
	dr->qpool = NULL;
}

void vbi_lanepool_stats(struct vb_ctx *ctx, vb_stats_t *st)
{
	for (unsigned d = 0; d < ctx->ndev; d++) {
		struct vbi_qpool_stats ps;

		if (!ctx->dr[d].qpool)
			continue;
		vbi_qpool_stats(ctx->dr[d].qpool, &ps);
		st->qp_pool_hits += ps.hits;
		st->qp_pool_misses += ps.misses;
		st->qps_recycled += ps.recycled;
		st->qps_destroyed += ps.destroyed;
		st->qps_created += ps.created;
		st->qp_pool_parked += ps.parked;
	}
}
