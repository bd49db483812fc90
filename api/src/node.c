/* SPDX-License-Identifier: MIT */
/*
 * Nodes and their peers: RC connections (librdmacm through the transport),
 * the HELLO/SUB control protocol, receive dispatch, credits and
 * acknowledgements, and teardown with a full drain.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "api/src/vb_int.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
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

/* Undo vbi_sring_take() for an entry that was not posted. */
void vbi_sring_untake(struct vbi_sring *sr)
{
	sr->head = (sr->head + sr->n - 1) % sr->n;
	sr->outstanding--;
}

/* ---- peers -------------------------------------------------------------------------------- */

struct vbi_peer *vbi_peer_alloc(struct vb_node *node)
{
	struct vbi_peer *p = calloc(1, sizeof(*p));

	if (!p) {
		vbi_err(-ENOMEM, "peer");
		return NULL;
	}
	p->node = node;
	pthread_mutex_init(&p->txlock, NULL);
	snprintf(p->name, sizeof(p->name), "?");
	p->next_lane_id = 1;
	if (vbi_peer_init_path(p)) {
		pthread_mutex_destroy(&p->txlock);
		free(p);
		return NULL;
	}
	return p;
}

/* Every lane must be gone (vbi_lane_destroy_now) before. */
void vbi_peer_free(struct vbi_peer *p)
{
	struct vb_ctx *ctx = p->node->ctx;

	if (p->ah)
		ctx->ops->ah_destroy(p->ah);
	while (p->rsubs) {
		struct vbi_rsub *r = p->rsubs;

		p->rsubs = r->next;
		free(r);
	}
	vbi_path_fini(&p->path);
	pthread_mutex_destroy(&p->txlock);
	free(p);
}

/*
 * Peer reaping (maintenance thread, each round). A peer given up or closed
 * (dead) goes with everything it holds, so a node that sees peers come and
 * go for weeks keeps its QP, MR and memory counts and max_peers counts
 * only live peers:
 *  1. every lane of it is retired (active, standby, probe, any other):
 *     maint_retire drains and destroys them in this or a later round;
 *  2. once it has no lane left (so no completion or callback refers to it)
 *     and no backup switch is pending for it, it is unlinked from the node
 *     under the node's write lock, with its publisher attachments and its
 *     ORDERED receive streams;
 *  3. after an RCU grace period (publishing threads read peers in a
 *     read-side section, vb_pub_commit) it is freed and its max_peers slot
 *     given back.
 */
static void reap_detach(struct vb_node *node, struct vbi_peer *p)
{
	for (struct vb_pub *pub = node->pubs; pub; pub = pub->next) {
		pthread_mutex_lock(&pub->lock);
		for (struct vbi_pubpeer **q = &pub->peers; *q;) {
			struct vbi_pubpeer *pp = *q;

			if (pp->peer != p) {
				q = &pp->next_in_pub;
				continue;
			}
			*q = pp->next_in_pub;
			pub->npeers--;
			free(pp);
		}
		pthread_mutex_unlock(&pub->lock);
	}
	p->pubs = NULL;
	p->rr = NULL;
	vbi_sub_drop_peer(node, p);
}

void vbi_node_reap(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;

	for (;;) {
		struct vbi_peer *victim = NULL;

		pthread_rwlock_wrlock(&node->lock);
		for (struct vbi_peer **q = &node->peers; *q; q = &(*q)->next) {
			struct vbi_peer *p = *q;
			bool gone;

			if (atomic_load(&p->alt_pending))
				continue;
			pthread_mutex_lock(&p->txlock);
			if (!p->dead) {
				pthread_mutex_unlock(&p->txlock);
				continue;
			}
			for (struct vbi_lane *l = p->lanes; l; l = l->next)
				if (!atomic_load(&l->retiring))
					vbi_lane_retire(l);
			vbi_path_switch(&p->path, NULL, vbi_mono_ns(), NULL);
			vbi_path_take_standby(&p->path);
			p->probe = NULL;
			gone = !p->lanes;
			pthread_mutex_unlock(&p->txlock);
			if (!gone)
				continue;
			*q = p->next;
			reap_detach(node, p);
			victim = p;
			break;
		}
		pthread_rwlock_unlock(&node->lock);
		if (!victim)
			return;
		vbi_rcu_synchronize(); /* publishers that picked it as a target are done */
		vbi_info("peer '%s' reaped", victim->name);
		vbi_peer_free(victim);
		vbi_ctx_put_peer(ctx);
		atomic_fetch_add(&ctx->st.peers_reaped, 1);
	}
}

/* Tell a live peer we are closing (so it does not take the silence for a
 * failure), and give the BYE up to 200 ms to leave. */
static void peer_say_bye(struct vbi_peer *p)
{
	uint8_t buf[VBI_WIRE_HDR_LEN];
	struct vbi_wire_hdr h = { .type = VBI_WT_BYE };
	uint64_t t0 = now_ms();
	struct vbi_lane *l;
	int rc;

	vbi_wire_put(buf, &h);
	pthread_mutex_lock(&p->txlock);
	l = vbi_path_lane(&p->path);
	rc = p->up && !p->dead && l ? vbi_peer_send_ctrl(p, buf, sizeof(buf)) : -ENOTCONN;
	pthread_mutex_unlock(&p->txlock);
	if (rc)
		return;
	for (;;) {
		uint32_t out;

		pthread_mutex_lock(&p->txlock);
		out = l->sr.outstanding;
		pthread_mutex_unlock(&p->txlock);
		if (!out || now_ms() - t0 > 200)
			break;
		vbi_progress_or_nap(p->node->ctx);
	}
}

