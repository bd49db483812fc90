/* SPDX-License-Identifier: MIT */
/*
 * The progress engine (progress.c), for the context's create (ctx.c).
 * vbi_progress_once, vbi_progress_or_nap and vbi_ctx_kick are in proto.h.
 */
#ifndef VERBUS_API_PROGRESS_H
#define VERBUS_API_PROGRESS_H

struct vb_ctx;

/* VB_PROGRESS_THREAD: start the context's progress thread; 0 or negative
 * errno (the error is set). */
int vbi_progress_start(struct vb_ctx *ctx);

#endif
