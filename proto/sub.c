/* SPDX-License-Identifier: MIT */
/*
 * Subscribers: per publisher session, sequence tracking (duplicates, gaps,
 * late join) and reassembly, then delivery to the application callback.
 * Everything here runs in the progress context, in an RCU read-side
 * section with no node->lock (stream_get takes it to add an ORDERED
 * stream), except create/destroy (node->lock held for writing), which the
 * public functions (api/src/sub.c) call.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/statfile.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

struct vb_sub *vbi_sub_find(struct vb_node *node, uint32_t topic_id)
{
	if (!node)
		return NULL;
	for (struct vb_sub *s = vbi_rcu_deref(node->subs); s; s = vbi_rcu_deref(s->next))
		if (s->topic_id == topic_id)
			return s;
	return NULL;
}

/* Reassembly buffers: plain heap memory, bounded by max_msg per stream
 * (the wire parser refused any larger msg_len). */
static void *reasm_alloc(size_t len, void *arg)
{
	(void)arg;
	return malloc(len ? len : 1);
}

static void reasm_free(void *buf, void *arg)
{
	(void)arg;
	free(buf);
}

static void stream_reset(struct vb_sub *sub, struct vbi_rxs *r, struct vbi_peer *peer,
			 uint32_t session)
{
	vbi_reasm_fini(&r->reasm);
	r->peer = peer;
	r->sub = sub;
	r->session = session;
	r->topic = sub->topic_id;
	vbi_rx_init(&r->rx, sub->cls == VB_ORDERED ? VBI_RX_ORDERED : VBI_RX_FANOUT);
	vbi_reasm_init(&r->reasm, reasm_alloc, reasm_free, NULL);
	r->acked_sent = 0;
	r->ack_next = 0;
	r->dlv_next = 0;
	r->nak_seq = 0;
	r->nak_ms = 0;
	atomic_fetch_add(&sub->c->publishers, 1);
}

/* The stream of publisher @session from @peer, made (or an old one reused)
 * when there is none: see stream_get. Progress context; for ORDERED
 * (@peer set) node->lock held for writing. */
