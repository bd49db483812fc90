/* SPDX-License-Identifier: MIT */
/*
 * Lanes and failover: the RC connections behind a peer, the HELLO that
 * binds a connection to its peer, error classification of completions and
 * async events (core/errpolicy), the switch to a pre-warmed standby lane
 * (core/path: RCU-published active lane, epoch, policy). The per-node
 * maintenance thread that retires old lanes, warms standbys and rebuilds a
 * lane when no standby was left is in maint.c.
 *
 * The recovery, step by step (docs/recovery.md has the long version):
 *  1. A completion with an error status or an async event on a lane's QP
 *     (or on its port or device) is classified; a disruptive verdict marks
 *     the lane (vbi_lane_report, any thread) and the progress thread acts
 *     on it (vbi_peer_handle_failures): one action per incident.
 *  2. Under the peer's txlock: vbi_path_fail() decides. With a standby, it
 *     is published (vbi_path_switch: atomic exchange, new epoch), every
 *     publisher's cursor to this peer is rewound to what the peer
 *     acknowledged (the retransmission: the receiver drops what it already
 *     has by sequence), a LANE frame tells the peer to switch as well, and
 *     the recovery ends (vbi_path_resume). Without a standby the path has
 *     no lane (publishes queue in the windows, bounded, then -EAGAIN) until
 *     the connecting side has built a replacement.
 *  3. The old lane goes to the maintenance thread: ERR, every posted WR
 *     reaped (flushes are RECLAIM, not new failures), a grace period
 *     (vbi_rcu_synchronize), then its buffers are freed and its QP goes
 *     back to the device's warm pool through RESET when it drained and
 *     saw no error, else it is destroyed (lanepool.c).
 *  4. The connecting side warms a new standby in the background (on the
 *     other device when the context has one and its port is up).
 *
 * Thread-safety: vbi_lane_report and vbi_dev_event may run on any thread
 * (atomics only); everything that changes which lane is active runs with
 * the peer's txlock held; lanes are freed only by the maintenance thread or
 * node destruction, after their WRs are reaped and a grace period passed.
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
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/rcu.h"

/* HELLO payload: core/wire_msg.h (vbi_wire_hello_encode/decode). */
_Static_assert(VBI_LANE_PROBE == VBI_WIRE_ROLE_MAX, "HELLO roles");
_Static_assert(VB_QPT_RC == 0 && VB_QPT_UC == 1 && VB_QPT_UD == 2, "HELLO modes");

/* ---- creation, posting ---------------------------------------------------------------- */

static int post_slot(struct vbi_lane *l, struct vbi_slot *s)
{
	struct vbt_sge sge = { (uintptr_t)s->buf.addr, (uint32_t)l->node->ctx->attr.slot_size,
			       s->buf.lkey };
	struct vbt_recv_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1 };
	const struct vbt_recv_wr *bad;
	int rc = vbt_post_recv(l->qp, &wr, &bad);

	if (!rc)
		atomic_fetch_add(&l->posted_recvs, 1);
	return rc;
}

/* Receive slots [@from, @to) of @l: allocated and posted. Every field of
 * the lane is set before (the post publishes it to the progress thread:
 * init_gen). */
static int lane_fill(struct vbi_lane *l, uint32_t from, uint32_t to)
{
	struct vb_ctx *ctx = l->node->ctx;
	int rc;

	for (uint32_t i = from; i < to; i++) {
		struct vbi_slot *s = &l->slots[i];

		s->kind = VBI_WR_RC_RECV;
		s->lane = l;
		rc = vbi_mempool_alloc(l->dr->pool, ctx->attr.slot_size, &s->buf);
		if (rc)
			return rc;
	}
	atomic_fetch_add_explicit(&ctx->init_gen, 1, memory_order_release);
	for (uint32_t i = from; i < to; i++)
		if ((rc = post_slot(l, &l->slots[i])))
			return rc;
	return 0;
}

int vbi_lane_commit(struct vbi_lane *l)
{
	struct vb_ctx *ctx = l->node->ctx;
	int rc;

	if (!l->lean)
		return 0;
	rc = vbi_sring_add_bufs(ctx, &l->sr);
	if (!rc)
		rc = lane_fill(l, VBI_LEAN_SLOTS, l->nslots);
	if (rc)
		return vbi_err_prefix(rc, "committing the connection's memory");
	l->lean = false;
	return 0;
}

int vbi_lane_new(struct vb_node *node, struct vbi_devres *dr, enum vb_qp_type mode,
		 bool lean, struct vbi_lane **out)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_lane *l = calloc(1, sizeof(*l));
	int rc;

	*out = NULL;
	if (!l)
		return vbi_err(-ENOMEM, "lane");
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
	pthread_mutex_init(&l->own_lock, NULL);
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
		rc = vbi_sring_init(ctx, dr->pool, &l->sr, l->qp->cap.max_send_wr, VBI_WR_RC_SEND,
				    l, VBI_LEAN_SLOTS);
		if (!rc)
			rc = lane_fill(l, 0, VBI_LEAN_SLOTS);
	} else {
		rc = vbi_sring_init(ctx, dr->pool, &l->sr, l->qp->cap.max_send_wr, VBI_WR_RC_SEND,
				    l, l->qp->cap.max_send_wr);
		if (!rc)
			rc = lane_fill(l, 0, l->nslots);
	}
	if (rc)
		goto err;
	atomic_fetch_add_explicit(&ctx->st.lanes_created, 1, memory_order_relaxed);
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

uint32_t vbi_lane_credits(const struct vbi_lane *l)
{
	return (uint32_t)(l->remote_slots + l->returned_total - l->sends_total);
}

/* Post @wr (a SEND) on @l: a UD lane addresses the remote lane's QP (its
 * QPN, Q_Key and an AH from the connection set-up). *l->lk held. */
