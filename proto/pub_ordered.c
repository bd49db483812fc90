/* SPDX-License-Identifier: MIT */
/*
 * ORDERED publishers, the protocol side (pub.c has the entry points): the
 * retransmit window's release, acknowledgements and NAKs, the UC/UD
 * retransmission timeout, attaching and detaching subscriber peers, the
 * rewind at failover, and slow subscribers (VB_SLOW_CUT). Framing the
 * window to a peer is in pub_frame.c.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/pub_ordered.h"
#include "proto/proto.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"


/* ---- window release and acknowledgements (pub->lock held) -------------------------- */

void vbi_pub_release_msg(void *c, uint64_t seq, void *arg)
{
	struct vb_pub *pub = arg;
	struct vbi_msg *m = c;

	(void)seq;
	pub->retained -= m->len < pub->retained ? m->len : pub->retained;
	vbi_msg_put(m);
}

/* Drop from the window what every live subscriber has acknowledged (all of
 * it when nobody is subscribed). Returns the new k-of-n sequence. */
uint64_t vbi_pub_release(struct vb_pub *pub)
{
	uint64_t min = pub->win.next_seq - 1;
	uint64_t acked[VBI_MAX_PEERS];
	unsigned n = 0;

	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub) {
		if (!pp->dead && pp->acked < min)
			min = pp->acked;
		/* Only a subscriber that was there for the first message not yet
		 * k-of-n acknowledged counts: it delivered everything from there
		 * up to its ACK. One that joined later did not get that message.
		 * One that left (dead) counts for what it acknowledged before. */
		if (n < VBI_MAX_PEERS)
			acked[n++] = pp->joined <= pub->quorum_seq ? pp->acked : 0;
	}
	for (unsigned i = 0; i < pub->nleft && n < VBI_MAX_PEERS; i++)
		acked[n++] = pub->left[i].joined <= pub->quorum_seq ? pub->left[i].acked : 0;
	if (min > pub->win.acked) {
		vbi_txwin_ack(&pub->win, min, vbi_pub_release_msg, pub);
		atomic_store_explicit(&pub->win_full, false, memory_order_relaxed);
	}
	if (pub->attr.ack_quorum && n >= pub->attr.ack_quorum) {
		uint64_t q;

		if (vbi_quorum_seq(acked, n, pub->attr.ack_quorum, &q) == 0 && q > pub->quorum_seq)
			pub->quorum_seq = q;
	}
	return pub->quorum_seq;
}

void vbi_pub_keep_acked(struct vb_pub *pub, const struct vbi_pubpeer *pp)
{
	struct vbi_left_ack *slot = NULL;
	unsigned k = pub->attr.ack_quorum;

	if (pub->cls != VB_ORDERED || !k || pp->acked <= pub->quorum_seq)
		return;
	if (pub->nleft < k) {
		slot = &pub->left[pub->nleft++];
	} else {
		/* full: the lowest goes (one at or below quorum_seq counts for
		 * nothing any more) */
		for (unsigned i = 0; i < k; i++)
			if (!slot || pub->left[i].acked < slot->acked)
				slot = &pub->left[i];
		if (slot->acked > pub->quorum_seq && slot->acked >= pp->acked)
			return;
	}
	slot->joined = pp->joined;
	slot->acked = pp->acked;
}

