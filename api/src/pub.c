/* SPDX-License-Identifier: MIT */
/*
 * Publishers. ORDERED: every message goes into the publisher's retransmit
 * window (core/stream) and is framed to each subscriber peer from there, as
 * that peer's credits and send queue allow — small messages batched into one
 * SEND when more than one is waiting, large ones fragmented with a
 * registered header plus a zero-copy slice of the message. A message leaves
 * the window when every live subscriber has acknowledged it; with
 * VB_SLOW_CUT a subscriber that acknowledged nothing for slow_sub_ms is cut
 * (no longer waited for) and told so with an END frame ("slow subscribers").
 * FANOUT: datagrams (fragmented to the path MTU) posted on the context's UD
 * QP once to the topic's multicast group for the subscribers that joined it
 * (mcast.c), and to the address handle of each subscriber that did not.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <sys/random.h>
#include <time.h>

#include "api/src/vb_int.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

#define SLOW_SUB_MS_MIN 10u
#define SLOW_SUB_MS_MAX 3600000u
#define SLOW_CHECK_NS 10000000ull /* vbi_pub_slow_check() at most every 10 ms */

static void env_pub(vb_pub_attr_t *a)
{
	const char *v = getenv("VERBUS_SLOW_SUB");
	char *end;

	if (v && *v) {
		if (!strcmp(v, "cut"))
			a->slow_policy = VB_SLOW_CUT;
		else if (!strcmp(v, "block"))
			a->slow_policy = VB_SLOW_BLOCK;
		else
			vbi_warn("VERBUS_SLOW_SUB='%s' ignored (cut or block)", v);
	}
	v = getenv("VERBUS_SLOW_SUB_MS");
	if (v && *v) {
		unsigned long n = strtoul(v, &end, 10);

		if (*end || n < SLOW_SUB_MS_MIN || n > SLOW_SUB_MS_MAX)
			vbi_warn("VERBUS_SLOW_SUB_MS='%s' ignored (%u..%u)", v, SLOW_SUB_MS_MIN,
				 SLOW_SUB_MS_MAX);
		else
			a->slow_sub_ms = (unsigned)n;
	}
	v = getenv("VERBUS_RETAIN_BYTES");
	if (v && *v) {
		unsigned long long n = strtoull(v, &end, 10);

		if (*end)
			vbi_warn("VERBUS_RETAIN_BYTES='%s' ignored (bytes, 0 = no bound)", v);
		else
			a->retain_bytes = (size_t)n;
	}
}

void vb_pub_attr_init(vb_pub_attr_t *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->linger_ms = 2000;
	a->slow_policy = VB_SLOW_CUT;
	a->slow_sub_ms = 2000;
	a->retain_bytes = (size_t)64 << 20;
	env_pub(a);
}

static uint32_t random_session(void)
{
	uint32_t v = 0;

	while (!v) {
		if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			v = (uint32_t)(ts.tv_nsec ^ ts.tv_sec ^ (uintptr_t)&v);
		}
	}
	return v;
}

/* Does @pp have messages to frame? txlock held; takes the pub's lock (the
 * window moves under it). */
static bool pp_pending(struct vbi_pubpeer *pp)
{
	bool r;

	if (pp->dead)
		return false;
	pthread_mutex_lock(&pp->pub->lock);
	r = pp->sent < pp->pub->win.next_seq - 1;
	pthread_mutex_unlock(&pp->pub->lock);
	return r;
}

/* ---- window release and acknowledgements (pub->lock held) -------------------------- */

static void release_msg(void *c, uint64_t seq, void *arg)
{
	struct vb_pub *pub = arg;
	struct vbi_msg *m = c;

	(void)seq;
	pub->retained -= m->len < pub->retained ? m->len : pub->retained;
	vbi_msg_put(pub->node->ctx, m);
}

/* Drop from the window what every live subscriber has acknowledged (all of
 * it when nobody is subscribed). Returns the new k-of-n sequence. */
static uint64_t pub_release(struct vb_pub *pub)
{
	uint64_t min = pub->win.next_seq - 1;
	uint64_t acked[VBI_MAX_PEERS];
	unsigned n = 0;

	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub) {
		if (pp->dead)
			continue;
		if (pp->acked < min)
			min = pp->acked;
		if (n < VBI_MAX_PEERS)
			acked[n++] = pp->acked > pp->joined ? pp->acked : 0;
	}
	if (min > pub->win.acked) {
		vbi_txwin_ack(&pub->win, min, release_msg, pub);
		atomic_store_explicit(&pub->win_full, false, memory_order_relaxed);
	}
	if (pub->attr.ack_quorum && n >= pub->attr.ack_quorum) {
		uint64_t q;

		if (vbi_quorum_seq(acked, n, pub->attr.ack_quorum, &q) == 0 && q > pub->quorum_seq)
			pub->quorum_seq = q;
	}
	return pub->quorum_seq;
}

void vbi_pub_on_ack(struct vb_node *node, struct vbi_peer *peer, const struct vbi_wire_hdr *h)
{
	struct vb_ctx *ctx = node->ctx;

	if (!h->session)
		return;
	for (struct vb_pub *pub = node->pubs; pub; pub = pub->next) {
		uint64_t before, after, win_before;
		struct vbi_pubpeer *pp;

		if (pub->session != h->session || pub->topic_id != h->topic ||
		    pub->cls != VB_ORDERED)
			continue;
		pthread_mutex_lock(&pub->lock);
		for (pp = pub->peers; pp && pp->peer != peer; pp = pp->next_in_pub)
			;
		if (!pp || h->seq > pp->high) {
			pthread_mutex_unlock(&pub->lock);
			atomic_fetch_add(&ctx->st.malformed, 1);
			vbi_event(ctx, VB_EV_PROTOCOL, peer->name,
				  "ACK for '%s' seq %llu: never sent to this peer", pub->topic,
				  (unsigned long long)h->seq);
			return;
		}
		if (h->seq > pp->acked) {
			pp->acked = h->seq;
			pp->progress_ns = vbi_now_ns();
			pp->rto_shift = 0;
			/* progress: a slow subscriber's clock starts again */
			pp->stall_ns = pp->acked < pub->win.next_seq - 1 ? pp->progress_ns : 0;
		}
		before = pub->quorum_seq;
		win_before = pub->win.acked;
		after = pub_release(pub);
		/* on_ack runs with no lock held, by vbi_cb_flush(); queued under
		 * pub->lock, so a destroy that saw this ACK waits for it */
		if (after != before && pub->attr.on_ack && vbi_cb_queue_ack(pub, after))
			vbi_warn("'%s': acknowledgement of %llu not reported: no memory", pub->topic,
				 (unsigned long long)after);
		if (after != before || pub->win.acked != win_before)
			pthread_cond_broadcast(&pub->acked_cv); /* wait_acked, destroy's linger */
		pthread_mutex_unlock(&pub->lock);
		return;
	}
}

