/* SPDX-License-Identifier: MIT */
/*
 * Lanes: the connections behind a peer. A lane's QP (from the device's warm
 * pool, lanepool.c), its receive slots and send ring, posting and credits,
 * the UC/UD timers, receiving, and retiring and freeing a lane. The HELLO
 * that binds a connection to its peer is in lane_hello.c; error
 * classification and the switch to a standby lane (failover) in
 * lane_failover.c; the maintenance thread in maint.c.
 *
 * Thread-safety: lanes are freed only by the maintenance thread or node
 * destruction, after their WRs are reaped and a grace period passed.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/events.h"
#include "engine/lane.h"
#include "engine/lanepool.h"
#include "engine/progress.h"
#include "engine/upcalls.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/rcu.h"

/* ---- creation, posting ---------------------------------------------------------------- */

static int post_slot(struct vbi_lane *l, struct vbi_slot *s)
{
	int rc;

	if (vbi_slots_post(l->qp, &s, 1, (uint32_t)l->node->ctx->attr.slot_size, &rc))
		atomic_fetch_add(&l->posted_recvs, 1);
	return rc;
}

/* Receive slots [@from, @to) of @l: allocated in blocks (vbi_buf_block),
 * each block's heads (struct vbi_slot) in one allocation beside it when the
 * QP takes two scatter entries, and posted in lists of VBI_REPOST_BATCH
 * (one post call each, as the reposts). Every field of the lane is set
 * before (the post publishes it to the progress thread: init_gen). */
static int lane_fill(struct vbi_lane *l, uint32_t from, uint32_t to)
{
	struct vb_ctx *ctx = l->node->ctx;
	bool heads = l->qp->cap.max_recv_sge >= 2 && ctx->attr.slot_size > VBI_RX_HEAD;
	int rc = 0;

	for (uint32_t i = from; i < to;) {
		struct vbi_buf b[VBI_BUF_BLOCK], h = { 0 };
		uint32_t n = to - i < VBI_BUF_BLOCK ? to - i : VBI_BUF_BLOCK;

		if ((rc = vbi_buf_block(l->dr->pool, ctx->attr.slot_size, n, b)) < 0)
			return rc;
		n = (uint32_t)rc;
		if (heads && (rc = vbi_mempool_alloc(l->dr->pool, (size_t)n * VBI_RX_HEAD, &h))) {
			vbi_mempool_free(l->dr->pool, b[0].addr);
			return rc;
		}
		rc = 0;
		for (uint32_t j = 0; j < n; j++, i++) {
			struct vbi_slot *s = &l->slots[i];

			s->kind = VBI_WR_RC_RECV;
			s->lane = l;
			s->buf = b[j];
			s->carved = j != 0;
			if (h.addr) {
				s->head = (uint8_t *)h.addr + (size_t)j * VBI_RX_HEAD;
				s->head_lkey = h.lkey;
				s->head_owner = j == 0;
			}
		}
	}
	atomic_fetch_add_explicit(&ctx->init_gen, 1, memory_order_release);
	for (uint32_t i = from; i < to && !rc;) {
		struct vbi_slot *list[VBI_REPOST_BATCH];
		uint32_t n = 0;

		while (i < to && n < VBI_REPOST_BATCH)
			list[n++] = &l->slots[i++];
		atomic_fetch_add(&l->posted_recvs, vbi_slots_post(l->qp, list, n,
								  (uint32_t)ctx->attr.slot_size, &rc));
	}
	return rc;
}

int vbi_lane_commit(struct vbi_lane *l)
{
	int rc;

	if (!l->lean)
		return 0;
	rc = vbi_sring_add_bufs(&l->sr);
	if (!rc)
		rc = lane_fill(l, VBI_LEAN_SLOTS, l->nslots);
	if (rc)
		return vbi_err_prefix(rc, "committing the connection's memory");
	l->lean = false;
	return 0;
}