int vbi_lane_post_wr(struct vbi_lane *l, struct vbt_send_wr *wr)
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

/*
 * Post one SEND of @len bytes already in @s->buf. Selective signaling: a
 * SEND is signaled when none is in flight on the lane (its completion is
 * what uncorks the data queued behind it: vb_pub_commit), every quarter
 * ring, when the ring is all but full (so unsignaled entries are always
 * released by a later completion, or by the flush of a QP in error, which
 * completes every WR), or when @force says so. *l->lk held; the caller
 * checked credits and ring space.
 */
int vbi_lane_post(struct vbi_lane *l, struct vbi_sctx *s, uint32_t len, bool force)
{
	struct vb_ctx *ctx = l->node->ctx;
	struct vbt_sge sge = { (uintptr_t)s->buf.addr, len, s->buf.lkey };
	struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1,
				  .opcode = VBT_WR_SEND };
	int rc;

	if (force || !atomic_load(&l->sr.sig_inflight) || ++l->sr.since_signal >= l->sr.n / 4 ||
	    l->sr.outstanding >= l->sr.n - 1) {
		wr.flags |= VBT_SEND_SIGNALED;
		l->sr.since_signal = 0;
	}
	if (len <= l->qp->cap.max_inline_data) {
		wr.flags |= VBT_SEND_INLINE;
		atomic_fetch_add_explicit(&ctx->st.inline_sends, 1, memory_order_relaxed);
	}
	rc = vbi_lane_post_wr(l, &wr);
	if (rc)
		return rc;
	l->sends_total++;
	atomic_fetch_add_explicit(&ctx->st.sends_posted, 1, memory_order_relaxed);
	return 0;
}

/* The retransmission timeout of UC/UD lanes: VERBUS_RTO_MS, default
 * VBI_RTO_MS_DEFAULT (read once). */
uint64_t vbi_rto_ns(void)
{
	static _Atomic uint64_t rto;
	uint64_t v = atomic_load_explicit(&rto, memory_order_relaxed);

	if (!v) {
		const char *e = getenv("VERBUS_RTO_MS");
		long ms = e && *e ? strtol(e, NULL, 10) : 0;

		if (ms < 1 || ms > 60000)
			ms = VBI_RTO_MS_DEFAULT;
		v = (uint64_t)ms * 1000000ull;
		atomic_store_explicit(&rto, v, memory_order_relaxed);
	}
	return v;
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

	if (l->returned_total != l->last_returned) {
		l->last_returned = l->returned_total;
		l->credit_ns = now_ns;
	} else if (vbi_lane_credits(l) < 2 && now_ns - l->credit_ns > rto) {
		l->returned_total = l->sends_total;
		l->last_returned = l->returned_total;
		l->credit_ns = now_ns;
		atomic_fetch_add_explicit(&ctx->st.credit_resyncs, 1, memory_order_relaxed);
	}
	n = vbi_pub_rto_peer(p, now_ns, rto);
	if (n)
		atomic_fetch_add_explicit(&ctx->st.rto_retransmits, n, memory_order_relaxed);
}

/* Control frames may use the last credit (data keeps one in reserve so
 * these can always flow). *l->lk held. */
int vbi_lane_send_ctrl(struct vbi_lane *l, const void *frames, uint32_t len)
{
	uint32_t rss = l->peer ? l->peer->remote_slot_size : 0;
	struct vbi_sctx *s;
	int rc;

	if (atomic_load(&l->dead))
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
	memcpy(s->buf.addr, frames, len);
	rc = vbi_lane_post(l, s, len, false);
	if (rc)
		vbi_sring_untake(&l->sr);
	return rc;
}

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
		vbi_ctx_kick(l->node->ctx);
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
	pthread_mutex_lock(l->lk);
	rc = vbi_lane_send_ctrl(l, buf, sizeof(buf));
	atomic_store(&l->hello_sent, rc == 0);
	pthread_mutex_unlock(l->lk);
	if (rc) {
		struct vbi_err_verdict v = { VBI_ACT_FAILOVER, VBI_SCOPE_QP, "cannot send HELLO" };

		vbi_lane_report(l, v, "cannot send HELLO");
	}
}

/* ---- failure reports (any thread) ----------------------------------------------------- */

void vbi_lane_report(struct vbi_lane *l, struct vbi_err_verdict v, const char *why)
{
	struct vb_ctx *ctx = l->node->ctx;
	int cur;

	if (atomic_load(&l->draining) || atomic_load(&l->dead) ||
	    !vbi_err_action_disrupts(v.action))
		return;
	{
		const char *none = NULL;

		atomic_compare_exchange_strong(&l->fail_why, &none, why); /* the first reason */
	}
	cur = atomic_load(&l->fail_act);
	while ((int)v.action > cur && !atomic_compare_exchange_weak(&l->fail_act, &cur,
								    (int)v.action))
		;
	atomic_store(&ctx->fail_pending, true);
}

/* The device's async-event thread. QP events name the lane (user_ctx);
 * port and device events fail every lane on the device. */
void vbi_dev_event(const struct vbt_event *ev, void *arg)
{
	struct vbi_devres *dr = arg;
	struct vb_ctx *ctx = dr->ctx;
	struct vbi_err_verdict v = vbi_errpol_event(&ctx->errpol, ev->type);

	vbi_info("%s: async event %s: %s (%s)", dr->dev ? dr->dev->caps.name : "?",
		 vbt_event_name(ev->type), vbi_err_action_name(v.action), v.reason);
	if (ev->type == VBT_EV_PORT_ERR)
		atomic_store(&dr->port_down, true);
	else if (ev->type == VBT_EV_PORT_ACTIVE)
		atomic_store(&dr->port_down, false);
	else if (ev->type == VBT_EV_DEVICE_FATAL)
		atomic_store(&dr->fatal, true);
	else if (ev->type == VBT_EV_DEVICE_REMOVAL && !atomic_load(&dr->removed)) {
		/* fail over off it, then close it all (vbi_dev_reap) */
		dr->removed_ns = vbi_mono_ns();
		atomic_store(&dr->fatal, true);
		atomic_store(&dr->removed, true);
		atomic_store(&ctx->dev_removing, true);
		atomic_fetch_add(&ctx->st.devices_removed, 1);
	}
	if (!vbi_err_action_disrupts(v.action))
		return;
	if (v.scope == VBI_SCOPE_QP || v.scope == VBI_SCOPE_WR) {
		if (ev->qp_ctx) /* the UD endpoint has none: FANOUT reports its loss */
			vbi_lane_report(ev->qp_ctx, v, v.reason);
		return;
	}
	atomic_store(&dr->failed, true);
	atomic_store(&ctx->fail_pending, true);
}