/*
 * NAK (from a subscriber on a UC/UD lane): it has everything before h->seq
 * (an implied ACK) and lost h->seq. Go-back-N: the cursor goes back to
 * h->seq - 1 and everything from there is sent again (the receiver dropped
 * what came after the hole). A NAK repeating the one just acted upon is
 * ignored for an RTO/2 (what we resent is still on its way). Progress
 * context.
 */
void vbi_pub_on_nak(struct vb_node *node, struct vbi_peer *peer, const struct vbi_wire_hdr *h)
{
	struct vb_ctx *ctx = node->ctx;
	uint64_t now = vbi_now_ns(), n = 0;

	if (!h->session || !h->seq)
		return;
	if (h->seq > 1) {
		struct vbi_wire_hdr a = *h;

		a.type = VBI_WT_ACK;
		a.seq = h->seq - 1;
		vbi_pub_on_ack(node, peer, &a);
	}
	pthread_mutex_lock(&peer->txlock);
	for (struct vbi_pubpeer *pp = peer->pubs; pp; pp = pp->next_in_peer) {
		struct vb_pub *pub = pp->pub;

		if (pub->session != h->session || pub->topic_id != h->topic)
			continue;
		pthread_mutex_lock(&pub->lock);
		if (!pp->dead) {
			struct vbi_txcursor c = { .sent = pp->sent, .high = pp->high,
						  .acked = pp->acked, .frag_sent = pp->frag_sent,
						  .nak_seq = pp->nak_seq, .nak_ns = pp->nak_ns };

			if (vbi_txcursor_nak(&c, h->seq, now, vbi_rto_ns() / 2, &n)) {
				pp->sent = c.sent;
				pp->frag_sent = c.frag_sent;
				pp->nak_seq = c.nak_seq;
				pp->nak_ns = c.nak_ns;
				pp->progress_ns = now;
			}
		}
		pthread_mutex_unlock(&pub->lock);
		break;
	}
	pthread_mutex_unlock(&peer->txlock);
	if (n)
		atomic_fetch_add(&ctx->st.retransmits, n);
}

/*
 * Retransmission timeout on a UC/UD lane (txlock held): a cursor with
 * unacknowledged messages and no acknowledgement progress for @rto_ns goes
 * back to what was acknowledged (tail loss: no later message arrives to
 * reveal the hole, or the ACKs were lost). Consecutive timeouts without
 * progress back off exponentially (up to 16 x @rto_ns: a far end that is
 * gone is not flooded). Returns the messages to resend.
 */
uint64_t vbi_pub_rto_peer(struct vbi_peer *peer, uint64_t now_ns, uint64_t rto_ns)
{
	uint64_t n = 0;

	for (struct vbi_pubpeer *pp = peer->pubs; pp; pp = pp->next_in_peer) {
		pthread_mutex_lock(&pp->pub->lock);
		if (!pp->dead && pp->high > pp->acked &&
		    now_ns - pp->progress_ns > rto_ns << pp->rto_shift) {
			n += pp->sent > pp->acked ? pp->sent - pp->acked : 0;
			pp->sent = pp->acked;
			pp->frag_sent = 0;
			pp->progress_ns = now_ns;
			if (pp->rto_shift < 4)
				pp->rto_shift++;
		}
		pthread_mutex_unlock(&pp->pub->lock);
	}
	return n;
}

/* ---- attaching subscribers (node->lock held for writing) ------------------------------ */

void vbi_pub_attach(struct vb_pub *pub, struct vbi_peer *peer)
{
	struct vbi_pubpeer *pp;

	for (pp = pub->peers; pp; pp = pp->next_in_pub)
		if (pp->peer == peer) {
			/* re-subscribed after an UNSUB: start again from the next message */
			pthread_mutex_lock(&peer->txlock);
			pthread_mutex_lock(&pub->lock);
			if (pp->dead && !peer->dead) {
				pp->joined = pp->sent = pp->acked = pub->cls == VB_ORDERED
					? pub->win.next_seq - 1 : pub->fanout_seq;
				pp->frag_sent = 0;
				pp->dead = false;
				if (pp->end_pending)
					pub->ends_pending--;
				pp->cut = pp->end_pending = false;
				pp->stall_ns = 0;
				pp->mcast = vbi_mcast_peer_joined(pub, peer);
			}
			pthread_mutex_unlock(&pub->lock);
			pthread_mutex_unlock(&peer->txlock);
			return;
		}
	pp = calloc(1, sizeof(*pp));
	if (!pp) {
		vbi_error("out of memory attaching a subscriber to '%s'", pub->topic);
		return;
	}
	pp->pub = pub;
	pp->peer = peer;
	pthread_mutex_lock(&peer->txlock);
	pthread_mutex_lock(&pub->lock);
	/* A late joiner starts with the next message. */
	pp->joined = pp->sent = pp->acked =
		pub->cls == VB_ORDERED ? pub->win.next_seq - 1 : pub->fanout_seq;
	pp->dead = peer->dead;
	pp->mcast = vbi_mcast_peer_joined(pub, peer);
	pp->next_in_pub = pub->peers;
	pub->peers = pp;
	pub->npeers++;
	pthread_mutex_unlock(&pub->lock);
	if (pub->cls == VB_ORDERED) {
		pp->next_in_peer = peer->pubs;
		peer->pubs = pp;
	}
	pthread_mutex_unlock(&peer->txlock);
	vbi_info("'%s' (%s) now reaches '%s'%s", pub->topic, pub->cls ? "FANOUT" : "ORDERED",
		 peer->name, pp->mcast ? " through its multicast group" : "");
}

static void detach_pp(struct vbi_pubpeer *pp)
{
	struct vbi_peer *peer = pp->peer;

	pthread_mutex_lock(&peer->txlock);
	for (struct vbi_pubpeer **q = &peer->pubs; *q; q = &(*q)->next_in_peer)
		if (*q == pp) {
			*q = pp->next_in_peer;
			break;
		}
	if (peer->rr == pp)
		peer->rr = NULL;
	pthread_mutex_unlock(&peer->txlock);
}

