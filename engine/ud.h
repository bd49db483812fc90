/* SPDX-License-Identifier: MIT */
/*
 * The context's UD endpoint (engine/ud.c, FANOUT): its QP, send ring and
 * receive slots, moving it off a removed device, and the datagrams it
 * receives (their frames go to the protocol: upcall datagram).
 */
#ifndef VERBUS_ENGINE_UD_H
#define VERBUS_ENGINE_UD_H

#include <stdint.h>

struct vb_ctx;
struct vbi_slot;
struct vbt_peer;

/* The UD endpoint on ctx->ud_dr: 0 or negative errno. */
int vbi_ud_open(struct vb_ctx *ctx);
/* Its objects, closed; ud_lock held (or no other thread left). */
void vbi_ud_teardown(struct vb_ctx *ctx);
/* Its device is being removed: moved to the other one or closed. */
void vbi_ud_move(struct vb_ctx *ctx);
/* A receive slot of the UD endpoint or the multicast QP, posted again:
 * the multicast QP's at once, the endpoint's held (ctx->ud_held) until
 * vbi_ud_repost_held() or until VBI_REPOST_BATCH wait. Progress context. */
void vbi_ud_repost(struct vb_ctx *ctx, struct vbi_slot *s);
/* The UD endpoint's held receive slots, posted again in one list
 * (progress context; the start of each round). */
void vbi_ud_repost_held(struct vb_ctx *ctx);
/* A datagram received in @slot (progress context, no lock held). */
void vbi_ud_recv(struct vb_ctx *ctx, struct vbi_slot *slot, uint32_t byte_len);
/* Our UD endpoint's address (for HELLO and UDADDR frames); any thread. */
void vbi_ud_addr(struct vb_ctx *ctx, struct vbt_peer *out);

#endif