/* ---- path events: recorded under txlock, reported after ------------------------------- */

static void path_event(const struct vbi_path_event *ev, void *arg)
{
	struct vbi_peer *p = arg;

	/* mode changes are reported by the lanes' modes (switch_to), on both
	 * ends: the policy's own DEGRADE precedes the lane that carries it */
	if (ev->type == VBI_PATH_EV_DEGRADE || ev->type == VBI_PATH_EV_PROMOTE)
		return;
	if (p->npev < sizeof(p->pev) / sizeof(p->pev[0])) {
		p->pev[p->npev].type = (uint8_t)ev->type;
		p->pev[p->npev].outage_ns = ev->outage_ns;
		p->pev[p->npev].reason = ev->reason;
		p->npev++;
	}
}

/* Report recorded path events (txlock NOT held: callbacks may publish). */
void vbi_peer_pev_flush(struct vbi_peer *p)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbi_pev ev[8];
	unsigned n;

	pthread_mutex_lock(&p->txlock);
	n = p->npev;
	memcpy(ev, p->pev, n * sizeof(ev[0]));
	p->npev = 0;
	pthread_mutex_unlock(&p->txlock);
	for (unsigned i = 0; i < n; i++) {
		const char *r = ev[i].reason ? ev[i].reason : "";

		switch (ev[i].type) {
		case VBI_PATH_EV_FAILOVER:
			vbi_event(ctx, VB_EV_FAILOVER, p->name, "switched to the standby connection%s%s",
				  *r ? ": " : "", r);
			break;
		case VBI_PATH_EV_RECOVERED: {
			uint64_t o = ev[i].outage_ns, max;

			atomic_store(&ctx->st.recover_last_ns, o);
			max = atomic_load(&ctx->st.recover_max_ns);
			while (o > max && !atomic_compare_exchange_weak(&ctx->st.recover_max_ns, &max, o))
				;
			vbi_event(ctx, VB_EV_RECOVERED, p->name, "path recovered after %.3f ms",
				  (double)o / 1e6);
			break;
		}
		case VBI_PATH_EV_DOWN:
			vbi_event(ctx, VB_EV_PATH_DOWN, p->name, "%s", r);
			break;
		case VBI_PATH_EV_DEGRADE:
			vbi_event(ctx, VB_EV_DEGRADED, p->name, "degraded from %s to %s%s%s",
				  vbi_path_mode_name(ev[i].from), vbi_path_mode_name(ev[i].to),
				  *r ? ": " : "", r);
			break;
		case VBI_PATH_EV_PROMOTE:
			vbi_event(ctx, VB_EV_PROMOTED, p->name, "promoted from %s to %s%s%s",
				  vbi_path_mode_name(ev[i].from), vbi_path_mode_name(ev[i].to),
				  *r ? ": " : "", r);
			break;
		default:
			break;
		}
	}
}

int vbi_peer_init_path(struct vbi_peer *p)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbi_path_cfg cfg;

	vbi_path_cfg_init(&cfg);
	/* Lanes are RC; the connecting side's path may degrade to UC and UD
	 * (vbi_peer_allow_degrade: it builds the lanes); the accepting side
	 * follows the lanes it is given and never degrades on its own. */
	cfg.best = VB_QPT_RC;
	cfg.worst = VB_QPT_RC;
	/* While recovering, publishes queue in the retransmit windows (they are
	 * the bound); beyond them -EAGAIN. */
	if (!getenv("VERBUS_RECOVERY_QUEUE"))
		cfg.recovery_queue = ctx->attr.window;
	return vbi_path_init(&p->path, &cfg, vbi_mono_ns(), path_event, p);
}

/* The connecting side: its path may degrade down to UD (before the peer is
 * shared with other threads). */
void vbi_peer_allow_degrade(struct vbi_peer *p)
{
	pthread_mutex_lock(&p->path.mu);
	p->path.cfg.worst = VB_QPT_UD;
	pthread_mutex_unlock(&p->path.mu);
}

/* ---- switching lanes (txlock held) ------------------------------------------------------- */

void vbi_lane_retire_locked(struct vbi_lane *l)
{
	atomic_store(&l->dead, true);
	vbi_lane_retire(l);
}

/*
 * Make @s the active lane: publish it (new epoch), rewind every publisher's
 * cursor to this peer to what it acknowledged (the retransmission), tell
 * the peer (LANE frame on @s) unless it told us, end the recovery. Returns
 * the lane that was active (NULL if none), for the caller to retire.
 */
struct vbi_lane *vbi_peer_activate(struct vbi_peer *p, struct vbi_lane *s, bool tell, bool promote)
{
	struct vb_ctx *ctx = p->node->ctx;
	uint64_t now = vbi_mono_ns();
	struct vbi_lane *old = NULL;
	uint64_t n;