/* SUB frames for every local subscriber, in as few SENDs as fit. node->lock held. */
int vbi_peer_send_subs(struct vbi_peer *p, struct vb_sub *only)
{
	uint8_t *buf = malloc(p->node->ctx->attr.slot_size);
	size_t cap = p->node->ctx->attr.slot_size, off = 0;
	int rc = 0;

	if (p->remote_slot_size && p->remote_slot_size < cap)
		cap = p->remote_slot_size;
	if (!buf)
		return -ENOMEM;
	for (struct vb_sub *s = only ? only : p->node->subs; s; s = only ? NULL : s->next) {
		size_t nl = strlen(s->topic);
		/* epoch: the multicast group s's context joined (0: none) */
		struct vbi_wire_hdr h = { .type = VBI_WT_SUB, .topic = s->topic_id,
					  .epoch = s->mcast_group, .len = (uint32_t)(1 + nl) };

		if (off + vbi_wire_frame_size(h.len) > cap) {
			pthread_mutex_lock(&p->txlock);
			rc = vbi_peer_send_ctrl(p, buf, (uint32_t)off);
			pthread_mutex_unlock(&p->txlock);
			off = 0;
			if (rc)
				break;
		}
		off += vbi_wire_sub_encode(buf + off, h.topic, h.epoch, (uint8_t)s->cls, s->topic,
					   nl);
	}
	if (!rc && off) {
		pthread_mutex_lock(&p->txlock);
		rc = vbi_peer_send_ctrl(p, buf, (uint32_t)off);
		pthread_mutex_unlock(&p->txlock);
	}
	free(buf);
	return rc;
}

/* The peer is gone for good (closed, or no lane could be had): its cursors
 * stop holding the windows back. */
void vbi_peer_failed(struct vbi_peer *p, const char *why)
{
	bool was;
	struct vbi_lane *old;

	pthread_mutex_lock(&p->txlock);
	was = p->dead;
	p->dead = true;
	old = vbi_path_switch(&p->path, NULL, vbi_mono_ns(), NULL);
	if (old)
		vbi_lane_retire(old);
	pthread_mutex_unlock(&p->txlock);
	if (was || p->closing)
		return;
	if (p->up) {
		p->up = false;
		__atomic_fetch_sub(&p->node->npeers_up, 1, __ATOMIC_RELAXED);
	}
	vbi_pub_detach_peer(p);
	if (p->remote_closed)
		vbi_info("connection to '%s': %s", p->name, why);
	else
		vbi_warn("connection to '%s' failed: %s", p->name, why);
	vbi_event(p->node->ctx, VB_EV_PEER_DOWN, p->name, "%s", why);
	if (p->alt_addr.ss_family && !atomic_load(&p->node->stop)) {
		atomic_store(&p->alt_pending, true);
		vbi_maint_kick(p->node);
	}
}

