/* SPDX-License-Identifier: MIT */
/*
 * The HELLO that binds a connection (lane) to its peer: sending ours,
 * taking the peer's (a new peer or a lane of a known one, the peer's
 * receive geometry and UD endpoint), refusing a connection, and the UDADDR
 * frame (the peer's FANOUT endpoint moved). Progress context unless said
 * otherwise.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "proto/proto.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

/* HELLO payload: core/wire_msg.h (vbi_wire_hello_encode/decode). */
_Static_assert(VBI_LANE_PROBE == VBI_WIRE_ROLE_MAX, "HELLO roles");
_Static_assert(VB_QPT_RC == 0 && VB_QPT_UC == 1 && VB_QPT_UD == 2, "HELLO modes");

static void addr_to_hello(const struct sockaddr_storage *ss, struct vbi_wire_hello *hi)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)ss;

		hi->sb_family = 4;
		hi->sb_port = ntohs(s4->sin_port);
		memcpy(hi->sb_addr, &s4->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)ss;

		hi->sb_family = 6;
		hi->sb_port = ntohs(s6->sin6_port);
		memcpy(hi->sb_addr, &s6->sin6_addr, 16);
	}
}

static void addr_from_hello(const struct vbi_wire_hello *hi, struct sockaddr_storage *ss)
{
	uint32_t fam = hi->sb_family, port = hi->sb_port;

	memset(ss, 0, sizeof(*ss));
	if (port == 0 || port > 65535)
		return;
	if (fam == 4) {
		struct sockaddr_in *s4 = (void *)ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		memcpy(&s4->sin_addr, hi->sb_addr, 4);
	} else if (fam == 6) {
		struct sockaddr_in6 *s6 = (void *)ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		memcpy(&s6->sin6_addr, hi->sb_addr, 16);
	}
}

void vbi_lane_send_hello(struct vbi_lane *l)
{
	struct vb_node *node = l->node;
	struct vb_ctx *ctx = node->ctx;
	uint8_t buf[VBI_WIRE_HDR_LEN + VBI_HELLO_LEN_AUTH];
	struct vbi_wire_hdr h = { .type = VBI_WT_HELLO, .len = VBI_HELLO_LEN_AUTH };
	uint8_t *pl = buf + VBI_WIRE_HDR_LEN;
	struct vbi_wire_hello hi;
	int rc;

	if (l->mode == VB_QPT_UD && !atomic_load(&l->conn_ready)) {
		/* an accepted UD lane whose accept() has not returned yet: no
		 * address to answer to; vbi_peer_after_poll sends it later */
		atomic_store(&l->hello_deferred, true);
		atomic_store(&ctx->hellos_deferred, true);
		vbi_ctx_kick(ctx);
		if (!atomic_load(&l->conn_ready))
			return;
	}
	atomic_store(&l->hello_deferred, false);
	if (atomic_exchange(&l->hello_claim, true))
		return; /* sent already */
	vbi_wire_put(buf, &h);
	memset(&hi, 0, sizeof(hi));
	hi.version = VBI_HELLO_VERSION;
	{
		struct vbt_peer ud;

		vbi_ud_addr(ctx, &ud);
		hi.ud_qpn = ud.qpn;
		hi.ud_qkey = ud.qkey;
		memcpy(hi.gid, ud.gid, 16);
	}
	hi.slots = l->nslots;
	hi.slot_size = (uint32_t)ctx->attr.slot_size;
	hi.max_msg = (uint32_t)ctx->attr.max_msg;
	memcpy(hi.name, node->name, strnlen(node->name, VBI_NAME_MAX - 1));
	hi.uid = node->uid;
	hi.lane = l->id;
	hi.role = l->role;
	addr_to_hello(&node->sb_listen, &hi);
	hi.mode = l->mode;
	hi.uc_port = atomic_load(&node->lport[2]);
	hi.ud_port = atomic_load(&node->lport[3]);
	vbi_wire_hello_encode(&hi, pl);
	vbi_hello_auth_put(l, pl); /* authentication section (auth.c) */
	vbi_mutex_lock(l->lk);
	rc = vbi_lane_send_ctrl(l, buf, sizeof(buf));
	vbi_mutex_unlock(l->lk);
	if (rc) {
		struct vbi_err_verdict v = { VBI_ACT_FAILOVER, VBI_SCOPE_QP, "cannot send HELLO" };

		vbi_lane_report(l, v, "cannot send HELLO");
	}
}

