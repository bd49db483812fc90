/* SPDX-License-Identifier: MIT */
/*
 * FANOUT over multicast groups, the engine's part (engine/mcast.c; the
 * header comment there has the whole design): the topic -> group mapping,
 * the context's receiving multicast QP and its slots, the memberships
 * (subscribers' and publishers'), the statistics. What a publisher's
 * cursors decide (which subscriber is reached through the group) is the
 * protocol's: proto/mcast_pub.c.
 */
#ifndef VERBUS_ENGINE_MCAST_H
#define VERBUS_ENGINE_MCAST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include <verbus/verbus.h>

struct vb_ctx;
struct vbi_slot;
struct vbt_wc;
struct vbt_mcast;

/* vb_ctx_attr_t's multicast defaults (mcast, mcast_prefix; VERBUS_MCAST,
 * VERBUS_MCAST_PREFIX). */
void vbi_mcast_attr_init(vb_ctx_attr_t *a);
int vbi_mcast_ctx_init(struct vb_ctx *ctx);
void vbi_mcast_ctx_fini(struct vb_ctx *ctx);
/* Progress context: the multicast QP, a membership or a retired one still
 * holds the primary device (or it cannot tell now): true. */
bool vbi_mcast_uses_dev(struct vb_ctx *ctx);
/* The multicast QP's receive slots posted, a line to @f (vb_node_dump);
 * nothing while a join holds mc->lock. Any thread. */
void vbi_mcast_dump(struct vb_ctx *ctx, FILE *f);
void vbi_mcast_recv(struct vb_ctx *ctx, struct vbi_slot *s, const struct vbt_wc *wc);
void vbi_mcast_repost(struct vb_ctx *ctx, struct vbi_slot *s);
/* The multicast QP's held receive slots (vbi_mcast_repost holds them),
 * posted again in one list; progress context, at the start of each round. */
void vbi_mcast_repost_held(struct vb_ctx *ctx);
void vbi_mcast_sent(struct vb_ctx *ctx, unsigned datagrams);

uint32_t vbi_mcast_sub_join(struct vb_ctx *ctx, uint32_t topic_id);
void vbi_mcast_sub_leave(struct vb_ctx *ctx, uint32_t topic_id);
void vbi_mcast_pub_join(struct vb_ctx *ctx, uint32_t topic_id, const char *who, uint32_t *group,
			struct vbt_mcast **mcp);
void vbi_mcast_pub_retire(struct vb_ctx *ctx, struct vbt_mcast **mcp, const char *who);

#endif
