/* SPDX-License-Identifier: MIT */
/*
 * Application callbacks run with no verbus lock held (verbus.h).
 *
 * Deliveries (on_msg, on_gap, on_end) and k-of-n acknowledgements (on_ack) are
 * found by the progress thread while it dispatches a received SEND or
 * datagram in an RCU read-side section (a control frame of a SEND may
 * hold the node's lock meanwhile). They are queued in ctx->cbq
 * instead of called there, and run by vbi_cb_flush(), which the receive
 * handlers call after that section and before the receive buffer is
 * posted again: a queued message
 * still points into that buffer (or owns its reassembled copy), in order.
 * The ORDERED acknowledgement of a message is made owed only after its
 * callback returned, so an ACK never covers what the application has not
 * seen.
 *
 * Events (on_event) come from every library thread, often under a lock:
 * they are copied into ctx->evq (engine/events.c; a lock-free hand-off list)
 * and run by the progress thread at its next flush (each receive, and every round of
 * vbi_progress_once: within 20 ms when it blocks), or by vb_ctx_destroy.
 *
 * Threads: ctx->cbq, cb_zombies and cb_depth belong to the thread running
 * progress (the progress thread, alone, with no lock; or in APP mode the
 * application thread inside vb_progress(): one at a time by progress_lock,
 * a trylock). evq: any thread adds, the flushing thread takes. A subscriber or
 * publisher counts its queued entries (cb_pending, atomic): destroying it
 * from another thread waits for them; destroying it from a callback (the
 * flushing thread) marks it dead, and the flush frees it at its end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/proto.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

/* The context whose callbacks this thread is running (NULL: none). */
static _Thread_local struct vb_ctx *cb_ctx;

bool vbi_in_callback(const struct vb_ctx *ctx)
{
	return cb_ctx == ctx;
}

/* VERBUS_TEST_CBQ_ENOMEM=N: the Nth vbi_cb_reserve() of the process fails
 * (once), as if memory ran out: how the tests reach that path. */
static bool test_reserve_fails(void)
{
	static _Atomic long n = -1;
	long v = atomic_load_explicit(&n, memory_order_relaxed);

	if (v < 0) {
		unsigned u = 0;

		vbi_cfg_unsigned(VBI_CFG_TEST_CBQ_ENOMEM, &u); /* 0..1000000000 */
		v = (long)u;
		atomic_store_explicit(&n, v, memory_order_relaxed);
	}
	return v > 0 && atomic_fetch_sub_explicit(&n, 1, memory_order_relaxed) == 1;
}

/* Capacity for @want entries (doubling from 64): 0 or -ENOMEM. */
static int cbq_grow(struct vb_ctx *ctx, size_t want)
{
	size_t cap = ctx->cbq_cap ? ctx->cbq_cap : 64;
	struct vbi_cb *q;

	if (want <= ctx->cbq_cap)
		return 0;
	while (cap < want)
		cap *= 2;
	if (cap > UINT_MAX || !(q = realloc(ctx->cbq, cap * sizeof(*q))))
		return vbi_err(-ENOMEM, "callback queue of %zu entries: no memory", cap);
	ctx->cbq = q;
	ctx->cbq_cap = (unsigned)cap;
	return 0;
}

int vbi_cb_reserve(struct vb_ctx *ctx, size_t more)
{
	if (test_reserve_fails())
		return vbi_err(-ENOMEM, "callback queue: no memory (VERBUS_TEST_CBQ_ENOMEM)");
	/* the room is there in all but the first deliveries: no call */
	return (size_t)ctx->cbq_n + more <= ctx->cbq_cap ? 0 :
	       cbq_grow(ctx, (size_t)ctx->cbq_n + more);
}

static struct vbi_cb *cbq_push(struct vb_ctx *ctx)
{
	if (ctx->cbq_n >= ctx->cbq_cap && cbq_grow(ctx, (size_t)ctx->cbq_n + 1))
		return NULL;
	return &ctx->cbq[ctx->cbq_n++];
}

int vbi_cb_queue_msg(struct vb_sub *sub, struct vbi_rxs *r, const vb_msg_t *m, void *owned,
		     bool ack_req)
{
	struct vbi_cb *e = cbq_push(sub->node->ctx);

	if (!e)
		return -ENOMEM;
	e->kind = VBI_CB_MSG;
	e->sub = sub;
	e->r = r;
	e->msg = *m;
	e->owned = owned;
	e->ack_req = ack_req;
	atomic_fetch_add(&sub->cb_pending, 1);
	return 0;
}

int vbi_cb_queue_gap(struct vb_sub *sub, uint32_t session, uint64_t lost, uint64_t next)
{
	struct vbi_cb *e = cbq_push(sub->node->ctx);

	if (!e)
		return -ENOMEM;
	e->kind = VBI_CB_GAP;
	e->sub = sub;
	e->r = NULL;
	e->owned = NULL;
	e->gap.session = session;
	e->gap.lost = lost;
	e->gap.next = next;
	atomic_fetch_add(&sub->cb_pending, 1);
	return 0;
}