/* ---- HELLO ------------------------------------------------------------------------------ */

/* A HELLO we cannot use: counted; @fatal ones (impossible geometry, an
 * unknown peer) also close the connection, the others are dropped. */
void vbi_lane_refuse(struct vbi_lane *l, const char *why)
{
	struct vb_ctx *ctx = l->node->ctx;
	uint8_t buf[VBI_WIRE_HDR_LEN + VBI_REFUSE_MAX];
	uint32_t n = vbi_wire_bye_encode(buf, why);

	atomic_fetch_add(&ctx->st->refused, 1); /* counted before the peer can see it */
	vbi_mutex_lock(l->lk);
	if (vbi_lane_send_ctrl(l, buf, n))
		vbi_info("refusal not sent: %s", vbi_errmsg());
	vbi_mutex_unlock(l->lk);
	vbi_event(ctx, VB_EV_PROTOCOL, "", "connection refused: %s", why);
	/* dropped once the BYE has left (vbi_node_pending_expire), bounded */
	l->refused_ns = vbi_mono_ns();
}

static void hello_bad(struct vbi_lane *l, const char *why, bool fatal)
{
	struct vb_ctx *ctx = l->node->ctx;
	struct vbi_err_verdict v = { VBI_ACT_FAILOVER, VBI_SCOPE_QP, "bad HELLO" };

	atomic_fetch_add(&ctx->st->malformed, 1);
	if (!fatal) {
		vbi_event(ctx, VB_EV_PROTOCOL, l->peer ? l->peer->name : "", "%s", why);
		return;
	}
	vbi_lane_report(l, v, why);
	if (!l->peer || !atomic_load(&l->peer->up))
		vbi_event(ctx, VB_EV_PEER_DOWN, l->peer ? l->peer->name : "", "%s", why);
}

/* The remote node's UD endpoint (FANOUT): from its first HELLO, and again
 * from a UDADDR frame when it moved its endpoint to another device. The
 * address handle is built on the device that carries our UD endpoint. */
void vbi_peer_set_ud(struct vbi_peer *p, uint32_t qpn, uint32_t qkey, const uint8_t *gid)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbt_peer ud = { 0 };
	struct vbt_ah_attr aa;
	struct vbt_ah *ah = NULL;

	ud.qpn = qpn & 0xffffff;
	ud.qkey = qkey;
	memcpy(ud.gid, gid, 16);
	/* FANOUT publishers read these under ud_lock; the UD endpoint and its
	 * device's PD are valid while ud_qp is set (dev_reap, progress.c, changes them
	 * under ud_lock) */
	pthread_mutex_lock(&ctx->ud_lock);
	if (ctx->ud_qp) {
		vbt_ah_attr_from_peer(ctx->ud_dr->dev, &ud, &aa);
		if (ctx->ops->ah_create(ctx->ud_dr->pd, &aa, &ah))
			vbi_warn("peer '%s': no address handle for FANOUT: %s", p->name,
				 vbi_errmsg());
	}
	if (p->ah)
		ctx->ops->ah_destroy(p->ah);
	p->ud = ud;
	p->ah = ah;
	pthread_mutex_unlock(&ctx->ud_lock);
}

uint32_t vbi_udaddr_frame(struct vb_ctx *ctx, uint8_t *buf)
{
	struct vbi_wire_udaddr a;
	struct vbt_peer ud;

	vbi_ud_addr(ctx, &ud);
	a.qpn = ud.qpn;
	a.qkey = ud.qkey;
	memcpy(a.gid, ud.gid, 16);
	return vbi_wire_udaddr_encode(buf, &a);
}

void vbi_peer_on_udaddr(struct vbi_peer *p, const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	struct vbi_wire_udaddr a;

	if (vbi_wire_udaddr_decode(h, pl, &a))
		return;
	vbi_peer_set_ud(p, a.qpn, a.qkey, a.gid);
	vbi_info("peer '%s': its FANOUT endpoint moved (UD QP %u)", p->name, p->ud.qpn);
}

