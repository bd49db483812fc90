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
#include <time.h>

#include "api/src/vb_int.h"
#include "core/err.h"
#include "core/log.h"

/* HELLO payload (little-endian), after the wire header. */
enum {
	HELLO_VERSION = 0, HELLO_UD_QPN = 4, HELLO_UD_QKEY = 8, HELLO_GID = 12,
	HELLO_SLOTS = 28, HELLO_SLOT_SIZE = 32, HELLO_MAX_MSG = 36, HELLO_NAME = 40,
	HELLO_LEN = HELLO_NAME + VBI_NAME_MAX,
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }

/* ---- credits and control sends (peer->txlock held) ----------------------------- */

static uint32_t peer_credits(const struct vbi_peer *p)
{
	return (uint32_t)(p->remote_slots + p->returned_total - p->sends_total);
}

/*
 * Post one SEND of @len bytes already in @s->buf (or inline from @inl).
 * Data sends keep one credit in reserve so credit-returning control frames
 * can always flow; control sends may use it. Caller holds txlock, checked
 * credits and ring space.
 */
int vbi_peer_post(struct vbi_peer *p, struct vbi_sctx *s, uint32_t len, bool last)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbt_sge sge = { (uintptr_t)s->buf.addr, len, s->buf.lkey };
	struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1,
				  .opcode = VBT_WR_SEND };
	const struct vbt_send_wr *bad;
	int rc;

	/* Signal the last send of a burst and every quarter ring, so unsignaled
	 * entries are always released by a later completion. */
	if (last || ++p->sr.since_signal >= p->sr.n / 4 || p->sr.outstanding >= p->sr.n - 1) {
		wr.flags |= VBT_SEND_SIGNALED;
		p->sr.since_signal = 0;
		s->signaled = true;
	}
	if (len <= p->qp->cap.max_inline_data) {
		wr.flags |= VBT_SEND_INLINE;
		atomic_fetch_add_explicit(&ctx->st.inline_sends, 1, memory_order_relaxed);
	}
	rc = vbt_post_send(p->qp, &wr, &bad);
	if (rc)
		return rc;
	p->sends_total++;
	atomic_fetch_add_explicit(&ctx->st.sends_posted, 1, memory_order_relaxed);
	return 0;
}

/* Undo vbi_sring_take() for an entry that was not posted. */
void vbi_sring_untake(struct vbi_sring *sr)
{
	sr->head = (sr->head + sr->n - 1) % sr->n;
	sr->outstanding--;
}

int vbi_peer_send_ctrl(struct vbi_peer *p, const void *frames, uint32_t len)
{
	struct vbi_sctx *s;
	int rc;

	if (p->dead || p->closing)
		return -ENOTCONN;
	if (len > p->node->ctx->attr.slot_size || (p->remote_slot_size && len > p->remote_slot_size))
		return vbi_err(-EMSGSIZE, "control frames of %u bytes", len);
	if (peer_credits(p) < 1 || p->sr.outstanding >= p->sr.n)
		return -EAGAIN;
	s = vbi_sring_take(&p->sr);
	memcpy(s->buf.addr, frames, len);
	rc = vbi_peer_post(p, s, len, true);
	if (rc)
		vbi_sring_untake(&p->sr);
	return rc;
}

/* ---- receive slots ------------------------------------------------------------------ */

static int post_slot(struct vbi_peer *p, struct vbi_slot *s)
{
	struct vbt_sge sge = { (uintptr_t)s->buf.addr, (uint32_t)p->node->ctx->attr.slot_size,
			       s->buf.lkey };
	struct vbt_recv_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1 };
	const struct vbt_recv_wr *bad;
	int rc = vbt_post_recv(p->qp, &wr, &bad);

	if (!rc)
		atomic_fetch_add(&p->posted_recvs, 1);
	return rc;
}

/* ---- peer creation / destruction ------------------------------------------------------ */

