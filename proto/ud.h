/* SPDX-License-Identifier: MIT */
/*
 * The context's UD endpoint (ud.c), for the context's create/destroy
 * (ctx.c) and the progress engine (progress.c). vbi_ud_repost and
 * vbi_ud_addr are in proto.h.
 */
#ifndef VERBUS_API_UD_H
#define VERBUS_API_UD_H

struct vb_ctx;

/* The UD endpoint on ctx->ud_dr: 0 or negative errno. */
int vbi_ud_open(struct vb_ctx *ctx);
/* Its objects, closed; ud_lock held (or no other thread left). */
void vbi_ud_teardown(struct vb_ctx *ctx);
/* Its device is being removed: moved to the other one or closed. */
void vbi_ud_move(struct vb_ctx *ctx);

#endif