/* ---- receive dispatch (progress context, node->lock held for reading) ------------- */

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
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, p->name, "malformed SUB dropped");
		return;
	}
	if (rc != VBI_WSUB_OK) {
		atomic_fetch_add(&ctx->st.malformed, 1);
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
static bool data_lane_ok(struct vb_ctx *ctx, struct vbi_peer *p, struct vbi_lane *l)
{
	uint32_t id = __atomic_load_n(&l->id, __ATOMIC_RELAXED); /* a promotion renumbers */

	if (id < p->rx_lane_id) {
		atomic_fetch_add_explicit(&ctx->st.stale_frames, 1, memory_order_relaxed);
		return false;
	}
	if (id > p->rx_lane_id) {
		if (p->rx_lane_id)
			vbi_sub_peer_lane_changed(p->node, p);
		p->rx_lane_id = id;
	}
	/* go-back-N on UC/UD: a hole is a loss to recover, not a fault */
	p->rx_unreliable = l->mode != VB_QPT_RC;
	return true;
}

/* Parse every frame of a received buffer; a bad header drops the rest of
 * the buffer (frame boundaries after it cannot be trusted). */
void vbi_dispatch_frames(struct vb_ctx *ctx, struct vbi_lane *l, const uint8_t *buf, uint32_t len)
{
	struct vbi_wire_walk w;
	struct vbi_wire_hdr h;
	const uint8_t *pl;
	int r;

	vbi_wire_walk_init(&w, buf, len, (uint32_t)ctx->attr.max_msg);
	while ((r = vbi_wire_walk_next(&w, &h, &pl)) != 0) {
		struct vbi_peer *p = l->peer; /* set by the HELLO of an accepted lane */

		if (r < 0) {
			atomic_fetch_add(&ctx->st.malformed, 1);
			if (r == -VBI_WE_VERSION) /* a peer of another release */
				vbi_event(ctx, VB_EV_PROTOCOL, p ? p->name : "",
					  "frame dropped: the peer speaks wire version %u, this "
					  "node %u", buf[w.off + 2], VBI_WIRE_VERSION);
			else
				vbi_event(ctx, VB_EV_PROTOCOL, p ? p->name : "",
					  "frame at offset %u of %u dropped: %s", w.off, len,
					  vbi_wire_err_name((enum vbi_wire_err)-r));
			return;
		}
		if (h.type == VBI_WT_HELLO || h.type == VBI_WT_AUTH) {
			if (h.type == VBI_WT_HELLO)
				vbi_lane_on_hello(l, &h, pl);
			else
				vbi_hello_auth_on_frame(l, &h, pl);
			if (vbi_hello_auth_refusal(l))
				return; /* refused: nothing after it is looked at */
			continue;
		}
		if (h.type == VBI_WT_BYE && p && p->connector && !atomic_load(&p->up) &&
		    !atomic_load(&l->hello_rcvd)) {
			/* our connection refused by the node we connect to, with its
			 * reason (a refusal is a BYE instead of its HELLO) */
			char why[VBI_REFUSE_MAX + 1];
			uint32_t n = vbi_wire_bye_reason(&h, pl, why);

			pthread_mutex_lock(&p->txlock);
			snprintf(p->refused, sizeof(p->refused), "%s", n ? why : "no reason given");
			pthread_mutex_unlock(&p->txlock);
			p->remote_closed = true;
			vbi_peer_failed(p, "refused by the peer");
			return;
		}
		if (!p || !atomic_load(&l->hello_rcvd)) {
			atomic_fetch_add(&ctx->st.malformed, 1);
			vbi_event(ctx, VB_EV_PROTOCOL, "", "frame type %u before HELLO dropped", h.type);
			return;
		}
		switch (h.type) {
		case VBI_WT_DATA: {
			struct vb_sub *s = vbi_sub_find(p->node, h.topic);

			if (s && s->cls == VB_ORDERED && data_lane_ok(ctx, p, l))
				vbi_sub_data(s, p, &h, pl);
			break;
		}
		case VBI_WT_ACK:
			atomic_fetch_add(&ctx->st.acks_received, 1);
			if (h.frag_off) { /* credits of the lane it came on */
				bool bad;

				pthread_mutex_lock(&p->txlock);
				/* unreliable lanes: after a credit resync (lost
				 * datagrams assumed) late returns only refill */
				bad = vbi_wire_credit_return(&l->returned_total, l->sends_total,
							     h.frag_off, l->mode == VB_QPT_RC) < 0;
				pthread_mutex_unlock(&p->txlock);
				if (!bad)
					atomic_store_explicit(&p->credit_rx_ns, vbi_now_ns(),
							      memory_order_relaxed);
				if (bad) {
					atomic_fetch_add(&ctx->st.malformed, 1);
					vbi_event(ctx, VB_EV_PROTOCOL, p->name,
						  "ACK returns %u credits that were never used", h.frag_off);
				}
			}
			vbi_pub_on_ack(p->node, p, &h);
			break;
		case VBI_WT_SUB:
		case VBI_WT_UNSUB:
			on_sub(p, &h, pl, h.type == VBI_WT_UNSUB);
			break;
		case VBI_WT_LANE:
			/* lane number and epoch rules (auth.c); a promoted probe
			 * lane is renumbered there */
			if (vbi_rule_lane_frame(p, l, &h) && data_lane_ok(ctx, p, l))
				vbi_lane_on_switch(l);
			break;
		case VBI_WT_NAK:
			atomic_fetch_add(&ctx->st.naks_received, 1);
			vbi_pub_on_nak(p->node, p, &h);
			break;
		case VBI_WT_UDADDR:
			vbi_peer_on_udaddr(p, &h, pl);
			break;
		case VBI_WT_END: /* a publisher cut our stream (slow subscriber) */
			vbi_sub_on_end(p, &h);
			break;
		case VBI_WT_BYE:
			p->remote_closed = true;
			vbi_peer_failed(p, "closed by the peer");
			return;
		default: /* HEARTBEAT: nothing to do */
			break;
		}
	}
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
	if (!r && !l->to_return)
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
			h.frag_off = l->to_return;
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

/* The ACKs built by vbi_peer_build_acks() were posted on @l. txlock held. */
void vbi_peer_acks_sent(struct vbi_peer *p, struct vbi_lane *l, struct vbi_rxs *upto)
{
	l->to_return = 0;
	p->delivered_since_ack = 0;
	while (p->dirty && p->dirty != upto) {
		struct vbi_rxs *d = p->dirty;

		p->dirty = d->next_dirty;
		d->in_dirty = false;
		d->ack_urgent = false;
		if (d->nak_pending) {
			d->nak_pending = false;
			atomic_fetch_add_explicit(&p->node->ctx->st.naks_sent, 1,
						  memory_order_relaxed);
		}
		d->acked_sent = d->ack_next - 1;
	}
	atomic_fetch_add_explicit(&p->node->ctx->st.acks_sent, 1, memory_order_relaxed);
}

/*
 * After each poll: flush queued data first (ACKs ride along in its batches),
 * then send a standalone ACK only when one is really due: the publisher
 * asked (k-of-n), a quarter of the slots wait to be returned, 256 messages
 * went unacknowledged, or nothing has arrived for 2 ms. A lone credit is
 * not returned on its own: the ACK carrying it would consume one of the
 * peer's slots, which it would return the same way (ACK ping-pong). Lanes
 * other than the active one return their credits on their own. node->lock
 * held for reading (so subscribers, whose streams sit on the dirty list,
 * cannot go away meanwhile).
 */
/*
 * Keepalive on the active lane @l: when it has posted nothing for
 * keepalive_ms, a credits-only ACK frame goes. A peer that died silently
 * (SIGKILL, power) leaves a receiver with nothing to send; without this its
 * RC QP would never find out (no send, no completion error). With it, the
 * keepalive's retries run out (RETRY_EXC_ERR) and the usual recovery runs:
 * standby, rebuild, given up, and then vb_node_connect_backup()'s
 * alternative. Each side sends at most one per interval when idle; it
 * carries the slots to return, so the two ends' keepalives pay for each
 * other. txlock held.
 */
static void keepalive(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf)
{
	unsigned ka = p->node->ctx->attr.keepalive_ms;
	uint64_t now;

	if (!ka)
		return;
	now = vbi_now_ms();
	if (l->sends_total != l->ka_sends || !l->ka_ms) {
		l->ka_sends = l->sends_total;
		l->ka_ms = now;
		return;
	}
	if (now - l->ka_ms < ka)
		return;
	struct vbi_wire_hdr h = { .type = VBI_WT_ACK, .frag_off = l->to_return };

	vbi_wire_put(buf, &h);
	if (vbi_lane_send_ctrl(l, buf, VBI_WIRE_HDR_LEN) == 0) {
		l->to_return = 0;
		atomic_fetch_add_explicit(&p->node->ctx->st.keepalives, 1, memory_order_relaxed);
	}
	l->ka_sends = l->sends_total;
	l->ka_ms = now;
}

void vbi_peer_after_poll(struct vbi_peer *p, bool idle)
{
	uint8_t buf[VBI_WIRE_HDR_LEN * 64];
	struct vbi_rxs *upto;
	struct vbi_lane *l;
	bool urgent = false, due, held;
	uint32_t len;

	if (p->dead || p->closing || !p->up)
		return;
	{
		/* an accepted UD lane's HELLO answer deferred until its
		 * accept() returned (vbi_lane_send_hello) */
		struct vbi_lane *hl = NULL;

		vbi_rcu_enter(); /* lanes are freed after a grace period */
		pthread_mutex_lock(&p->txlock);
		for (struct vbi_lane *o = p->lanes; o && !hl; o = o->next)
			if (atomic_load(&o->hello_deferred) && atomic_load(&o->conn_ready) &&
			    !atomic_load(&o->dead))
				hl = o;
		pthread_mutex_unlock(&p->txlock);
		if (hl)
			vbi_lane_send_hello(hl);
		vbi_rcu_leave();
	}
	if (p->subs_pending)
		p->subs_pending = vbi_peer_send_subs(p, NULL) != 0; /* retried until sent */
	/* Data corked behind a SEND in flight goes once that SEND completed
	 * (vb_pub_commit); anything else queued (waiting for credits or ring
	 * space) goes as soon as they allow. */
	{
		struct vbi_lane *al;

		vbi_rcu_enter();
		al = atomic_load(&p->corked) ? vbi_path_lane(&p->path) : NULL;
		held = al && atomic_load(&al->sr.sig_inflight);
		vbi_rcu_leave();
	}
	if (!held)
		vbi_peer_flush(p);
	pthread_mutex_lock(&p->txlock);
	l = vbi_peer_lane(p);
	if (atomic_load_explicit(&p->ack_all, memory_order_relaxed) &&
	    atomic_exchange(&p->ack_all, false))
		vbi_sub_peer_ack_all(p->node, p); /* urgent: goes below */
	/* our FANOUT endpoint moved: tell the peer, on a lane that stays */
	if (atomic_load_explicit(&p->ud_announce, memory_order_relaxed) && l &&
	    atomic_load(&l->hello_rcvd) && !atomic_load(&l->dr->fatal) &&
	    l->max_send >= VBI_WIRE_HDR_LEN + VBI_UDADDR_LEN &&
	    vbi_lane_send_ctrl(l, buf, vbi_udaddr_frame(p->node->ctx, buf)) == 0)
		atomic_store(&p->ud_announce, false);
	if (l && atomic_load(&l->hello_rcvd)) {
		uint32_t cap = l->max_send < sizeof(buf) ? l->max_send : (uint32_t)sizeof(buf);

		if (l->mode != VB_QPT_RC)
			vbi_lane_check_timers(p, l, vbi_now_ns());
		for (struct vbi_rxs *r = p->dirty; r; r = r->next_dirty)
			urgent |= r->ack_urgent;
		due = urgent || l->to_return >= l->nslots / 4 || p->delivered_since_ack >= 256 ||
		      (idle && (p->dirty || l->to_return > 1) && vbi_now_ms() - p->last_rx_ms >= 2);
		if (due && (len = vbi_peer_build_acks(p, l, buf, cap, &upto)) &&
		    vbi_lane_send_ctrl(l, buf, len) == 0)
			vbi_peer_acks_sent(p, l, upto);
		keepalive(p, l, buf);
	}
	for (struct vbi_lane *o = p->lanes; o; o = o->next) {
		struct vbi_wire_hdr h = { .type = VBI_WT_ACK };

		if (o == l || atomic_load(&o->dead) || !atomic_load(&o->hello_rcvd) ||
		    o->to_return < 2 || (o->to_return < o->nslots / 4 && !idle))
			continue;
		h.frag_off = o->to_return;
		vbi_wire_put(buf, &h);
		if (vbi_lane_send_ctrl(o, buf, VBI_WIRE_HDR_LEN) == 0)
			o->to_return = 0;
	}
	pthread_mutex_unlock(&p->txlock);
}

/* ---- UD receive (FANOUT) --------------------------------------------------------------- */

void vbi_ud_recv(struct vb_ctx *ctx, struct vbi_slot *slot, uint32_t byte_len)
{
	const uint8_t *buf, *pl;
	uint32_t len = vbi_wire_ud_frames(slot->buf.addr, byte_len, &buf);
	struct vbi_wire_walk w;
	struct vbi_wire_hdr h;
	int r;

	if (!len) {
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, "(datagram)", "empty datagram dropped");
	}

	pthread_mutex_lock(&ctx->lock);
	vbi_wire_walk_init(&w, buf, len, (uint32_t)ctx->attr.max_msg);
	while ((r = vbi_wire_walk_next(&w, &h, &pl)) != 0) {
		if (r < 0) {
			atomic_fetch_add(&ctx->st.malformed, 1);
			vbi_event(ctx, VB_EV_PROTOCOL, "(datagram)", "datagram frame dropped: %s",
				  vbi_wire_err_name((enum vbi_wire_err)-r));
			break;
		}
		if (h.type == VBI_WT_DATA || h.type == VBI_WT_HEARTBEAT) {
			for (struct vb_node *n = ctx->nodes; n; n = n->next) {
				struct vb_sub *s;

				pthread_rwlock_rdlock(&n->lock);
				s = vbi_sub_find(n, h.topic);
				if (s && s->cls == VB_FANOUT)
					vbi_sub_data(s, NULL, &h, pl);
				pthread_rwlock_unlock(&n->lock);
			}
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	vbi_cb_flush(ctx); /* the callbacks read the slot: before it is posted again */
	vbi_ud_repost(ctx, slot);
}

/* ---- nodes ------------------------------------------------------------------------------- */

void vb_node_attr_init(vb_node_attr_t *a)
{
	const char *n = getenv("VERBUS_NODE_NAME");

	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->name = n && *n ? n : "verbus";
}

static int make_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		return 0;
	}
	return vbi_err(-EINVAL, "'%s' is not an IPv4 or IPv6 address", ip);
}

/* Close listener @idx (its accept thread joined, or that thread itself). */
static void listener_drop(struct vb_node *node, unsigned idx)
{
	if (!node->listener[idx])
		return;
	atomic_store(&node->lport[idx], 0);
	node->ctx->ops->listener_close(node->listener[idx]);
	node->listener[idx] = NULL;
	atomic_fetch_sub(&node->ctx->dr[idx == 1 ? 1 : 0].nlisteners, 1);
}

/*
 * Accept connections on listener @idx: each becomes a lane, pending until
 * its HELLO says which peer it belongs to (a new one, or a standby /
 * replacement for a known one).
 */
/*
 * Half-open connections (accepted, no valid HELLO yet) hold a QP and
 * VBI_LEAN_SLOTS receive slots each. At most max_pending of them per node:
 * past it the oldest (the list's tail) is dropped, so a flood of them
 * cannot keep a real peer out; vbi_node_pending_expire() drops those older
 * than cm_timeout_ms. node->lock held for writing.
 */
static void pending_cap(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_lane *oldest = NULL;
	unsigned n = 0;

	for (struct vbi_lane *l = node->pending; l; l = l->next)
		if (!atomic_load(&l->dead) && !atomic_load(&l->hello_rcvd) && !l->refused_ns) {
			n++;
			oldest = l;
		}
	if (n <= ctx->attr.max_pending || !oldest)
		return;
	atomic_fetch_add(&ctx->st.pending_dropped, 1);
	vbi_info("node '%s': %u connections without a HELLO (max_pending %u): the oldest "
		 "(QP %u) dropped", node->name, n, ctx->attr.max_pending, oldest->qp->qpn);
	vbi_lane_retire(oldest);
}

void vbi_node_pending_expire(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;
	uint64_t now = vbi_mono_ns(), limit = (uint64_t)ctx->attr.cm_timeout_ms * 1000000ull;

	pthread_rwlock_rdlock(&node->lock);
	for (struct vbi_lane *l = node->pending; l; l = l->next) {
		if (atomic_load(&l->dead) || atomic_load(&l->in_setup))
			continue;
		if (l->refused_ns) { /* its BYE went (or 1 s passed): close it */
			uint32_t out;

			pthread_mutex_lock(l->lk);
			out = l->sr.outstanding;
			pthread_mutex_unlock(l->lk);
			if (!out || now - l->refused_ns > 1000000000ull)
				vbi_lane_retire(l);
			continue;
		}
		if (l->accepted_ns && now - l->accepted_ns > limit) {
			atomic_fetch_add(&ctx->st.pending_dropped, 1);
			vbi_warn("node '%s': a connection sent no HELLO within %d ms: dropped (QP %u)",
				 node->name, ctx->attr.cm_timeout_ms, l->qp->qpn);
			vbi_lane_retire(l);
		}
	}
	pthread_rwlock_unlock(&node->lock);
}

static void accept_loop(struct vb_node *node, unsigned idx)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_devres *dr = &ctx->dr[idx == 1 ? 1 : 0];
	enum vb_qp_type mode = node->listener[idx]->type;
	struct vbt_conn_param cp = ctx->cp;
	struct vbi_lane *l = NULL;

	/* Wait for requests in short slices so stop is noticed; the handshake
	 * steps after a request keep the full cm_timeout_ms. */
	cp.accept_wait_ms = 500;
	while (!atomic_load(&node->stop) && !atomic_load(&dr->removed)) {
		int rc;

		if (!l && vbi_lane_new(node, dr, mode, true, &l)) {
			vbi_warn("accept: cannot prepare a connection: %s", vbi_errmsg());
			struct timespec ts = { 0, 100000000 };

			nanosleep(&ts, NULL);
			continue;
		}
		atomic_store(&l->in_setup, true);
		rc = ctx->ops->accept(node->listener[idx], l->qp, &cp, &l->conn);
		if (rc == -ETIMEDOUT && vbt_qp_state(l->qp) == VB_QPS_INIT)
			continue;
		if (rc) {
			if (!atomic_load(&node->stop))
				vbi_warn("accept failed: %s", vbi_errmsg());
			vbi_lane_destroy_now(l);
			l = NULL;
			continue;
		}
		/* The peer's HELLO may have been processed already (it can
		 * arrive as soon as our QP is in RTR): then it is bound. Our
		 * HELLO answers it, from the progress thread, once the lane is
		 * bound (one thread, one lock: the lane's lock changes then). */
		atomic_store(&l->conn_ready, true); /* UD: its HELLO may be answered */
		vbi_ctx_kick(node->ctx);
		l->accepted_ns = vbi_mono_ns();
		pthread_rwlock_wrlock(&node->lock);
		if (!l->peer) {
			l->next = node->pending;
			node->pending = l;
			pending_cap(node);
		}
		pthread_rwlock_unlock(&node->lock);
		atomic_store(&l->in_setup, false); /* the last touch: retire may take it */
		l = NULL;
	}
	if (l)
		vbi_lane_destroy_now(l);
	if (atomic_load(&dr->removed) && !atomic_load(&node->stop)) {
		/* its rdma_cm id pins the device: let the removal finish */
		vbi_info("node '%s': %s listener on %s closed (device removed)", node->name,
			 vbi_path_mode_name(mode), dr->name);
		listener_drop(node, idx);
	}
}