/* @peer unsubscribed from @pub: stop sending to it and stop waiting for it. */
void vbi_pub_drop_peer(struct vb_pub *pub, struct vbi_peer *peer)
{
	pthread_mutex_lock(&peer->txlock);
	pthread_mutex_lock(&pub->lock);
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub) {
		if (pp->peer == peer && pp->end_pending) {
			/* it left on its own: no END owed any more */
			pp->end_pending = false;
			pub->ends_pending--;
		}
		if (pp->peer == peer && !pp->dead) {
			uint64_t before = pub->quorum_seq;

			pp->dead = true;
			pp->frag_sent = 0;
			if (pub->cls == VB_ORDERED && pub_release(pub) != before)
				pthread_cond_broadcast(&pub->acked_cv);
		}
	}
	pthread_mutex_unlock(&pub->lock);
	pthread_mutex_unlock(&peer->txlock);
}

/* The peer failed: its cursors stop holding the windows back. */
void vbi_pub_detach_peer(struct vbi_peer *peer)
{
	pthread_mutex_lock(&peer->txlock);
	for (struct vbi_pubpeer *pp = peer->pubs; pp; pp = pp->next_in_peer) {
		uint64_t before, after;

		pthread_mutex_lock(&pp->pub->lock);
		pp->dead = true;
		before = pp->pub->quorum_seq;
		after = pub_release(pp->pub);
		if (before != after)
			pthread_cond_broadcast(&pp->pub->acked_cv);
		pthread_mutex_unlock(&pp->pub->lock);
	}
	pthread_mutex_unlock(&peer->txlock);
}

/* ---- ORDERED: framing queued messages to a peer --------------------------------------- */

static struct vbi_pubpeer *next_pending(struct vbi_peer *p)
{
	struct vbi_pubpeer *start = p->rr ? p->rr->next_in_peer : NULL;

	if (!start)
		start = p->pubs;
	for (struct vbi_pubpeer *pp = start; pp; pp = pp->next_in_peer)
		if (pp_pending(pp))
			return p->rr = pp;
	for (struct vbi_pubpeer *pp = p->pubs; pp && pp != start; pp = pp->next_in_peer)
		if (pp_pending(pp))
			return p->rr = pp;
	return NULL;
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
	pthread_mutex_unlock(&pub->lock);
	if (++l->sr.since_signal >= l->sr.n / 4 || (h.flags & VBI_WF_LAST) ||
	    l->sr.outstanding >= l->sr.n - 1) {
		wr.flags = VBT_SEND_SIGNALED;
		l->sr.since_signal = 0;
	}
	rc = vbi_lane_post_wr(l, &wr);
	if (rc) {
		if (s->msg) {
			s->msg = NULL;
			vbi_msg_put(ctx, m);
		}
		vbi_sring_untake(&l->sr);
		return rc;
	}
	l->sends_total++;
	atomic_fetch_add_explicit(&ctx->st.sends_posted, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&ctx->st.frames_sent, 1, memory_order_relaxed);
	pthread_mutex_lock(&pub->lock); /* pp->sent is read under it (acks) */
	pp->frag_sent += flen;
	if (pp->frag_sent == m->len) {
		pp->frag_sent = 0;
		pp->sent++;
		if (pp->sent > pp->high)
			pp->high = pp->sent;
	}
	pthread_mutex_unlock(&pub->lock);
	return 1;
}

/* A batch in ring entry @s: the ACKs we owe peer @p first (piggybacked),
 * then one BATCH frame with this publisher's next whole messages from @m on
 * (consecutive seqs, the same flags) while they fit, one header for all and
 * 4 bytes each. pub->lock held; dropped. Returns 1, 0 if nothing fitted,
 * or negative on a post error. */
static int frame_batch(struct vbi_peer *p, struct vbi_lane *l, struct vbi_pubpeer *pp,
		       struct vbi_sctx *s, struct vbi_msg *m, uint32_t cap)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vb_pub *pub = pp->pub;
	uint32_t room = cap - (uint32_t)(VBI_WIRE_HDR_LEN + vbi_wire_rec_size(m->len));
	struct vbi_wire_hdr bh = { .type = VBI_WT_BATCH, .flags = m->flags,
				   .session = pub->session, .topic = pub->topic_id,
				   .epoch = l->epoch, .seq = m->seq };
	struct vbi_rxs *acks_upto = NULL;
	uint8_t *buf = s->buf.addr;
	uint32_t off, acks, bh_off, frames = 0;
	int rc;

	off = acks = vbi_peer_build_acks(p, l, buf, room < 8 * VBI_WIRE_HDR_LEN ?
					 room : 8 * VBI_WIRE_HDR_LEN, &acks_upto);
	bh_off = off;
	off += VBI_WIRE_HDR_LEN;
	while (off + vbi_wire_rec_size(m->len) <= cap && m->flags == bh.flags) {
		const struct vbi_txent *e;

		off += (uint32_t)vbi_wire_rec_put(buf + off, (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN,
						  m->len);
		frames++;
		pp->sent++;
		if (!(e = vbi_txwin_get(&pub->win, pp->sent + 1)))
			break;
		m = e->ctx;
	}
	if (frames) {
		bh.len = off - bh_off - VBI_WIRE_HDR_LEN;
		bh.msg_len = frames;
		vbi_wire_put(buf + bh_off, &bh);
	} else {
		off = bh_off;
	}
	if (pp->sent > pp->high)
		pp->high = pp->sent;
	pthread_mutex_unlock(&pub->lock);
	if (!off) { /* nothing fitted (cannot happen: the caller's cap holds one) */
		vbi_sring_untake(&l->sr);
		return 0;
	}
	rc = vbi_lane_post(l, s, off, false);
	if (rc) {
		pthread_mutex_lock(&pub->lock);
		pp->sent -= frames;
		pthread_mutex_unlock(&pub->lock);
		vbi_sring_untake(&l->sr);
		return rc;
	}
	if (acks)
		vbi_peer_acks_sent(p, l, acks_upto);
	atomic_fetch_add_explicit(&ctx->st.frames_sent, frames, memory_order_relaxed);
	if (frames > 1)
		atomic_fetch_add_explicit(&ctx->st.batched_frames, frames, memory_order_relaxed);
	return 1;
}

/* One SEND on lane @l for @pp: a batch of whole small messages, or the next
 * fragment of a large one. txlock held; takes pub->lock briefly. Returns 1
 * if it posted, 0 if nothing to do, negative on a post error. */
