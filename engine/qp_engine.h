/* SPDX-License-Identifier: MIT */
/*
 * QP lifecycle engine: a transport QP (transport/transport.h) wrapped with
 * exact tracking of every outstanding work request, so that a QP can be moved
 * to ERR and drained (every outstanding WR completes exactly once, flushed
 * ones with VBT_WC_WR_FLUSH_ERR, and hands its buffer back to its owner),
 * then recovered in place (ERR->RESET->INIT->RTR->RTS, same qp_num) or
 * destroyed without any thread touching freed memory.
 *
 * Pieces built on it: engine/qpool.h (pre-warmed, recycled QPs) and
 * engine/qp_handle.h (the RCU-protected pointer posters read); the RCU
 * helpers are core/rcu.h.
 *
 * Tracking. Every WR posted through vbi_qpe_post_send/_recv takes a slot
 * (buffer pointer + cookie) and is posted SIGNALED, so each one produces
 * exactly one completion (success or flush). wr_id encodes (registry index,
 * incarnation, slot): vbi_qpe_poll() finds the QP from the wr_id through a
 * process-wide registry read under RCU, frees the slot and calls the QP's
 * completion callback once. The registry entry is cleared when the QP is
 * closed; the incarnation changes at every reset, so a completion that
 * arrives late (a marker of a previous life, or anything after close) is
 * counted (orphans / stale) and dropped, never delivered to the wrong QP.
 * A CQ polled with vbi_qpe_poll() must serve engine QPs only (a foreign
 * wr_id is dropped as an orphan; its qp_num is checked too).
 *
 * Capacity. The QP is created with one send and one receive WR more than
 * asked: room for the drain markers. Users can have at most cap.max_send_wr
 * sends and cap.max_recv_wr receives outstanding; beyond that -EAGAIN.
 *
 * Drain (vbi_qpe_fail). Posting is paused, the QP goes to ERR, a zero-length
 * signaled SEND marker is posted (UD: through a loopback AH made for it) and
 * a zero-SGE RECV marker; completions are polled until every tracked WR has
 * completed and the send marker has come back (send completions are in
 * order, so the marker proves the SQ is empty). The receive side is closed by
 * the exact count: rxe on Linux 6.1 does not flush a receive posted after
 * ERR (observed), so the RQ marker is posted and counted when it comes but
 * not waited for. After a timeout the drain returns -ETIMEDOUT; the WRs
 * still outstanding are completed by vbi_qpe_free() with a synthetic flush
 * (VBI_QPE_CQE_SYNTHETIC) once the QP is destroyed, so no buffer is lost.
 *
 * Synchronization table (same QP unless stated):
 *   call                        may run concurrently with
 *   vbi_qpe_post_send/_recv     each other, vbi_qpe_poll (any CQ), fail,
 *                               park/reset/connect, close (they see -EAGAIN
 *                               while paused, -ESHUTDOWN once closed). NOT
 *                               with free: callers reach the QP through an
 *                               RCU-protected pointer (qp_handle.h) and call
 *                               them inside vbi_rcu_read_lock().
 *   vbi_qpe_poll                everything, from any number of threads; it
 *                               takes the RCU read lock itself (the caller
 *                               must be an RCU-registered thread). The
 *                               completion callback runs in the polling
 *                               thread with no engine lock held; it may post.
 *   vbi_qpe_fail, _park,        serialized per QP by the caller (one owner
 *   _reset, _connect, _recover, changes the QP's life at a time); concurrent
 *   _close                      with posting and polling. They poll the CQ
 *                               themselves: RCU-registered thread, not inside
 *                               a read-side critical section.
 *   vbi_qpe_free                alone: after vbi_qpe_close() and a grace
 *                               period (vbi_rcu_synchronize()).
 *   vbi_qpe_stats, accessors    any time before free.
 *   Different QPs are independent.
 *
 * Ownership: the engine owns the transport QP and its slots; buffers stay the
 * poster's and are handed back through the completion callback exactly once.
 * The PD and CQ must outlive the QP.
 *
 * Return codes: 0 (or a count) on success; negative errno with vb_errmsg()
 * set, except -EAGAIN from posting (back-pressure: queue full, or posting
 * paused during a drain/reset), which sets no message.
 */
