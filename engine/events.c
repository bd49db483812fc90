/* SPDX-License-Identifier: MIT */
/*
 * The context's event queue (vb_ctx_attr_t.on_event): vbi_event() is called
 * on every library thread, often under a lock, so an event is copied into
 * ctx->evq, a lock-free hand-off list (core/llist.h), and run later, with
 * no lock held, by vbi_events_run() (from the callback flush, proto/cbq.c,
 * on the thread running progress, and from vb_ctx_destroy), oldest first.
 * Past VBI_EVQ_MAX queued events the next ones are counted
 * (events_dropped), not kept.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/events.h"
#include "core/log.h"

struct vbi_ev {
	struct vbi_llnode node;
	vb_event_type_t type;
	char peer[VBI_NAME_MAX];
	char detail[256];
};

#define VBI_EVQ_MAX 4096 /* queued events; past it they are counted, not kept */

void vbi_event(struct vb_ctx *ctx, vb_event_type_t type, const char *peer, const char *fmt, ...)
{
	struct vbi_ev *e;
	va_list ap;

	e = calloc(1, sizeof(*e));
	if (!e) {
		vbi_warn("event %d not reported: no memory", (int)type);
		return;
	}
	e->type = type;
	snprintf(e->peer, sizeof(e->peer), "%s", peer ? peer : "");
	va_start(ap, fmt);
	vsnprintf(e->detail, sizeof(e->detail), fmt, ap);
	va_end(ap);
	vbi_info("event %d peer '%s': %s", (int)type, e->peer, e->detail);
	if (!ctx->attr.on_event) {
		free(e);
		return;
	}
	/* a place in the queue first: taken back when it is full */
	if (atomic_fetch_add(&ctx->evq_n, 1) >= VBI_EVQ_MAX) {
		atomic_fetch_sub(&ctx->evq_n, 1);
		atomic_fetch_add(&ctx->st->events_dropped, 1);
		free(e);
		return;
	}
	vbi_llist_add(&ctx->evq, &e->node);
}

void vbi_events_run(struct vb_ctx *ctx)
{
	struct vbi_llnode *n;

	if (vbi_llist_empty(&ctx->evq))
		return;
	n = vbi_llist_take(&ctx->evq);
	while (n) {
		struct vbi_ev *e = vbi_llist_entry(n, struct vbi_ev, node);
		vb_event_t ev = { .type = e->type, .peer = e->peer, .detail = e->detail };

		n = n->next;
		atomic_fetch_sub(&ctx->evq_n, 1); /* its place, before the callback */
		ctx->attr.on_event(&ev, ctx->attr.event_arg);
		free(e);
	}
}

void vbi_events_init(struct vb_ctx *ctx)
{
	atomic_store(&ctx->evq.first, NULL);
	atomic_store(&ctx->evq_n, 0);
}

void vbi_events_fini(struct vb_ctx *ctx)
{
	struct vbi_llnode *n = vbi_llist_take(&ctx->evq);

	while (n) {
		struct vbi_ev *e = vbi_llist_entry(n, struct vbi_ev, node);

		n = n->next;
		free(e);
	}
}