int vbi_lane_commit_prepare(struct vbi_lane *l, unsigned others)
{
	size_t bytes;
	int rc;

	if (!l->lean)
		return 0;
	/* the receive slots and send buffers vbi_lane_commit() allocates,
	 * and a quarter more: jemalloc pads a large buffer by a page */
	bytes = (size_t)(l->nslots - VBI_LEAN_SLOTS) * l->node->ctx->attr.slot_size +
		(size_t)l->sr.n * l->sr.buf_size;
	bytes += bytes / 4;
	rc = vbi_mempool_reserve(l->dr->pool, bytes * (1 + (size_t)others));
	if (rc > 0)
		vbi_debug("%d chunk(s) registered ahead: room for %u connection(s) of %zu bytes",
			  rc, 1 + others, bytes);
	return rc < 0 ? rc : 0;
}

int vbi_lane_new(struct vb_node *node, struct vbi_devres *dr, enum vb_qp_type mode,
		 bool lean, struct vbi_lane **out)
{
	struct vb_ctx *ctx = node->ctx;
	/* the lane and its handshake authentication state, in one block (one
	 * free in vbi_lane_destroy_now) */
	struct vbi_lane *l = calloc(1, sizeof(*l) + ctx->up->lane_auth_size);
	int rc;

	*out = NULL;
	if (!l)
		return vbi_err(-ENOMEM, "lane");
	l->auth = (struct vbi_lane_auth *)(l + 1);
	l->node = node;
	l->dr = dr;
	/* counted before the check: the reaper sees the lane or we see removed */
	atomic_fetch_add(&dr->nlanes, 1);
	l->mode = (uint8_t)mode;
	/* A UD receive buffer starts with the 40-byte GRH, and a datagram
	 * cannot exceed the path MTU: larger messages are fragmented. */
	l->max_send = (uint32_t)ctx->attr.slot_size;
	if (mode == VB_QPT_UD && l->max_send > ctx->ud_mtu)
		l->max_send = ctx->ud_mtu;
	if (mode == VB_QPT_UD && l->max_send > ctx->attr.slot_size - VBI_UD_GRH)
		l->max_send = (uint32_t)ctx->attr.slot_size - VBI_UD_GRH;
	vbi_mutex_init(&l->own_lock);
	l->lk = &l->own_lock;
	l->created_ns = vbi_mono_ns();
	l->credit_ns = l->created_ns;
	if (atomic_load(&dr->removed)) {
		rc = vbi_err(-ENODEV, "the device is being removed");
		goto err;
	}
	/* parked in INIT by the device's warm pool (lanepool.c) */
	if ((rc = vbi_lane_qp_get(l, mode)))
		goto err;
	l->nslots = l->qp->cap.max_recv_wr;
	l->slots = calloc(l->nslots, sizeof(*l->slots));
	if (!l->slots) {
		rc = vbi_err(-ENOMEM, "receive slots");
		goto err;
	}
	/* Until the peer's HELLO says how many slots it has, one credit:
	 * enough for our own HELLO (every node posts >= 16 before connecting). */
	l->remote_slots = 1;
	if (lean && l->nslots > VBI_LEAN_SLOTS) {
		/* An accepted connection, before a valid HELLO: the peer may send
		 * only its HELLO yet (one credit; with authentication, its answer
		 * too), so a few receive slots and send buffers;
		 * vbi_lane_commit() adds the rest once the HELLO (and the proof
		 * of the key) is valid. A connection that never sends one pins
		 * VBI_LEAN_SLOTS of each. */
		l->lean = true;
		/* the send ring, with buffers for what goes before the commit
		 * (an authentication proof, a refusal) */
		rc = vbi_sring_init(dr->pool, &l->sr, l->qp->cap.max_send_wr, VBI_WR_RC_SEND, l,
				    VBI_LEAN_SLOTS, ctx->attr.slot_size);
		if (!rc)
			rc = lane_fill(l, 0, VBI_LEAN_SLOTS);
	} else {
		rc = vbi_sring_init(dr->pool, &l->sr, l->qp->cap.max_send_wr, VBI_WR_RC_SEND, l,
				    l->qp->cap.max_send_wr, ctx->attr.slot_size);
		if (!rc)
			rc = lane_fill(l, 0, l->nslots);
	}
	if (rc)
		goto err;
	atomic_fetch_add_explicit(&ctx->st->lanes_created, 1, memory_order_relaxed);
	*out = l;
	return 0;
err:
	vbi_err_prefix(rc, "new connection on %s", dr->name);
	{
		char msg[VBI_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
		vbi_lane_destroy_now(l);
		vbi_err(rc, "%s", msg);
	}
	return rc;
}

/* Bind an unbound lane to @p. p->txlock held; nobody holds the lane's own
 * lock (it is no longer used afterwards). */
void vbi_lane_bind(struct vbi_lane *l, struct vbi_peer *p)
{
	l->peer = p;
	l->lk = &p->txlock;
	l->next = p->lanes;
	p->lanes = l;
	/* completions of sends posted from now on read l->lk and l->peer on
	 * the progress thread: publish them as vbi_lane_new does */
	atomic_fetch_add_explicit(&l->node->ctx->init_gen, 1, memory_order_release);
}


/* Post @wr (a SEND) on @l: a UD lane addresses the remote lane's QP (its
 * QPN, Q_Key and an AH from the connection set-up). *l->lk held. Inline in
 * vbi_lane_post_from (a batch per SEND: one call less). */
static inline __attribute__((always_inline)) int lane_post_wr(struct vbi_lane *l,
							       struct vbt_send_wr *wr)
{
	const struct vbt_send_wr *bad;
	int rc;

	if (l->mode == VB_QPT_UD) {
		if (!atomic_load(&l->conn_ready) || !l->conn || !l->conn->ah)
			return -EAGAIN; /* set-up not finished: nowhere to send yet */
		wr->ah = l->conn->ah;
		wr->remote_qpn = l->conn->remote.qpn;
		wr->remote_qkey = l->conn->remote.qkey;
	}
	rc = vbt_post_send(l->qp, wr, &bad);
	if (!rc && (wr->flags & VBT_SEND_SIGNALED))
		vbi_sring_signaled(&l->sr, (struct vbi_sctx *)(uintptr_t)wr->wr_id);
	return rc;
}

int vbi_lane_post_wr(struct vbi_lane *l, struct vbt_send_wr *wr)
{
	return lane_post_wr(l, wr);
}

/*
 * Post one SEND of @len bytes already in @s->buf. Selective signaling: a
 * SEND is signaled when none is in flight on the lane (its completion is
 * what uncorks the data queued behind it: vb_pub_commit) unless it is an
 * answer (a SEND with frames came in on the lane since our last post:
 * rx_since_post), every quarter ring, when the ring is all but full (so
 * unsignaled entries are always released by a later completion, or by
 * the flush of a QP in error, which completes every WR), or when @force
 * says so. An answer is request/response traffic, a ping-pong: nothing
 * queues behind it, and its completion would only cost both ends work
 * (rxe's CQE, our poll and release). The next post with nothing received
 * in between is signaled again, so a stream still corks behind it.
 * *l->lk held; the caller checked credits and ring space.
 */
int vbi_lane_post_from(struct vbi_lane *l, struct vbi_sctx *s, const void *buf, uint32_t len,
		       bool force)
{
	struct vb_ctx *ctx = l->node->ctx;
	struct vbt_sge sge = { (uintptr_t)buf, len, s->buf.lkey };
	struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1,
				  .opcode = VBT_WR_SEND };
	int rc;

	bool answer = atomic_load_explicit(&l->rx_since_post, memory_order_relaxed);

	if (answer)
		atomic_store_explicit(&l->rx_since_post, false, memory_order_relaxed);
	if (force || (!answer && !atomic_load(&l->sr.sig_inflight)) ||
	    ++l->sr.since_signal >= l->sr.n / 4 || l->sr.outstanding >= l->sr.n - 1) {
		wr.flags |= VBT_SEND_SIGNALED;
		l->sr.since_signal = 0;
	}
	if (len <= l->qp->cap.max_inline_data)
		wr.flags |= VBT_SEND_INLINE;
	else if (buf != s->buf.addr)
		return vbi_err(-EINVAL, "lane %u: %u bytes to post from an unregistered buffer "
			       "(inline: at most %u)", l->id, len, l->qp->cap.max_inline_data);
	/* counted before the post, taken back if it fails: a vb_ctx_stats()
	 * snapshot taken once the peer has the SEND includes it */
	vbi_st_count_send(ctx->st, wr.flags & VBT_SEND_INLINE, wr.flags & VBT_SEND_SIGNALED, 1);
	rc = lane_post_wr(l, &wr);
	if (rc) {
		vbi_st_count_send(ctx->st, wr.flags & VBT_SEND_INLINE,
				  wr.flags & VBT_SEND_SIGNALED, -1);
		return rc;
	}
	vbi_lane_count_send(l);
	return 0;
}