	if (promote) {
		void *o = NULL;

		/* A probe lane was numbered when it was built, maybe before the
		 * degraded lanes that carried data since: it gets a new number
		 * (the LANE frame carries it), or the other end would take its
		 * data for stale (data from lanes numbered below the newest is). */
		__atomic_store_n(&s->id, p->next_lane_id++, __ATOMIC_RELAXED);
		if (vbi_path_promote(&p->path, (enum vb_qp_type)s->mode, s, now, &o, &s->epoch))
			return NULL;
		old = o;
	} else {
		old = vbi_path_switch(&p->path, s, now, &s->epoch);
	}
	n = vbi_pub_rewind_peer(p);
	if (s->mode != VB_QPT_RC) {
		/* degraded lanes have no standby: an RC one left from before is
		 * stale (its other end was retired with the degradation) */
		struct vbi_lane *sb = vbi_path_take_standby(&p->path);

		if (sb && sb != s)
			vbi_lane_retire_locked(sb);
	}
	if (s->mode != p->mode) {
		/* the mode changed: an event (on both ends) and a counter */
		bool worse = s->mode > p->mode;

		if (p->npev < sizeof(p->pev) / sizeof(p->pev[0])) {
			struct vbi_pev *e = &p->pev[p->npev++];

			e->type = worse ? VBI_PATH_EV_DEGRADE : VBI_PATH_EV_PROMOTE;
			e->from = p->mode;
			e->to = s->mode;
			e->outage_ns = 0;
			e->reason = worse ? "the connection kept failing" : "the better mode works again";
		}
		atomic_fetch_add(worse ? &ctx->st.degrades : &ctx->st.promotions, 1);
		vbi_warn("peer '%s': %s from %s to %s", p->name, worse ? "degraded" : "promoted",
			 vbi_path_mode_name((enum vb_qp_type)p->mode),
			 vbi_path_mode_name((enum vb_qp_type)s->mode));
		__atomic_store_n(&p->mode, s->mode, __ATOMIC_RELAXED);
	}
	if (p->probe == s)
		p->probe = NULL;

	atomic_fetch_add(&ctx->st.retransmits, n);
	/* What we received from it is acknowledged again at once (our ACKs
	 * in flight on the old lane are lost), so its retransmission skips
	 * it: the progress thread, which owns the receive streams, does it
	 * on its next pass (after the LANE frame, on the same lane). */
	atomic_store(&p->ack_all, true);
	vbi_ctx_kick(ctx);
	if (tell) {
		uint8_t buf[VBI_WIRE_HDR_LEN];
		struct vbi_wire_hdr h = { .type = VBI_WT_LANE, .seq = s->id, .epoch = s->epoch };

		vbi_wire_put(buf, &h);
		if (vbi_lane_send_ctrl(s, buf, sizeof(buf)))
			vbi_warn("peer '%s': LANE frame on lane %u not sent: %s", p->name, s->id,
				 vbi_errmsg());
	}
	vbi_path_resume(&p->path, now);
	p->recover_since_ns = 0;
	/* the peer's DATA now comes on @s: older lanes are stale for it */
	vbi_info("peer '%s': lane %u (%s QP %u on %s) active, epoch %u, %llu messages to "
		 "retransmit", p->name, s->id, vbi_path_mode_name((enum vb_qp_type)s->mode),
		 s->qp->qpn, s->dr->dev->caps.name, s->epoch, (unsigned long long)n);
	return old != s ? old : NULL;
}

static struct vbi_lane *switch_to(struct vbi_peer *p, struct vbi_lane *s, bool tell)
{
	return vbi_peer_activate(p, s, tell, false);
}

/* The failure of lane @l (disruptive action @act): txlock held. Returns
 * true when the peer must be given up (no lane can be had). */
static bool lane_failed_locked(struct vbi_peer *p, struct vbi_lane *l, enum vbi_err_action act)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbi_lane *active = vbi_path_lane(&p->path);
	struct vbi_path_decision d;
	uint64_t now = vbi_mono_ns();

	vbi_warn("peer '%s': lane %u (QP %u on %s) failed: %s -> %s", p->name, l->id,
		 l->qp->qpn, l->dr->dev->caps.name,
		 atomic_load(&l->fail_why) ? atomic_load(&l->fail_why) : "?",
		 vbi_err_action_name(act));
	if (l != active) {
		struct vbi_lane *sb = vbi_path_take_standby(&p->path);

		if (l == p->probe) { /* the RC probe failed: the better mode is not back */
			p->probe = NULL;
			vbi_path_probe(&p->path, VB_QPT_RC, 0, now);
		}
		if (sb && sb != l) /* not the one that failed: keep it */
			vbi_path_set_standby(&p->path, sb);
		vbi_lane_retire_locked(l);
		return false;
	}
	d = vbi_path_fail(&p->path, l->epoch, now, 0);
	/* the dead-peer rule (maint_peer): watch from the first failure since
	 * the peer was last heard from */
	if (!p->fail_watch || p->last_rx_ms != p->rx_ms_at_fail) {
		p->fail_watch = true;
		p->rx_ms_at_fail = p->last_rx_ms;
	}
	switch (d.action) {
	case VBI_PATH_SWITCH_TO_STANDBY: {
		struct vbi_lane *s = d.lane, *old;

		if (atomic_load(&s->dead)) { /* failed too (same port): no switch */
			vbi_lane_retire_locked(s);
			goto rebuild;
		}
		atomic_fetch_add(&ctx->st.failovers, 1);
		old = switch_to(p, s, true);
		if (old)
			vbi_lane_retire_locked(old);
		return false;
	}
	case VBI_PATH_REBUILD:
	case VBI_PATH_DEGRADE:
		if (d.lane)
			vbi_lane_retire_locked(d.lane);
rebuild: {
		struct vbi_lane *old = vbi_path_switch(&p->path, NULL, now, NULL);

		if (old)
			vbi_lane_retire_locked(old);
		vbi_lane_retire_locked(l);
		if (!p->recover_since_ns)
			p->recover_since_ns = now;
		atomic_fetch_add(&ctx->st.rebuilds, 1);
		return false;
	}
	case VBI_PATH_DOWN:
		return true;
	case VBI_PATH_STALE:
	case VBI_PATH_IN_PROGRESS:
		vbi_lane_retire_locked(l);
		return false;
	}
	return false;
}