#ifndef VERBUS_ENGINE_QP_ENGINE_H
#define VERBUS_ENGINE_QP_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/transport.h"

struct vbi_qpe;

/* One completion handed to the owner. */
enum {
	VBI_QPE_CQE_RECV = 1 << 0,      /* a receive (else a send) */
	VBI_QPE_CQE_SYNTHETIC = 1 << 1, /* made up by vbi_qpe_free after a drain
					 * timeout: status WR_FLUSH_ERR */
};

struct vbi_qpe_cqe {
	struct vbi_qpe *qp;
	void *buf;               /* as given to post */
	uint64_t cookie;         /* as given to post */
	enum vbt_wc_status status;
	enum vbt_wc_opcode opcode;
	uint32_t byte_len;
	uint32_t imm_data;
	uint32_t src_qp;
	unsigned wc_flags;       /* VBT_WC_F_* */
	unsigned flags;          /* VBI_QPE_CQE_* */
};

/* Called once per tracked WR (see the synchronization table). It owns
 * cqe->buf from then on (typically: back to the mempool). */
typedef void (*vbi_qpe_complete_fn)(const struct vbi_qpe_cqe *cqe, void *arg);

struct vbi_qpe_attr {
	enum vb_qp_type type;
	struct vbt_cq *cq;       /* send and receive CQ */
	struct vbt_qp_cap cap;   /* user capacity (markers are added on top) */
	vbi_qpe_complete_fn on_complete; /* required */
	void *cb_arg;
	void *user;              /* vbi_qpe_user() */
};

struct vbi_qpe_stats {
	uint32_t qpn;
	enum vb_qp_state state;  /* mirrored */
	uint64_t posted_send, posted_recv;
	uint64_t completed_ok, completed_flush, completed_err;
	uint64_t synthetic;      /* completed by free after a drain timeout */
	uint32_t outstanding_send, outstanding_recv;
	uint64_t drains, drain_timeouts, resets, recoveries;
	uint64_t sq_markers_seen, rq_markers_seen;
	uint64_t last_drain_ns;  /* ERR .. drained, last drain */
	uint32_t last_drain_wrs; /* tracked WRs that completed during it */
	uint64_t async_errors;   /* QP_FATAL / REQ_ERR / ACCESS_ERR events */
};

/* Process-wide counters of completions vbi_qpe_poll could not deliver. */
struct vbi_qpe_poll_stats {
	uint64_t orphans;        /* no live QP for the wr_id (closed, foreign) */
	uint64_t stale;          /* a previous incarnation's (late marker) */
};

/* Create the QP (RESET) and register it for vbi_qpe_poll. 0, -EINVAL,
 * -ENOMEM, -ENOSPC (registry full), or the transport's error. */
int vbi_qpe_create(struct vbt_pd *pd, const struct vbi_qpe_attr *attr, struct vbi_qpe **out);

/* Post one WR (wr->next must be NULL). The engine sets wr_id and, for sends,
 * VBT_SEND_SIGNALED. @buf/@cookie come back in the completion. 0; -EAGAIN
 * (queue full or paused, no message); -ESHUTDOWN (closed); transport errors
 * (e.g. -EINVAL posting a send in INIT). Nothing is tracked on failure. */
int vbi_qpe_post_send(struct vbi_qpe *q, struct vbt_send_wr *wr, void *buf, uint64_t cookie);
int vbi_qpe_post_recv(struct vbi_qpe *q, struct vbt_recv_wr *wr, void *buf, uint64_t cookie);

/* Poll up to @max completions from @cq and deliver each to its QP's
 * callback. Returns how many CQEs were taken (delivered, markers, dropped),
 * or the transport's negative errno. */