void vbi_pub_on_ack(struct vb_node *node, struct vbi_peer *peer, const struct vbi_wire_hdr *h)
{
	struct vb_ctx *ctx = node->ctx;

	if (!h->session)
		return;
	/* no node->lock: publishers are freed after a grace period
	 * (vb_pub_destroy), and their attachments are read under pub->lock */
	for (struct vb_pub *pub = vbi_rcu_deref(node->pubs); pub; pub = vbi_rcu_deref(pub->next)) {
		uint64_t before, after, win_before;
		struct vbi_pubpeer *pp;

		if (pub->session != h->session || pub->topic_id != h->topic ||
		    pub->cls != VB_ORDERED)
			continue;
		vbi_mutex_lock(&pub->lock);
		for (pp = pub->peers; pp && pp->peer != peer; pp = pp->next_in_pub)
			;
		if (!pp || h->seq > pp->high) {
			vbi_mutex_unlock(&pub->lock);
			atomic_fetch_add(&ctx->st->malformed, 1);
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
		after = vbi_pub_release(pub);
		/* on_ack runs with no lock held, by vbi_cb_flush(); queued under
		 * pub->lock, so a destroy that saw this ACK waits for it */
		if (after != before && pub->attr.on_ack && vbi_cb_queue_ack(pub, after))
			vbi_warn("'%s': acknowledgement of %llu not reported: no memory", pub->topic,
				 (unsigned long long)after);
		if (after != before || pub->win.acked != win_before)
			vbi_cond_broadcast(&pub->acked_cv); /* wait_acked, destroy's linger */
		vbi_mutex_unlock(&pub->lock);
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
	vbi_mutex_lock(&peer->txlock);
	for (struct vbi_pubpeer *pp = peer->pubs; pp; pp = pp->next_in_peer) {
		struct vb_pub *pub = pp->pub;

		if (pub->session != h->session || pub->topic_id != h->topic)
			continue;
		vbi_mutex_lock(&pub->lock);
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
				atomic_store(&peer->tx_pending, true);
			}
		}
		vbi_mutex_unlock(&pub->lock);
		break;
	}
	vbi_mutex_unlock(&peer->txlock);
	if (n) {
		atomic_fetch_add(&ctx->st->retransmits, n);
		atomic_fetch_add_explicit(&peer->retransmits, n, memory_order_relaxed);
	}
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
		vbi_mutex_lock(&pp->pub->lock);
		if (!pp->dead && pp->high > pp->acked &&
		    now_ns - pp->progress_ns > rto_ns << pp->rto_shift) {
			n += pp->sent > pp->acked ? pp->sent - pp->acked : 0;
			pp->sent = pp->acked;
			pp->frag_sent = 0;
			pp->progress_ns = now_ns;
			atomic_store(&peer->tx_pending, true);
			if (pp->rto_shift < 4)
				pp->rto_shift++;
		}
		vbi_mutex_unlock(&pp->pub->lock);
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
			vbi_mutex_lock(&peer->txlock);
			vbi_mutex_lock(&pub->lock);
			if (pp->dead && !peer->dead) {
				vbi_pub_keep_acked(pub, pp); /* what it acknowledged before */
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
			vbi_mutex_unlock(&pub->lock);
			vbi_mutex_unlock(&peer->txlock);
			return;
		}
	pp = calloc(1, sizeof(*pp));
	if (!pp) {
		vbi_error("out of memory attaching a subscriber to '%s'", pub->topic);
		return;
	}
	pp->pub = pub;
	pp->peer = peer;
	vbi_mutex_lock(&peer->txlock);
	vbi_mutex_lock(&pub->lock);
	/* A late joiner starts with the next message. */
	pp->joined = pp->sent = pp->acked =
		pub->cls == VB_ORDERED ? pub->win.next_seq - 1 : pub->fanout_seq;
	pp->dead = peer->dead;
	pp->mcast = vbi_mcast_peer_joined(pub, peer);
	pp->next_in_pub = pub->peers;
	vbi_rcu_assign(pub->peers, pp); /* slow_send_ends reads with no lock */
	pub->npeers++;
	vbi_mutex_unlock(&pub->lock);
	if (pub->cls == VB_ORDERED) {
		pp->next_in_peer = peer->pubs;
		peer->pubs = pp;
	}
	vbi_mutex_unlock(&peer->txlock);
	vbi_info("'%s' (%s) now reaches '%s'%s", pub->topic, pub->cls ? "FANOUT" : "ORDERED",
		 peer->name, pp->mcast ? " through its multicast group" : "");
}

void vbi_pub_detach_pp(struct vbi_pubpeer *pp)
{
	struct vbi_peer *peer = pp->peer;

	vbi_mutex_lock(&peer->txlock);
	for (struct vbi_pubpeer **q = &peer->pubs; *q; q = &(*q)->next_in_peer)
		if (*q == pp) {
			*q = pp->next_in_peer;
			break;
		}
	if (peer->rr == pp)
		peer->rr = NULL;
	vbi_mutex_unlock(&peer->txlock);
}

/* @peer unsubscribed from @pub: stop sending to it and stop waiting for it. */
void vbi_pub_drop_peer(struct vb_pub *pub, struct vbi_peer *peer)
{
	vbi_mutex_lock(&peer->txlock);
	vbi_mutex_lock(&pub->lock);
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
			if (pub->cls == VB_ORDERED && vbi_pub_release(pub) != before)
				vbi_cond_broadcast(&pub->acked_cv);
		}
	}
	vbi_mutex_unlock(&pub->lock);
	vbi_mutex_unlock(&peer->txlock);
}

/* The peer failed: its cursors stop holding the windows back. */
void vbi_pub_detach_peer(struct vbi_peer *peer)
{
	vbi_mutex_lock(&peer->txlock);
	for (struct vbi_pubpeer *pp = peer->pubs; pp; pp = pp->next_in_peer) {
		uint64_t before, after;

		vbi_mutex_lock(&pp->pub->lock);
		pp->dead = true;
		before = pp->pub->quorum_seq;
		after = vbi_pub_release(pp->pub);
		if (before != after)
			vbi_cond_broadcast(&pp->pub->acked_cv);
		vbi_mutex_unlock(&pp->pub->lock);
	}
	vbi_mutex_unlock(&peer->txlock);
}