static struct vbi_rxs *stream_make(struct vb_sub *sub, struct vbi_peer *peer, uint32_t session,
				   uint64_t now)
{
	struct vbi_rxs *r, *oldest = NULL;

	for (r = sub->streams; r; r = r->next) {
		if (r->session == session && r->peer == peer) {
			r->last_ms = now;
			return r;
		}
		if (peer && r->peer == peer && !r->in_dirty) {
			stream_reset(sub, r, peer, session);
			r->last_ms = now;
			return r;
		}
		if (!r->in_dirty && (!oldest || r->last_ms < oldest->last_ms))
			oldest = r;
	}
	if (sub->nstreams >= VBI_MAX_STREAMS_PER_SUB) {
		if (!oldest || now - oldest->last_ms < 1000)
			return NULL;
		stream_reset(sub, oldest, peer, session);
		oldest->last_ms = now;
		return oldest;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	stream_reset(sub, r, peer, session);
	r->last_ms = now;
	r->next = sub->streams;
	vbi_rcu_assign(sub->streams, r);
	sub->nstreams++;
	return r;
}

/*
 * The stream of publisher @session (arriving on @peer for ORDERED, NULL for
 * datagrams). A new session on an ORDERED connection replaces the old one
 * (one publisher per topic per node: the old instance is gone). Streams are
 * bounded (a peer inventing sessions must not grow memory): at the bound the
 * longest-idle stream (idle > 1 s, not on an ACK list) is reused, else the
 * message is refused (NULL).
 *
 * Progress context, no node->lock (an RCU read-side section). This thread
 * is the only one that adds or reuses a stream; the reaper unlinks an
 * ORDERED subscriber's streams from a peer it reaps (vbi_sub_drop_peer,
 * node->lock held for writing), so finding one needs no lock, and making
 * or reusing one of ORDERED takes the write lock.
 */
static struct vbi_rxs *stream_get(struct vb_sub *sub, struct vbi_peer *peer, uint32_t session)
{
	uint64_t now = vbi_now_ms();
	struct vbi_rxs *r;

	for (r = vbi_rcu_deref(sub->streams); r; r = vbi_rcu_deref(r->next))
		if (r->session == session && r->peer == peer) {
			r->last_ms = now;
			return r;
		}
	if (!peer) /* FANOUT: the reaper leaves these alone */
		return stream_make(sub, NULL, session, now);
	pthread_rwlock_wrlock(&sub->node->lock);
	r = stream_make(sub, peer, session, now);
	pthread_rwlock_unlock(&sub->node->lock);
	return r;
}

void vbi_sub_drop_peer(struct vb_node *node, struct vbi_peer *p, struct vbi_rxs **gone)
{
	for (struct vb_sub *sub = node->subs; sub; sub = sub->next)
		for (struct vbi_rxs **q = &sub->streams; sub->cls == VB_ORDERED && *q;) {
			struct vbi_rxs *r = *q;

			if (r->peer != p) {
				q = &r->next;
				continue;
			}
			vbi_rcu_assign(*q, r->next); /* a round standing on r goes on */
			sub->nstreams--;
			r->gone_next = *gone;
			*gone = r;
		}
}

void vbi_sub_free_streams(struct vbi_rxs *gone)
{
	while (gone) {
		struct vbi_rxs *r = gone;

		gone = r->gone_next;
		vbi_reasm_fini(&r->reasm);
		free(r);
	}
}

/* @peer now sends on a newer connection, which restarts any fragmented
 * message from its first fragment: drop partial reassemblies. Progress
 * context: node->lock held or an RCU read-side section (the streams'
 * other writers unlink with vbi_rcu_assign and free after a grace
 * period). */
void vbi_sub_peer_lane_changed(struct vb_node *node, struct vbi_peer *peer)
{
	for (struct vb_sub *sub = vbi_rcu_deref(node->subs); sub; sub = vbi_rcu_deref(sub->next))
		for (struct vbi_rxs *r = vbi_rcu_deref(sub->streams); r; r = vbi_rcu_deref(r->next))
			if (r->peer == peer && r->reasm.active) {
				vbi_reasm_fini(&r->reasm);
				vbi_reasm_init(&r->reasm, reasm_alloc, reasm_free, NULL);
			}
}

static void report_gap(struct vb_sub *sub, struct vbi_rxs *r, uint64_t lost, uint64_t next)
{
	struct vb_ctx *ctx = sub->node->ctx;

	atomic_fetch_add(&sub->c->gaps, 1);
	atomic_fetch_add(&sub->c->lost, lost);
	atomic_fetch_add_explicit(&ctx->st->gaps, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&ctx->st->lost, lost, memory_order_relaxed);
	if (sub->attr.on_gap && vbi_cb_queue_gap(sub, r->session, lost, next))
		vbi_warn("'%s': gap of %llu not reported to the application: no memory",
			 sub->topic, (unsigned long long)lost);
}

/*
 * ORDERED stream @r owes its peer a (cumulative) ACK: put it on the peer's
 * dirty list. @urgent: send it after this poll rather than when the usual
 * thresholds say. Duplicates call this too (urgent, not @delivered): a
 * duplicate is a retransmission after a failover of what we have, and our
 * ACK for it may have been lost with the old connection; without a new ACK
 * a publisher whose window holds only such messages would wait forever.
 */
static void ack_owed_locked(struct vbi_rxs *r, bool urgent, bool nak)
{
	struct vbi_peer *p = r->peer;

	if (!r->dlv_next)
		return; /* nothing delivered yet: the first delivery owes one */
	r->ack_next = r->dlv_next; /* progress thread: dlv_next is ours to read */
	if (urgent)
		r->ack_urgent = true;
	if (nak)
		r->nak_pending = true;
	if (urgent || nak) /* the per-peer round's hint (vbi_peer_after_poll) */
		atomic_store_explicit(&p->ack_due, true, memory_order_relaxed);
	if (!r->in_dirty) {
		if (!p->dirty)
			p->ack_owed_ns = vbi_now_ns();
		r->in_dirty = true;
		r->next_dirty = p->dirty;
		p->dirty = r;
	}
}

static void ack_owed(struct vbi_rxs *r, bool urgent, bool delivered, bool nak)
{
	struct vbi_peer *p = r->peer;

	vbi_mutex_lock(&p->txlock);
	ack_owed_locked(r, urgent, nak);
	if (delivered && ++p->delivered_since_ack >= VBI_ACK_ALONE_AFTER)
		atomic_store_explicit(&p->ack_due, true, memory_order_relaxed);
	vbi_mutex_unlock(&p->txlock);
}

/* A lane switch with @peer: every ORDERED stream from it owes an ACK, now.
 * The publisher rewinds to what it saw acknowledged, and ACKs that were in
 * flight on the old lane are lost: our state lets it skip what we have
 * instead of resending it. Progress context, peer->txlock held, and
 * node->lock (read) or an RCU read-side section. */
void vbi_sub_peer_ack_all(struct vb_node *node, struct vbi_peer *peer)
{
	/* the per-peer round calls this with no node->lock (RCU: the lists'
	 * other writers unlink with vbi_rcu_assign and free after a grace
	 * period); the streams' own writer is this thread */
	for (struct vb_sub *sub = vbi_rcu_deref(node->subs); sub; sub = vbi_rcu_deref(sub->next))
		for (struct vbi_rxs *r = vbi_rcu_deref(sub->streams); r; r = vbi_rcu_deref(r->next))
			if (r->peer == peer && r->rx.started)
				ack_owed_locked(r, true, false);
}

/*
 * ORDERED over a UC/UD lane lost something before what just arrived
 * (go-back-N): what arrived is dropped, and a NAK for the first missing
 * message rides the next ACKs (urgently). The same hole is NAKed again
 * only after VBI_NAK_RETRY_MS (the publisher's RTO covers lost NAKs too).
 */
static void nak_owed(struct vbi_rxs *r)
{
	uint64_t now = vbi_now_ms();

	if (r->nak_seq == r->rx.next && now - r->nak_ms < VBI_NAK_RETRY_MS)
		return;
	r->nak_seq = r->rx.next;
	r->nak_ms = now;
	ack_owed(r, true, false, true);
}

/* Accept message @h of stream @r and queue its delivery. @owned: a buffer
 * holding @data that the delivery frees (NULL: @data is in the receive
 * buffer). Returns whether @owned was taken. */
static inline __attribute__((always_inline)) bool deliver(struct vb_sub *sub, struct vbi_rxs *r,
							  const struct vbi_wire_hdr *h,
							  const void *data, size_t len, void *owned)
{
	struct vb_ctx *ctx = sub->node->ctx;
	uint64_t lost = 0;
	enum vbi_rx_verdict v = vbi_rx_accept(&r->rx, h->session, h->epoch, h->seq, &lost);
	vb_msg_t msg;

	switch (v) {
	case VBI_RX_DUPLICATE:
		atomic_fetch_add(&sub->c->duplicates, 1);
		atomic_fetch_add_explicit(&ctx->st->duplicates_dropped, 1, memory_order_relaxed);
		if (r->peer) /* ORDERED: see ack_owed() */
			ack_owed(r, true, false, false);
		return false;
	case VBI_RX_AHEAD:
		if (r->peer && r->peer->rx_unreliable) {
			nak_owed(r);
			return false;
		}
		/* RC delivers in order: a hole means a protocol fault upstream. */
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, r->peer ? r->peer->name : "",
			  "'%s' seq %llu arrived, %llu expected: dropped", sub->topic,
			  (unsigned long long)h->seq, (unsigned long long)r->rx.next);
		return false;
	case VBI_RX_INVALID: /* seq 2^64 - 1: it would wrap the stream (core/stream.h) */
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, r->peer ? r->peer->name : "(datagram)",
			  "'%s' seq %llu out of range: dropped", sub->topic,
			  (unsigned long long)h->seq);
		return false;
	case VBI_RX_GAP:
		report_gap(sub, r, lost, h->seq);
		break;
	case VBI_RX_DELIVER:
		break;
	}
	msg.data = data;
	msg.len = len;
	msg.seq = h->seq;
	msg.publisher = h->session;
	msg.epoch = h->epoch;
	msg.topic = sub->topic;
	/* run by vbi_cb_flush() once the locks are released; ORDERED is
	 * acknowledged there, after the callback (urgently when asked) */
	if (!vbi_cb_queue_msg(sub, r->peer ? r : NULL, &msg, owned, h->flags & VBI_WF_ACK_REQ))
		return true;
	/* Cannot happen: the receive path reserved room for every delivery of
	 * the buffer (vbi_cb_reserve) before the dispatch. Never a callback
	 * here, inside the dispatch (a callback may destroy, which waits for
	 * a grace period: a deadlock in this RCU read-side section, and the
	 * reaper or a control frame may hold node->lock). Counted as lost
	 * (the stream has moved past it). */
	vbi_error("'%s' seq %llu: no room in the callback queue: not delivered", sub->topic,
		  (unsigned long long)h->seq);
	atomic_fetch_add(&sub->c->lost, 1);
	return false;
}

