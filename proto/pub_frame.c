/* SPDX-License-Identifier: MIT */
/*
 * ORDERED publishers: framing what waits in the windows to a peer's active
 * lane, as its credits and send queue allow (small messages batched into
 * one SEND, large ones fragmented: registered header plus a zero-copy
 * slice of the message).
 */
#include <errno.h>
#include <string.h>

#include "proto/proto.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

/* ---- ORDERED: framing queued messages to a peer --------------------------------------- */

/* Count (@dir 1) or take back (@dir -1) the frames of a SEND: a BATCH of
 * @frames frames (@compact: its compact header), or a DATA fragment (1). */
static inline __attribute__((always_inline)) void frame_count(struct vb_ctx *ctx, uint32_t frames, bool compact, int dir)
{
	if (frames && compact)
		vbi_st_step(&ctx->st->compact_batches, dir, 1);
	vbi_st_step(&ctx->st->frames_sent, dir, frames);
	if (frames > 1)
		vbi_st_step(&ctx->st->batched_frames, dir, frames);
}

/* The next fragment of @m (a message that does not fit one SEND, or one
 * already begun) in ring entry @s: registered header + zero-copy slice of
 * the message (copied into the entry's buffer when the message's memory is
 * registered on another device than the lane's). pub->lock held; dropped.
 * Returns 1, or negative on a post error. */
static int frame_fragment(struct vbi_lane *l, struct vbi_pubpeer *pp, struct vbi_sctx *s,
			  struct vbi_msg *m, uint32_t cap)
{
	struct vb_ctx *ctx = l->node->ctx;
	struct vb_pub *pub = pp->pub;
	uint32_t fmax = cap - VBI_WIRE_HDR_LEN;
	uint32_t flen = m->len - pp->frag_sent < fmax ? m->len - pp->frag_sent : fmax;
	struct vbi_wire_hdr h = {
		.type = VBI_WT_DATA, .session = pub->session, .topic = pub->topic_id,
		.epoch = l->epoch, .seq = m->seq, .len = flen, .frag_off = pp->frag_sent,
		.msg_len = m->len, .flags = (uint16_t)(m->flags & ~(VBI_WF_FIRST | VBI_WF_LAST)),
	};
	struct vbt_sge sge[2] = {
		{ (uintptr_t)s->hdr, VBI_WIRE_HDR_LEN, s->hdr_lkey },
		{ (uintptr_t)m->buf.addr + VBI_WIRE_HDR_LEN + pp->frag_sent, flen, m->buf.lkey },
	};
	struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .sg_list = sge, .num_sge = 2,
				  .opcode = VBT_WR_SEND };
	int rc;

	if (!pp->frag_sent)
		h.flags |= VBI_WF_FIRST;
	if (pp->frag_sent + flen == m->len)
		h.flags |= VBI_WF_LAST;
	if (m->dr != l->dr) {
		vbi_wire_put(s->buf.addr, &h);
		memcpy((uint8_t *)s->buf.addr + VBI_WIRE_HDR_LEN,
		       (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN + pp->frag_sent, flen);
		sge[0] = (struct vbt_sge){ (uintptr_t)s->buf.addr, VBI_WIRE_HDR_LEN + flen,
					   s->buf.lkey };
		wr.num_sge = 1;
	} else {
		vbi_wire_put(s->hdr, &h);
		atomic_fetch_add(&m->refs, 1);
		s->msg = m;
	}
	vbi_mutex_unlock(&pub->lock);
	if (++l->sr.since_signal >= l->sr.n / 4 || (h.flags & VBI_WF_LAST) ||
	    l->sr.outstanding >= l->sr.n - 1) {
		wr.flags = VBT_SEND_SIGNALED;
		l->sr.since_signal = 0;
	}
	/* counted before the post, taken back if it fails (as a BATCH's) */
	vbi_st_count_send(ctx->st, false, wr.flags & VBT_SEND_SIGNALED, 1);
	frame_count(ctx, 1, false, 1);
	rc = vbi_lane_post_wr(l, &wr);
	if (rc) {
		vbi_st_count_send(ctx->st, false, wr.flags & VBT_SEND_SIGNALED, -1);
		frame_count(ctx, 1, false, -1);
		if (s->msg) {
			s->msg = NULL;
			vbi_msg_put(m);
		}
		vbi_sring_untake(&l->sr);
		return rc;
	}
	vbi_lane_count_send(l);
	vbi_mutex_lock(&pub->lock); /* pp->sent is read under it (acks) */
	pp->frag_sent += flen;
	if (pp->frag_sent == m->len) {
		pp->frag_sent = 0;
		pp->sent++;
		if (pp->sent > pp->high)
			pp->high = pp->sent;
	}
	vbi_mutex_unlock(&pub->lock);
	return 1;
}

