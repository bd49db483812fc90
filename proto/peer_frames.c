/* SPDX-License-Identifier: MIT */
/*
 * The control protocol with a peer, after the HELLO (lane_hello.c): our SUB
 * frames, the dispatch of every frame received on a lane (SUB/UNSUB, DATA,
 * ACK with its credits, NAK, LANE, UDADDR, END, BYE and a refusal), and the
 * ACK/NAK frames we owe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

/* SUB frames for @only, or for every local subscriber, in as few SENDs as
 * fit: @only with node->lock held (vb_sub_create), all of them from the
 * per-peer round (progress context, an RCU read-side section). */
int vbi_peer_send_subs(struct vbi_peer *p, struct vb_sub *only)
{
	uint8_t *buf = malloc(p->node->ctx->attr.slot_size);
	size_t cap = p->node->ctx->attr.slot_size, off = 0;
	int rc = 0;

	if (p->remote_slot_size && p->remote_slot_size < cap)
		cap = p->remote_slot_size;
	if (!buf)
		return -ENOMEM;
	/* all of them: the per-peer round, with no node->lock (RCU; the head
	 * sequentially consistent: vbi_sub_create) */
	for (struct vb_sub *s = only ? only : __atomic_load_n(&p->node->subs, __ATOMIC_SEQ_CST); s;
	     s = only ? NULL : vbi_rcu_deref(s->next)) {
		size_t nl = strlen(s->topic);
		/* epoch: the multicast group s's context joined (0: none) */
		struct vbi_wire_hdr h = { .type = VBI_WT_SUB, .topic = s->topic_id,
					  .epoch = s->mcast_group, .len = (uint32_t)(1 + nl) };

		if (off + vbi_wire_frame_size(h.len) > cap) {
			vbi_mutex_lock(&p->txlock);
			rc = vbi_peer_send_ctrl(p, buf, (uint32_t)off);
			vbi_mutex_unlock(&p->txlock);
			off = 0;
			if (rc)
				break;
		}
		off += vbi_wire_sub_encode(buf + off, h.topic, h.epoch, (uint8_t)s->cls, s->topic,
					   nl);
	}
	if (!rc && off) {
		vbi_mutex_lock(&p->txlock);
		rc = vbi_peer_send_ctrl(p, buf, (uint32_t)off);
		vbi_mutex_unlock(&p->txlock);
	}
	free(buf);
	return rc;
}

/* ---- receive dispatch (progress context, an RCU read-side section) ------------------- */

static void on_sub(struct vbi_peer *p, const struct vbi_wire_hdr *h, const uint8_t *pl,
		   bool unsub)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbi_wire_sub d;
	const char *name;
	struct vbi_rsub *r, **pp;
	int rc;

	if (unsub) {
		for (pp = &p->rsubs; (r = *pp); pp = &r->next)
			if (r->topic == h->topic) {
				*pp = r->next;
				free(r);
				break;
			}
		for (struct vb_pub *pub = p->node->pubs; pub; pub = pub->next)
			if (pub->topic_id == h->topic)
				vbi_pub_drop_peer(pub, p);
		return;
	}
	rc = vbi_wire_sub_decode(h, pl, &d);
	if (rc == VBI_WSUB_MALFORMED) {
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, p->name, "malformed SUB dropped");
		return;
	}
	if (rc != VBI_WSUB_OK) {
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, p->name, "SUB topic id does not match its name");
		return;
	}
	name = d.name;
	for (r = p->rsubs; r; r = r->next)
		if (r->topic == h->topic)
			return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	r->topic = h->topic;
	r->cls = d.cls;
	r->mcast_group = d.mcast_group;
	r->next = p->rsubs;
	p->rsubs = r;
	for (struct vb_pub *pub = p->node->pubs; pub; pub = pub->next) {
		if (pub->topic_id != h->topic)
			continue;
		if (strcmp(pub->topic, name)) {
			vbi_warn("topic id collision: '%s' and '%s'", pub->topic, name);
			continue;
		}
		if ((uint8_t)pub->cls != r->cls) {
			vbi_warn("peer '%s' subscribes to '%s' as %s, published as %s", p->name, name,
				 r->cls ? "FANOUT" : "ORDERED", pub->cls ? "FANOUT" : "ORDERED");
			continue;
		}
		vbi_pub_attach(pub, p);
	}
}

/* DATA on lane @l of @p: stale if the peer already moved to a newer lane
 * (it retransmits there whatever we have not acknowledged); the first DATA
 * on a newer lane abandons partial reassemblies (fragments restart there). */