void vbi_sub_delivered(struct vbi_rxs *r, uint64_t seq, bool ack_req)
{
	if (seq + 1 > r->dlv_next)
		r->dlv_next = seq + 1;
	ack_owed(r, ack_req, true, false);
}

void vbi_sub_data(struct vb_sub *sub, struct vbi_peer *peer, const struct vbi_wire_hdr *h,
		  const void *payload)
{
	struct vbi_rxs *r = stream_get(sub, peer, h->session);
	void *whole;
	int rc;

	if (!r) {
		atomic_fetch_add(&sub->node->ctx->st->malformed, 1);
		vbi_event(sub->node->ctx, VB_EV_PROTOCOL, peer ? peer->name : "(datagram)",
			  "'%s': no stream for publisher session %08x (limit %d or no memory): "
			  "dropped", sub->topic, h->session, VBI_MAX_STREAMS_PER_SUB);
		return;
	}
	if (h->type == VBI_WT_HEARTBEAT) {
		/* FANOUT tail: h->seq was the publisher's last message. */
		uint64_t lost = vbi_rx_heartbeat(&r->rx, h->seq);

		if (lost)
			report_gap(sub, r, lost, h->seq + 1);
		return;
	}
	if ((h->flags & (VBI_WF_FIRST | VBI_WF_LAST)) == (VBI_WF_FIRST | VBI_WF_LAST)) {
		deliver(sub, r, h, payload, h->len, NULL);
		return;
	}
	rc = vbi_reasm_push(&r->reasm, h, payload, &whole);
	if (rc == 1) {
		if (!deliver(sub, r, h, whole, h->msg_len, whole))
			reasm_free(whole, NULL);
	} else if (rc == -EAGAIN) {
		vbi_error("'%s' seq %llu: no memory to reassemble %u bytes", sub->topic,
			  (unsigned long long)h->seq, h->msg_len);
	} else if (rc == -EPROTO && peer && peer->rx_unreliable) {
		/* a fragment was lost on a UC/UD lane: the message restarts from
		 * its first fragment once NAKed (unless it is one we have) */
		if (!vbi_rx_is_duplicate(&r->rx, h->session, h->seq))
			nak_owed(r);
	} else if (rc == -EPROTO && peer) {
		/* ORDERED rides RC, which delivers fragments in order: one that
		 * does not continue the message is the peer's protocol fault. */
		atomic_fetch_add(&sub->node->ctx->st->malformed, 1);
		vbi_event(sub->node->ctx, VB_EV_PROTOCOL, peer->name,
			  "'%s' seq %llu: stray fragment at offset %u of %u dropped", sub->topic,
			  (unsigned long long)h->seq, h->frag_off, h->msg_len);
	}
	/* -EPROTO on FANOUT: a stray fragment after a lost one; the message
	 * shows up as a gap when the next one arrives. */
}