static void *accept_main0(void *arg)
{
	accept_loop(arg, 0);
	return NULL;
}

static void *accept_main1(void *arg)
{
	accept_loop(arg, 1);
	return NULL;
}

static void *accept_main2(void *arg)
{
	accept_loop(arg, 2);
	return NULL;
}

static void *accept_main3(void *arg)
{
	accept_loop(arg, 3);
	return NULL;
}

/* Listener @idx: 0 RC on the primary device, 1 RC on the standby device,
 * 2 UC and 3 UD on the primary device (any port: announced in HELLO). */
static int node_listen(struct vb_node *node, unsigned idx, const char *ip, uint16_t port)
{
	static void *(*const mains[4])(void *) = { accept_main0, accept_main1, accept_main2,
						   accept_main3 };
	static const enum vb_qp_type types[4] = { VB_QPT_RC, VB_QPT_RC, VB_QPT_UC, VB_QPT_UD };
	struct vb_ctx *ctx = node->ctx;
	struct vbi_devres *dr = &ctx->dr[idx == 1 ? 1 : 0];
	struct sockaddr_storage ss;
	int rc;

	if (atomic_load(&dr->removed))
		return vbi_err(-ENODEV, "%s was removed", dr->name);
	rc = make_addr(ip, port, &ss);
	if (!rc)
		rc = ctx->ops->listen(dr->dev, types[idx], (struct sockaddr *)&ss,
				      &node->listener[idx]);
	if (rc)
		return rc;
	atomic_fetch_add(&dr->nlisteners, 1);
	atomic_store(&node->lport[idx], node->listener[idx]->port);
	if (idx == 1) {
		node->sb_listen = ss;
		if (ss.ss_family == AF_INET)
			((struct sockaddr_in *)&node->sb_listen)->sin_port =
				htons(node->listener[1]->port);
		else
			((struct sockaddr_in6 *)&node->sb_listen)->sin6_port =
				htons(node->listener[1]->port);
	}
	rc = -pthread_create(&node->accept_thread[idx], NULL, mains[idx], node);
	if (!rc)
		vbi_thread_name(node->accept_thread[idx], "vb-accept");
	if (rc)
		return vbi_err(rc, "accept thread: %s", strerror(-rc));
	node->accepting[idx] = true;
	return 0;
}

