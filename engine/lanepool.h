/* SPDX-License-Identifier: MIT */
/*
 * The lanes' QPs, from their device's pre-warmed pool and back to it
 * (engine/lanepool.c, over engine/qpool; docs/lifecycle.md). Return codes:
 * 0 or a negative errno with vbi_errmsg() set. Threads: see lanepool.c.
 */
#ifndef VERBUS_ENGINE_LANEPOOL_H
#define VERBUS_ENGINE_LANEPOOL_H

#include <stdbool.h>

#include <verbus/verbus.h>

#include "engine/engine.h"

int vbi_lanepool_init(struct vb_ctx *ctx, struct vbi_devres *dr);
/* Refill every device's QP pool (vbi_qpool_refill). Returns how many QPs
 * were made. Conductor thread. */
int vbi_lanepool_refill(struct vb_ctx *ctx);
void vbi_lanepool_close(struct vbi_devres *dr); /* device removed: parked QPs go */
void vbi_lanepool_fini(struct vbi_devres *dr);
void vbi_lanepool_stats(struct vb_ctx *ctx, vb_stats_t *st);
/* l->qp = a QP of @mode in INIT, user_ctx @l. 0 or negative errno. */
int vbi_lane_qp_get(struct vbi_lane *l, enum vb_qp_type mode);
/* Before the drain: no error reported on @l's QP nor found by a query. */
bool vbi_lane_qp_healthy(struct vbi_lane *l);
/* After the drain and a grace period: recycle (@reuse) or destroy l->qp. */
void vbi_lane_qp_put(struct vbi_lane *l, bool reuse);

#endif