/* The retransmission timeout of UC/UD lanes: VERBUS_RTO_MS (the table's
 * default and range, 1..60000 ms; read once). */
uint64_t vbi_rto_ns(void)
{
	return vbi_cfg_u64_once(VBI_CFG_RTO_MS) * 1000000ull;
}

/*
 * Timers of the active lane @l when it is UC or UD (progress context,
 * txlock held):
 *  - credits: a lost datagram never consumes the remote slot it was
 *    counted against, and a lost ACK never returns the slots it carried.
 *    When we are out of credits and none came back for an RTO, the
 *    outstanding ones are taken as lost: the count starts over (a too
 *    optimistic guess only overruns the receiver, i.e. more loss, which
 *    the NAK/RTO recover; never a permanent stall).
 *  - retransmission: unacknowledged messages with no ACK progress for an
 *    RTO are sent again from the acknowledged point (vbi_pub_rto_peer).
 */
void vbi_lane_check_timers(struct vbi_peer *p, struct vbi_lane *l, uint64_t now_ns)
{
	struct vb_ctx *ctx = p->node->ctx;
	uint64_t rto = vbi_rto_ns(), n;

	uint64_t returned = atomic_load_explicit(&l->returned_total, memory_order_relaxed);

	if (returned != l->last_returned) {
		l->last_returned = returned;
		l->credit_ns = now_ns;
	} else if (vbi_lane_credits(l) < 2 && now_ns - l->credit_ns > rto) {
		l->last_returned = atomic_load_explicit(&l->sends_total, memory_order_relaxed);
		atomic_store_explicit(&l->returned_total, l->last_returned, memory_order_relaxed);
		l->credit_ns = now_ns;
		atomic_fetch_add_explicit(&ctx->st->credit_resyncs, 1, memory_order_relaxed);
	}
	n = ctx->up->peer_rto(p, now_ns, rto);
	if (n) {
		atomic_fetch_add_explicit(&ctx->st->rto_retransmits, n, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->retransmits, n, memory_order_relaxed);
	}
}