static bool data_lane_moved(struct vb_ctx *ctx, struct vbi_peer *p, struct vbi_lane *l,
			    uint32_t id)
{
	if (id < p->rx_lane_id) {
		atomic_fetch_add_explicit(&ctx->st->stale_frames, 1, memory_order_relaxed);
		return false;
	}
	if (id > p->rx_lane_id) {
		if (p->rx_lane_id)
			vbi_sub_peer_lane_changed(p->node, p);
		p->rx_lane_id = id;
	}
	return true;
}

/* The lane of every DATA frame: the same as the last one's, inline */
static inline __attribute__((always_inline)) bool data_lane_ok(struct vb_ctx *ctx,
								struct vbi_peer *p,
								struct vbi_lane *l)
{
	uint32_t id = __atomic_load_n(&l->id, __ATOMIC_RELAXED); /* a promotion renumbers */

	if (id != p->rx_lane_id && !data_lane_moved(ctx, p, l, id))
		return false;
	/* go-back-N on UC/UD: a hole is a loss to recover, not a fault */
	p->rx_unreliable = l->mode != VB_QPT_RC;
	return true;
}

/* Our connection @p refused by the node we connect to, with its reason (a
 * refusal is a BYE instead of its HELLO). */
static void on_refusal(struct vbi_peer *p, const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	char why[VBI_REFUSE_MAX + 1];
	uint32_t n = vbi_wire_bye_reason(h, pl, why);

	vbi_mutex_lock(&p->txlock);
	snprintf(p->refused, sizeof(p->refused), "%s", n ? why : "no reason given");
	vbi_mutex_unlock(&p->txlock);
	p->remote_closed = true;
	vbi_peer_failed(p, "refused by the peer");
}

/* An ACK from @p on lane @l: the credits it returns, then the publishers. */
static void on_ack(struct vb_ctx *ctx, struct vbi_peer *p, struct vbi_lane *l,
		   const struct vbi_wire_hdr *h)
{
	atomic_fetch_add(&ctx->st->acks_received, 1);
	if (h->frag_off) { /* credits of the lane it came on */
		/* returned_total is this thread's alone (engine.h): no
		 * lock. Unreliable lanes: after a credit resync (lost
		 * datagrams assumed) late returns only refill. */
		uint64_t returned = atomic_load_explicit(&l->returned_total, memory_order_relaxed);
		bool bad = vbi_wire_credit_return(&returned,
						  atomic_load_explicit(&l->sends_total, memory_order_relaxed),
						  h->frag_off, l->mode == VB_QPT_RC) < 0;

		atomic_store_explicit(&l->returned_total, returned, memory_order_relaxed);
		if (!bad)
			atomic_store_explicit(&p->credit_rx_ns, vbi_now_ns(),
					      memory_order_relaxed);
		if (bad) {
			atomic_fetch_add(&ctx->st->malformed, 1);
			vbi_event(ctx, VB_EV_PROTOCOL, p->name,
				  "ACK returns %u credits that were never used", h->frag_off);
		}
	}
	vbi_pub_on_ack(p->node, p, h);
}

/*
 * The node->lock a frame needs. The data path's frames (DATA, ACK, NAK,
 * END, HEARTBEAT) take none: they read the node's subscribers and
 * publishers in the caller's RCU read-side section (both are freed after a
 * grace period), a subscriber's streams are this thread's to change but
 * for the reaper's unlinking (stream_get takes the write lock to add or
 * reuse one), and a publisher's attachments are read under pub->lock.
 * SUB and UNSUB change the peer's rsubs and publishers' attachments, which
 * vb_pub_create walks: the write lock. A HELLO on a lane with no peer yet
 * may create one (node->peers, node->pending): the write lock. The other
 * control frames (HELLO on a bound lane, AUTH, LANE, UDADDR, BYE) switch
 * lanes and peers' state, which the conductor reads under the read lock.
 */
enum frame_lock { FL_NONE, FL_READ, FL_WRITE };

static enum frame_lock frame_lock(const struct vbi_lane *l, uint8_t type)
{
	switch (type) {
	case VBI_WT_DATA:
	case VBI_WT_ACK:
	case VBI_WT_NAK:
	case VBI_WT_END:
	case VBI_WT_HEARTBEAT:
		return FL_NONE;
	case VBI_WT_SUB:
	case VBI_WT_UNSUB:
		return FL_WRITE;
	case VBI_WT_HELLO:
	case VBI_WT_AUTH:
		return l->peer ? FL_READ : FL_WRITE;
	default:
		return FL_READ;
	}
}