int vbi_qpe_poll(struct vbt_cq *cq, int max);
void vbi_qpe_poll_stats(struct vbi_qpe_poll_stats *st);

/* ERR + drain: pause posting, move to ERR (unless in RESET or already ERR),
 * post the markers, poll until every tracked WR has completed and the send
 * marker is back. Returns how many tracked WRs completed during the drain;
 * -ETIMEDOUT after @timeout_ms (message has the counts). Posting stays
 * paused (or closed) afterwards. */
int vbi_qpe_fail(struct vbi_qpe *q, int timeout_ms);

/* Drain if needed, then RESET, new incarnation and new local parameters
 * (fresh random PSN, @p->qkey for UD; see vbi_qpe_local()), then park:
 * RESET->INIT for RC/UC, ->INIT->RTR->RTS for UD. Posting reopens. Same
 * qp_num. 0 or negative errno. vbi_qpe_park() is the same from RESET (a
 * new QP) and is what the pool uses. */
int vbi_qpe_reset(struct vbi_qpe *q, const struct vbt_conn_param *p, int timeout_ms);
int vbi_qpe_park(struct vbi_qpe *q, const struct vbt_conn_param *p, int timeout_ms);

/* RC/UC: INIT->RTR->RTS against @remote (the peer's current parameters);
 * UD: nothing to do (already RTS). 0 or negative errno. */
int vbi_qpe_connect(struct vbi_qpe *q, const struct vbt_conn_param *p,
		    const struct vbt_peer *remote);

/* Recovery in place: reset (drains first) + connect. Counted in
 * stats.recoveries. The peer must be brought back against vbi_qpe_local(q)
 * (its RTR needs our new PSN). */
int vbi_qpe_recover(struct vbi_qpe *q, const struct vbt_conn_param *p,
		    const struct vbt_peer *remote, int timeout_ms);

/* Destruction in three steps (close -> grace period -> free):
 * close: posting refused for good (-ESHUTDOWN), drain if anything is
 *        outstanding or the QP may hold WRs, unregister from the registry
 *        (late completions become orphans). Returns the drain's result
 *        (-ETIMEDOUT possible; the QP is closed anyway).
 * free:  destroy the transport QP, complete leftovers synthetically, free.
 *        Only after a grace period following close. 0, or the transport's
 *        error (the QP is then kept: call free again).
 * destroy: close + vbi_rcu_synchronize() + free. */
int vbi_qpe_close(struct vbi_qpe *q, int timeout_ms);
int vbi_qpe_free(struct vbi_qpe *q);
int vbi_qpe_destroy(struct vbi_qpe *q, int timeout_ms);

/* Async-event hook: pass vbt_event from the device's event callback. QP
 * errors (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR) on an engine QP are counted
 * and flagged (vbi_qpe_async_error()); the owner decides to fail/recover or
 * destroy. Returns 1 when the event was an engine QP's, else 0. */
int vbi_qpe_handle_event(const struct vbt_event *ev);

struct vbt_qp *vbi_qpe_qp(const struct vbi_qpe *q);
uint32_t vbi_qpe_qpn(const struct vbi_qpe *q);
enum vb_qp_type vbi_qpe_type(const struct vbi_qpe *q);
enum vb_qp_state vbi_qpe_state(const struct vbi_qpe *q);
/* Our current parameters (valid after park/reset): what the peer needs. */
const struct vbt_peer *vbi_qpe_local(const struct vbi_qpe *q);
void *vbi_qpe_user(const struct vbi_qpe *q);
void vbi_qpe_set_user(struct vbi_qpe *q, void *user);
/* Last async QP error event (enum vbt_event_type), or -1; cleared by reset. */
int vbi_qpe_async_error(const struct vbi_qpe *q);
uint32_t vbi_qpe_outstanding(const struct vbi_qpe *q);
void vbi_qpe_stats(const struct vbi_qpe *q, struct vbi_qpe_stats *st);

#endif