/* Progress thread: act on every lane marked failed (completions, events,
 * port/device failures). */
void vbi_peer_handle_failures(struct vb_ctx *ctx)
{
	bool any = false;

	if (!atomic_exchange(&ctx->fail_pending, false))
		return;
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vbi_peer *p = n->peers; p; p = p->next) {
			bool down = false, acted = false;

			pthread_mutex_lock(&p->txlock);
			for (struct vbi_lane *l = p->lanes; l; l = l->next) {
				int act;

				if (atomic_load(&l->dr->failed))
					vbi_lane_report(l, (struct vbi_err_verdict){ VBI_ACT_FAILOVER,
						VBI_SCOPE_PORT, "port or device failed" },
						atomic_load(&l->dr->fatal) ? "device fatal" : "port down");
				act = atomic_exchange(&l->fail_act, 0);
				if (!act || atomic_load(&l->dead))
					continue;
				acted = true;
				if (!p->dead && !p->closing)
					down |= lane_failed_locked(p, l, (enum vbi_err_action)act);
				else
					vbi_lane_retire_locked(l);
			}
			pthread_mutex_unlock(&p->txlock);
			if (acted) {
				any = true;
				vbi_peer_pev_flush(p);
			}
			if (down)
				vbi_peer_failed(p, "no connection can be had");
		}
		pthread_rwlock_unlock(&n->lock);
		if (any)
			vbi_maint_kick(n);
	}
	for (unsigned i = 0; i < ctx->ndev; i++)
		atomic_store(&ctx->dr[i].failed, false);
	/* reports made meanwhile set fail_pending again */
	pthread_mutex_unlock(&ctx->lock);
}

/* The peer sent a LANE frame on @l: it transmits there now; follow. Progress
 * context, node->lock held for reading. */
void vbi_lane_on_switch(struct vbi_lane *l)
{
	struct vbi_peer *p = l->peer;
	struct vbi_lane *old = NULL;

	if (!p)
		return;
	pthread_mutex_lock(&p->txlock);
	if (atomic_load(&l->dead) || p->dead)
		vbi_warn("peer '%s': LANE on lane %u ignored: %s", p->name, l->id,
			 p->dead ? "peer given up" : "that lane is being retired here");
	if (!atomic_load(&l->dead) && vbi_path_lane(&p->path) != l && !p->dead) {
		struct vbi_lane *sb = vbi_path_take_standby(&p->path);

		if (sb && sb != l)
			vbi_path_set_standby(&p->path, sb);
		old = switch_to(p, l, false);
		atomic_fetch_add(&p->node->ctx->st.failovers, 1);
		if (old)
			vbi_lane_retire_locked(old);
	}
	pthread_mutex_unlock(&p->txlock);
	vbi_peer_pev_flush(p);
	vbi_maint_kick(p->node);
}

/* ---- HELLO ------------------------------------------------------------------------------ */

/* A HELLO we cannot use: counted; @fatal ones (impossible geometry, an
 * unknown peer) also close the connection, the others are dropped. */
void vbi_lane_refuse(struct vbi_lane *l, const char *why)
{
	struct vb_ctx *ctx = l->node->ctx;
	uint8_t buf[VBI_WIRE_HDR_LEN + VBI_REFUSE_MAX];
	uint32_t n = vbi_wire_bye_encode(buf, why);

	atomic_fetch_add(&ctx->st.refused, 1); /* counted before the peer can see it */
	pthread_mutex_lock(l->lk);
	if (vbi_lane_send_ctrl(l, buf, n))
		vbi_info("refusal not sent: %s", vbi_errmsg());
	pthread_mutex_unlock(l->lk);
	vbi_event(ctx, VB_EV_PROTOCOL, "", "connection refused: %s", why);
	/* dropped once the BYE has left (vbi_node_pending_expire), bounded */
	l->refused_ns = vbi_mono_ns();
}