static int frame_one(struct vbi_peer *p, struct vbi_lane *l, struct vbi_pubpeer *pp, uint32_t cap)
{
	struct vb_pub *pub = pp->pub;
	struct vbi_sctx *s = vbi_sring_take(&l->sr);
	const struct vbi_txent *e;
	struct vbi_msg *m;

	pthread_mutex_lock(&pub->lock);
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
		pthread_mutex_unlock(&pub->lock);
		vbi_sring_untake(&l->sr);
		return 0;
	}
	m = e->ctx;
	if (pp->frag_sent || VBI_WIRE_HDR_LEN + vbi_wire_rec_size(m->len) > cap)
		return frame_fragment(l, pp, s, m, cap);
	return frame_batch(p, l, pp, s, m, cap);
}

/*
 * Frame as much as credits and the send queue of the peer's active lane
 * allow. Takes txlock; the lane is read from the path inside an RCU
 * read-side section (a switch, under the same txlock, cannot run meanwhile;
 * the grace period covers lock-free readers). A post error is the lane's
 * failure: the data stays in the window and goes out on the next lane.
 */
void vbi_peer_flush(struct vbi_peer *p)
{
	uint32_t cap = (uint32_t)p->node->ctx->attr.slot_size;
	struct vbi_lane *l;

	pthread_mutex_lock(&p->txlock);
	atomic_store(&p->corked, false);
	if (p->remote_slot_size && p->remote_slot_size < cap)
		cap = p->remote_slot_size;
	vbi_rcu_enter();
	l = vbi_peer_lane(p);
	if (l && cap > l->max_send)
		cap = l->max_send; /* UD: a datagram */
	if (l && l->mode == VB_QPT_UD && p->remote_slot_size && cap > p->remote_slot_size - VBI_UD_GRH)
		cap = p->remote_slot_size - VBI_UD_GRH;
	while (l && !p->dead && !p->closing && p->up && atomic_load(&l->hello_rcvd)) {
		struct vbi_pubpeer *pp;
		int rc;

		/* keep one credit for credit-returning control frames */
		if (vbi_lane_credits(l) < 2 || l->sr.outstanding >= l->sr.n)
			break;
		pp = next_pending(p);
		if (!pp)
			break;
		rc = frame_one(p, l, pp, cap);
		if (rc < 0) {
			if (rc != -EAGAIN) {
				struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP,
							     "post_send failed" };

				vbi_lane_report(l, v, "post_send failed");
			}
			break;
		}
		if (rc == 0)
			break;
	}
	vbi_rcu_leave();
	pthread_mutex_unlock(&p->txlock);
}

/* Failover: every ORDERED cursor to @peer goes back to what it
 * acknowledged, so the next lane carries everything unacknowledged again
 * (the receiver drops what it already has by sequence). txlock held.
 * Returns how many messages will be resent. */
uint64_t vbi_pub_rewind_peer(struct vbi_peer *peer)
{
	uint64_t n = 0;

	for (struct vbi_pubpeer *pp = peer->pubs; pp; pp = pp->next_in_peer) {
		pthread_mutex_lock(&pp->pub->lock);
		if (!pp->dead && pp->sent > pp->acked) {
			n += pp->sent - pp->acked;
			pp->sent = pp->acked;
		}
		pp->frag_sent = 0;
		pp->progress_ns = vbi_now_ns();
		pp->rto_shift = 0;
		if (pp->stall_ns) /* a new connection: the slow clock restarts */
			pp->stall_ns = pp->progress_ns;
		pthread_mutex_unlock(&pp->pub->lock);
	}
	return n;
}

/* ---- ORDERED: slow subscribers ---------------------------------------------------------------- */

/* Payload bytes of the messages after @from in @pub's window. pub->lock held. */
static size_t window_bytes(const struct vb_pub *pub, uint64_t from)
{
	size_t n = 0;

	for (uint64_t s = from + 1; s < pub->win.next_seq; s++) {
		const struct vbi_txent *e = vbi_txwin_get(&pub->win, s);

		if (e)
			n += e->len;
	}
	return n;
}

/* Can @p be sent to now? (a connection that is recovering is not slow) */
static bool peer_reachable(struct vbi_peer *p)
{
	bool ok;

	if (atomic_load(&p->dead) || atomic_load(&p->closing) || !atomic_load(&p->up))
		return false;
	vbi_rcu_enter();
	ok = vbi_peer_lane(p) != NULL;
	vbi_rcu_leave();
	return ok;
}

/*
 * VB_SLOW_CUT: cut every subscriber of @pub that holds unacknowledged
 * messages and acknowledged nothing new for slow_sub_ms. Its cursor goes
 * dead (the window stops waiting for it and frees what only it needed),
 * an END frame is owed to it, and the cut is counted and reported.
 * node->lock held for reading; takes pub->lock.
 */
