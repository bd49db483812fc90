/* SPDX-License-Identifier: MIT */
/*
 * RCU-protected QP handle: the pointer posters read to reach the QP they
 * post to (a publisher's active QP, a path's current QP). liburcu, memb
 * flavour (<urcu/urcu-memb.h>): readers only bump a per-thread counter; a
 * destroyer unpublishes the pointer, drains the QP and waits a grace period
 * before the QP is freed or reused, so no thread can touch a freed QP and no
 * stale poster can post into a recycled one.
 *
 * Every thread that reads a handle, polls with vbi_qpe_poll() or destroys
 * must be registered: vbi_rcu_register_thread() once, and
 * vbi_rcu_unregister_thread() before it exits (core/rcu.h).
 *
 * The pointer itself is published with C11 release/acquire atomics (what
 * rcu_assign_pointer / rcu_dereference / rcu_xchg_pointer do, written so
 * ThreadSanitizer sees them); the read-side critical sections and grace
 * periods are liburcu's, through core/rcu.h.
 *
 * Retire sequence (vbi_qp_handle_retire):
 *   1. old = xchg(handle, NULL)          new readers see no QP (-ENOTCONN)
 *   2. vbi_qpe_close(old) / _fail(old)   posting refused, ERR, markers,
 *                                        every outstanding WR completed once
 *   3. vbi_rcu_synchronize()             readers that still held old are out
 *   4. vbi_qpe_free(old)                 destroy; or vbi_qpool_release(old)
 *                                        (reset + park) for recycling
 *
 * Synchronization table (same handle unless stated):
 *   call                           may run concurrently with
 *   vbi_rcu_read_lock/unlock,      everything, in registered threads; nests.
 *   vbi_qp_handle_deref,
 *   vbi_qp_handle_post_send/_recv
 *   vbi_qp_handle_publish,         readers; NOT with each other on the same
 *   _unpublish, _retire            handle (one writer: serialize them).
 *   vbi_rcu_synchronize            anything, but never inside a read-side
 *                                  critical section (deadlock).
 *
 * Return codes: 0 or negative errno; posting through an empty handle gives
 * -ENOTCONN (no message: it is the normal state during failover).
 */
#ifndef VERBUS_ENGINE_QP_HANDLE_H
#define VERBUS_ENGINE_QP_HANDLE_H

#include "core/rcu.h"
#include "engine/qp_engine.h"

struct vbi_qpool;

struct vbi_qp_handle {
	struct vbi_qpe *qp; /* RCU-protected; NULL when nothing is published */
};

static inline void vbi_qp_handle_init(struct vbi_qp_handle *h)
{
	__atomic_store_n(&h->qp, NULL, __ATOMIC_RELAXED);
}

/* Inside vbi_rcu_read_lock(): the published QP or NULL. Valid until
 * vbi_rcu_read_unlock(). */
static inline struct vbi_qpe *vbi_qp_handle_deref(struct vbi_qp_handle *h)
{
	return __atomic_load_n(&h->qp, __ATOMIC_ACQUIRE);
}

/* Publish @q (fully set up: connected or parked). Returns the QP that was
 * published before (NULL normally): the caller retires it. */
struct vbi_qpe *vbi_qp_handle_publish(struct vbi_qp_handle *h, struct vbi_qpe *q);

/* Unpublish: returns the old QP (may be NULL). Readers may still hold it
 * until the next grace period. */
struct vbi_qpe *vbi_qp_handle_unpublish(struct vbi_qp_handle *h);

/* Post through the handle (takes the read lock): -ENOTCONN when nothing is
 * published, else vbi_qpe_post_send/_recv's result. */
int vbi_qp_handle_post_send(struct vbi_qp_handle *h, struct vbt_send_wr *wr, void *buf,
			    uint64_t cookie);
int vbi_qp_handle_post_recv(struct vbi_qp_handle *h, struct vbt_recv_wr *wr, void *buf,
			    uint64_t cookie);

/* Steps 1-4 above. @pool NULL: destroy; else the QP goes back to @pool
 * (vbi_qpool_release: reset and park, or destroyed when the pool is full).
 * Returns 0 when nothing was published, 1 when a QP was retired, or a
 * negative errno (drain timeout: the QP is destroyed anyway, its leftovers
 * completed synthetically). */
int vbi_qp_handle_retire(struct vbi_qp_handle *h, struct vbi_qpool *pool, int timeout_ms);

#endif