static void hello_bad(struct vbi_lane *l, const char *why, bool fatal)
{
	struct vb_ctx *ctx = l->node->ctx;
	struct vbi_err_verdict v = { VBI_ACT_FAILOVER, VBI_SCOPE_QP, "bad HELLO" };

	atomic_fetch_add(&ctx->st.malformed, 1);
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
	 * device's PD are valid while ud_qp is set (vbi_dev_reap changes them
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

/*
 * HELLO on lane @l. Progress context; node->lock held for writing when the
 * lane is not bound yet (it may create a peer), for reading otherwise.
 */
void vbi_lane_on_hello(struct vbi_lane *l, const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	struct vb_node *node = l->node;
	struct vb_ctx *ctx = node->ctx;
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
		/* An accepted connection: a new peer, or a lane of a known one. */
		if (role == VBI_LANE_PRIMARY) {
			p = vbi_peer_alloc(node);
			if (!p) {
				hello_bad(l, "no memory for a new peer", true);
				return;
			}
			if (!vbi_ctx_take_peer(ctx)) {
				char why[96];

				snprintf(why, sizeof(why), "max_peers (%u) reached at node '%s'",
					 ctx->attr.max_peers, node->name);
				vbi_warn("refusing a connection: %s", why);
				vbi_peer_free(p);
				vbi_lane_refuse(l, why);
				return;
			}
			p->uid = uid;
			p->next = node->peers;
			node->peers = p;
		} else {
			for (p = node->peers; p; p = p->next)
				if (p->uid == uid && !p->connector && !atomic_load(&p->dead))
					break;
			if (!p) {
				hello_bad(l, "standby connection for a peer we do not know", true);
				return;
			}
		}
		if (!vbi_rule_new_lane(l, p, hi.lane, role))
			return;
		if (hi.lane > p->max_lane_id)
			p->max_lane_id = hi.lane;
		for (struct vbi_lane **q = &node->pending; *q; q = &(*q)->next)
			if (*q == l) {
				*q = l->next;
				break;
			}
		l->id = hi.lane;
		l->role = (uint8_t)role;
		pthread_mutex_lock(&p->txlock);
		vbi_lane_bind(l, p);
		pthread_mutex_unlock(&p->txlock);
		/* our answer (the acceptor speaks after the connector) */
		vbi_lane_send_hello(l);
	} else if (uid != p->uid && atomic_load(&p->up)) {
		hello_bad(l, "HELLO from another node on this peer's connection", true);
		return;
	}
	role = l->role; /* ours (the connector numbers and names lanes) */
	pthread_mutex_lock(&p->txlock);
	/* Our HELLO consumed one of its slots before we knew the count. */
	l->remote_slots = slots;
	p->remote_slot_size = slot_size;
	{
		uint32_t ucp = hi.uc_port, udp = hi.ud_port;

		p->uc_port = ucp <= 65535 ? (uint16_t)ucp : 0;
		p->ud_port = udp <= 65535 ? (uint16_t)udp : 0;
	}
	pthread_mutex_unlock(&p->txlock);
	atomic_store(&l->hello_rcvd, true);

	if (!atomic_load(&p->up)) {
		struct vbi_lane *old;

		memcpy(p->name, hi.name, VBI_NAME_MAX - 1);
		p->name[VBI_NAME_MAX - 1] = '\0';
		p->uid = uid;
		addr_from_hello(&hi, &p->sb_addr);
		vbi_peer_set_ud(p, hi.ud_qpn, hi.ud_qkey, hi.gid);
		pthread_mutex_lock(&p->txlock);
		old = vbi_path_switch(&p->path, l, vbi_mono_ns(), &l->epoch);
		pthread_mutex_unlock(&p->txlock);
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
		return;
	}
	if (role == VBI_LANE_PROBE) {
		/* kept idle: the connector's maintenance thread reports it to the
		 * policy and promotes it (a LANE frame tells this end) */
		vbi_info("peer '%s': RC probe lane %u up (QP %u)", p->name, l->id, l->qp->qpn);
		vbi_maint_kick(node);
		return;
	}
	if (role == VBI_LANE_STANDBY) {
		struct vbi_lane *old;

		pthread_mutex_lock(&p->txlock);
		if (!vbi_path_lane(&p->path) && p->recover_since_ns) {
			/* recovering with nothing to switch to: it is the lane now
			 * (and the other end, which took it for a standby, is told) */
			old = switch_to(p, l, true);
		} else {
			old = vbi_path_set_standby(&p->path, l);
			atomic_fetch_add(&ctx->st.standbys_warmed, 1);
		}
		if (old)
			vbi_lane_retire_locked(old);
		pthread_mutex_unlock(&p->txlock);
		vbi_info("peer '%s': standby lane %u ready (QP %u on %s)", p->name, l->id,
			 l->qp->qpn, l->dr->dev->caps.name);
	} else {
		/* REPLACE: the connector built it after a failure; both ends
		 * switch when its HELLO arrives. */
		struct vbi_lane *old;

		pthread_mutex_lock(&p->txlock);
		old = switch_to(p, l, false);
		if (old)
			vbi_lane_retire_locked(old);
		pthread_mutex_unlock(&p->txlock);
	}
	vbi_peer_pev_flush(p);
	vbi_maint_kick(node);
}

/* ---- receive ------------------------------------------------------------------------------ */

/* Testing the software reliability of UC/UD lanes: VERBUS_TEST_DROP_EVERY=N
 * drops every N-th SEND/datagram received on such a lane (after its HELLO)
 * as if the fabric had lost it: nothing of it is processed and its slot is
 * not returned to the sender (a lost datagram's credit is lost too). 0 or
 * unset: off. Read once. */
static unsigned test_drop_every(void)
{
	static _Atomic int v = -1;
	int r = atomic_load_explicit(&v, memory_order_relaxed);

	if (r < 0) {
		const char *e = getenv("VERBUS_TEST_DROP_EVERY");
		long n = e && *e ? strtol(e, NULL, 10) : 0;

		r = n > 1 && n < 1000000 ? (int)n : 0;
		atomic_store_explicit(&v, r, memory_order_relaxed);
	}
	return (unsigned)r;
}

void vbi_lane_rc_recv(struct vbi_lane *l, struct vbi_slot *slot, uint32_t byte_len)
{
	struct vb_node *node = l->node;
	struct vb_ctx *ctx = node->ctx;
	bool bound = l->peer != NULL;
	const uint8_t *data = slot->buf.addr;
	unsigned drop_every;

	if (l->mode == VB_QPT_UD) /* a datagram: after the GRH */
		byte_len = vbi_wire_ud_frames(slot->buf.addr, byte_len, &data);
	if (l->mode != VB_QPT_RC && atomic_load(&l->hello_rcvd) &&
	    (drop_every = test_drop_every()) && ++l->rx_count % drop_every == 0) {
		if (!atomic_load(&l->draining) && !atomic_load(&l->dead) && post_slot(l, slot)) {
			struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP,
						     "receive repost failed" };

			vbi_lane_report(l, v, "receive repost failed");
		}
		return;
	}
	if (bound)
		pthread_rwlock_rdlock(&node->lock);
	else
		pthread_rwlock_wrlock(&node->lock);
	if (!byte_len) { /* a SEND with no frame in it */
		atomic_fetch_add(&ctx->st.malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, l->peer ? l->peer->name : "", "empty SEND dropped");
	} else if (!atomic_load(&l->dead) && !(l->peer && atomic_load(&l->peer->closing))) {
		vbi_dispatch_frames(ctx, l, data, byte_len);
	}
	pthread_rwlock_unlock(&node->lock);
	/* the callbacks, with no lock held; the slot (what they read) is
	 * posted again after them */
	vbi_cb_flush(ctx);
	if (atomic_load(&l->draining) || atomic_load(&l->dead))
		return;
	if (post_slot(l, slot)) {
		struct vbi_err_verdict v = { VBI_ACT_RESET_QP, VBI_SCOPE_QP, "receive repost failed" };

		vbi_lane_report(l, v, "receive repost failed");
		return;
	}
	pthread_mutex_lock(l->lk);
	l->to_return++;
	if (l->peer)
		l->peer->last_rx_ms = vbi_now_ms();
	pthread_mutex_unlock(l->lk);
}