static void peer_free(struct vbi_peer *p)
{
	struct vb_ctx *ctx = p->node->ctx;

	if (p->conn)
		ctx->ops->conn_close(p->conn);
	if (p->qp)
		ctx->ops->qp_destroy(p->qp);
	if (p->ah)
		ctx->ops->ah_destroy(p->ah);
	pthread_mutex_lock(&p->txlock);
	vbi_sring_fini(ctx, &p->sr);
	pthread_mutex_unlock(&p->txlock);
	if (p->slots) {
		for (uint32_t i = 0; i < p->nslots; i++)
			if (p->slots[i].buf.addr)
				vbi_mempool_free(ctx->pool, p->slots[i].buf.addr);
		free(p->slots);
	}
	while (p->rsubs) {
		struct vbi_rsub *r = p->rsubs;

		p->rsubs = r->next;
		free(r);
	}
	pthread_mutex_destroy(&p->txlock);
	free(p);
}

/* Reap completions: the progress thread does it, or this thread in APP mode. */
static void progress_or_nap(struct vb_ctx *ctx)
{
	if (!ctx->thread_running && pthread_mutex_trylock(&ctx->progress_lock) == 0) {
		vbi_progress_once(ctx);
		pthread_mutex_unlock(&ctx->progress_lock);
	} else {
		struct timespec ts = { 0, 200000 };

		nanosleep(&ts, NULL);
	}
}

/* Tell a live peer we are closing (so it does not take the silence for a
 * failure), and give the BYE up to 200 ms to leave. */
static void peer_say_bye(struct vbi_peer *p)
{
	uint8_t buf[VBI_WIRE_HDR_LEN];
	struct vbi_wire_hdr h = { .type = VBI_WT_BYE };
	uint64_t t0 = now_ms();
	int rc;

	vbi_wire_put(buf, &h);
	pthread_mutex_lock(&p->txlock);
	rc = p->up && !p->dead ? vbi_peer_send_ctrl(p, buf, sizeof(buf)) : -ENOTCONN;
	pthread_mutex_unlock(&p->txlock);
	if (rc)
		return;
	for (;;) {
		uint32_t out;

		pthread_mutex_lock(&p->txlock);
		out = p->sr.outstanding;
		pthread_mutex_unlock(&p->txlock);
		if (!out || now_ms() - t0 > 200)
			break;
		progress_or_nap(p->node->ctx);
	}
}

/* Move the QP to ERR and wait until every posted WR has completed (flushed
 * ones included) — reaped by the progress thread, or here in APP mode. */
static void peer_drain(struct vbi_peer *p)
{
	struct vb_ctx *ctx = p->node->ctx;
	uint64_t t0 = now_ms();

	pthread_mutex_lock(&p->txlock);
	p->closing = true;
	pthread_mutex_unlock(&p->txlock);
	if (p->qp && vbt_qp_state(p->qp) != VB_QPS_RESET)
		vbt_qp_set_state(p->qp, VB_QPS_ERR);
	for (;;) {
		uint32_t out;

		pthread_mutex_lock(&p->txlock);
		out = p->sr.outstanding;
		pthread_mutex_unlock(&p->txlock);
		if (!out && !atomic_load(&p->posted_recvs))
			break;
		if (vbt_qp_state(p->qp) == VB_QPS_RESET) /* never posted-to */
			break;
		if (now_ms() - t0 > 10000) {
			vbi_warn("peer '%s': drain gave up with %u sends, %u receives outstanding",
				 p->name, out, atomic_load(&p->posted_recvs));
			break;
		}
		progress_or_nap(ctx);
	}
	pthread_mutex_lock(&p->txlock);
	vbi_sring_release_upto(ctx, &p->sr, NULL);
	pthread_mutex_unlock(&p->txlock);
}