/* The first valid HELLO on accepted lane @l: a new peer (@role primary) or
 * a lane of a known one, bound to @l, and our answer sent. NULL when the
 * HELLO was refused or dropped (reported here). node->lock held for
 * writing. */
static struct vbi_peer *hello_accept(struct vbi_lane *l, const struct vbi_wire_hello *hi,
				     uint32_t role, uint64_t uid)
{
	struct vb_node *node = l->node;
	struct vb_ctx *ctx = node->ctx;
	struct vbi_peer *p;

	/* An accepted connection: a new peer, or a lane of a known one. */
	if (role == VBI_LANE_PRIMARY) {
		p = vbi_peer_alloc(node);
		if (!p) {
			hello_bad(l, "no memory for a new peer", true);
			return NULL;
		}
		if (!vbi_ctx_take_peer(ctx)) {
			char why[VBI_REFUSE_MAX + 1]; /* as vbi_lane_refuse reads it */

			snprintf(why, sizeof(why), "max_peers (%u) reached at node '%s'",
				 ctx->attr.max_peers, node->name);
			vbi_warn("refusing a connection: %s", why);
			vbi_peer_free(p);
			vbi_lane_refuse(l, why);
			return NULL;
		}
		p->uid = uid;
		p->next = node->peers;
		vbi_rcu_assign(node->peers, p); /* the per-peer round reads with no lock */
	} else {
		for (p = node->peers; p; p = p->next)
			if (p->uid == uid && !p->connector && !atomic_load(&p->dead))
				break;
		if (!p) {
			hello_bad(l, "standby connection for a peer we do not know", true);
			return NULL;
		}
	}
	if (!vbi_rule_new_lane(l, p, hi->lane, role))
		return NULL;
	if (hi->lane > p->max_lane_id)
		p->max_lane_id = hi->lane;
	for (struct vbi_lane **q = &node->pending; *q; q = &(*q)->next)
		if (*q == l) {
			*q = l->next;
			break;
		}
	l->id = hi->lane;
	l->role = (uint8_t)role;
	vbi_mutex_lock(&p->txlock);
	vbi_lane_bind(l, p);
	vbi_mutex_unlock(&p->txlock);
	/* our answer (the acceptor speaks after the connector) */
	vbi_lane_send_hello(l);
	return p;
}

/* The first HELLO of peer @p (not up yet) on @l: its name, address and UD
 * endpoint; @l becomes its active lane and the peer is up. */
static void hello_peer_up(struct vbi_lane *l, struct vbi_peer *p, const struct vbi_wire_hello *hi,
			  uint32_t slots, uint32_t slot_size)
{
	struct vb_node *node = l->node;
	struct vb_ctx *ctx = node->ctx;
	struct vbi_lane *old;

	memcpy(p->name, hi->name, VBI_NAME_MAX - 1);
	p->name[VBI_NAME_MAX - 1] = '\0';
	p->uid = hi->uid;
	addr_from_hello(hi, &p->sb_addr);
	vbi_peer_set_ud(p, hi->ud_qpn, hi->ud_qkey, hi->gid);
	vbi_mutex_lock(&p->txlock);
	old = vbi_path_switch(&p->path, l, vbi_mono_ns(), &l->epoch);
	vbi_mutex_unlock(&p->txlock);
	if (old)
		vbi_lane_retire(old);
	/* Our SUBs follow our HELLO: sent from after_poll. */
	p->subs_pending = true;
	vbi_ctx_kick(node->ctx);
	atomic_store(&p->up, true);
	__atomic_fetch_add(&node->npeers_up, 1, __ATOMIC_RELAXED);
	vbi_event(ctx, VB_EV_PEER_UP, p->name,
		  "RC QP %u on %s; the peer has %u slots of %u bytes", l->qp->qpn,
		  l->dr->dev->caps.name, slots, slot_size);
	vbi_peer_pev_flush(p);
	vbi_maint_kick(node);
}

/* Another lane of peer @p (up) said HELLO: by its @role (ours), an RC
 * probe, a standby, or a replacement both ends switch to. */