/* Frame @h on lane @l of peer @p (NULL before the HELLO), its lock held.
 * Returns true when the walk ends here (a refusal, a BYE). */
static bool dispatch_frame(struct vb_ctx *ctx, struct vbi_lane *l, struct vbi_peer *p,
			   const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	if (h->type == VBI_WT_HELLO || h->type == VBI_WT_AUTH) {
		if (!l->peer && vbi_lane_dead(l))
			return true; /* dropped meanwhile (accept: pending_cap) */
		if (h->type == VBI_WT_HELLO)
			vbi_lane_on_hello(l, h, pl);
		else
			vbi_hello_auth_on_frame(l, h, pl);
		/* refused: nothing after it is looked at */
		return vbi_hello_auth_refusal(l) != NULL;
	}
	if (h->type == VBI_WT_BYE && p && p->connector && !atomic_load(&p->up) &&
	    !atomic_load(&l->hello_rcvd)) {
		on_refusal(p, h, pl);
		return true;
	}
	if (!p || !atomic_load(&l->hello_rcvd)) {
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, "", "frame type %u before HELLO dropped", h->type);
		return true;
	}
	switch (h->type) {
	case VBI_WT_DATA: {
		struct vb_sub *s = vbi_sub_find(p->node, h->topic);

		if (s && s->cls == VB_ORDERED && data_lane_ok(ctx, p, l))
			vbi_sub_data(s, p, h, pl);
		break;
	}
	case VBI_WT_ACK:
		on_ack(ctx, p, l, h);
		break;
	case VBI_WT_SUB:
	case VBI_WT_UNSUB:
		on_sub(p, h, pl, h->type == VBI_WT_UNSUB);
		break;
	case VBI_WT_LANE:
		/* lane number and epoch rules (auth.c); a promoted probe
		 * lane is renumbered there */
		if (vbi_rule_lane_frame(p, l, h) && data_lane_ok(ctx, p, l))
			vbi_lane_on_switch(l);
		break;
	case VBI_WT_NAK:
		atomic_fetch_add(&ctx->st->naks_received, 1);
		vbi_pub_on_nak(p->node, p, h);
		break;
	case VBI_WT_UDADDR:
		vbi_peer_on_udaddr(p, h, pl);
		break;
	case VBI_WT_END: /* a publisher cut our stream (slow subscriber) */
		vbi_sub_on_end(p, h);
		break;
	case VBI_WT_BYE:
		p->remote_closed = true;
		vbi_peer_failed(p, "closed by the peer");
		return true;
	default: /* HEARTBEAT: nothing to do */
		break;
	}
	return false;
}

/* The frames of @w, each handled as it comes under the node->lock it
 * needs (frame_lock); a bad header, a refusal or a BYE ends the walk
 * early. */
static void dispatch_walk(struct vb_ctx *ctx, struct vbi_lane *l, struct vbi_wire_walk *w,
			  const uint8_t *buf, uint32_t len)
{
	pthread_rwlock_t *lock = &l->node->lock;
	struct vbi_wire_hdr h;
	const uint8_t *pl;
	int r;

	while (!vbi_wire_walk_done(w) && (r = vbi_wire_walk_next(w, &h, &pl)) != 0) {
		struct vbi_peer *p = l->peer; /* set by the HELLO of an accepted lane */
		enum frame_lock fl;
		bool stop;

		if (r < 0) {
			atomic_fetch_add(&ctx->st->malformed, 1);
			if (r == -VBI_WE_VERSION) /* a peer of another release */
				vbi_event(ctx, VB_EV_PROTOCOL, p ? p->name : "",
					  "frame dropped: the peer speaks wire version %u, this "
					  "node %u", buf[w->off + 2], VBI_WIRE_VERSION);
			else
				vbi_event(ctx, VB_EV_PROTOCOL, p ? p->name : "",
					  "frame at offset %u of %u dropped: %s", w->off, len,
					  vbi_wire_err_name((enum vbi_wire_err)-r));
			return;
		}
		fl = frame_lock(l, h.type);
		if (fl == FL_READ)
			pthread_rwlock_rdlock(lock);
		else if (fl == FL_WRITE)
			pthread_rwlock_wrlock(lock);
		stop = dispatch_frame(ctx, l, p, &h, pl);
		if (fl != FL_NONE)
			pthread_rwlock_unlock(lock);
		if (stop)
			return;
	}
}