/* A batch for ring entry @s (in its buffer, or in the lane's tx_hot when
 * it goes inline): the ACKs we owe peer @p first (piggybacked,
 * when vbi_peer_acks_ride() says they go now), then one BATCH frame with
 * this publisher's next whole messages from @m on (consecutive seqs, the
 * same flags) while they fit, one header for all and
 * 4 bytes each. On RC, a batch that continues the last one posted on the
 * lane (the same stream, the next seq) goes as a compact BATCH, a 4-byte
 * header instead of 40 (core/wire.h; the receiver knows the rest from the
 * one before, in order on the same QP). pub->lock held; dropped. Returns
 * 2 if it posted and the window held nothing more for @pp, 1 if it posted,
 * 0 if nothing fitted, or negative on a post error. */
static int frame_batch(struct vbi_peer *p, struct vbi_lane *l, struct vbi_pubpeer *pp,
		       struct vbi_sctx *s, struct vbi_msg *m, uint32_t cap)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vb_pub *pub = pp->pub;
	uint32_t one = (uint32_t)(VBI_WIRE_HDR_LEN + vbi_wire_rec_size(m->len)), room;
	uint32_t inl = l->qp->cap.max_inline_data < VBI_TX_HOT ? l->qp->cap.max_inline_data :
		       VBI_TX_HOT;
	struct vbi_wire_hdr bh = { .type = VBI_WT_BATCH, .flags = m->flags,
				   .session = pub->session, .topic = pub->topic_id,
				   .epoch = l->epoch, .seq = m->seq };
	struct vbi_rxs *acks_upto = NULL;
	uint8_t *buf = s->buf.addr;
	uint32_t off, acks, bh_off, frames = 0;
	bool drained = false;
	bool compact = l->mode == VB_QPT_RC && l->tx_bctx.next_seq == m->seq &&
		       l->tx_bctx.session == pub->session && l->tx_bctx.topic == pub->topic_id &&
		       l->tx_bctx.epoch == l->epoch;
	int rc;

	/* The last message in the window for @pp, and small (a request, an
	 * answer): built in the lane's tx_hot and posted inline, rather than
	 * in the entry's own buffer, a page the TLB has long forgotten
	 * (struct vbi_lane.tx_hot) */
	if (one <= inl && !vbi_txwin_get(&pub->win, pp->sent + 2)) {
		buf = l->tx_hot;
		if (cap > inl)
			cap = inl;
	}
	room = cap - one;
	off = acks = !vbi_peer_acks_ride(p, l) ? 0 :
		vbi_peer_build_acks(p, l, buf, room < 8 * VBI_WIRE_HDR_LEN ? room : 8 * VBI_WIRE_HDR_LEN,
				    &acks_upto);
	bh_off = off;
	off += compact ? VBI_WIRE_CHDR_LEN : VBI_WIRE_HDR_LEN;
	while (off + vbi_wire_rec_size(m->len) <= cap && m->flags == bh.flags) {
		const struct vbi_txent *e;

		off += (uint32_t)vbi_wire_rec_put(buf + off, (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN,
						  m->len);
		frames++;
		pp->sent++;
		if (!(e = vbi_txwin_get(&pub->win, pp->sent + 1))) {
			drained = true;
			break;
		}
		m = e->ctx;
	}
	if (frames && compact) {
		vbi_wire_cput(buf + bh_off, bh.flags);
	} else if (frames) {
		bh.len = off - bh_off - VBI_WIRE_HDR_LEN;
		bh.msg_len = frames;
		vbi_wire_put(buf + bh_off, &bh);
	} else {
		off = bh_off;
	}
	if (pp->sent > pp->high)
		pp->high = pp->sent;
	vbi_mutex_unlock(&pub->lock);
	if (!off) { /* nothing fitted (cannot happen: the caller's cap holds one) */
		vbi_sring_untake(&l->sr);
		return 0;
	}
	/* counted before the post: once the peer can have delivered a
	 * message, a vb_ctx_stats() snapshot taken after that delivery
	 * includes its frame (taken back when the post fails) */
	frame_count(ctx, frames, compact, 1);
	if (acks)
		vbi_peer_acks_count(p, acks_upto, 1);
	rc = vbi_lane_post_from(l, s, buf, off, false);
	if (rc) {
		frame_count(ctx, frames, compact, -1);
		if (acks)
			vbi_peer_acks_count(p, acks_upto, -1);
		vbi_mutex_lock(&pub->lock);
		pp->sent -= frames;
		vbi_mutex_unlock(&pub->lock);
		vbi_sring_untake(&l->sr);
		l->tx_bctx.next_seq = 0; /* the peer did not get it: no continuation */
		return rc;
	}
	if (frames && l->mode == VB_QPT_RC)
		l->tx_bctx = (struct vbi_wire_bctx){ .session = bh.session, .topic = bh.topic,
						     .epoch = bh.epoch, .next_seq = bh.seq + frames };
	if (acks)
		vbi_peer_acks_sent(p, l, acks_upto);
	return drained ? 2 : 1;
}