static void slow_cut(struct vb_pub *pub)
{
	uint64_t now;
	struct vb_ctx *ctx = pub->node->ctx;
	uint64_t limit = (uint64_t)pub->attr.slow_sub_ms * 1000000;
	bool released = false;

	unsigned connected = 0;

	pthread_mutex_lock(&pub->lock);
	/* read under the lock: publishing threads set stall clocks to their
	 * own now, which must not be later than ours */
	now = vbi_now_ns();
	if (pub->attr.ack_quorum)
		for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
			connected += !pp->dead && peer_reachable(pp->peer);
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub) {
		uint64_t last = pub->win.next_seq - 1, n, held_ms;
		size_t bytes;

		if (pp->dead || !pp->stall_ns || pp->acked >= last || pp->stall_ns > now ||
		    now - pp->stall_ns < limit)
			continue;
		/* A recovering connection is recovery's business (its clock
		 * restarts), except for a k-of-n publisher while k others are
		 * connected: a replica that is gone must not hold the others'
		 * writes for the whole recovery timeout (net_replica_test: a
		 * killed replica stalled them until it was given up). */
		if (!peer_reachable(pp->peer) &&
		    !(pub->attr.ack_quorum && connected >= pub->attr.ack_quorum)) {
			pp->stall_ns = now;
			continue;
		}
		{	/* it consumed what we sent since (receive credits came back):
			 * alive and reading, e.g. a large message fragment by
			 * fragment; its clock restarts from then */
			uint64_t c = atomic_load_explicit(&pp->peer->credit_rx_ns,
							  memory_order_relaxed);

			if (c > pp->stall_ns && c <= now) {
				pp->stall_ns = c;
				if (now - c < limit)
					continue;
			}
		}
		n = last - pp->acked;
		bytes = window_bytes(pub, pp->acked);
		held_ms = (now - pp->stall_ns) / 1000000;
		pp->dead = pp->cut = pp->end_pending = true;
		pp->frag_sent = 0;
		pub->ends_pending++;
		released = true;
		atomic_fetch_add(&ctx->st.slow_cuts, 1);
		atomic_fetch_add(&ctx->st.slow_cut_msgs, n);
		vbi_warn("'%s': subscriber '%s' acknowledged nothing for %llu ms with %llu messages "
			 "(%zu bytes) unacknowledged: its stream is cut (slow_sub_ms %u)", pub->topic,
			 pp->peer->name, (unsigned long long)held_ms, (unsigned long long)n, bytes,
			 pub->attr.slow_sub_ms);
		vbi_event(ctx, VB_EV_SLOW_SUBSCRIBER, pp->peer->name,
			  "topic '%s': no acknowledgement for %llu ms with %llu messages (%zu bytes) "
			  "unacknowledged (slow_sub_ms %u): stream cut, acknowledged up to seq %llu",
			  pub->topic, (unsigned long long)held_ms, (unsigned long long)n, bytes,
			  pub->attr.slow_sub_ms, (unsigned long long)pp->acked);
	}
	if (released) {
		uint64_t before = pub->quorum_seq, win_before = pub->win.acked;

		if (pub_release(pub) != before || pub->win.acked != win_before)
			pthread_cond_broadcast(&pub->acked_cv);
	}
	pthread_mutex_unlock(&pub->lock);
}

/* Send the END frames @pub owes its cut subscribers (retried each round
 * until a credit is free: a stopped subscriber returns none). node->lock
 * held for reading; takes each peer's txlock, then pub->lock. */
static void slow_send_ends(struct vb_pub *pub)
{
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub) {
		struct vbi_peer *p = pp->peer;
		uint8_t buf[VBI_WIRE_HDR_LEN];
		struct vbi_wire_hdr h = { .type = VBI_WT_END, .session = pub->session,
					  .topic = pub->topic_id, .frag_off = VB_END_SLOW };
		bool owed;

		pthread_mutex_lock(&p->txlock);
		pthread_mutex_lock(&pub->lock);
		owed = pp->end_pending && pp->cut;
		h.seq = pp->sent; /* the last message framed to it: the END follows it */
		pthread_mutex_unlock(&pub->lock);
		if (owed) {
			vbi_wire_put(buf, &h);
			if (atomic_load(&p->dead)) {
				owed = true; /* nobody to tell any more */
			} else if (vbi_peer_send_ctrl(p, buf, sizeof(buf))) {
				owed = false; /* no credit yet: next round */
			}
			if (owed) {
				pthread_mutex_lock(&pub->lock);
				if (pp->end_pending) {
					pp->end_pending = false;
					pub->ends_pending--;
				}
				pthread_mutex_unlock(&pub->lock);
			}
		}
		pthread_mutex_unlock(&p->txlock);
	}
}