/* Control frames may use the last credit (data keeps one in reserve so
 * these can always flow). *l->lk held. */
int vbi_lane_send_ctrl(struct vbi_lane *l, const void *frames, uint32_t len)
{
	uint32_t rss = l->peer ? l->peer->remote_slot_size : 0;
	struct vbi_sctx *s;
	int rc;

	if (vbi_lane_dead(l))
		return -ENOTCONN;
	if (len > l->max_send || (rss && len > rss))
		return vbi_err(-EMSGSIZE, "control frames of %u bytes", len);
	if (vbi_lane_credits(l) < 1 || l->sr.outstanding >= l->sr.n)
		return -EAGAIN;
	s = vbi_sring_take(&l->sr);
	if (!s->buf.addr) { /* a lean lane past its VBI_LEAN_SLOTS sends */
		vbi_sring_untake(&l->sr);
		return vbi_err(-EAGAIN, "no send buffer before the connection is committed");
	}
	if (len <= l->qp->cap.max_inline_data) { /* copied by the post: no ring buffer to touch */
		rc = vbi_lane_post_from(l, s, frames, len, false);
	} else {
		memcpy(s->buf.addr, frames, len);
		rc = vbi_lane_post(l, s, len, false);
	}
	if (rc)
		vbi_sring_untake(&l->sr);
	return rc;
}

/* ---- receive ------------------------------------------------------------------------------ */

/* Testing the software reliability of UC/UD lanes: VERBUS_TEST_DROP_EVERY=N
 * drops every N-th SEND/datagram received on such a lane (after its HELLO)
 * as if the fabric had lost it: nothing of it is processed and its slot is
 * not returned to the sender (a lost datagram's credit is lost too). 0, 1
 * or unset: off. Read once. */
static unsigned test_drop_every(void)
{
	unsigned n = (unsigned)vbi_cfg_u64_once(VBI_CFG_TEST_DROP_EVERY); /* 0..999999 */

	return n > 1 ? n : 0;
}