int vb_node_create(vb_ctx_t *ctx, const vb_node_attr_t *attr, vb_node_t **out)
{
	struct vb_node *node;
	int rc;

	if (!ctx || !attr || !out || attr->size < sizeof(*attr))
		return vbi_err(-EINVAL, "vb_node_create: NULL argument or attr not initialized");
	*out = NULL;
	node = calloc(1, sizeof(*node));
	if (!node)
		return vbi_err(-ENOMEM, "node");
	node->ctx = ctx;
	snprintf(node->name, sizeof(node->name), "%s", attr->name ? attr->name : "verbus");
	while (!node->uid)
		if (getrandom(&node->uid, sizeof(node->uid), 0) != sizeof(node->uid))
			node->uid = vbi_mono_ns() ^ (uintptr_t)node;
	pthread_rwlock_init(&node->lock, NULL);
	pthread_mutex_init(&node->maint_lock, NULL);
	pthread_cond_init(&node->maint_cv, NULL);
	rc = vbi_maint_start(node);
	if (rc)
		goto err;
	if (attr->listen_ip) {
		rc = node_listen(node, 0, attr->listen_ip, attr->listen_port);
		if (rc)
			goto err;
		node->port = node->listener[0]->port;
		/* UC and UD listeners for degraded lanes (a node that cannot
		 * have them keeps RC only: its peers do not degrade) */
		for (unsigned i = 2; i < 4; i++)
			if (node_listen(node, i, attr->listen_ip, 0))
				vbi_warn("no %s listener (no degradation to it): %s",
					 i == 2 ? "UC" : "UD", vbi_errmsg());
		/* A standby listener on the context's second device: peers
		 * connect their standby lanes there (it is in our HELLO). */
		if (ctx->ndev > 1 && ctx->attr.standby_ip) {
			rc = node_listen(node, 1, ctx->attr.standby_ip, attr->standby_port);
			if (rc)
				goto err;
		}
	}
	pthread_mutex_lock(&ctx->lock);
	node->next = ctx->nodes;
	ctx->nodes = node;
	pthread_mutex_unlock(&ctx->lock);
	*out = node;
	return 0;
err:
	vbi_maint_stop(node);
	for (unsigned i = 0; i < 4; i++) {
		if (node->accepting[i])
			pthread_join(node->accept_thread[i], NULL);
		listener_drop(node, i);
	}
	pthread_cond_destroy(&node->maint_cv);
	pthread_mutex_destroy(&node->maint_lock);
	pthread_rwlock_destroy(&node->lock);
	free(node);
	return vbi_err_prefix(rc, "vb_node_create");
}