int vbi_cb_queue_ack(struct vb_pub *pub, uint64_t acked)
{
	struct vbi_cb *e = cbq_push(pub->node->ctx);

	if (!e)
		return -ENOMEM;
	e->kind = VBI_CB_ACK;
	e->pub = pub;
	e->owned = NULL;
	e->acked = acked;
	atomic_fetch_add(&pub->cb_pending, 1);
	return 0;
}

int vbi_cb_queue_end(struct vb_sub *sub, uint32_t session, uint32_t reason, uint64_t last)
{
	struct vbi_cb *e = cbq_push(sub->node->ctx);

	if (!e)
		return -ENOMEM;
	e->kind = VBI_CB_END;
	e->sub = sub;
	e->r = NULL;
	e->owned = NULL;
	e->end.session = session;
	e->end.reason = reason;
	e->end.last = last;
	atomic_fetch_add(&sub->cb_pending, 1);
	return 0;
}

/* ---- flush ------------------------------------------------------------------------------- */

static void run_one(struct vb_ctx *ctx, const struct vbi_cb *e)
{
	switch (e->kind) {
	case VBI_CB_MSG:
		if (!atomic_load(&e->sub->dead)) {
			atomic_fetch_add(&e->sub->c->delivered, 1);
			atomic_fetch_add_explicit(&ctx->st->delivered, 1, memory_order_relaxed);
			e->sub->attr.on_msg(e->sub, &e->msg, e->sub->attr.arg);
			/* The application has it: it is owed an ACK, also when
			 * another thread began destroying the subscriber while
			 * on_msg ran (that thread waits for cb_pending, then
			 * sends the final ACKs: skipping this lost the last
			 * message's). Not once its streams are freed (destroyed
			 * from a callback), nor for a stream taken by a newer
			 * session. */
			if (e->r && !e->sub->streams_freed && e->r->session == e->msg.publisher)
				vbi_sub_delivered(e->r, e->msg.seq, e->ack_req);
		}
		if (e->owned) /* a reassembled message (most point into the receive slot) */
			free(e->owned);
		atomic_fetch_sub(&e->sub->cb_pending, 1);
		break;
	case VBI_CB_GAP:
		if (!atomic_load(&e->sub->dead) && e->sub->attr.on_gap)
			e->sub->attr.on_gap(e->sub, e->gap.session, e->gap.lost, e->gap.next,
					    e->sub->attr.arg);
		atomic_fetch_sub(&e->sub->cb_pending, 1);
		break;
	case VBI_CB_END:
		if (!atomic_load(&e->sub->dead) && e->sub->attr.on_end)
			e->sub->attr.on_end(e->sub, e->end.session, (vb_end_reason_t)e->end.reason,
					    e->end.last, e->sub->attr.arg);
		atomic_fetch_sub(&e->sub->cb_pending, 1);
		break;
	case VBI_CB_ACK:
		if (!atomic_load(&e->pub->dead) && e->pub->attr.on_ack)
			e->pub->attr.on_ack(e->pub, e->acked, e->pub->attr.arg);
		atomic_fetch_sub(&e->pub->cb_pending, 1);
		break;
	}
}

void vbi_cb_flush(struct vb_ctx *ctx)
{
	struct vb_ctx *outer = cb_ctx;

	if (ctx->cb_depth) /* a callback reached a receive path: the outer flush runs it */
		return;
	/* the empty poll's case: nothing queued, no event, nothing to free */
	if (!ctx->cbq_n && !ctx->cb_zombies && vbi_llist_empty(&ctx->evq))
		return;
	ctx->cb_depth++;
	cb_ctx = ctx;
	if (!vbi_llist_empty(&ctx->evq))
		vbi_events_run(ctx);
	/* entries queued by a callback (none today: no receive path runs
	 * inside one) would land behind: index, not pointer */
	for (unsigned i = 0; i < ctx->cbq_n; i++) {
		struct vbi_cb e = ctx->cbq[i];

		run_one(ctx, &e);
	}
	ctx->cbq_n = 0;
	while (ctx->cb_zombies) {
		struct vbi_zombie *z = ctx->cb_zombies;

		ctx->cb_zombies = z->next;
		z->free(z->obj);
		free(z);
	}
	cb_ctx = outer;
	ctx->cb_depth--;
}

int vbi_cb_defer_free(struct vb_ctx *ctx, void *obj, void (*fn)(void *))
{
	struct vbi_zombie *z = malloc(sizeof(*z));

	if (!z)
		return -ENOMEM;
	z->obj = obj;
	z->free = fn;
	z->next = ctx->cb_zombies;
	ctx->cb_zombies = z;
	return 0;
}

void vbi_cb_wait_idle(atomic_uint *pending)
{
	while (atomic_load(pending)) {
		struct timespec ts = { 0, 100000 };

		nanosleep(&ts, NULL);
	}
}

void vbi_cb_fini(struct vb_ctx *ctx)
{
	struct vb_ctx *outer = cb_ctx;

	/* events raised while everything was closed, on the destroying thread */
	if (ctx->attr.on_event) {
		cb_ctx = ctx;
		vbi_events_run(ctx);
		cb_ctx = outer;
	}
	vbi_events_fini(ctx);
	free(ctx->cbq);
	ctx->cbq = NULL;
	ctx->cbq_n = ctx->cbq_cap = 0;
}

void vbi_cb_init(struct vb_ctx *ctx)
{
	vbi_events_init(ctx);
}