/* The frames of one datagram (the UD endpoint's or the multicast QP's,
 * @len bytes after the GRH): DATA and HEARTBEAT frames go to each node's
 * FANOUT subscriber of their topic. Progress context, no lock (an RCU
 * read-side section). Room in the callback queue is reserved before each
 * delivery (a message and a gap): with no memory that subscriber misses
 * the frame, a FANOUT loss its next one reports as a gap. Upcall
 * datagram. */
void vbi_sub_datagram(struct vb_ctx *ctx, const uint8_t *buf, uint32_t len)
{
	const uint8_t *pl;
	struct vbi_wire_walk w;
	struct vbi_wire_hdr h;
	int r;

	vbi_wire_walk_init(&w, buf, len, (uint32_t)ctx->attr.max_msg);
	/* No ctx->lock or node->lock: nodes and subscribers are freed after a
	 * grace period (vb_node_destroy, vb_sub_destroy), and a FANOUT
	 * subscriber's streams have this thread as their only writer until
	 * then (the reaper drops ORDERED streams only: vbi_sub_drop_peer).
	 * One section for the datagram. */
	vbi_rcu_enter();
	while ((r = vbi_wire_walk_next(&w, &h, &pl)) != 0) {
		if (r < 0) {
			atomic_fetch_add(&ctx->st->malformed, 1);
			vbi_event(ctx, VB_EV_PROTOCOL, "(datagram)", "datagram frame dropped: %s",
				  vbi_wire_err_name((enum vbi_wire_err)-r));
			break;
		}
		if (h.type == VBI_WT_DATA || h.type == VBI_WT_HEARTBEAT) {
			for (struct vb_node *n = vbi_rcu_deref(ctx->nodes); n;
			     n = vbi_rcu_deref(n->next)) {
				struct vb_sub *s = vbi_sub_find(n, h.topic);

				if (!s || s->cls != VB_FANOUT)
					continue;
				if (vbi_cb_reserve(ctx, 2))
					vbi_error("'%s': FANOUT seq %llu not delivered: %s",
						  s->topic, (unsigned long long)h.seq,
						  vbi_errmsg());
				else
					vbi_sub_data(s, NULL, &h, pl);
			}
		}
	}
	vbi_rcu_leave();
}