void vbi_lane_rc_recv(struct vbi_lane *l, struct vbi_slot *slot, uint32_t byte_len)
{
	struct vb_node *node = l->node;
	struct vb_ctx *ctx = node->ctx;
	bool bound = l->peer != NULL;
	const uint8_t *data = vbi_slot_data(slot, byte_len);
	unsigned drop_every;

	if (l->mode == VB_QPT_UD) /* a datagram: after the GRH */
		byte_len = vbi_wire_ud_frames(data, byte_len, &data);
	if (l->mode != VB_QPT_RC && atomic_load(&l->hello_rcvd) &&
	    (drop_every = test_drop_every()) && ++l->rx_count % drop_every == 0) {
		if (!vbi_lane_dead(l) && post_slot(l, slot)) {
			struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP,
						     "receive repost failed" };

			vbi_lane_report(l, v, "receive repost failed");
		}
		return;
	}
	if (atomic_load(&l->rx_lost))
		return; /* the lane fails over: nothing after the lost SEND is used */
	/* Room to queue every delivery the SEND may hold, before any lock:
	 * queuing cannot fail under them (no callback ever runs there). With
	 * no memory the SEND is not used and the lane fails over: the peer
	 * sends again what we did not acknowledge (ORDERED: exactly once). */
	if (byte_len && ctx->up->cb_reserve(ctx, VBI_CB_FOR_BYTES(byte_len))) {
		struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP,
					     "no memory to queue deliveries" };

		vbi_error("lane %u: a received SEND of %u bytes not used: %s", l->id, byte_len,
			  vbi_errmsg());
		atomic_store(&l->rx_lost, true);
		vbi_lane_report(l, v, "no memory to queue deliveries");
		return;
	}
	/* No node->lock: the frames that change the node's lists take it
	 * themselves (vbi_dispatch_frames); the rest read them in this RCU
	 * read-side section (their writers free after a grace period) */
	vbi_rcu_enter();
	if (!byte_len) { /* a SEND with no frame in it */
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, l->peer ? l->peer->name : "", "empty SEND dropped");
	} else if (!vbi_lane_dead(l) && !(l->peer && atomic_load(&l->peer->closing))) {
		ctx->up->dispatch_frames(ctx, l, data, byte_len);
		/* before the callbacks: what they publish answers this SEND */
		atomic_store_explicit(&l->rx_since_post, true, memory_order_relaxed);
	}
	vbi_rcu_leave();
	/* the callbacks, with no lock held and outside the section (they may
	 * destroy, which waits for a grace period); the slot (what they read)
	 * is posted again after them */
	ctx->up->cb_flush(ctx);
	if (vbi_lane_dead(l))
		return;
	if (!bound) { /* not on a peer's lanes (no per-peer round): at once */
		if (post_slot(l, slot)) {
			struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP,
						     "receive repost failed" };

			vbi_lane_report(l, v, "receive repost failed");
			return;
		}
		atomic_fetch_add_explicit(&l->to_return, 1, memory_order_relaxed);
	} else {
		/* held: posted again here once vbi_repost_batch() wait, or
		 * by the next timed or idle per-peer round (vbi_peer_after_poll):
		 * not on the way from the callbacks to the next poll */
		l->held[l->nheld++] = slot;
		if (l->nheld >= vbi_repost_batch(l->nslots))
			vbi_lane_repost_held(l);
	}
	if (l->peer)
		atomic_store_explicit(&l->peer->last_rx_ns, vbi_now_ns(), memory_order_relaxed);
}

/* Post @l's held receive slots again, in one list: a timed or idle
 * per-peer round (vbi_peer_after_poll, txlock held), or vbi_lane_rc_recv
 * once enough wait. Progress context. Each posted slot is a credit to
 * return. A dead or draining lane's slots are dropped: its drain does not
 * wait for them (they are not in posted_recvs), and vbi_lane_retire_start
 * sets those flags under l->lk, so a caller holding it cannot race the drain;
 * vbi_lane_rc_recv does not hold it, but the completion it handles is
 * still counted in posted_recvs until it returns. */