/* ---- retiring ------------------------------------------------------------------------------ */

/* Hand @l to the maintenance thread (drain, grace period, destroy). Any
 * thread; idempotent. */
void vbi_lane_retire(struct vbi_lane *l)
{
	struct vb_node *node = l->node;

	atomic_store(&l->dead, true);
	if (atomic_exchange(&l->retiring, true))
		return;
	pthread_mutex_lock(&node->maint_lock);
	/* it stays on its peer's (or the pending) list, marked retiring: the
	 * maintenance thread finds it there (maint_retire); the count only
	 * keeps that thread from sleeping on a retire it has not seen yet */
	node->retiring++;
	pthread_cond_broadcast(&node->maint_cv);
	pthread_mutex_unlock(&node->maint_lock);
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
	pthread_mutex_lock(l->lk);
	if (l->sr.outstanding && l->sr.outstanding < l->sr.n) {
		struct vbi_sctx *s = vbi_sring_take(&l->sr);
		struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .num_sge = 0,
					  .opcode = VBT_WR_SEND, .flags = VBT_SEND_SIGNALED };

		/* addressed as any SEND of the lane (UD: its AH); counted as
		 * signaled when posted */
		if (vbi_lane_post_wr(l, &wr))
			vbi_sring_untake(&l->sr);
	}
	pthread_mutex_unlock(l->lk);
}

void vbi_lane_destroy_now(struct vbi_lane *l)
{
	struct vb_ctx *ctx = l->node->ctx;
	uint64_t t0 = vbi_mono_ns();
	bool reuse = false; /* drained, no error: the QP goes back to the pool */

	pthread_mutex_lock(l->lk);
	atomic_store(&l->dead, true);
	atomic_store(&l->draining, true);
	pthread_mutex_unlock(l->lk);
	if (l->qp && vbt_qp_state(l->qp) != VB_QPS_RESET && !atomic_load(&l->dr->fatal)) {
		reuse = vbi_lane_qp_healthy(l);
		vbt_qp_set_state(l->qp, VB_QPS_ERR);
		drain_marker(l);
	}
	for (;;) {
		uint32_t out;

		pthread_mutex_lock(l->lk);
		out = l->sr.outstanding;
		pthread_mutex_unlock(l->lk);
		if (!out && !atomic_load(&l->posted_recvs))
			break;
		if (!l->qp || vbt_qp_state(l->qp) == VB_QPS_RESET || atomic_load(&l->dr->fatal)) {
			reuse = false;
			break; /* never posted to, or nothing will complete any more */
		}
		if (vbi_mono_ns() - t0 > 10000000000ull) {
			vbi_warn("lane %u: drain gave up with %u sends, %u receives outstanding",
				 l->id, out, atomic_load(&l->posted_recvs));
			reuse = false;
			break;
		}
		vbi_progress_or_nap(ctx);
	}
	pthread_mutex_lock(l->lk);
	vbi_sring_release_upto(ctx, &l->sr, NULL);
	if (l->peer)
		for (struct vbi_lane **q = &l->peer->lanes; *q; q = &(*q)->next)
			if (*q == l) {
				*q = l->next;
				break;
			}
	pthread_mutex_unlock(l->lk);
	/* posters that read the lane before it was unpublished are done */
	vbi_rcu_synchronize();
	if (l->conn)
		ctx->ops->conn_close(l->conn);
	if (l->qp)
		vbi_lane_qp_put(l, reuse);
	vbi_sring_fini(ctx, &l->sr);
	vbi_slots_free(l->dr->pool, l->slots, l->nslots);
	pthread_mutex_destroy(&l->own_lock);
	atomic_fetch_add_explicit(&ctx->st.lanes_retired, 1, memory_order_relaxed);
	atomic_fetch_sub(&l->dr->nlanes, 1);
	free(l);
}

/* ---- fault injection ----------------------------------------------------------------------- */

/* The peer named @peer (NULL: the first) that is up. On success node->lock
 * is held for reading (the caller unlocks); on NULL it is not held. */
static struct vbi_peer *find_up_peer(struct vb_node *node, const char *peer)
{
	struct vbi_peer *p;

	pthread_rwlock_rdlock(&node->lock);
	for (p = node->peers; p; p = p->next)
		if (atomic_load(&p->up) && !atomic_load(&p->dead) &&
		    (!peer || !strcmp(peer, p->name)))
			return p;
	pthread_rwlock_unlock(&node->lock);
	return NULL;
}

