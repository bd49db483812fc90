/* SPDX-License-Identifier: MIT */
/*
 * The context's event queue (vb_ctx_attr_t.on_event): vbi_event() is called
 * on every library thread, often under a lock, so an event is copied into
 * ctx->evq (evq_lock, a leaf lock) and run later, with no lock held, by
 * vbi_events_run() (from the callback flush, proto/cbq.c, on the thread
 * running progress, and from vb_ctx_destroy). Past VBI_EVQ_MAX queued
 * events the next ones are counted (events_dropped), not kept.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/events.h"
#include "core/log.h"

struct vbi_ev {
	struct vbi_ev *next;
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
	pthread_mutex_lock(&ctx->evq_lock);
	if (ctx->evq_n >= VBI_EVQ_MAX) {
		pthread_mutex_unlock(&ctx->evq_lock);
		atomic_fetch_add(&ctx->st->events_dropped, 1);
		free(e);
		return;
	}
	*ctx->evq_tail = e;
	ctx->evq_tail = &e->next;
	ctx->evq_n++;
	atomic_store_explicit(&ctx->evq_any, true, memory_order_release);
	pthread_mutex_unlock(&ctx->evq_lock);
}

void vbi_events_run(struct vb_ctx *ctx)
{
	struct vbi_ev *e;

	if (!atomic_load_explicit(&ctx->evq_any, memory_order_acquire))
		return;
	pthread_mutex_lock(&ctx->evq_lock);
	e = ctx->evq;
	ctx->evq = NULL;
	ctx->evq_tail = &ctx->evq;
	ctx->evq_n = 0;
	atomic_store_explicit(&ctx->evq_any, false, memory_order_relaxed);
	pthread_mutex_unlock(&ctx->evq_lock);
	while (e) {
		struct vbi_ev *next = e->next;
		vb_event_t ev = { .type = e->type, .peer = e->peer, .detail = e->detail };

		ctx->attr.on_event(&ev, ctx->attr.event_arg);
		free(e);
		e = next;
	}
}

void vbi_events_init(struct vb_ctx *ctx)
{
	pthread_mutex_init(&ctx->evq_lock, NULL);
	ctx->evq = NULL;
	ctx->evq_tail = &ctx->evq;
}

void vbi_events_fini(struct vb_ctx *ctx)
{
	while (ctx->evq) {
		struct vbi_ev *e = ctx->evq;

		ctx->evq = e->next;
		free(e);
	}
	pthread_mutex_destroy(&ctx->evq_lock);
}