void vbi_lane_repost_held(struct vbi_lane *l)
{
	uint32_t n = l->nheld, ok;
	int rc;

	l->nheld = 0;
	if (!n || vbi_lane_dead(l))
		return;
	ok = vbi_slots_post(l->qp, l->held, n, (uint32_t)l->node->ctx->attr.slot_size, &rc);
	atomic_fetch_add(&l->posted_recvs, ok);
	atomic_fetch_add_explicit(&l->to_return, ok, memory_order_relaxed);
	if (rc) {
		struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP, "receive repost failed" };

		vbi_lane_report(l, v, "receive repost failed");
	}
}

/* ---- retiring ------------------------------------------------------------------------------ */

/* Hand @l to the maintenance thread (drain, grace period, destroy). Any
 * thread; idempotent. */
void vbi_lane_retire(struct vbi_lane *l)
{
	struct vb_node *node = l->node;

	if (vbi_lane_life_raise(l, VBI_LANE_RETIRING) >= VBI_LANE_RETIRING)
		return;
	/* it stays on its peer's (or the pending) list, marked retiring: the
	 * conductor finds it there (maint_retire); the count only keeps that
	 * thread from sleeping on a retire it has not seen yet (counted after
	 * the mark: a round that clears the count looks at the lists after) */
	atomic_fetch_add(&node->retiring, 1);
	if (l->peer) /* a peer's lane waits for the quiet time's end anyway */
		vbi_maint_kick_unless_quiet(node);
	else
		vbi_maint_kick(node);
}

/*
 * Drain @l and free it: ERR, wait (bounded) until every posted WR has been
 * reaped (by the progress thread, or here in APP mode), unlink it from its
 * peer, wait for a grace period, destroy. Not from the progress context,
 * not inside an RCU read-side section, no lock held.
 */
/*
 * An unsignaled SEND that completed successfully leaves no completion: its
 * ring entry is released by the next signaled one (vbi_sring_release_upto).
 * A QP moved to ERR completes what it still holds (flushed, signaled or
 * not), but the entries that had completed silently would wait for ever.
 * So, as the kernel's ib_drain_sq() does, post one signaled empty SEND to
 * the QP in ERR: it is flushed after everything before it, and its
 * completion releases the whole ring. Nothing to do when no unsignaled
 * entry is left behind a signaled one. Posting to a QP in ERR is allowed
 * (the WR completes with a flush error); if the provider refuses, the
 * drain waits as before.
 */
static void drain_marker(struct vbi_lane *l)
{
	vbi_mutex_lock(l->lk);
	if (l->sr.outstanding && l->sr.outstanding < l->sr.n) {
		struct vbi_sctx *s = vbi_sring_take(&l->sr);
		struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .num_sge = 0,
					  .opcode = VBT_WR_SEND, .flags = VBT_SEND_SIGNALED };

		/* addressed as any SEND of the lane (UD: its AH); counted as
		 * signaled when posted */
		if (vbi_lane_post_wr(l, &wr))
			vbi_sring_untake(&l->sr);
	}
	vbi_mutex_unlock(l->lk);
}

void vbi_lane_retire_start(struct vbi_lane *l)
{
	vbi_mutex_lock(l->lk);
	vbi_lane_life_raise(l, VBI_LANE_DRAINING);
	vbi_mutex_unlock(l->lk);
	if (l->retire_ns)
		return;
	l->retire_ns = vbi_mono_ns();
	if (l->qp && vbt_qp_state(l->qp) != VB_QPS_RESET && !atomic_load(&l->dr->fatal)) {
		l->retire_reuse = vbi_lane_qp_healthy(l);
		vbt_qp_set_state(l->qp, VB_QPS_ERR);
		drain_marker(l);
	}
}

/* @l's QP is in RESET: nothing completes on it any more, but completions
 * it made before may still wait in the CQ, pointing into the lane (Soft-
 * RoCE flushes a receive queue late, or only when a packet comes). It may
 * go once the poller has swept the CQ empty after this first call: two
 * sweeps from now, as the next one counted may have begun before. */
static bool swept_since_reset(struct vbi_lane *l)
{
	uint64_t n = atomic_load_explicit(&l->dr->cq_sweeps, memory_order_acquire);

	if (!l->retire_sweep) {
		l->retire_sweep = n + 2;
		return false;
	}
	return n >= l->retire_sweep;
}

static bool retire_drained(struct vbi_lane *l);