static int peer_new(struct vb_node *node, struct vbi_peer **out)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_peer *p = calloc(1, sizeof(*p));
	struct vbt_qp_init_attr qa = {
		.type = VB_QPT_RC, .send_cq = ctx->cq, .recv_cq = ctx->cq,
		.cap = { .max_send_wr = ctx->sz.sq_depth, .max_recv_wr = ctx->sz.rq_depth,
			 .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = ctx->sz.max_inline },
	};
	struct vbt_peer local;
	int rc;

	if (!p)
		return vbi_err(-ENOMEM, "peer");
	p->node = node;
	pthread_mutex_init(&p->txlock, NULL);
	snprintf(p->name, sizeof(p->name), "?");
	qa.user_ctx = p;
	rc = ctx->ops->qp_create(ctx->pd, &qa, &p->qp);
	if (rc)
		goto err;
	rc = vbt_qp_local_peer(p->qp, 0, &local);
	if (!rc)
		rc = vbt_qp_to_init(p->qp, &ctx->cp, &local);
	if (rc)
		goto err;
	rc = vbi_sring_init(ctx, &p->sr, p->qp->cap.max_send_wr, VBI_WR_RC_SEND, p, true);
	if (rc)
		goto err;
	p->nslots = p->qp->cap.max_recv_wr;
	p->slots = calloc(p->nslots, sizeof(*p->slots));
	if (!p->slots) {
		rc = vbi_err(-ENOMEM, "receive slots");
		goto err;
	}
	for (uint32_t i = 0; i < p->nslots; i++) {
		struct vbi_slot *s = &p->slots[i];

		s->kind = VBI_WR_RC_RECV;
		s->peer = p;
		rc = vbi_mempool_alloc(ctx->pool, ctx->attr.slot_size, &s->buf);
		if (rc)
			goto err;
	}
	/* Until the peer's HELLO says how many slots it has, one credit:
	 * enough for our own HELLO (every node posts >= 16 before connecting). */
	p->remote_slots = 1;
	atomic_fetch_add_explicit(&ctx->init_gen, 1, memory_order_release);
	for (uint32_t i = 0; i < p->nslots; i++)
		if ((rc = post_slot(p, &p->slots[i])))
			goto err;
	*out = p;
	return 0;
err:
	vbi_err_prefix(rc, "new connection");
	if (p->qp)
		peer_drain(p);
	peer_free(p);
	return rc;
}

static void send_hello(struct vbi_peer *p)
{
	struct vb_node *node = p->node;
	struct vb_ctx *ctx = node->ctx;
	uint8_t buf[VBI_WIRE_HDR_LEN + HELLO_LEN];
	struct vbi_wire_hdr h = { .type = VBI_WT_HELLO, .len = HELLO_LEN };
	uint8_t *pl = buf + VBI_WIRE_HDR_LEN;
	int rc;

	vbi_wire_put(buf, &h);
	memset(pl, 0, HELLO_LEN);
	put32(pl + HELLO_VERSION, VBI_HELLO_VERSION);
	put32(pl + HELLO_UD_QPN, ctx->ud_local.qpn);
	put32(pl + HELLO_UD_QKEY, ctx->ud_local.qkey);
	memcpy(pl + HELLO_GID, ctx->ud_local.gid, 16);
	put32(pl + HELLO_SLOTS, p->nslots);
	put32(pl + HELLO_SLOT_SIZE, (uint32_t)ctx->attr.slot_size);
	put32(pl + HELLO_MAX_MSG, (uint32_t)ctx->attr.max_msg);
	memcpy(pl + HELLO_NAME, node->name, strnlen(node->name, VBI_NAME_MAX - 1));
	pthread_mutex_lock(&p->txlock);
	rc = vbi_peer_send_ctrl(p, buf, sizeof(buf));
	p->hello_sent = rc == 0;
	pthread_mutex_unlock(&p->txlock);
	if (rc)
		vbi_peer_failed(p, "cannot send HELLO");
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
		memset(buf + off, 0, vbi_wire_frame_size(h.len));
		vbi_wire_put(buf + off, &h);
		buf[off + VBI_WIRE_HDR_LEN] = (uint8_t)s->cls;
		memcpy(buf + off + VBI_WIRE_HDR_LEN + 1, s->topic, nl);
		off += vbi_wire_frame_size(h.len);
	}
	if (!rc && off) {
		pthread_mutex_lock(&p->txlock);
		rc = vbi_peer_send_ctrl(p, buf, (uint32_t)off);
		pthread_mutex_unlock(&p->txlock);
	}
	free(buf);
	return rc;
}

/* Link an established connection into the node and greet the peer. */
static int peer_link(struct vb_node *node, struct vbi_peer *p)
{
	struct vb_ctx *ctx = node->ctx;

	pthread_mutex_lock(&ctx->lock);
	if (ctx->npeers >= ctx->attr.max_peers) {
		pthread_mutex_unlock(&ctx->lock);
		return vbi_err(-ENOSPC, "max_peers (%u) reached", ctx->attr.max_peers);
	}
	ctx->npeers++;
	pthread_mutex_unlock(&ctx->lock);
	pthread_rwlock_wrlock(&node->lock);
	p->next = node->peers;
	node->peers = p;
	send_hello(p);
	pthread_rwlock_unlock(&node->lock);
	return 0;
}