static void hello_lane_up(struct vbi_lane *l, struct vbi_peer *p, uint32_t role)
{
	struct vb_node *node = l->node;
	struct vb_ctx *ctx = node->ctx;

	if (role == VBI_LANE_PROBE) {
		/* kept idle: the connector's maintenance thread reports it to the
		 * policy and promotes it (a LANE frame tells this end) */
		vbi_info("peer '%s': RC probe lane %u up (QP %u)", p->name, l->id, l->qp->qpn);
		vbi_maint_kick(node);
		return;
	}
	if (role == VBI_LANE_STANDBY) {
		struct vbi_lane *old;

		vbi_mutex_lock(&p->txlock);
		if (!vbi_path_lane(&p->path) && p->recover_since_ns) {
			/* recovering with nothing to switch to: it is the lane now
			 * (and the other end, which took it for a standby, is told) */
			old = vbi_peer_switch_to(p, l, true);
			if (old)
				vbi_lane_retire(old);
		} else {
			/* A standby it replaces stays a while: the connector
			 * builds a new one after it switched to the old one, and
			 * that LANE frame may come after this HELLO (another
			 * connection: no order between them). */
			old = vbi_path_set_standby(&p->path, l);
			atomic_fetch_add(&ctx->st->standbys_warmed, 1);
			if (old && old != l)
				old->replaced_ns = vbi_mono_ns();
		}
		vbi_mutex_unlock(&p->txlock);
		vbi_info("peer '%s': standby lane %u ready (QP %u on %s)", p->name, l->id,
			 l->qp->qpn, l->dr->dev->caps.name);
	} else {
		/* REPLACE: the connector built it after a failure; both ends
		 * switch when its HELLO arrives. */
		struct vbi_lane *old;

		vbi_mutex_lock(&p->txlock);
		old = vbi_peer_switch_to(p, l, false);
		if (old)
			vbi_lane_retire(old);
		vbi_mutex_unlock(&p->txlock);
	}
	vbi_peer_pev_flush(p);
	vbi_maint_kick(node);
}

/*
 * HELLO on lane @l. Progress context; node->lock held for writing when the
 * lane is not bound yet (it may create a peer), for reading otherwise.
 */
void vbi_lane_on_hello(struct vbi_lane *l, const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	struct vbi_peer *p = l->peer;
	struct vbi_wire_hello hi;
	uint32_t slots, slot_size, role;
	uint64_t uid;
	int rc = vbi_wire_hello_decode(pl, h->len, &hi);

	if (rc == VBI_WHELLO_BAD || atomic_load(&l->hello_rcvd)) {
		hello_bad(l, "bad or repeated HELLO dropped", false);
		return;
	}
	slots = hi.slots;
	slot_size = hi.slot_size;
	role = hi.role;
	uid = hi.uid;
	if (rc != VBI_WHELLO_OK) {
		hello_bad(l, "HELLO with impossible slot geometry or role", true);
		return;
	}
	if (hi.mode != l->mode) {
		hello_bad(l, "HELLO announces another mode than the connection's", true);
		return;
	}
	/* peer authentication first: nothing is bound or created before it */
	if (vbi_hello_auth_check(l, h, pl, slots) != VBI_HELLO_AUTH_GO)
		return;
	if (!p && vbi_lane_commit(l)) {
		/* a valid HELLO: now the connection gets its memory */
		vbi_warn("refusing a connection: %s", vbi_errmsg());
		hello_bad(l, "no registered memory for the connection", true);
		return;
	}
	if (!p) {
		p = hello_accept(l, &hi, role, uid);
		if (!p)
			return;
	} else if (uid != p->uid && atomic_load(&p->up)) {
		hello_bad(l, "HELLO from another node on this peer's connection", true);
		return;
	}
	role = l->role; /* ours (the connector numbers and names lanes) */
	vbi_mutex_lock(&p->txlock);
	/* Our HELLO consumed one of its slots before we knew the count. */
	l->remote_slots = slots;
	p->remote_slot_size = slot_size;
	{
		uint32_t ucp = hi.uc_port, udp = hi.ud_port;

		p->uc_port = ucp <= 65535 ? (uint16_t)ucp : 0;
		p->ud_port = udp <= 65535 ? (uint16_t)udp : 0;
	}
	vbi_mutex_unlock(&p->txlock);
	atomic_store(&l->hello_rcvd, true);

	if (!atomic_load(&p->up)) {
		hello_peer_up(l, p, &hi, slots, slot_size);
		return;
	}
	hello_lane_up(l, p, role);
}