uint16_t vb_node_port(const vb_node_t *node)
{
	return node ? node->port : 0;
}

int vb_node_peers(vb_node_t *node)
{
	if (!node)
		return vbi_err(-EINVAL, "NULL node");
	return (int)__atomic_load_n(&node->npeers_up, __ATOMIC_RELAXED);
}

static const char *addr_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		port = ntohs(s4->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		port = ntohs(s6->sin6_port);
	}
	snprintf(buf, len, "%s:%u", ip, port);
	return buf;
}

/* Connect to @addr and wait for the handshake; @alt (may be NULL): where to
 * go when this peer is given up later (vb_node_connect_backup). */
static int connect_addr(struct vb_node *node, const struct sockaddr_storage *addr,
			const struct sockaddr_storage *alt)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_peer *p;
	struct vbi_lane *l = NULL;
	char where[INET6_ADDRSTRLEN + 8];
	uint64_t t0;
	int rc;

	addr_str(addr, where, sizeof(where));
	if (vbi_in_callback(ctx))
		return vbi_err(-EDEADLK, "connect to %s from a callback: the handshake is "
			       "completed by this very thread; connect from another thread", where);
	p = vbi_peer_alloc(node);
	if (!p)
		return vbi_err_prefix(-ENOMEM, "connect to %s", where);
	p->connector = true;
	vbi_peer_allow_degrade(p); /* we build its lanes: we may degrade them */
	p->addr = *addr;
	if (alt)
		p->alt_addr = *alt;
	if (!vbi_ctx_take_peer(ctx)) {
		rc = vbi_err(-ENOSPC, "max_peers (%u) reached", ctx->attr.max_peers);
		goto err_peer;
	}
	if ((rc = vbi_lane_new(node, &ctx->dr[0], VB_QPT_RC, false, &l)))
		goto err_count;
	atomic_store(&l->in_setup, true); /* ours until the handshake is done */
	pthread_mutex_lock(&p->txlock);
	l->id = p->next_lane_id++;
	l->role = VBI_LANE_PRIMARY;
	vbi_lane_bind(l, p);
	pthread_mutex_unlock(&p->txlock);
	/* linked before the connection completes: its HELLO may come first */
	pthread_rwlock_wrlock(&node->lock);
	p->next = node->peers;
	node->peers = p;
	pthread_rwlock_unlock(&node->lock);
	rc = ctx->ops->connect(l->dr->dev, l->qp, (struct sockaddr *)&p->addr, &ctx->cp, &l->conn);
	if (rc) {
		vbi_err_prefix(rc, "connect to %s", where);
		goto err_linked;
	}
	atomic_store(&l->conn_ready, true);
	vbi_lane_send_hello(l);
	/* The handshake is complete when the peer's HELLO has arrived. */
	t0 = now_ms();
	while (!atomic_load(&p->up)) {
		if (atomic_load(&l->dead) || p->dead) {
			char why[sizeof(p->refused)];

			pthread_mutex_lock(&p->txlock);
			snprintf(why, sizeof(why), "%s", p->refused);
			pthread_mutex_unlock(&p->txlock);
			if (vbi_hello_auth_refusal(l))
				rc = vbi_err(-ECONNREFUSED, "connection to %s refused: authentication: %s",
					     where, vbi_hello_auth_refusal(l));
			else if (why[0])
				rc = vbi_err(-ECONNREFUSED, "connection to %s refused: %s", where, why);
			else
				rc = vbi_err(-ECONNRESET, "connection to %s failed during handshake",
					     where);
			goto err_linked;
		}
		if (now_ms() - t0 > (uint64_t)ctx->attr.cm_timeout_ms) {
			rc = vbi_err(-ETIMEDOUT, "no HELLO from %s within %d ms", where,
				     ctx->attr.cm_timeout_ms);
			goto err_linked;
		}
		vbi_progress_or_nap(ctx);
	}
	atomic_store(&l->in_setup, false); /* the last touch: retire may take it */
	return 0;