void vbi_pub_slow_check(struct vb_ctx *ctx)
{
	uint64_t now = vbi_now_ns();

	if (now - ctx->slow_check_ns < SLOW_CHECK_NS)
		return;
	ctx->slow_check_ns = now;
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vb_pub *pub = n->pubs; pub; pub = pub->next) {
			unsigned owed;

			if (pub->cls != VB_ORDERED)
				continue;
			if (pub->attr.slow_policy == VB_SLOW_CUT)
				slow_cut(pub);
			pthread_mutex_lock(&pub->lock);
			owed = pub->ends_pending;
			pthread_mutex_unlock(&pub->lock);
			if (owed)
				slow_send_ends(pub);
		}
		pthread_rwlock_unlock(&n->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* ---- claim / commit / publish ---------------------------------------------------------------- */

static int check_len(struct vb_pub *pub, size_t len)
{
	if (len > pub->node->ctx->attr.max_msg)
		return vbi_err(-EMSGSIZE, "'%s': %zu bytes > max_msg %zu", pub->topic, len,
			       pub->node->ctx->attr.max_msg);
	return 0;
}

int vb_pub_claim(vb_pub_t *pub, size_t len, vb_claim_t *claim)
{
	struct vb_ctx *ctx;
	struct vbi_msg *m;
	size_t need;
	int rc;

	if (!pub || !claim)
		return vbi_err(-EINVAL, "NULL argument");
	if ((rc = check_len(pub, len)))
		return rc;
	ctx = pub->node->ctx;
	need = VBI_WIRE_HDR_LEN + len;
	if (pub->cls == VB_FANOUT) {
		/* room to lay every datagram out at an MTU stride */
		uint32_t fmax = ctx->ud_mtu - VBI_WIRE_HDR_LEN;
		size_t nfrag = len ? (len + fmax - 1) / fmax : 1;

		need = nfrag * ctx->ud_mtu;
		if (need > VBI_MEMPOOL_MAX_ALLOC - VBI_MSG_DESC)
			return vbi_err(-EMSGSIZE, "'%s': %zu bytes need %zu datagrams", pub->topic,
				       len, nfrag);
	}
	{
		/* the primary device is gone (its pool may be detached already):
		 * ORDERED goes on over the standby; FANOUT is posted zero-copy by
		 * the UD endpoint, wherever it is (fanout_rehome if it moves
		 * meanwhile) */
		struct vbi_devres *dr = &ctx->dr[0];

		if (ctx->ndev > 1 && atomic_load(&ctx->dr[0].fatal) && pub->cls == VB_ORDERED)
			dr = &ctx->dr[1];
		else if (pub->cls == VB_FANOUT)
			dr = ctx->ud_dr;
		rc = vbi_msg_new(dr, need, &m);
		if (rc == -ENODEV && pub->cls == VB_FANOUT && dr != ctx->ud_dr)
			rc = vbi_msg_new(ctx->ud_dr, need, &m); /* the endpoint moved meanwhile */
	}
	if (rc) {
		if (rc == -EAGAIN)
			atomic_fetch_add(&ctx->st.backpressure, 1);
		return vbi_err_prefix(rc, "'%s': registered memory", pub->topic);
	}
	m->owner = pub;
	claim->data = (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN;
	claim->len = len;
	claim->priv_ = m;
	return 0;
}

int vb_pub_abort(vb_pub_t *pub, vb_claim_t *claim)
{
	if (!pub || !claim || !claim->priv_)
		return vbi_err(-EINVAL, "no claim to abort");
	if (((struct vbi_msg *)claim->priv_)->owner != pub)
		return vbi_err(-EINVAL, "'%s': the claim was made on another publisher", pub->topic);
	vbi_msg_put(pub->node->ctx, claim->priv_);
	claim->priv_ = NULL;
	return 0;
}

/* What a publisher's -EAGAIN says, kept unformatted: a publisher retries at
 * full rate while its window is full, and formatting the message each time
 * cost more than the retry (vfprintf on the publishing thread's profile).
 * vb_errmsg() formats it (full_fmt) when it is read. */
struct full_why {
	char topic[96], who[64];
	bool bytes;             /* retain_bytes reached, else the window */
	bool block;             /* slow_policy BLOCK */
	unsigned inflight;
	size_t retained, cap;
	uint64_t held_ms;       /* UINT64_MAX: no holder known */
};
_Static_assert(sizeof(struct full_why) <= VBI_ERR_LAZY_MAX, "full_why fits the lazy error");
_Static_assert(VBI_TOPIC_MAX < 96 && VBI_NAME_MAX <= 64, "names fit full_why");

static void full_fmt(char *buf, size_t len, const void *data)
{
	const struct full_why *w = data;
	char who[256] = "";

	if (w->held_ms != UINT64_MAX)
		snprintf(who, sizeof(who), "; the oldest is held by '%s', which acknowledged "
			 "nothing new for %llu ms%s", w->who, (unsigned long long)w->held_ms,
			 w->block ? " (policy BLOCK)" : "");
	if (w->bytes)
		snprintf(buf, len, "vb_pub_commit: '%s': retained bytes at retain_bytes (%zu of %zu "
			 "bytes, %u messages not yet acknowledged by every subscriber)%s", w->topic,
			 w->retained, w->cap, w->inflight, who);
	else
		snprintf(buf, len, "vb_pub_commit: '%s': retransmit window full (%u messages not yet "
			 "acknowledged by every subscriber)%s", w->topic, w->inflight, who);
}

static void copy_name(char *dst, size_t len, const char *src, size_t srclen)
{
	size_t n = strnlen(src, len - 1 < srclen ? len - 1 : srclen);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* -EAGAIN from vb_pub_commit(): the window (or retain_bytes, @bytes) is
 * full; the message says which live subscriber holds the oldest message,
 * and for how long it has not advanced. Called with pub->lock held; drops
 * it. */
static int retain_full(struct vb_pub *pub, bool bytes)
{
	struct vbi_pubpeer *slow = NULL;
	struct full_why w = { .bytes = bytes, .inflight = vbi_txwin_inflight(&pub->win),
			      .retained = pub->retained, .cap = pub->attr.retain_bytes,
			      .held_ms = UINT64_MAX,
			      .block = pub->attr.slow_policy != VB_SLOW_CUT };

	copy_name(w.topic, sizeof(w.topic), pub->topic, sizeof(pub->topic));
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
		if (!pp->dead && (!slow || pp->acked < slow->acked))
			slow = pp;
	if (slow && slow->stall_ns) {
		uint64_t now = vbi_now_ns();

		copy_name(w.who, sizeof(w.who), slow->peer->name, sizeof(slow->peer->name));
		w.held_ms = now > slow->stall_ns ? (now - slow->stall_ns) / 1000000 : 0;
	}
	pthread_mutex_unlock(&pub->lock);
	atomic_fetch_add(&pub->node->ctx->st.backpressure, 1);
	return vbi_err_lazy(-EAGAIN, full_fmt, &w, sizeof(w));
}

int vb_pub_commit(vb_pub_t *pub, vb_claim_t *claim, size_t len, uint64_t *seq_out)
{
	struct vb_ctx *ctx;
	struct vbi_msg *m;
	struct vbi_peer *targets[VBI_MAX_PEERS];
	unsigned nt = 0;
	uint64_t seq;
	int rc;

	if (!pub || !claim || !claim->priv_)
		return vbi_err(-EINVAL, "no claim to commit");
	if (((struct vbi_msg *)claim->priv_)->owner != pub)
		return vbi_err(-EINVAL, "'%s': the claim was made on another publisher (commit it "
			       "there)", pub->topic);
	if (len > claim->len)
		return vbi_err(-EINVAL, "commit of %zu bytes > %zu claimed", len, claim->len);
	ctx = pub->node->ctx;
	m = claim->priv_;
	m->len = (uint32_t)len;
	if (pub->cls == VB_FANOUT) {
		rc = vbi_fanout_send(pub, &m, seq_out);
		if (rc == 0) {
			claim->priv_ = NULL; /* it is the library's now */
		} else { /* still the caller's, maybe moved to another pool (fanout_rehome) */
			claim->priv_ = m;
			claim->data = (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN;
		}
		return rc;
	}
	m->flags = VBI_WF_FIRST | VBI_WF_LAST;
	if (pub->attr.ack_quorum)
		m->flags |= VBI_WF_ACK_REQ;
	pthread_mutex_lock(&pub->lock);
	if (pub->attr.retain_bytes && pub->retained &&
	    pub->retained + m->len > pub->attr.retain_bytes) {
		rc = retain_full(pub, true);
		atomic_fetch_add(&ctx->st.retain_full, 1);
		return rc;
	}
	rc = vbi_txwin_push(&pub->win, m, m->len, &seq);
	if (rc) {
		atomic_store_explicit(&pub->win_full, true, memory_order_relaxed);
		return retain_full(pub, false);
	}
	pub->retained += m->len;
	m->seq = seq; /* framed when sent: a BATCH record, or DATA fragments (frame_one) */
	for (struct vbi_pubpeer *pp = pub->peers; pp && nt < VBI_MAX_PEERS; pp = pp->next_in_pub)
		if (!pp->dead) {
			targets[nt++] = pp->peer;
			if (!pp->stall_ns) /* it holds an unacknowledged message from now */
				pp->stall_ns = vbi_now_ns();
		}
	if (!nt)
		pub_release(pub); /* nobody to wait for */
	pthread_mutex_unlock(&pub->lock);
	claim->priv_ = NULL;
	atomic_fetch_add_explicit(&ctx->st.published, 1, memory_order_relaxed);
	/* Cork batching: a publish to a connection with no SEND in flight is
	 * posted now (no added latency when idle); one that finds a SEND in
	 * flight is queued, and the progress thread posts everything queued,
	 * packed, when that SEND completes (vbi_peer_after_poll). The flag is
	 * set before the second look at the count, and the progress thread
	 * clears the count before it looks at the flag (both seq_cst): either
	 * this thread sees the SEND completed and flushes, or the progress
	 * thread sees the flag. */
	/* the targets were read under pub->lock: a peer reaped since is freed
	 * only after this read-side section (vbi_node_reap) */
	vbi_rcu_enter();
	for (unsigned t = 0; t < nt; t++) {
		struct vbi_peer *p = targets[t];
		struct vbi_lane *l = ctx->cork ? vbi_path_lane(&p->path) : NULL;

		if (l && atomic_load(&l->sr.sig_inflight)) {
			atomic_store(&p->corked, true);
			if (atomic_load(&l->sr.sig_inflight))
				continue;
		}
		vbi_peer_flush(p);
	}
	vbi_rcu_leave();
	if (seq_out)
		*seq_out = seq;
	return 0;
}

int vb_publish(vb_pub_t *pub, const void *data, size_t len, uint64_t *seq)
{
	vb_claim_t c;
	int rc;

	if (!pub || (len && !data))
		return vbi_err(-EINVAL, "vb_publish: NULL argument");
	if (atomic_load_explicit(&pub->win_full, memory_order_relaxed)) {
		/* A publisher retrying while its window is still full (no ACK
		 * released anything since the push that found it full):
		 * refused before a buffer is claimed, and without the lock the
		 * progress thread needs to release the window. The message
		 * names no holder (the refusal that set the flag did). */
		struct full_why w = { .inflight = pub->win.cap, .held_ms = UINT64_MAX };

		copy_name(w.topic, sizeof(w.topic), pub->topic, sizeof(pub->topic));
		atomic_fetch_add_explicit(&pub->node->ctx->st.backpressure, 1, memory_order_relaxed);
		return vbi_err_lazy(-EAGAIN, full_fmt, &w, sizeof(w));
	}
	rc = vb_pub_claim(pub, len, &c);
	if (rc)
		return rc;
	if (len)
		memcpy(c.data, data, len);
	rc = vb_pub_commit(pub, &c, len, seq);
	if (rc)
		vb_pub_abort(pub, &c);
	return rc;
}

/* ---- waiting for k-of-n ------------------------------------------------------------------------ */

static unsigned acked_by(struct vb_pub *pub, uint64_t seq)
{
	unsigned n = 0;

	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
		n += !pp->dead && pp->joined < seq && pp->acked >= seq;
	return n;
}

int vb_pub_wait_acked(vb_pub_t *pub, uint64_t seq, int timeout_ms)
{
	struct vb_ctx *ctx;
	struct timespec dl;
	int rc = 0;

	if (!pub)
		return vbi_err(-EINVAL, "NULL publisher");
	if (pub->cls != VB_ORDERED || !pub->attr.ack_quorum)
		return vbi_err(-EINVAL, "'%s' has no acknowledgement quorum", pub->topic);
	ctx = pub->node->ctx;
	if (vbi_in_callback(ctx))
		return vbi_err(-EDEADLK, "vb_pub_wait_acked() from a callback: the acknowledgements "
			       "are read by this very thread; wait from another thread");
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&pub->lock);
	while (acked_by(pub, seq) < pub->attr.ack_quorum) {
		if (ctx->thread_running) {
			rc = pthread_cond_timedwait(&pub->acked_cv, &pub->lock, &dl);
		} else {
			struct timespec now;

			pthread_mutex_unlock(&pub->lock);
			vb_progress(ctx);
			pthread_mutex_lock(&pub->lock);
			clock_gettime(CLOCK_REALTIME, &now);
			if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec))
				rc = ETIMEDOUT;
		}
		if (rc == ETIMEDOUT) {
			unsigned have = acked_by(pub, seq);

			pthread_mutex_unlock(&pub->lock);
			return vbi_err(-ETIMEDOUT, "'%s' seq %llu: %u of %u acknowledgements after %d ms "
				       "(%u subscribers)", pub->topic, (unsigned long long)seq, have,
				       pub->attr.ack_quorum, timeout_ms, pub->npeers);
		}
	}
	pthread_mutex_unlock(&pub->lock);
	return 0;
}

/* ---- create / destroy --------------------------------------------------------------------------- */

static int check_topic(const char *topic)
{
	size_t n;

	if (!topic)
		return vbi_err(-EINVAL, "NULL topic");
	n = strlen(topic);
	if (!n || n > VBI_TOPIC_MAX)
		return vbi_err(-EINVAL, "topic '%s': 1..%d bytes", topic, VBI_TOPIC_MAX);
	return 0;
}

int vbi_check_topic(const char *topic)
{
	return check_topic(topic);
}

int vb_pub_create(vb_node_t *node, const char *topic, vb_class_t cls, const vb_pub_attr_t *attr,
		  vb_pub_t **out)
{
	struct vb_pub *pub;
	vb_pub_attr_t def;
	int rc;

	if (!node || !out)
		return vbi_err(-EINVAL, "vb_pub_create: NULL argument");
	*out = NULL;
	if ((rc = check_topic(topic)))
		return rc;
	if (cls != VB_ORDERED && cls != VB_FANOUT)
		return vbi_err(-EINVAL, "class %d unknown", (int)cls);
	if (!attr) {
		vb_pub_attr_init(&def);
		attr = &def;
	}
	/* an older header's struct (no slow-subscriber fields): defaults for them */
	if (attr->size < offsetof(vb_pub_attr_t, slow_policy))
		return vbi_err(-EINVAL, "vb_pub_attr_t not initialized with vb_pub_attr_init()");
	if (attr != &def) {
		vb_pub_attr_init(&def);
		memcpy(&def, attr, attr->size < sizeof(def) ? attr->size : sizeof(def));
		def.size = sizeof(def);
		attr = &def;
	}
	if (attr->ack_quorum && cls != VB_ORDERED)
		return vbi_err(-EINVAL, "ack_quorum needs VB_ORDERED");
	if (attr->slow_policy != VB_SLOW_CUT && attr->slow_policy != VB_SLOW_BLOCK)
		return vbi_err(-EINVAL, "slow_policy %d unknown (VB_SLOW_CUT or VB_SLOW_BLOCK)",
			       (int)attr->slow_policy);
	if (attr->slow_policy == VB_SLOW_CUT &&
	    (attr->slow_sub_ms < SLOW_SUB_MS_MIN || attr->slow_sub_ms > SLOW_SUB_MS_MAX))
		return vbi_err(-EINVAL, "slow_sub_ms %u out of range (%u..%u)", attr->slow_sub_ms,
			       SLOW_SUB_MS_MIN, SLOW_SUB_MS_MAX);
	pub = calloc(1, sizeof(*pub));
	if (!pub)
		return vbi_err(-ENOMEM, "publisher");
	pub->node = node;
	snprintf(pub->topic, sizeof(pub->topic), "%s", topic);
	pub->topic_id = vbi_topic_id(topic);
	pub->cls = cls;
	pub->attr = *attr;
	pub->session = random_session();
	pthread_mutex_init(&pub->lock, NULL);
	pthread_cond_init(&pub->acked_cv, NULL);
	if (cls == VB_ORDERED && (rc = vbi_txwin_init(&pub->win, node->ctx->attr.window, 1))) {
		free(pub);
		return rc;
	}
	if (cls == VB_FANOUT)
		vbi_mcast_pub_open(pub); /* on failure: unicast to every subscriber */
	pthread_rwlock_wrlock(&node->lock);
	for (struct vb_pub *o = node->pubs; o; o = o->next)
		if (o->topic_id == pub->topic_id) {
			pthread_rwlock_unlock(&node->lock);
			vbi_mcast_pub_close(pub);
			vbi_txwin_fini(&pub->win);
			free(pub);
			return vbi_err(-EEXIST, "node '%s' already publishes '%s'%s", node->name,
				       topic, strcmp(o->topic, topic) ? " (topic id collision)" : "");
		}
	pub->next = node->pubs;
	node->pubs = pub;
	/* subscribers already known */
	for (struct vbi_peer *p = node->peers; p; p = p->next)
		for (struct vbi_rsub *r = p->rsubs; r; r = r->next)
			if (r->topic == pub->topic_id && r->cls == (uint8_t)cls)
				vbi_pub_attach(pub, p);
	pthread_rwlock_unlock(&node->lock);
	*out = pub;
	return 0;
}

int vb_pub_subscribers(vb_pub_t *pub)
{
	int n = 0;

	if (!pub)
		return vbi_err(-EINVAL, "NULL publisher");
	pthread_mutex_lock(&pub->lock);
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
		n += !pp->dead;
	pthread_mutex_unlock(&pub->lock);
	return n;
}

/* Messages some live subscriber has not acknowledged. pub->lock held. */
static uint64_t unacked(struct vb_pub *pub)
{
	uint64_t last = pub->win.next_seq - 1, n = 0;

	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub) {
		uint64_t from = pp->acked > pp->joined ? pp->acked : pp->joined;

		if (!pp->dead && !atomic_load(&pp->peer->dead) && last > from && last - from > n)
			n = last - from;
	}
	return n;
}