int vb_node_inject_fault(vb_node_t *node, const char *peer, vb_fault_t fault)
{
	struct vbi_peer *p;
	struct vbi_lane *l;
	int rc = 0;

	if (!node || fault < VB_FAULT_QP_ERR || fault > VB_FAULT_REM_ACCESS)
		return vbi_err(-EINVAL, "vb_node_inject_fault: NULL node or unknown fault %d",
			       (int)fault);
	if (!(p = find_up_peer(node, peer)))
		return vbi_err(-ENOENT, "no peer '%s' is up", peer ? peer : "(any)");
	pthread_mutex_lock(&p->txlock);
	vbi_rcu_enter();
	l = vbi_peer_lane(p);
	if (!l) {
		rc = vbi_err(-ENOTCONN, "peer '%s' has no active connection (recovering)", p->name);
	} else if (fault == VB_FAULT_QP_ERR) {
		rc = vbt_qp_set_state(l->qp, VB_QPS_ERR);
		vbi_info("fault: lane %u QP %u moved to ERR", l->id, l->qp->qpn);
	} else if (l->sr.outstanding >= l->sr.n) {
		rc = vbi_err(-EAGAIN, "send queue full");
	} else {
		struct vbi_sctx *s = vbi_sring_take(&l->sr);
		struct vbt_sge sge = { (uintptr_t)s->hdr, VBI_WIRE_HDR_LEN, s->hdr_lkey };
		struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1,
					  .flags = VBT_SEND_SIGNALED };

		if (fault == VB_FAULT_LOC_PROT) {
			/* a valid lkey over an address outside its region: a
			 * local protection fault (an unknown lkey is an
			 * operation error on rxe) */
			sge.addr = 0x1000;
			wr.opcode = VBT_WR_SEND;
		} else {
			/* the QP allows remote writes, but no region on the peer
			 * does (they are registered for local access only):
			 * any rkey is an access violation there */
			struct vbi_wire_hdr h = { .type = VBI_WT_HEARTBEAT };

			vbi_wire_put(s->hdr, &h);
			wr.opcode = VBT_WR_RDMA_WRITE;
			wr.remote_addr = 0x1000;
			wr.rkey = 0x12345678u;
		}
		if (l->mode == VB_QPT_UD && wr.opcode == VBT_WR_RDMA_WRITE)
			rc = vbi_err(-EOPNOTSUPP, "no RDMA WRITE on a UD connection");
		else
			rc = vbi_lane_post_wr(l, &wr);
		if (rc)
			vbi_sring_untake(&l->sr);
		else
			vbi_info("fault: lane %u QP %u: %s posted", l->id, l->qp->qpn,
				 fault == VB_FAULT_LOC_PROT ? "SEND with a bad lkey"
							    : "RDMA WRITE with a bad rkey");
	}
	vbi_rcu_leave();
	pthread_mutex_unlock(&p->txlock);
	pthread_rwlock_unlock(&node->lock);
	return rc;
}

int vb_node_peer_mode(vb_node_t *node, const char *peer)
{
	struct vbi_peer *p;
	int rc;

	if (!node)
		return vbi_err(-EINVAL, "vb_node_peer_mode: NULL node");
	if (!(p = find_up_peer(node, peer)))
		return vbi_err(-ENOENT, "no peer '%s' is up", peer ? peer : "(any)");
	pthread_mutex_lock(&p->txlock);
	vbi_rcu_enter();
	rc = vbi_peer_lane(p) && !vbi_path_recovering(&p->path) ? p->mode
		: vbi_err(-ENOTCONN, "peer '%s' is recovering", p->name);
	vbi_rcu_leave();
	pthread_mutex_unlock(&p->txlock);
	pthread_rwlock_unlock(&node->lock);
	return rc;
}

/* ---- diagnostics ----------------------------------------------------------------------------- */

int vb_node_dump(vb_node_t *node, FILE *f)
{
	if (!node || !f)
		return vbi_err(-EINVAL, "vb_node_dump: NULL argument");
	pthread_rwlock_rdlock(&node->lock);
	fprintf(f, "node '%s' uid %016llx\n", node->name, (unsigned long long)node->uid);
	for (struct vbi_lane *l = node->pending; l; l = l->next)
		fprintf(f, "  pending lane QP %u on %s\n", l->qp->qpn, l->dr->dev->caps.name);
	for (struct vbi_peer *p = node->peers; p; p = p->next) {
		struct vbi_lane *a;

		pthread_mutex_lock(&p->txlock);
		a = vbi_path_lane(&p->path);
		fprintf(f, "  peer '%s'%s%s%s epoch %u%s, mode %s (policy %s), active lane %u, "
			"rx lane %u%s\n", p->name,
			p->connector ? " (we connected)" : "", atomic_load(&p->up) ? " up" : "",
			atomic_load(&p->dead) ? " dead" : "", vbi_path_epoch(&p->path),
			vbi_path_recovering(&p->path) ? " recovering" : "",
			vbi_path_mode_name((enum vb_qp_type)p->mode),
			vbi_path_mode_name(vbi_path_mode(&p->path)), a ? a->id : 0, p->rx_lane_id,
			p->probe ? ", probing RC" : "");
		for (struct vbi_lane *l = p->lanes; l; l = l->next)
			fprintf(f, "    lane %u %s QP %u on %s %s%s%s%s credits %u sq %u/%u recvs %u "
				"to_return %u\n", l->id, vbi_path_mode_name((enum vb_qp_type)l->mode),
				l->qp->qpn, l->dr->dev->caps.name,
				l == a ? "active" : "", atomic_load(&l->dead) ? " dead" : "",
				atomic_load(&l->retiring) ? " retiring" : "",
				atomic_load(&l->hello_rcvd) ? "" : " no-hello", vbi_lane_credits(l),
				(unsigned)l->sr.outstanding, l->sr.n, atomic_load(&l->posted_recvs),
				l->to_return);
		for (struct vbi_pubpeer *pp = p->pubs; pp; pp = pp->next_in_peer) {
			pthread_mutex_lock(&pp->pub->lock);
			fprintf(f, "    pub '%s': sent %llu high %llu acked %llu window next %llu%s\n",
				pp->pub->topic, (unsigned long long)pp->sent,
				(unsigned long long)pp->high, (unsigned long long)pp->acked,
				(unsigned long long)pp->pub->win.next_seq, pp->dead ? " dead" : "");
			pthread_mutex_unlock(&pp->pub->lock);
		}
		pthread_mutex_unlock(&p->txlock);
	}
	pthread_rwlock_unlock(&node->lock);
	return 0;
}
