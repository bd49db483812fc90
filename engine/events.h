/* SPDX-License-Identifier: MIT */
/*
 * Events for vb_ctx_attr_t.on_event (engine/events.c). Thread-safety: as
 * each function says; ownership: an event's text is copied, nothing of the
 * caller's is kept.
 */
#ifndef VERBUS_ENGINE_EVENTS_H
#define VERBUS_ENGINE_EVENTS_H

#include <verbus/verbus.h>

#include "engine/engine.h"

/* Queue an event: any thread, any lock held (lock-free: no lock is taken;
 * the event is allocated and its line logged). With no on_event it is only
 * logged (info); memory or queue full: dropped and counted. */
void vbi_event(struct vb_ctx *ctx, vb_event_type_t type, const char *peer, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Run the queued events, oldest first, with no lock held: the thread
 * running the context's callbacks (the caller marks it so). */
void vbi_events_run(struct vb_ctx *ctx);
/* Before any vbi_event(); after the last (vb_ctx_destroy): frees what is
 * left unreported. */
void vbi_events_init(struct vb_ctx *ctx);
void vbi_events_fini(struct vb_ctx *ctx);

#endif