/* One SEND on lane @l for @pp: a batch of whole small messages, or the next
 * fragment of a large one (*@frag set). txlock held; takes pub->lock
 * briefly (the window moves under it, and a slow-subscriber cut sets dead
 * under it alone: slow_cut). Returns 2 if it posted and @pp has nothing
 * more to send, 1 if it posted, 0 if @pp had nothing to send, negative on
 * a post error. */
static int frame_one(struct vbi_peer *p, struct vbi_lane *l, struct vbi_pubpeer *pp, uint32_t cap,
		     bool *frag)
{
	struct vb_pub *pub = pp->pub;
	struct vbi_sctx *s = vbi_sring_take(&l->sr);
	const struct vbi_txent *e;
	struct vbi_msg *m;

	vbi_mutex_lock(&pub->lock);
	if (pp->dead) {
		vbi_mutex_unlock(&pub->lock);
		vbi_sring_untake(&l->sr);
		return 0;
	}
	if (pp->high <= pp->acked)
		pp->progress_ns = vbi_now_ns(); /* nothing outstanding: the RTO starts now */
	if (pp->sent < pp->acked) {
		/* rewound by a failover, then acknowledged past that point by
		 * ACKs still in flight: what it acknowledged is gone from the
		 * window; resume after it */
		pp->sent = pp->acked;
		pp->frag_sent = 0;
	}
	e = vbi_txwin_get(&pub->win, pp->sent + 1);
	if (!e) {
		/* nothing to send, or released without this peer's ack (dead) */
		vbi_mutex_unlock(&pub->lock);
		vbi_sring_untake(&l->sr);
		return 0;
	}
	m = e->ctx;
	*frag = pp->frag_sent || VBI_WIRE_HDR_LEN + vbi_wire_rec_size(m->len) > cap;
	if (*frag)
		return frame_fragment(l, pp, s, m, cap);
	return frame_batch(p, l, pp, s, m, cap);
}