void vbi_peer_failed(struct vbi_peer *p, const char *why)
{
	bool was;

	pthread_mutex_lock(&p->txlock);
	was = p->dead;
	p->dead = true;
	pthread_mutex_unlock(&p->txlock);
	if (was || p->closing)
		return;
	if (p->up) {
		p->up = false;
		__atomic_fetch_sub(&p->node->npeers_up, 1, __ATOMIC_RELAXED);
	}
	vbi_pub_detach_peer(p);
	if (p->remote_closed)
		vbi_info("connection to '%s' (QP %u): %s", p->name, p->qp ? p->qp->qpn : 0, why);
	else
		vbi_warn("connection to '%s' (QP %u) failed: %s", p->name, p->qp ? p->qp->qpn : 0,
			 why);
	vbi_event(p->node->ctx, VB_EV_PEER_DOWN, p->name, "%s", why);
}

/* ---- receive dispatch (progress context, node->lock held for reading) ------------- */

static void on_hello(struct vbi_peer *p, const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbt_ah_attr aa;
	uint32_t slots, slot_size;
	int rc;

	if (h->len < HELLO_LEN || get32(pl + HELLO_VERSION) != VBI_HELLO_VERSION || p->up) {
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, p->name, "bad or repeated HELLO dropped");
		return;
	}
	slots = get32(pl + HELLO_SLOTS);
	slot_size = get32(pl + HELLO_SLOT_SIZE);
	if (!slots || slots > (1u << 20) || slot_size < 1024 || slot_size > (1u << 20) ||
	    slot_size % 64) {
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_peer_failed(p, "HELLO with impossible slot geometry");
		return;
	}
	memcpy(p->name, pl + HELLO_NAME, VBI_NAME_MAX - 1);
	p->name[VBI_NAME_MAX - 1] = '\0';
	{
		struct vbt_peer ud = { 0 };
		struct vbt_ah *ah = NULL;

		ud.qpn = get32(pl + HELLO_UD_QPN) & 0xffffff;
		ud.qkey = get32(pl + HELLO_UD_QKEY);
		memcpy(ud.gid, pl + HELLO_GID, 16);
		vbt_ah_attr_from_peer(ctx->dev, &ud, &aa);
		rc = ctx->ops->ah_create(ctx->pd, &aa, &ah);
		if (rc)
			vbi_warn("peer '%s': no address handle for FANOUT: %s", p->name, vbi_errmsg());
		/* FANOUT publishers read these under ud_lock */
		pthread_mutex_lock(&ctx->ud_lock);
		p->ud = ud;
		p->ah = ah;
		pthread_mutex_unlock(&ctx->ud_lock);
	}
	pthread_mutex_lock(&p->txlock);
	/* Our HELLO consumed one of its slots before we knew the count. */
	p->remote_slots = slots;
	p->remote_slot_size = slot_size;
	pthread_mutex_unlock(&p->txlock);
	/* Our SUBs follow our HELLO: sent from after_poll once both are true. */
	p->subs_pending = true;
	atomic_store(&p->up, true);
	__atomic_fetch_add(&p->node->npeers_up, 1, __ATOMIC_RELAXED);
	vbi_event(ctx, VB_EV_PEER_UP, p->name, "RC QP %u; the peer has %u slots of %u bytes",
		  p->qp->qpn, slots, slot_size);
}

static void on_sub(struct vbi_peer *p, const struct vbi_wire_hdr *h, const uint8_t *pl,
		   bool unsub)
{
	struct vb_ctx *ctx = p->node->ctx;
	char name[VBI_TOPIC_MAX + 1];
	struct vbi_rsub *r, **pp;

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
	if (h->len < 2 || h->len > VBI_TOPIC_MAX + 1 || pl[0] > VB_FANOUT) {
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, p->name, "malformed SUB dropped");
		return;
	}
	memcpy(name, pl + 1, h->len - 1);
	name[h->len - 1] = '\0';
	if (vbi_topic_id(name) != h->topic || strlen(name) != h->len - 1) {
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, p->name, "SUB topic id does not match its name");
		return;
	}
	for (r = p->rsubs; r; r = r->next)
		if (r->topic == h->topic)
			return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	r->topic = h->topic;
	r->cls = pl[0];
	r->mcast_group = r->cls == VB_FANOUT ? h->epoch : 0;
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

/* Parse every frame of a received buffer; a bad header drops the rest of
 * the buffer (frame boundaries after it cannot be trusted). */