/* Parse every frame of a received buffer; a bad header drops the rest of
 * the buffer (frame boundaries after it cannot be trusted). On RC the
 * lane's stream context goes with the walk (compact BATCHes continue it);
 * a walk that stopped before the end leaves it unknown. */
void vbi_dispatch_frames(struct vb_ctx *ctx, struct vbi_lane *l, const uint8_t *buf, uint32_t len)
{
	struct vbi_wire_walk w;

	vbi_wire_walk_init(&w, buf, len, (uint32_t)ctx->attr.max_msg);
	if (l->mode == VB_QPT_RC) /* in order, nothing lost */
		vbi_wire_walk_bctx(&w, &l->rx_bctx);
	dispatch_walk(ctx, l, &w, buf, len);
	if (w.bctx && (w.off < len || w.recs_left))
		w.bctx->next_seq = 0; /* frames not walked may have moved it */
}

/*
 * Acknowledgements owed to @p, as ACK frames into @buf (at most @cap bytes),
 * to go on lane @l: one cumulative ACK per stream with news, @l's credits
 * to return in the first. Nothing changes until vbi_peer_acks_sent() (the
 * SEND may fail). txlock held. Returns the bytes written (0 when nothing is
 * owed) and in *@upto the first dirty stream not included.
 */
uint32_t vbi_peer_build_acks(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
			     struct vbi_rxs **upto)
{
	struct vbi_rxs *r = p->dirty;
	uint32_t off = 0;

	*upto = r;
	l->credits_built = atomic_load_explicit(&l->to_return, memory_order_relaxed);
	if (!r && !l->credits_built)
		return 0;
	do {
		struct vbi_wire_hdr h = { .type = VBI_WT_ACK };
		bool nak = r && r->nak_pending;

		if (off + VBI_WIRE_HDR_LEN * (nak ? 2u : 1u) > cap)
			break;
		if (r) {
			h.session = r->session;
			h.topic = r->topic;
			h.seq = r->ack_next - 1;
		}
		if (!off)
			h.frag_off = l->credits_built;
		vbi_wire_put(buf + off, &h);
		off += VBI_WIRE_HDR_LEN;
		if (nak) { /* go-back-N: resend from the first missing message */
			struct vbi_wire_hdr n = { .type = VBI_WT_NAK, .session = r->session,
						  .topic = r->topic, .seq = r->ack_next };

			vbi_wire_put(buf + off, &n);
			off += VBI_WIRE_HDR_LEN;
		}
		if (r)
			r = r->next_dirty;
	} while (r);
	*upto = r;
	return off;
}

/* A dirty stream's ACK must go at once. txlock held. */
static bool acks_urgent(const struct vbi_peer *p)
{
	for (const struct vbi_rxs *r = p->dirty; r; r = r->next_dirty)
		if (r->ack_urgent || r->nak_pending)
			return true;
	return false;
}

/* How long an owed ACK may wait on RC: VERBUS_ACK_DELAY_MS (the table's
 * default and range; read once). */
static uint64_t ack_delay_ms(void)
{
	return vbi_cfg_u64_once(VBI_CFG_ACK_DELAY_MS);
}

/* What @p owes on its lane @l, for vbi_ack_rides() / vbi_ack_alone().
 * txlock held. */
static inline __attribute__((always_inline)) struct vbi_ack_owed
acks_owed(const struct vbi_peer *p, const struct vbi_lane *l)
{
	return (struct vbi_ack_owed){
		.streams = p->dirty != NULL,
		.urgent = acks_urgent(p),
		.reliable = l->mode == VB_QPT_RC,
		.to_return = atomic_load_explicit(&l->to_return, memory_order_relaxed),
		.nslots = l->nslots,
		.delivered = p->delivered_since_ack,
		.owed_ns = p->ack_owed_ns,
		.last_rx_ns = atomic_load_explicit(&p->last_rx_ns, memory_order_relaxed),
		.delay_ms = ack_delay_ms(),
	};
}

bool vbi_peer_acks_ride(struct vbi_peer *p, struct vbi_lane *l)
{
	struct vbi_ack_owed o = acks_owed(p, l);

	return vbi_ack_rides(&o, o.streams ? vbi_now_ns() : 0);
}

/* The ACKs @p owes built into @buf (@cap bytes, at most @l's max_send,
 * @tail_len of them kept for @tail), then @tail, sent on @l as one SEND;
 * the ACKs are marked sent once it is posted. -ENODATA with nothing to
 * send, -EMSGSIZE when @tail does not fit, else vbi_lane_send_ctrl()'s
 * result. *@more (when not NULL): some ACKs did not fit. txlock held. */
