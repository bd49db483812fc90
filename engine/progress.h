/* SPDX-License-Identifier: MIT */
/*
 * The progress engine (engine/progress.c): CQ polling and demultiplexing,
 * the per-peer round, the second half of a device's hot removal, the idle
 * strategy of the progress thread, and the library threads' helpers. The
 * protocol's part of a round (callbacks, ACKs, SUBs, queued data, FANOUT
 * batches and heartbeats, slow subscribers) goes through ctx->up
 * (engine/upcalls.h).
 */
#ifndef VERBUS_ENGINE_PROGRESS_H
#define VERBUS_ENGINE_PROGRESS_H

#include <pthread.h>
#include <stdbool.h>

#include "core/wire.h"

struct vb_ctx;
struct vbi_peer;

/* UDADDR payload: qpn, qkey, gid */
#define VBI_UDADDR_LEN VBI_WIRE_UDADDR_LEN

/* One progress round: completions handled, or a negative errno. */
int vbi_progress_once(struct vb_ctx *ctx);
/* VB_PROGRESS_THREAD: start the context's progress thread; 0 or negative
 * errno (the error is set). */
int vbi_progress_start(struct vb_ctx *ctx);
/* VB_PROGRESS_APP (vb_progress(), through the facade): one progress round
 * unless another thread runs one (then 0 at once); completions handled,
 * or a negative errno. */
int vbi_progress_app(struct vb_ctx *ctx);
/* Wait for completions another thread reaps, a bounded nap at a time: in
 * VB_PROGRESS_APP mode an application thread runs a progress round itself
 * (its callbacks run on it), a library thread only naps (the
 * application's vb_progress() reaps them). */
void vbi_progress_or_nap(struct vb_ctx *ctx);
/* First thing on every library thread (progress, maintenance, accept). */
void vbi_lib_thread_enter(void);
/* True on a library thread of a VB_PROGRESS_APP context: what it waits for
 * completes only when the application calls vb_progress(). */
bool vbi_progress_waits_for_app(const struct vb_ctx *ctx);
/* pthread_join(@t), a library thread of @ctx; from an application thread
 * in VB_PROGRESS_APP mode it runs progress meanwhile (@t may be waiting
 * for completions only this thread can reap now). */
void vbi_join_progressing(struct vb_ctx *ctx, pthread_t t);
/* The per-peer round of @peer (progress context, inside an RCU read-side
 * section, no node->lock). @idle: the round polled no completion; @full: a kicked or
 * timed round, which flushes whatever tx_pending says (those rounds also
 * send the HELLOs deferred until an accept() returned: ctx->hellos_deferred). */
void vbi_peer_after_poll(struct vbi_peer *peer, bool idle, bool full);
/* Any thread: have the next progress round visit every peer (work for it
 * was left by a thread other than the progress thread). */
void vbi_ctx_kick(struct vb_ctx *ctx);
/* Wake the progress thread if it blocks in its CQ wait: after a flag it will
 * look at (kick, fail_pending) is set. Any thread; a syscall only when it
 * sleeps. */
void vbi_ctx_wake(struct vb_ctx *ctx);

/* True while the calling thread runs a progress round (vbi_progress_once):
 * what it does there delays every delivery of its context. */
bool vbi_in_progress_round(void);

#endif