/*
 * END from @peer: publisher session h->session cut our stream of h->topic
 * (we were a slow subscriber); h->seq is the last message it sent us, and
 * RC delivered everything before this frame. The partial reassembly of a
 * message cut in the middle is dropped; the stream is reported ended
 * (on_end, queued) and counted. Nothing more comes from that session
 * unless we subscribe again. Progress context, an RCU read-side section.
 */
_Static_assert(VB_END_SLOW == VBI_WIRE_END_SLOW, "END reasons");

void vbi_sub_on_end(struct vbi_peer *peer, const struct vbi_wire_hdr *h)
{
	struct vb_ctx *ctx = peer->node->ctx;
	struct vb_sub *sub = vbi_sub_find(peer->node, h->topic);

	if (!vbi_wire_end_ok(h)) {
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, peer->name, "END frame with session %08x reason %u "
			  "dropped", h->session, h->frag_off);
		return;
	}
	if (!sub || sub->cls != VB_ORDERED)
		return; /* unsubscribed meanwhile */
	for (struct vbi_rxs *r = vbi_rcu_deref(sub->streams); r; r = vbi_rcu_deref(r->next))
		if (r->peer == peer && r->session == h->session && r->reasm.active) {
			vbi_reasm_fini(&r->reasm);
			vbi_reasm_init(&r->reasm, reasm_alloc, reasm_free, NULL);
		}
	atomic_fetch_add(&sub->c->ends, 1);
	atomic_fetch_add(&ctx->st->streams_ended, 1);
	vbi_warn("'%s': publisher %08x on '%s' cut our stream after seq %llu: we acknowledged "
		 "nothing for its slow_sub_ms (slow subscriber)", sub->topic, h->session, peer->name,
		 (unsigned long long)h->seq);
	if (vbi_cb_queue_end(sub, h->session, h->frag_off, h->seq))
		vbi_warn("'%s': end of stream not reported to the application: no memory",
			 sub->topic);
}