static int send_acks_then(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
			  const void *tail, uint32_t tail_len, bool *more)
{
	struct vbi_rxs *upto = NULL;
	uint32_t len = 0;
	int rc;

	if (l->max_send < cap)
		cap = l->max_send;
	if (tail_len > cap)
		return -EMSGSIZE;
	if (cap - tail_len >= VBI_WIRE_HDR_LEN)
		len = vbi_peer_build_acks(p, l, buf, cap - tail_len, &upto);
	if (!len && !tail_len)
		return -ENODATA;
	if (tail_len)
		memcpy(buf + len, tail, tail_len);
	if (len)
		vbi_peer_acks_count(p, upto, 1);
	if ((rc = vbi_lane_send_ctrl(l, buf, len + tail_len))) {
		if (len)
			vbi_peer_acks_count(p, upto, -1);
		return rc;
	}
	if (len)
		vbi_peer_acks_sent(p, l, upto);
	if (more)
		*more = upto != NULL;
	return 0;
}

int vbi_peer_send_switch(struct vbi_peer *p, struct vbi_lane *l, const void *tail,
			 uint32_t tail_len)
{
	uint8_t buf[VBI_WIRE_HDR_LEN * 9];

	vbi_sub_peer_ack_all(p->node, p);
	return send_acks_then(p, l, buf, (uint32_t)sizeof(buf), tail, tail_len, NULL);
}

void vbi_peer_acks_count(struct vbi_peer *p, struct vbi_rxs *upto, int dir)
{
	struct vbi_ctx_counters *st = p->node->ctx->st;
	uint64_t naks = 0;

	for (const struct vbi_rxs *r = p->dirty; r && r != upto; r = r->next_dirty)
		naks += r->nak_pending;
	if (naks)
		vbi_st_step(&st->naks_sent, dir, naks);
	vbi_st_step(&st->acks_sent, dir, 1);
}

/* The ACKs built by vbi_peer_build_acks() were posted on @l (and counted:
 * vbi_peer_acks_count). txlock held. */
void vbi_peer_acks_sent(struct vbi_peer *p, struct vbi_lane *l, struct vbi_rxs *upto)
{
	atomic_fetch_sub_explicit(&l->to_return, l->credits_built, memory_order_relaxed);
	l->credits_built = 0;
	p->delivered_since_ack = 0;
	while (p->dirty && p->dirty != upto) {
		struct vbi_rxs *d = p->dirty;

		p->dirty = d->next_dirty;
		d->in_dirty = false;
		d->ack_urgent = false;
		d->nak_pending = false;
		d->acked_sent = d->ack_next - 1;
		atomic_store_explicit(&d->sub->c->acked, d->acked_sent, memory_order_relaxed);
	}
	if (!p->dirty) /* all sent: nothing is due (vbi_peer_after_poll's hint) */
		atomic_store_explicit(&p->ack_due, false, memory_order_relaxed);
}

int vbi_peer_send_acks(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
		       bool *more)
{
	return send_acks_then(p, l, buf, cap, NULL, 0, more);
}

/*
 * The per-peer round (vbi_peer_after_poll, engine), active lane @l with
 * its HELLO received: send a standalone ACK only when one is really due
 * (core/stream.h vbi_ack_alone: the publisher asked (k-of-n), a quarter
 * of the slots wait to be returned, 256 messages went unacknowledged, or,
 * @idle: the poll found nothing, an ACK has been owed VERBUS_ACK_DELAY_MS,
 * or credits wait and nothing has arrived for that long). txlock held (a
 * stream leaves the dirty list under it before it is freed:
 * vb_sub_destroy, vbi_node_reap), in the per-peer round's RCU read-side
 * section. Upcall peer_acks.
 */
void vbi_peer_acks_due(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
		       bool idle)
{
	struct vbi_ack_owed o = acks_owed(p, l);

	/* an owed ACK waits from when it became owed (a keepalive arriving
	 * is no reason to hold it); credits alone, from the last data
	 * received (they ride on what comes back) */
	if (vbi_ack_alone(&o, idle, idle ? vbi_now_ns() : 0))
		vbi_peer_send_acks(p, l, buf, cap, NULL);
	else if (!o.urgent && o.delivered < VBI_ACK_ALONE_AFTER)
		atomic_store_explicit(&p->ack_due, false, memory_order_relaxed); /* not yet */
}