err_linked:
	/* The peer object stays on the node (dead) until the maintenance
	 * thread reaps it (vbi_node_reap, after an RCU grace period): the
	 * progress thread may still hold it. Its lane is retired now. */
	pthread_mutex_lock(&p->txlock);
	p->dead = true;
	pthread_mutex_unlock(&p->txlock);
	{
		char msg[VBI_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
		vbi_lane_destroy_now(l);
		vbi_err(rc, "%s", msg);
	}
	return rc;
err_count:
	vbi_ctx_put_peer(ctx);
err_peer:
	vbi_peer_free(p);
	return vbi_err_prefix(rc, "connect to %s", where);
}

int vb_node_connect(vb_node_t *node, const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	int rc;

	if (!node || !ip || !port)
		return vbi_err(-EINVAL, "vb_node_connect: node, ip and port are required");
	if ((rc = make_addr(ip, port, &ss)))
		return vbi_err_prefix(rc, "connect to %s:%u", ip, port);
	return connect_addr(node, &ss, NULL);
}

int vb_node_connect_backup(vb_node_t *node, const char *ip, uint16_t port, const char *backup_ip,
			   uint16_t backup_port)
{
	struct sockaddr_storage a, b;
	char first[VBI_ERRMSG_MAX];
	int rc;

	if (!node || !ip || !port || !backup_ip || !backup_port)
		return vbi_err(-EINVAL, "vb_node_connect_backup: node, both addresses and ports "
				      "are required");
	if ((rc = make_addr(ip, port, &a)) || (rc = make_addr(backup_ip, backup_port, &b)))
		return vbi_err_prefix(rc, "connect_backup");
	if (!memcmp(&a, &b, sizeof(a)))
		return vbi_err(-EINVAL, "backup %s:%u is the primary itself", backup_ip,
			       backup_port);
	if (!connect_addr(node, &a, &b))
		return 0;
	snprintf(first, sizeof(first), "%s", vbi_errmsg());
	vbi_warn("primary %s:%u not reachable (%s): trying the backup %s:%u", ip, port, first,
		 backup_ip, backup_port);
	if (!(rc = connect_addr(node, &b, &a))) {
		vbi_event(node->ctx, VB_EV_PEER_SWITCHED, "", "primary %s:%u not reachable: "
			  "connected to the backup %s:%u", ip, port, backup_ip, backup_port);
		return 0;
	}
	return vbi_err(rc, "neither the primary (%s) nor the backup (%s) could be reached",
		       first, vbi_errmsg());
}