bool vbi_lane_retire_drained(struct vbi_lane *l)
{
	struct vb_ctx *ctx = l->node->ctx;
	if (!retire_drained(l))
		return false;
	/* true once: the caller unlinks and frees it next; its drain time
	 * (vb_stats_t.drain_last_ns) runs from vbi_lane_retire_start */
	atomic_fetch_add_explicit(&ctx->st->lanes_drained, 1, memory_order_relaxed);
	vbi_st_last_max(&ctx->st->drain_last_ns, &ctx->st->drain_max_ns,
			vbi_mono_ns() - l->retire_ns);
	return true;
}

static bool retire_drained(struct vbi_lane *l)
{
	struct vb_ctx *ctx = l->node->ctx;
	uint32_t out, recvs;

	vbi_mutex_lock(l->lk);
	out = l->sr.outstanding;
	vbi_mutex_unlock(l->lk);
	recvs = atomic_load(&l->posted_recvs);
	if (!out && !recvs)
		return true; /* the poller's accounting was its last touch */
	if (!l->qp || atomic_load(&l->dr->fatal)) {
		l->retire_reuse = false;
		return true; /* never posted to, or its CQ is polled no more */
	}
	if (vbt_qp_state(l->qp) == VB_QPS_RESET) {
		l->retire_reuse = false;
		return swept_since_reset(l);
	}
	if (vbi_mono_ns() - l->retire_ns <= 10000000000ull)
		return false;
	/* 10 s without the flushes: give the WRs up. RESET stops the QP (no
	 * completion, no DMA into the lane's buffers any more); the lane
	 * still waits for the poller to sweep what is in the CQ (under
	 * VB_PROGRESS_APP: for the application's vb_progress()). */
	vbi_warn("lane %u: drain gave up with %u sends, %u receives outstanding after 10 s: "
		 "its QP goes to RESET%s", l->id, out, recvs,
		 vbi_progress_waits_for_app(ctx) ? "; waiting for the application's vb_progress()"
						 : "");
	l->retire_reuse = false;
	if (vbt_qp_set_state(l->qp, VB_QPS_RESET)) {
		vbi_warn("lane %u: QP %u to RESET failed: %s; tried again in 10 s", l->id,
			 l->qp->qpn, vbi_errmsg());
		l->retire_ns = vbi_mono_ns();
		return false;
	}
	return swept_since_reset(l);
}

void vbi_lane_unlink(struct vbi_lane *l)
{
	vbi_mutex_lock(l->lk);
	vbi_sring_release_upto(&l->sr, NULL);
	if (l->peer)
		for (struct vbi_lane **q = &l->peer->lanes; *q; q = &(*q)->next)
			if (*q == l) {
				*q = l->next;
				break;
			}
	vbi_mutex_unlock(l->lk);
}

void vbi_lane_free(struct vbi_lane *l)
{
	struct vb_ctx *ctx = l->node->ctx;

	if (l->conn)
		ctx->ops->conn_close(l->conn);
	if (l->qp)
		vbi_lane_qp_put(l, l->retire_reuse);
	vbi_sring_fini(&l->sr);
	vbi_slots_free(l->dr->pool, l->slots, l->nslots);
	vbi_mutex_destroy(&l->own_lock);
	atomic_fetch_add_explicit(&ctx->st->lanes_retired, 1, memory_order_relaxed);
	atomic_fetch_sub(&l->dr->nlanes, 1);
	free(l);
}

void vbi_lane_destroy_now(struct vbi_lane *l)
{
	vbi_lane_retire_start(l);
	while (!vbi_lane_retire_drained(l))
		vbi_progress_or_nap(l->node->ctx);
	vbi_lane_unlink(l);
	/* posters that read the lane before it was unpublished are done */
	vbi_rcu_synchronize();
	vbi_lane_free(l);
}

/* ---- control sends on the active lane (peer->txlock held) ------------------------------ */

int vbi_peer_send_ctrl(struct vbi_peer *p, const void *frames, uint32_t len)
{
	struct vbi_lane *l;
	int rc;

	if (p->dead || p->closing)
		return -ENOTCONN;
	vbi_rcu_enter();
	l = vbi_peer_lane(p);
	rc = l && atomic_load(&l->hello_rcvd) ? vbi_lane_send_ctrl(l, frames, len) : -EAGAIN;
	vbi_rcu_leave();
	return rc;
}