static void dispatch_frames(struct vb_ctx *ctx, struct vbi_peer *p, const uint8_t *buf,
			    uint32_t len)
{
	uint32_t off = 0;

	while (off < len) {
		struct vbi_wire_hdr h;
		long r = vbi_wire_parse(buf + off, len - off, (uint32_t)ctx->attr.max_msg, &h);
		const uint8_t *pl = buf + off + VBI_WIRE_HDR_LEN;

		if (r < 0) {
			atomic_fetch_add(&ctx->st.malformed, 1);
			vbi_event(ctx, VB_EV_PROTOCOL, p ? p->name : "(datagram)",
				  "frame at offset %u of %u dropped: %s", off, len,
				  vbi_wire_err_name((enum vbi_wire_err)-r));
			return;
		}
		off += (uint32_t)r;
		switch (h.type) {
		case VBI_WT_DATA: {
			struct vb_sub *s = vbi_sub_find(p ? p->node : NULL, h.topic);

			if (!p) /* datagram: handled by vbi_ud_recv's own loop */
				break;
			if (s && s->cls == VB_ORDERED)
				vbi_sub_data(s, p, &h, pl);
			break;
		}
		case VBI_WT_ACK:
			if (p) {
				atomic_fetch_add(&ctx->st.acks_received, 1);
				vbi_pub_on_ack(p->node, p, &h);
			}
			break;
		case VBI_WT_HELLO:
			if (p)
				on_hello(p, &h, pl);
			break;
		case VBI_WT_SUB:
		case VBI_WT_UNSUB:
			if (p)
				on_sub(p, &h, pl, h.type == VBI_WT_UNSUB);
			break;
		case VBI_WT_BYE:
			if (p) {
				p->remote_closed = true;
				vbi_peer_failed(p, "closed by the peer");
				return;
			}
			break;
		default: /* NAK/HEARTBEAT on RC: nothing to do */
			break;
		}
	}
}

void vbi_peer_rc_recv(struct vbi_peer *p, struct vbi_slot *slot, uint32_t byte_len)
{
	struct vb_node *node = p->node;

	pthread_rwlock_rdlock(&node->lock);
	if (!byte_len) { /* a SEND with no frame in it */
		atomic_fetch_add(&node->ctx->st.malformed, 1);
		vbi_event(node->ctx, VB_EV_PROTOCOL, p->name, "empty SEND dropped");
	} else if (!p->dead && !p->closing) {
		dispatch_frames(node->ctx, p, slot->buf.addr, byte_len);
	}
	pthread_rwlock_unlock(&node->lock);
	if (p->closing)
		return;
	if (post_slot(p, slot)) {
		vbi_peer_failed(p, "receive repost failed");
		return;
	}
	pthread_mutex_lock(&p->txlock);
	p->to_return++;
	p->last_rx_ms = vbi_now_ms();
	pthread_mutex_unlock(&p->txlock);
}

/*
 * Acknowledgements owed to @p, as ACK frames into @buf (at most @cap bytes):
 * one cumulative ACK per stream with news, the credits to return in the
 * first. Nothing changes until vbi_peer_acks_sent() (the SEND may fail).
 * txlock held. Returns the bytes written (0 when nothing is owed) and in
 * *@upto the first dirty stream not included.
 */
uint32_t vbi_peer_build_acks(struct vbi_peer *p, uint8_t *buf, uint32_t cap,
			     struct vbi_rxs **upto)
{
	struct vbi_rxs *r = p->dirty;
	uint32_t off = 0;

	*upto = r;
	if (!r && !p->to_return)
		return 0;
	do {
		struct vbi_wire_hdr h = { .type = VBI_WT_ACK };

		if (off + VBI_WIRE_HDR_LEN > cap)
			break;
		if (r) {
			h.session = r->session;
			h.topic = r->topic;
			h.seq = r->rx.next - 1;
			r = r->next_dirty;
		}
		if (!off)
			h.frag_off = p->to_return;
		vbi_wire_put(buf + off, &h);
		off += VBI_WIRE_HDR_LEN;
	} while (r);
	*upto = r;
	return off;
}