/*
 * Maintenance thread: peers given up that have an alternative
 * (vb_node_connect_backup) are replaced by a connection to it, then, while
 * that fails, to the original again, up to VBI_BACKUP_TRIES attempts 250 ms
 * apart; their subscriptions follow (SUBs go with every new connection).
 */
#define VBI_BACKUP_TRIES 8
void vbi_node_backup_step(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_peer *todo[8];
	unsigned n = 0;

	pthread_rwlock_rdlock(&node->lock);
	for (struct vbi_peer *p = node->peers; p && n < 8; p = p->next)
		if (atomic_load(&p->alt_pending) && atomic_exchange(&p->alt_pending, false))
			todo[n++] = p;
	pthread_rwlock_unlock(&node->lock);
	for (unsigned i = 0; i < n; i++) {
		/* peers are freed by vbi_node_reap, on this same thread */
		struct vbi_peer *p = todo[i];
		const struct sockaddr_storage *to = &p->alt_addr, *back = &p->addr;
		char was[INET6_ADDRSTRLEN + 8], now[INET6_ADDRSTRLEN + 8];
		uint64_t t0 = vbi_mono_ns();
		int rc = -1;

		addr_str(&p->addr, was, sizeof(was));
		for (unsigned k = 0; k < VBI_BACKUP_TRIES && !atomic_load(&node->stop); k++) {
			if ((rc = connect_addr(node, to, back)) == 0)
				break;
			vbi_warn("'%s' given up; %s not reachable (attempt %u): %s", p->name,
				 addr_str(to, now, sizeof(now)), k + 1, vbi_errmsg());
			{
				const struct sockaddr_storage *t = to;

				to = back;
				back = t;
			}
			usleep(250000);
		}
		addr_str(to, now, sizeof(now));
		if (!rc) {
			atomic_fetch_add(&ctx->st.peer_switches, 1);
			vbi_event(ctx, VB_EV_PEER_SWITCHED, p->name,
				  "%s given up: connected to %s instead after %.3f ms", was, now,
				  (double)(vbi_mono_ns() - t0) / 1e6);
		} else if (!atomic_load(&node->stop)) {
			vbi_event(ctx, VB_EV_PATH_DOWN, p->name,
				  "%s given up and neither it nor its alternative could be "
				  "reached in %u attempts", was, VBI_BACKUP_TRIES);
		}
	}
}

int vb_node_destroy(vb_node_t *node)
{
	struct vb_ctx *ctx;
	struct vbi_peer *peers;
	struct vbi_lane *pending;

	if (!node)
		return 0;
	ctx = node->ctx;
	if (vbi_in_callback(ctx))
		return vbi_err(-EDEADLK, "vb_node_destroy() from a callback: its connections are "
			       "drained by this very thread");
	pthread_rwlock_rdlock(&node->lock);
	if (node->pubs || node->subs) {
		pthread_rwlock_unlock(&node->lock);
		return vbi_err(-EBUSY, "node '%s' still has publishers or subscribers", node->name);
	}
	pthread_rwlock_unlock(&node->lock);
	vbi_maint_stop(node); /* sets stop: accept threads end too */
	for (unsigned i = 0; i < 4; i++) {
		if (node->accepting[i])
			pthread_join(node->accept_thread[i], NULL);
		listener_drop(node, i);
	}

	pthread_rwlock_wrlock(&node->lock);
	peers = node->peers;
	node->peers = NULL;
	pending = node->pending;
	node->pending = NULL;
	pthread_rwlock_unlock(&node->lock);
	for (struct vbi_peer *p = peers; p; p = p->next)
		peer_say_bye(p);
	for (struct vbi_peer *p = peers; p; p = p->next) {
		pthread_mutex_lock(&p->txlock);
		p->closing = true;
		vbi_path_switch(&p->path, NULL, vbi_mono_ns(), NULL);
		vbi_path_take_standby(&p->path); /* freed with p->lanes below */
		pthread_mutex_unlock(&p->txlock);
	}
	while (pending) {
		struct vbi_lane *l = pending;

		pending = l->next;
		vbi_lane_destroy_now(l);
	}
	while (peers) {
		struct vbi_peer *p = peers;

		peers = p->next;
		for (;;) {
			struct vbi_lane *l;

			pthread_mutex_lock(&p->txlock);
			l = p->lanes;
			pthread_mutex_unlock(&p->txlock);
			if (!l)
				break;
			vbi_lane_destroy_now(l); /* unlinks it */
		}
		vbi_peer_free(p);
		vbi_ctx_put_peer(ctx);
	}
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node **pp = &ctx->nodes; *pp; pp = &(*pp)->next)
		if (*pp == node) {
			*pp = node->next;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	pthread_cond_destroy(&node->maint_cv);
	pthread_mutex_destroy(&node->maint_lock);
	pthread_rwlock_destroy(&node->lock);
	free(node);
	return 0;
}
