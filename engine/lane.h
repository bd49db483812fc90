/* SPDX-License-Identifier: MIT */
/*
 * Lanes (engine/lane.c: QP, receive slots, send ring, posting, credits, the
 * UC/UD timers, receiving, retiring), failover (engine/lane_failover.c:
 * failure reports, the switch to a standby lane, path events) and the
 * per-node maintenance thread (engine/maint.c). What they need of the
 * protocol above (frame dispatch, retransmission, HELLO, giving a peer up)
 * they call through ctx->up (engine/upcalls.h). The HELLO that binds a
 * connection to its peer is the protocol's (proto/lane_hello.c).
 */
#ifndef VERBUS_ENGINE_LANE_H
#define VERBUS_ENGINE_LANE_H

#include <stdbool.h>
#include <stdint.h>

#include <verbus/verbus.h>

#include "core/errpolicy.h"
#include "core/wire.h"
#include "engine/engine.h"
#include "engine/sring.h"
#include "transport/transport.h"

/* the GRH in front of every UD receive buffer */
#define VBI_UD_GRH VBI_WIRE_UD_GRH
/* Room in the callback queue for the deliveries of @len bytes of frames
 * (upcall cb_reserve, before a received SEND is dispatched): at most 2
 * entries per 4 bytes of frames (a record and a gap). */
#define VBI_CB_FOR_BYTES(len) ((size_t)(len) / 2 + 2)

/* lane.c */
/* Receive slots an accepted connection has before its HELLO is valid. */
#define VBI_LEAN_SLOTS 2u
/* @lean (accepted connections): VBI_LEAN_SLOTS receive slots and no send
 * ring until vbi_lane_commit() (after a valid HELLO): 0 or negative errno. */
int vbi_lane_commit(struct vbi_lane *l);
/* Registered room for what vbi_lane_commit() will allocate, made now on
 * this thread (the accepting one), so that the commit, which runs on the
 * progress thread when the HELLO arrives, registers nothing: the pool's
 * free pages are made at least that much, times 1 + @others (accepted
 * connections whose commit is still to come: they take from the same
 * room; vbi_mempool_reserve). 0, or the pool's negative errno (the commit
 * then allocates as it can). */
int vbi_lane_commit_prepare(struct vbi_lane *l, unsigned others);
int vbi_lane_new(struct vb_node *node, struct vbi_devres *dr, enum vb_qp_type mode, bool lean,
		 struct vbi_lane **out);
int vbi_lane_post_wr(struct vbi_lane *l, struct vbt_send_wr *wr);
void vbi_lane_check_timers(struct vbi_peer *p, struct vbi_lane *l, uint64_t now_ns);
/* Unreliable lanes' retransmission timeout in ns [VERBUS_RTO_MS, default
 * 100 ms]; read once. */
uint64_t vbi_rto_ns(void);
void vbi_lane_bind(struct vbi_lane *l, struct vbi_peer *p);
/* Post @l's held receive slots again (struct vbi_lane.held), in one list.
 * Progress context; l->lk held unless called from vbi_lane_rc_recv. A
 * failed post is reported as a QP failure (vbi_lane_report). */
void vbi_lane_repost_held(struct vbi_lane *l);
/*
 * Post one SEND of @len bytes from @buf for ring entry @s (taken by the
 * caller: credits and ring space checked; *l->lk held). @buf is @s->buf,
 * or, for a SEND that goes inline (@len <= the QP's max_inline_data), any
 * memory: the post copies it. Signaled or not by the lane's rule
 * (lane.c). 0, or the post's negative errno (the caller untakes @s);
 * -EINVAL for a SEND too long to go inline from another buffer.
 */
int vbi_lane_post_from(struct vbi_lane *l, struct vbi_sctx *s, const void *buf, uint32_t len,
		       bool force);
/* vbi_lane_post_from() from the entry's own registered buffer. */
static inline int vbi_lane_post(struct vbi_lane *l, struct vbi_sctx *s, uint32_t len, bool force)
{
	return vbi_lane_post_from(l, s, s->buf.addr, len, force);
}
int vbi_lane_send_ctrl(struct vbi_lane *l, const void *frames, uint32_t len);
/* Credits left on @l: the remote slots not yet used (relaxed reads: a
 * stale one sees fewer). Inline: read before every SEND. */
static inline uint32_t vbi_lane_credits(const struct vbi_lane *l)
{
	uint64_t returned = atomic_load_explicit(&l->returned_total, memory_order_relaxed);

	return (uint32_t)(l->remote_slots + returned -
			  atomic_load_explicit(&l->sends_total, memory_order_relaxed));
}
/* A SEND was posted on @l: one remote slot used. *l->lk held (the posters'
 * count; the progress thread reads it without the lock). */