/* The ACKs built by vbi_peer_build_acks() were posted. txlock held. */
void vbi_peer_acks_sent(struct vbi_peer *p, struct vbi_rxs *upto)
{
	p->to_return = 0;
	p->delivered_since_ack = 0;
	while (p->dirty && p->dirty != upto) {
		struct vbi_rxs *d = p->dirty;

		p->dirty = d->next_dirty;
		d->in_dirty = false;
		d->ack_urgent = false;
		d->acked_sent = d->rx.next - 1;
	}
	atomic_fetch_add_explicit(&p->node->ctx->st.acks_sent, 1, memory_order_relaxed);
}

/*
 * After each poll: flush queued data first (ACKs ride along in its batches),
 * then send a standalone ACK only when one is really due: the publisher
 * asked (k-of-n), a quarter of the slots wait to be returned, 256 messages
 * went unacknowledged, or nothing has arrived for a millisecond. node->lock
 * held for reading (so subscribers, whose streams sit on the dirty list,
 * cannot go away meanwhile).
 */
bool vbi_peer_after_poll(struct vbi_peer *p, bool idle)
{
	uint8_t buf[VBI_WIRE_HDR_LEN * 64];
	struct vbi_rxs *upto;
	bool urgent = false, due, held = false;
	uint64_t since;
	uint32_t len;

	if (p->dead || p->closing || !p->hello_sent)
		return false;
	if (p->subs_pending && p->up)
		p->subs_pending = vbi_peer_send_subs(p, NULL) != 0; /* retried until sent */
	/* Data held for batching goes once it is batch_us old. */
	since = atomic_load_explicit(&p->hold_since_ns, memory_order_relaxed);
	if (since && vbi_now_ns() - since < p->node->ctx->batch_ns)
		held = true;
	else
		vbi_peer_flush(p);
	pthread_mutex_lock(&p->txlock);
	for (struct vbi_rxs *r = p->dirty; r; r = r->next_dirty)
		urgent |= r->ack_urgent;
	due = urgent || p->to_return >= p->nslots / 4 || p->delivered_since_ack >= 256 ||
	      (idle && (p->dirty || p->to_return) && vbi_now_ms() - p->last_rx_ms >= 2);
	if (due && (len = vbi_peer_build_acks(p, buf, sizeof(buf), &upto)) &&
	    vbi_peer_send_ctrl(p, buf, len) == 0)
		vbi_peer_acks_sent(p, upto);
	pthread_mutex_unlock(&p->txlock);
	return held;
}

/* ---- UD receive (FANOUT) --------------------------------------------------------------- */

void vbi_ud_recv(struct vb_ctx *ctx, struct vbi_slot *slot, uint32_t byte_len)
{
	const uint8_t *buf = (const uint8_t *)slot->buf.addr + VBI_UD_GRH;
	uint32_t len = byte_len > VBI_UD_GRH ? byte_len - VBI_UD_GRH : 0, off = 0;

	if (!len) {
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, "(datagram)", "empty datagram dropped");
	}

	pthread_mutex_lock(&ctx->lock);
	while (off < len) {
		struct vbi_wire_hdr h;
		long r = vbi_wire_parse(buf + off, len - off, (uint32_t)ctx->attr.max_msg, &h);

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
					vbi_sub_data(s, NULL, &h, buf + off + VBI_WIRE_HDR_LEN);
				pthread_rwlock_unlock(&n->lock);
			}
		}
		off += (uint32_t)r;
	}
	pthread_mutex_unlock(&ctx->lock);
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