/* vb_pub_destroy()'s linger: until every live subscriber acknowledged
 * everything, or @ms passed. Returns what is left unacknowledged. */
static uint64_t linger(struct vb_pub *pub, unsigned ms)
{
	struct vb_ctx *ctx = pub->node->ctx;
	uint64_t end = vbi_now_ns() + (uint64_t)ms * 1000000, left;

	pthread_mutex_lock(&pub->lock);
	while ((left = unacked(pub)) && vbi_now_ns() < end) {
		if (ctx->thread_running) {
			/* short slices: a subscriber given up wakes nobody */
			struct timespec dl;

			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += 10000000;
			if (dl.tv_nsec >= 1000000000) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&pub->acked_cv, &pub->lock, &dl);
		} else {
			pthread_mutex_unlock(&pub->lock);
			vb_progress(ctx);
			pthread_mutex_lock(&pub->lock);
		}
	}
	pthread_mutex_unlock(&pub->lock);
	return left;
}

static void pub_free(void *pub)
{
	free(pub);
}

int vb_pub_destroy(vb_pub_t *pub)
{
	struct vb_node *node;
	uint64_t left = 0;
	bool in_cb;

	if (!pub)
		return 0;
	node = pub->node;
	in_cb = vbi_in_callback(node->ctx);
	/* from a callback no acknowledgement can arrive while we wait (this
	 * thread reads them): no linger */
	if (pub->cls == VB_ORDERED && (left = linger(pub, in_cb ? 0 : pub->attr.linger_ms)))
		atomic_fetch_add(&node->ctx->st.unacked_on_close, left);
	if (!in_cb) /* the on_ack callbacks of what linger saw acknowledged run first */
		vbi_cb_wait_idle(&pub->cb_pending);
	pthread_rwlock_wrlock(&node->lock);
	for (struct vb_pub **pp = &node->pubs; *pp; pp = &(*pp)->next)
		if (*pp == pub) {
			*pp = pub->next;
			break;
		}
	atomic_store(&pub->dead, true); /* queued on_ack callbacks are skipped */
	pthread_rwlock_unlock(&node->lock);
	if (!in_cb)
		vbi_cb_wait_idle(&pub->cb_pending);
	pthread_rwlock_wrlock(&node->lock);
	while (pub->peers) {
		struct vbi_pubpeer *pp = pub->peers;

		pub->peers = pp->next_in_pub;
		if (pub->cls == VB_ORDERED)
			detach_pp(pp);
		free(pp);
	}
	pthread_rwlock_unlock(&node->lock);
	if (pub->cls == VB_ORDERED) {
		vbi_txwin_drain(&pub->win, release_msg, pub);
		vbi_txwin_fini(&pub->win);
	}
	if (pub->batch)
		vbi_msg_put(node->ctx, pub->batch);
	vbi_mcast_pub_close(pub);
	pthread_cond_destroy(&pub->acked_cv);
	pthread_mutex_destroy(&pub->lock);
	if (left) {
		int rc = vbi_err(-ETIMEDOUT, "'%s': %llu messages not acknowledged by every "
				 "subscriber within %u ms; released", pub->topic,
				 (unsigned long long)left, in_cb ? 0 : pub->attr.linger_ms);

		if (!in_cb || !atomic_load(&pub->cb_pending) ||
		    vbi_cb_defer_free(node->ctx, pub, pub_free))
			free(pub);
		return rc;
	}
	if (!in_cb || !atomic_load(&pub->cb_pending) || vbi_cb_defer_free(node->ctx, pub, pub_free))
		free(pub);
	return 0;
}