static inline void vbi_lane_count_send(struct vbi_lane *l)
{
	atomic_store_explicit(&l->sends_total,
			      atomic_load_explicit(&l->sends_total, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}
void vbi_lane_retire(struct vbi_lane *l);
/*
 * A lane's retirement, in steps that never block (the conductor's drain,
 * maint.c), or all at once (vbi_lane_destroy_now). The retiring thread
 * owns the lane from the first step on; no other thread posts to it any
 * more (dead), the progress thread still reaps its completions.
 *  1. vbi_lane_retire_start: dead, QP to ERR, a signaled drain marker
 *     (again: nothing; a lane begun stays begun).
 *  2. vbi_lane_retire_drained: true once every WR posted to it completed,
 *     or its QP is in RESET and the poller has swept the CQ since (what
 *     it completed before is consumed: nothing in the CQ points into it
 *     any more), or nothing will complete (no QP, the device is gone).
 *     After 10 s without its flushes it moves the QP to RESET itself.
 *     Its true is counted (vb_stats_t.lanes_drained, drain_last_ns/max).
 *     The sweep is the progress thread's, or under VB_PROGRESS_APP the
 *     application's vb_progress().
 *  3. vbi_lane_unlink: off its peer's lanes, its send ring released.
 *  4. After an RCU grace period (posters that read it are done):
 *     vbi_lane_free: its connection closed, its QP back to the warm pool
 *     through RESET when it drained without error (else destroyed), its
 *     buffers freed.
 */
void vbi_lane_retire_start(struct vbi_lane *l);
bool vbi_lane_retire_drained(struct vbi_lane *l);
void vbi_lane_unlink(struct vbi_lane *l);
void vbi_lane_free(struct vbi_lane *l);
/* Every step above, waiting (the progress thread's, or vb_progress()). */
void vbi_lane_destroy_now(struct vbi_lane *l);
void vbi_lane_rc_recv(struct vbi_lane *l, struct vbi_slot *slot, uint32_t byte_len);
/* Control frames on @p's active lane once its HELLO came: 0, -ENOTCONN
 * (peer dead or closing), -EAGAIN (no lane, or no credit / ring space) or
 * vbi_lane_send_ctrl()'s error. p->txlock held. */
int vbi_peer_send_ctrl(struct vbi_peer *p, const void *frames, uint32_t len);

/* lane_failover.c */
void vbi_lane_report(struct vbi_lane *l, struct vbi_err_verdict v, const char *why);
/* Make @s @p's active lane (new epoch, rewind, LANE frame unless @tell is
 * false); returns the lane that was active, for the caller to retire.
 * p->txlock held (lane_failover.c). */
struct vbi_lane *vbi_peer_activate(struct vbi_peer *p, struct vbi_lane *s, bool tell, bool promote);
/* A switch of connection at @now (vbi_peer_activate): the conductors leave
 * the work that can wait for ctx->quiet_ns from now (maint.c). Any thread. */
void vbi_ctx_quiet(struct vb_ctx *ctx, uint64_t now);
/* vbi_peer_activate without a promotion (lane_failover.c, lane_hello.c). */
struct vbi_lane *vbi_peer_switch_to(struct vbi_peer *p, struct vbi_lane *s, bool tell);
void vbi_lane_on_switch(struct vbi_lane *l);
void vbi_peer_handle_failures(struct vb_ctx *ctx);
void vbi_peer_pev_flush(struct vbi_peer *p);
int vbi_peer_init_path(struct vbi_peer *p);
void vbi_peer_allow_degrade(struct vbi_peer *p);
void vbi_dev_event(const struct vbt_event *ev, void *arg);

/* maint.c: the maintenance thread */
int vbi_maint_start(struct vb_node *node);
void vbi_maint_stop(struct vb_node *node);
/* Free what vbi_maint_start made (its wake-up descriptor, which other
 * threads may still write to until the node is unreachable: last). */
void vbi_maint_fini(struct vb_node *node);
void vbi_maint_kick(struct vb_node *node);
/* vbi_maint_kick, unless the context is within its quiet time after a
 * switch of connection (vbi_ctx_quiet) and the node is not stopping (the
 * conductor's own test: maint_quiet): what a switch asks of the
 * conductor (retiring the old lane, warming a new standby) waits for the
 * window's end anyway: its timer is armed for that end instead (an idle
 * conductor's rounds are up to 500 ms apart: maint_main); woken now it
 * would only take a CPU from the threads carrying the switch (on a small
 * machine it preempts them: docs/benchmarks.md, "A failover, thread by
 * thread"). Any thread. */
void vbi_maint_kick_unless_quiet(struct vb_node *node);
/* Conductor thread: connect @p's primary lane @l (bound, in_setup) to
 * p->addr in steps, within 3 x cm_timeout_ms. p->setup says how it went:
 * VBI_SETUP_CONNECTED (its HELLO went; in_setup stays: the lane is the
 * caller's until the peer is up) or VBI_SETUP_FAILED (@l destroyed, @p
 * dead). Marking @p dead meanwhile abandons it (FAILED, -ECANCELED). */
void vbi_maint_connect(struct vb_node *node, struct vbi_peer *p, struct vbi_lane *l);
/* Any thread: hand @p's primary lane @l to the node's conductor, which
 * connects it as vbi_maint_connect does. */
void vbi_maint_connect_queue(struct vb_node *node, struct vbi_peer *p, struct vbi_lane *l);
/* How long a replaced standby waits for a LANE frame (vbi_lane.replaced_ns). */
#define VBI_REPLACED_KEEP_NS 1000000000ull

#endif