/* Failover: every ORDERED cursor to @peer goes back to what it
 * acknowledged, so the next lane carries everything unacknowledged again
 * (the receiver drops what it already has by sequence). txlock held.
 * Returns how many messages will be resent. */
uint64_t vbi_pub_rewind_peer(struct vbi_peer *peer)
{
	uint64_t n = 0;

	for (struct vbi_pubpeer *pp = peer->pubs; pp; pp = pp->next_in_peer) {
		vbi_mutex_lock(&pp->pub->lock);
		if (!pp->dead && pp->sent > pp->acked) {
			n += pp->sent - pp->acked;
			pp->sent = pp->acked;
		}
		pp->frag_sent = 0;
		pp->progress_ns = vbi_now_ns();
		pp->rto_shift = 0;
		if (pp->stall_ns) /* a new connection: the slow clock restarts */
			pp->stall_ns = pp->progress_ns;
		vbi_mutex_unlock(&pp->pub->lock);
	}
	atomic_store(&peer->tx_pending, true);
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
 * Progress context, inside the slow-subscriber round's RCU read-side
 * section; takes pub->lock.
 */
static void slow_cut(struct vb_pub *pub)
{
	uint64_t now;
	struct vb_ctx *ctx = pub->node->ctx;
	uint64_t limit = (uint64_t)pub->attr.slow_sub_ms * 1000000;
	bool released = false;

	unsigned connected = 0;

	vbi_mutex_lock(&pub->lock);
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
		atomic_fetch_add(&ctx->st->slow_cuts, 1);
		atomic_fetch_add(&ctx->st->slow_cut_msgs, n);
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

		if (vbi_pub_release(pub) != before || pub->win.acked != win_before)
			vbi_cond_broadcast(&pub->acked_cv);
	}
	vbi_mutex_unlock(&pub->lock);
}

/* Send the END frames @pub owes its cut subscribers (retried each round
 * until a credit is free: a stopped subscriber returns none). Progress
 * context, inside an RCU read-side section (the attachments and their
 * peers are freed after a grace period); takes each peer's txlock, then
 * pub->lock. */
static void slow_send_ends(struct vb_pub *pub)
{
	for (struct vbi_pubpeer *pp = vbi_rcu_deref(pub->peers); pp;
	     pp = vbi_rcu_deref(pp->next_in_pub)) {
		struct vbi_peer *p = pp->peer;
		uint8_t buf[VBI_WIRE_HDR_LEN];
		struct vbi_wire_hdr h = { .type = VBI_WT_END, .session = pub->session,
					  .topic = pub->topic_id, .frag_off = VB_END_SLOW };
		bool owed;

		vbi_mutex_lock(&p->txlock);
		vbi_mutex_lock(&pub->lock);
		owed = pp->end_pending && pp->cut;
		h.seq = pp->sent; /* the last message framed to it: the END follows it */
		vbi_mutex_unlock(&pub->lock);
		if (owed) {
			vbi_wire_put(buf, &h);
			if (atomic_load(&p->dead)) {
				owed = true; /* nobody to tell any more */
			} else if (vbi_peer_send_ctrl(p, buf, sizeof(buf))) {
				owed = false; /* no credit yet: next round */
			}
			if (owed) {
				vbi_mutex_lock(&pub->lock);
				if (pp->end_pending) {
					pp->end_pending = false;
					pub->ends_pending--;
				}
				vbi_mutex_unlock(&pub->lock);
			}
		}
		vbi_mutex_unlock(&p->txlock);
	}
}

void vbi_pub_slow_check(struct vb_ctx *ctx, uint64_t now)
{
	if (now - ctx->slow_check_ns < VBI_SLOW_CHECK_NS)
		return;
	ctx->slow_check_ns = now;
	/* no ctx->lock or node->lock: nodes, publishers, their attachments and
	 * the peers these point to are freed after a grace period
	 * (vb_node_destroy, vb_pub_destroy, vbi_node_reap) */
	vbi_rcu_enter();
	for (struct vb_node *n = vbi_rcu_deref(ctx->nodes); n; n = vbi_rcu_deref(n->next)) {
		for (struct vb_pub *pub = vbi_rcu_deref(n->pubs); pub; pub = vbi_rcu_deref(pub->next)) {
			unsigned owed;

			if (pub->cls != VB_ORDERED)
				continue;
			if (pub->attr.slow_policy == VB_SLOW_CUT)
				slow_cut(pub);
			vbi_mutex_lock(&pub->lock);
			owed = pub->ends_pending;
			vbi_mutex_unlock(&pub->lock);
			if (owed)
				slow_send_ends(pub);
		}
	}
	vbi_rcu_leave();
}