static void *accept_main(void *arg)
{
	struct vb_node *node = arg;
	struct vb_ctx *ctx = node->ctx;
	struct vbt_conn_param cp = ctx->cp;
	struct vbi_peer *p = NULL;

	/* Wait for requests in short slices so stop is noticed; the handshake
	 * steps after a request keep the full cm_timeout_ms. */
	cp.accept_wait_ms = 500;
	while (!atomic_load(&node->stop)) {
		int rc;

		if (!p && peer_new(node, &p)) {
			vbi_warn("accept: cannot prepare a connection: %s", vbi_errmsg());
			struct timespec ts = { 0, 100000000 };

			nanosleep(&ts, NULL);
			continue;
		}
		rc = ctx->ops->accept(node->listener, p->qp, &cp, &p->conn);
		if (rc == -ETIMEDOUT && vbt_qp_state(p->qp) == VB_QPS_INIT)
			continue;
		if (rc) {
			if (!atomic_load(&node->stop))
				vbi_warn("accept failed: %s", vbi_errmsg());
			peer_drain(p);
			peer_free(p);
			p = NULL;
			continue;
		}
		if (peer_link(node, p)) {
			vbi_warn("accept: %s", vbi_errmsg());
			peer_drain(p);
			peer_free(p);
		}
		p = NULL;
	}
	if (p) {
		peer_drain(p);
		peer_free(p);
	}
	return NULL;
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
	pthread_rwlock_init(&node->lock, NULL);
	if (attr->listen_ip) {
		struct sockaddr_storage ss;

		rc = make_addr(attr->listen_ip, attr->listen_port, &ss);
		if (!rc)
			rc = ctx->ops->listen(ctx->dev, VB_QPT_RC, (struct sockaddr *)&ss,
					      &node->listener);
		if (rc)
			goto err;
		node->port = node->listener->port;
		rc = -pthread_create(&node->accept_thread, NULL, accept_main, node);
		if (rc) {
			vbi_err(rc, "accept thread: %s", strerror(-rc));
			goto err;
		}
		node->accepting = true;
	}
	pthread_mutex_lock(&ctx->lock);
	node->next = ctx->nodes;
	ctx->nodes = node;
	pthread_mutex_unlock(&ctx->lock);
	*out = node;
	return 0;
err:
	if (node->listener)
		ctx->ops->listener_close(node->listener);
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

int vb_node_connect(vb_node_t *node, const char *ip, uint16_t port)
{
	struct vb_ctx *ctx;
	struct sockaddr_storage ss;
	struct vbi_peer *p;
	uint64_t t0;
	int rc;

	if (!node || !ip || !port)
		return vbi_err(-EINVAL, "vb_node_connect: node, ip and port are required");
	ctx = node->ctx;
	if ((rc = make_addr(ip, port, &ss)))
		return rc;
	if ((rc = peer_new(node, &p)))
		return rc;
	rc = ctx->ops->connect(ctx->dev, p->qp, (struct sockaddr *)&ss, &ctx->cp, &p->conn);
	if (rc)
		goto err;
	if ((rc = peer_link(node, p)))
		goto err;
	/* The handshake is complete when the peer's HELLO has arrived. */
	t0 = now_ms();
	while (!atomic_load(&p->up)) {
		if (p->dead)
			return vbi_err(-ECONNRESET, "connection to %s:%u failed during handshake",
				       ip, port);
		if (now_ms() - t0 > (uint64_t)ctx->attr.cm_timeout_ms)
			return vbi_err(-ETIMEDOUT, "no HELLO from %s:%u within %d ms", ip, port,
				       ctx->attr.cm_timeout_ms);
		if (!ctx->thread_running)
			vb_progress(ctx);
		else {
			struct timespec ts = { 0, 100000 };

			nanosleep(&ts, NULL);
		}
	}
	return 0;
err:
	peer_drain(p);
	peer_free(p);
	return vbi_err_prefix(rc, "connect to %s:%u", ip, port);
}

int vb_node_destroy(vb_node_t *node)
{
	struct vb_ctx *ctx;
	struct vbi_peer *peers;

	if (!node)
		return 0;
	ctx = node->ctx;
	pthread_rwlock_rdlock(&node->lock);
	if (node->pubs || node->subs) {
		pthread_rwlock_unlock(&node->lock);
		return vbi_err(-EBUSY, "node '%s' still has publishers or subscribers", node->name);
	}
	pthread_rwlock_unlock(&node->lock);
	atomic_store(&node->stop, true);
	if (node->accepting)
		pthread_join(node->accept_thread, NULL);
	if (node->listener)
		ctx->ops->listener_close(node->listener);

	pthread_rwlock_wrlock(&node->lock);
	peers = node->peers;
	node->peers = NULL;
	pthread_rwlock_unlock(&node->lock);
	for (struct vbi_peer *p = peers; p; p = p->next)
		peer_say_bye(p);
	while (peers) {
		struct vbi_peer *p = peers;

		peers = p->next;
		peer_drain(p);
		peer_free(p);
		pthread_mutex_lock(&ctx->lock);
		ctx->npeers--;
		pthread_mutex_unlock(&ctx->lock);
	}
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node **pp = &ctx->nodes; *pp; pp = &(*pp)->next)
		if (*pp == node) {
			*pp = node->next;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	pthread_rwlock_destroy(&node->lock);
	free(node);
	return 0;
}