static int send_unsub(struct vbi_peer *p, uint32_t topic)
{
	uint8_t buf[VBI_WIRE_HDR_LEN];
	struct vbi_wire_hdr h = { .type = VBI_WT_UNSUB, .topic = topic };
	int rc;

	vbi_wire_put(buf, &h);
	vbi_mutex_lock(&p->txlock);
	rc = vbi_peer_send_ctrl(p, buf, sizeof(buf));
	vbi_mutex_unlock(&p->txlock);
	return rc;
}

/* Frees @sub, once nothing can count on it: its slot in the counters file
 * goes back first. */
static void sub_free(void *arg)
{
	struct vb_sub *sub = arg;

	vbi_statfile_sub_detach(sub->node->ctx->statf, sub);
	free(sub);
}

int vbi_sub_create(struct vb_node *node, const char *topic, vb_class_t cls,
		   const vb_sub_attr_t *attr, struct vb_sub **out)
{
	struct vb_sub *sub;

	*out = NULL;
	sub = calloc(1, sizeof(*sub));
	if (!sub)
		return vbi_err(-ENOMEM, "subscriber");
	sub->node = node;
	snprintf(sub->topic, sizeof(sub->topic), "%s", topic);
	sub->topic_id = vbi_topic_id(topic);
	sub->cls = cls;
	sub->attr = *attr;
	sub->c = &sub->c_own;
	sub->stat_slot = -1;
	/* FANOUT: join the topic's group first, so the SUB says so. */
	if (cls == VB_FANOUT)
		sub->mcast_group = vbi_mcast_sub_join(node->ctx, sub->topic_id);
	pthread_rwlock_wrlock(&node->lock);
	if (vbi_sub_find(node, sub->topic_id)) {
		pthread_rwlock_unlock(&node->lock);
		if (cls == VB_FANOUT)
			vbi_mcast_sub_leave(node->ctx, sub->topic_id);
		free(sub);
		return vbi_err(-EEXIST, "node '%s' already subscribes to '%s' (or a topic with the "
			       "same id)", node->name, topic);
	}
	vbi_statfile_sub_attach(node->ctx->statf, sub); /* before it counts */
	sub->next = node->subs;
	/* linked before subs_pending is looked at, both sequentially
	 * consistent: a peer whose SUBs are pending is sent them by the
	 * per-peer round, which takes the flag before it walks the list
	 * (vbi_peer_after_poll), so either that walk sees this subscriber or
	 * the flag is seen clear here and it is sent below */
	__atomic_store_n(&node->subs, sub, __ATOMIC_SEQ_CST);
	for (struct vbi_peer *p = node->peers; p; p = p->next)
		if (p->up && !atomic_load(&p->subs_pending) && vbi_peer_send_subs(p, sub)) {
			atomic_store(&p->subs_pending, true);
			vbi_ctx_kick(node->ctx);
		}
	pthread_rwlock_unlock(&node->lock);
	*out = sub;
	return 0;
}

/* How long vb_sub_destroy() keeps trying to send the final ACKs while the
 * connection has no credit or send entry free (as long as a BYE gets). */
#define FINAL_ACK_MS 200