/*
 * Frame as much as credits and the send queue of the peer's active lane
 * allow. Takes txlock; the lane is read from the path inside an RCU
 * read-side section (a switch, under the same txlock, cannot run meanwhile;
 * the grace period covers lock-free readers). A post error is the lane's
 * failure: the data stays in the window and goes out on the next lane.
 *
 * The cursors are visited round robin from the one after the last that
 * sent (p->rr), one SEND each in turn, until every cursor was found with
 * nothing to send in a row: a cursor whose batch emptied its window counts
 * as found empty (frame_one's 2), so one publisher with nothing more
 * costs no second look under its lock. @p->tx_pending is cleared first
 * and set again when the loop stopped with data left (no credit, ring
 * full, no usable lane, a post error, the burst): a push after the clear
 * sets it again itself.
 *
 * The burst: once it has posted ctx->flush_burst bytes' worth of batch
 * SENDs (VERBUS_FLUSH_BURST over the SEND size, at least one) while a
 * signaled SEND is in flight on the lane, the flush corks what is left
 * behind that SEND, as vbi_pub_commit corks a publish: the progress round
 * that reaps its completion flushes the next burst (vbi_peer_after_poll).
 * A stream of small messages then goes out a few SENDs at a time, and the
 * subscriber's ACKs come back while the publisher goes on, rather than
 * after a flush of up to the whole window (docs/benchmarks.md, "A bounded
 * flush": ORDERED 64 B msg/s higher in 22 of 27 pairs over five boots,
 * +3% to +31% in the medians). The fragments of large messages do not
 * count: waiting a progress round every burst cost a 64 KiB-message
 * stream 6-10%.
 */
void vbi_peer_flush(struct vbi_peer *p)
{
	struct vb_ctx *ctx = p->node->ctx;
	uint32_t cap = (uint32_t)ctx->attr.slot_size;
	struct vbi_pubpeer *pp;
	unsigned npp = 0, empty = 0;
	uint64_t burst = 0, left = 0; /* SENDs per burst (0: no bound), left in this one */
	bool frag = false;
	struct vbi_lane *l;

	vbi_mutex_lock(&p->txlock);
	atomic_store(&p->corked, false);
	atomic_store(&p->tx_pending, false);
	for (pp = p->pubs; pp; pp = pp->next_in_peer)
		npp++;
	pp = p->rr && p->rr->next_in_peer ? p->rr->next_in_peer : p->pubs;
	if (p->remote_slot_size && p->remote_slot_size < cap)
		cap = p->remote_slot_size;
	vbi_rcu_enter();
	l = vbi_peer_lane(p);
	if (l && cap > l->max_send)
		cap = l->max_send; /* UD: a datagram */
	if (l && l->mode == VB_QPT_UD && p->remote_slot_size && cap > p->remote_slot_size - VBI_UD_GRH)
		cap = p->remote_slot_size - VBI_UD_GRH;
	if (ctx->flush_burst)
		left = burst = ctx->flush_burst / cap ? ctx->flush_burst / cap : 1;
	while (pp && empty < npp) {
		int rc;

		/* keep one credit for credit-returning control frames */
		if (!l || p->dead || p->closing || !p->up || !atomic_load(&l->hello_rcvd) ||
		    vbi_lane_credits(l) < 2 || l->sr.outstanding >= l->sr.n) {
			atomic_store(&p->tx_pending, true); /* what is left waits for these */
			break;
		}
		rc = frame_one(p, l, pp, cap, &frag);
		if (rc < 0) {
			if (rc != -EAGAIN) {
				struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP,
							     "post_send failed" };

				vbi_lane_report(l, v, "post_send failed");
			}
			atomic_store(&p->tx_pending, true);
			break;
		}
		if (rc > 0) {
			p->rr = pp;
			if (burst && !frag && !--left) {
				if (vbi_peer_cork(p, l))
					break;
				left = burst; /* the SEND completed meanwhile: the next burst */
			}
		}
		empty = rc == 1 ? 0 : empty + 1;
		pp = pp->next_in_peer ? pp->next_in_peer : p->pubs;
	}
	vbi_rcu_leave();
	vbi_mutex_unlock(&p->txlock);
}