/*
 * What was delivered is acknowledged before the streams go: a publisher may
 * be waiting on the last message (vb_pub_wait_acked), and once the streams
 * are freed nothing would acknowledge it. Every peer's owed ACKs are sent;
 * one refused for want of a credit or a send entry (-EAGAIN) is tried again,
 * progress being driven meanwhile, for up to FINAL_ACK_MS. From a callback
 * (@in_cb, the progress thread itself) one attempt is all. node->lock not
 * held.
 */
static void final_acks(struct vb_node *node, bool in_cb)
{
	uint64_t t0 = vbi_now_ms();

	for (;;) {
		bool again = false;

		pthread_rwlock_rdlock(&node->lock);
		for (struct vbi_peer *p = node->peers; p; p = p->next) {
			uint8_t buf[VBI_WIRE_HDR_LEN * 64];
			struct vbi_lane *l;
			int rc;

			vbi_mutex_lock(&p->txlock);
			l = vbi_peer_lane(p);
			if (l && p->up && !p->dead && !p->closing) {
				bool more = false;

				rc = atomic_load(&l->hello_rcvd)
					? vbi_peer_send_acks(p, l, buf, sizeof(buf), &more) : -EAGAIN;
				/* more than one SEND's worth, or refused for now */
				again |= rc == 0 ? more : rc == -EAGAIN;
			}
			vbi_mutex_unlock(&p->txlock);
		}
		pthread_rwlock_unlock(&node->lock);
		if (!again || in_cb || vbi_now_ms() - t0 > FINAL_ACK_MS)
			return;
		vbi_progress_or_nap(node->ctx);
	}
}

int vbi_sub_destroy(struct vb_sub *sub)
{
	struct vb_node *node = sub->node;
	bool in_cb;

	atomic_fetch_add(&node->closing_objs, 1); /* its streams point to peers */
	pthread_rwlock_wrlock(&node->lock);
	for (struct vb_sub **pp = &node->subs; *pp; pp = &(*pp)->next)
		if (*pp == sub) {
			vbi_rcu_assign(*pp, sub->next);
			break;
		}
	atomic_store(&sub->dead, true); /* queued callbacks are skipped */
	pthread_rwlock_unlock(&node->lock);
	/* the progress thread's per-peer round, which walks the subscribers
	 * and their streams with no node->lock, is past it (no lock held
	 * here; from a callback, the progress thread is outside that round) */
	vbi_rcu_synchronize();
	in_cb = vbi_in_callback(node->ctx);
	if (!in_cb) /* no callback of it runs after we return */
		vbi_cb_wait_idle(&sub->cb_pending);
	final_acks(node, in_cb);
	pthread_rwlock_wrlock(&node->lock);
	if (in_cb) /* deliveries of it queued behind are skipped (dead) */
		sub->streams_freed = true;
	while (sub->streams) {
		struct vbi_rxs *r = sub->streams;

		sub->streams = r->next;
		if (r->peer) {
			vbi_mutex_lock(&r->peer->txlock);
			if (r->in_dirty)
				for (struct vbi_rxs **d = &r->peer->dirty; *d; d = &(*d)->next_dirty)
					if (*d == r) {
						*d = r->next_dirty;
						break;
					}
			vbi_mutex_unlock(&r->peer->txlock);
		}
		vbi_reasm_fini(&r->reasm);
		free(r);
	}
	for (struct vbi_peer *p = node->peers; p; p = p->next)
		if (p->up && !p->dead)
			send_unsub(p, sub->topic_id);
	atomic_fetch_sub(&node->closing_objs, 1);
	pthread_rwlock_unlock(&node->lock);
	if (sub->cls == VB_FANOUT)
		vbi_mcast_sub_leave(node->ctx, sub->topic_id);
	/* from a callback: entries of it may still be queued behind */
	if (in_cb && atomic_load(&sub->cb_pending) && vbi_cb_defer_free(node->ctx, sub, sub_free) == 0)
		return 0;
	sub_free(sub);
	return 0;
}
