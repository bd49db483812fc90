/* SPDX-License-Identifier: MIT */
/*
 * Nodes and their peers: RC connections (librdmacm through the transport),
 * peers' allocation, failure and reaping, listening and accepting,
 * connecting (and the backup address), and teardown with a full drain. The
 * control protocol is in lane_hello.c (HELLO) and peer_frames.c (SUB,
 * receive dispatch, credits and acknowledgements).
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

#include "proto/proto.h"
#include "proto/pub_ordered.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
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
	vbi_mutex_init(&p->txlock);
	snprintf(p->name, sizeof(p->name), "?");
	p->next_lane_id = 1;
	if (vbi_peer_init_path(p)) {
		vbi_mutex_destroy(&p->txlock);
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
	vbi_mutex_destroy(&p->txlock);
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
 *     read-side section, vb_pub_commit; the progress thread's per-peer
 *     round walks the peers and the subscribers' streams in one) it and
 *     its streams are freed and its max_peers slot given back.
 */
struct reaped {
	struct vbi_pubpeer *pps; /* its publisher attachments, through gone_next */
	struct vbi_rxs *streams; /* its ORDERED receive streams, through gone_next */
};

static void reap_detach(struct vb_node *node, struct vbi_peer *p, struct reaped *g)
{
	/* first out of the flush's and the ACK round's sight (both walk them
	 * under txlock, the progress thread's per-peer round with no
	 * node->lock); the attachments and the streams are unlinked below and
	 * freed after the grace period (slow_send_ends walks a publisher's
	 * attachments with no lock) */
	vbi_mutex_lock(&p->txlock);
	p->pubs = NULL;
	p->rr = NULL;
	p->dirty = NULL;
	vbi_mutex_unlock(&p->txlock);
	for (struct vb_pub *pub = node->pubs; pub; pub = pub->next) {
		vbi_mutex_lock(&pub->lock);
		for (struct vbi_pubpeer **q = &pub->peers; *q;) {
			struct vbi_pubpeer *pp = *q;

			if (pp->peer != p) {
				q = &pp->next_in_pub;
				continue;
			}
			vbi_rcu_assign(*q, pp->next_in_pub); /* slow_send_ends goes on */
			pub->npeers--;
			vbi_pub_keep_acked(pub, pp); /* it still counts for k-of-n */
			pp->gone_next = g->pps;
			g->pps = pp;
		}
		vbi_mutex_unlock(&pub->lock);
	}
	vbi_sub_drop_peer(node, p, &g->streams);
}

/* What a reaped peer leaves, freed after the grace period. */
static void reaped_free(struct reaped *g)
{
	while (g->pps) {
		struct vbi_pubpeer *pp = g->pps;

		g->pps = pp->gone_next;
		free(pp);
	}
	vbi_sub_free_streams(g->streams);
}

void vbi_node_reap(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;

	for (;;) {
		struct vbi_peer *victim = NULL;
		struct reaped left = { NULL, NULL };

		pthread_rwlock_wrlock(&node->lock);
		/* a publisher or subscriber being destroyed may still point to
		 * the peers: reap them in a later round */
		for (struct vbi_peer **q = atomic_load(&node->closing_objs) ? NULL : &node->peers;
		     q && *q; q = &(*q)->next) {
			struct vbi_peer *p = *q;
			bool gone;

			vbi_mutex_lock(&p->txlock);
			/* alt_pending: set with dead, under txlock (vbi_peer_failed) */
			if (!p->dead || atomic_load(&p->alt_pending)) {
				vbi_mutex_unlock(&p->txlock);
				continue;
			}
			for (struct vbi_lane *l = p->lanes; l; l = l->next)
				if (!vbi_lane_dead(l))
					vbi_lane_retire(l);
			vbi_path_switch(&p->path, NULL, vbi_mono_ns(), NULL);
			vbi_path_take_standby(&p->path);
			p->probe = NULL;
			gone = !p->lanes;
			vbi_mutex_unlock(&p->txlock);
			if (!gone)
				continue;
			vbi_rcu_assign(*q, p->next); /* a round standing on p goes on */
			reap_detach(node, p, &left);
			victim = p;
			break;
		}
		pthread_rwlock_unlock(&node->lock);
		if (!victim)
			return;
		/* publishers that picked it as a target are done, and so is the
		 * progress thread's per-peer round (it or its streams) */
		vbi_rcu_synchronize();
		reaped_free(&left);
		vbi_info("peer '%s' reaped", victim->name);
		vbi_peer_free(victim);
		vbi_ctx_put_peer(ctx);
		atomic_fetch_add(&ctx->st->peers_reaped, 1);
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
	vbi_mutex_lock(&p->txlock);
	l = vbi_path_lane(&p->path);
	rc = p->up && !p->dead && l ? vbi_peer_send_ctrl(p, buf, sizeof(buf)) : -ENOTCONN;
	vbi_mutex_unlock(&p->txlock);
	if (rc)
		return;
	for (;;) {
		uint32_t out;

		vbi_mutex_lock(&p->txlock);
		out = l->sr.outstanding;
		vbi_mutex_unlock(&p->txlock);
		if (!out || now_ms() - t0 > 200)
			break;
		vbi_progress_or_nap(p->node->ctx);
	}
}

/* The peer is gone for good (closed, or no lane could be had): its cursors
 * stop holding the windows back. */
void vbi_peer_failed(struct vbi_peer *p, const char *why)
{
	bool was, alt;
	struct vbi_lane *old;

	vbi_mutex_lock(&p->txlock);
	was = p->dead;
	p->dead = true;
	old = vbi_path_switch(&p->path, NULL, vbi_mono_ns(), NULL);
	if (old)
		vbi_lane_retire(old);
	/* in the same section as dead: the reaper, which looks at both under
	 * txlock and needs no node->lock of ours, keeps a peer whose backup
	 * is to be connected (vbi_node_backup_step) */
	alt = !was && !p->closing && p->alt_addr.ss_family && !atomic_load(&p->node->stop);
	if (alt)
		atomic_store(&p->alt_pending, true);
	vbi_mutex_unlock(&p->txlock);
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
	if (alt)
		vbi_maint_kick(p->node);
}

/* ---- nodes ------------------------------------------------------------------------------- */

int vbi_make_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss)
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

void vbi_node_pending_expire(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;
	uint64_t now = vbi_mono_ns(), limit = (uint64_t)ctx->attr.cm_timeout_ms * 1000000ull;

	pthread_rwlock_rdlock(&node->lock);
	for (struct vbi_lane *l = node->pending; l; l = l->next) {
		if (vbi_lane_dead(l) || atomic_load(&l->in_setup))
			continue;
		if (l->refused_ns) { /* its BYE went (or 1 s passed): close it */
			uint32_t out;

			vbi_mutex_lock(l->lk);
			out = l->sr.outstanding;
			vbi_mutex_unlock(l->lk);
			if (!out || now - l->refused_ns > 1000000000ull)
				vbi_lane_retire(l);
			continue;
		}
		if (l->accepted_ns && now - l->accepted_ns > limit) {
			atomic_fetch_add(&ctx->st->pending_dropped, 1);
			vbi_warn("node '%s': a connection sent no HELLO within %d ms: dropped (QP %u)",
				 node->name, ctx->attr.cm_timeout_ms, l->qp->qpn);
			vbi_lane_retire(l);
		}
	}
	pthread_rwlock_unlock(&node->lock);
}

int vbi_node_listen(struct vb_node *node, unsigned idx, const char *ip, uint16_t port)
{
	static const enum vb_qp_type types[4] = { VB_QPT_RC, VB_QPT_RC, VB_QPT_UC, VB_QPT_UD };
	struct vb_ctx *ctx = node->ctx;
	struct vbi_devres *dr = vbi_listener_dev(node, idx);
	struct sockaddr_storage ss;
	int rc;

	if (atomic_load(&dr->removed))
		return vbi_err(-ENODEV, "%s was removed", dr->name);
	rc = vbi_make_addr(ip, port, &ss);
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
	return 0;
}

int vbi_node_create(struct vb_ctx *ctx, const vb_node_attr_t *attr, struct vb_node **out)
{
	struct vb_node *node;
	int rc;

	*out = NULL;
	node = calloc(1, sizeof(*node));
	if (!node)
		return vbi_err(-ENOMEM, "node");
	node->ctx = ctx;
	node->wake_fd = -1;
	node->timer_fd = -1;
	snprintf(node->name, sizeof(node->name), "%s", attr->name ? attr->name : "verbus");
	while (!node->uid)
		if (getrandom(&node->uid, sizeof(node->uid), 0) != sizeof(node->uid))
			node->uid = vbi_mono_ns() ^ (uintptr_t)node;
	pthread_rwlock_init(&node->lock, NULL);
	if (attr->listen_ip) {
		rc = vbi_node_listen(node, 0, attr->listen_ip, attr->listen_port);
		if (rc)
			goto err;
		node->port = node->listener[0]->port;
		/* UC and UD listeners for degraded lanes (a node that cannot
		 * have them keeps RC only: its peers do not degrade) */
		for (unsigned i = 2; i < 4; i++)
			if (vbi_node_listen(node, i, attr->listen_ip, 0))
				vbi_warn("no %s listener (no degradation to it): %s",
					 i == 2 ? "UC" : "UD", vbi_errmsg());
		/* A standby listener on the context's second device: peers
		 * connect their standby lanes there (it is in our HELLO). */
		if (ctx->ndev > 1 && ctx->attr.standby_ip) {
			rc = vbi_node_listen(node, 1, ctx->attr.standby_ip, attr->standby_port);
			if (rc)
				goto err;
		}
		rc = vbi_accept_init(node);
		if (rc)
			goto err;
	}
	rc = vbi_maint_start(node); /* the conductor: accepting, maintenance */
	if (rc)
		goto err;
	pthread_mutex_lock(&ctx->lock);
	node->next = ctx->nodes;
	vbi_rcu_assign(ctx->nodes, node); /* the progress rounds read with no lock */
	pthread_mutex_unlock(&ctx->lock);
	*out = node;
	return 0;
err:
	vbi_maint_stop(node);
	vbi_accept_fini(node);
	vbi_maint_fini(node);
	pthread_rwlock_destroy(&node->lock);
	free(node);
	return vbi_err_prefix(rc, "vb_node_create");
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

/* A connecting peer for @addr (@alt, may be NULL: where to go when it is
 * given up later, vb_node_connect_backup) with its primary lane, bound
 * and in_setup (ours until the handshake is done), linked on the node
 * before the connection completes (its HELLO may come first). 0 or a
 * negative errno (nothing made). */
static int connect_prepare(struct vb_node *node, const struct sockaddr_storage *addr,
			   const struct sockaddr_storage *alt, struct vbi_peer **pp,
			   struct vbi_lane **lp)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_peer *p;
	struct vbi_lane *l = NULL;
	int rc;

	p = vbi_peer_alloc(node);
	if (!p)
		return -ENOMEM;
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
	atomic_store(&l->in_setup, true);
	vbi_mutex_lock(&p->txlock);
	l->id = p->next_lane_id++;
	l->role = VBI_LANE_PRIMARY;
	vbi_lane_bind(l, p);
	vbi_mutex_unlock(&p->txlock);
	pthread_rwlock_wrlock(&node->lock);
	p->next = node->peers;
	vbi_rcu_assign(node->peers, p); /* the per-peer round reads with no lock */
	pthread_rwlock_unlock(&node->lock);
	*pp = p;
	*lp = l;
	return 0;
err_count:
	vbi_ctx_put_peer(ctx);
err_peer:
	vbi_peer_free(p);
	return rc;
}

/* A connection that did not complete: the peer object stays on the node
 * (dead) until the conductor reaps it (vbi_node_reap, after an RCU grace
 * period: the progress thread may still hold it); its lane is destroyed
 * now. The error message is kept. */
static void connect_give_up(struct vbi_peer *p, struct vbi_lane *l)
{
	char msg[VBI_ERRMSG_MAX];

	vbi_mutex_lock(&p->txlock);
	p->dead = true;
	vbi_mutex_unlock(&p->txlock);
	snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
	if (l)
		vbi_lane_destroy_now(l);
	vbi_err(-EIO, "%s", msg);
}

/* The handshake of @p (lane @l, connected, HELLO sent) failed: why, as
 * vb_node_connect reports it. */
static int connect_refusal(struct vbi_peer *p, struct vbi_lane *l, const char *where)
{
	char why[sizeof(p->refused)];

	vbi_mutex_lock(&p->txlock);
	snprintf(why, sizeof(why), "%s", p->refused);
	vbi_mutex_unlock(&p->txlock);
	if (vbi_hello_auth_refusal(l))
		return vbi_err(-ECONNREFUSED, "connection to %s refused: authentication: %s", where,
			       vbi_hello_auth_refusal(l));
	if (why[0])
		return vbi_err(-ECONNREFUSED, "connection to %s refused: %s", where, why);
	return vbi_err(-ECONNRESET, "connection to %s failed during handshake", where);
}

/* Wait until the conductor has connected @p's primary lane (0: its HELLO
 * went, the lane is ours again) or failed to (the error; the lane is
 * gone, @p dead). Past the conductor's own bound (3 x cm_timeout_ms, and
 * a second for its rounds) we mark @p dead, which makes it give up. */
static int connect_wait(struct vb_ctx *ctx, struct vbi_peer *p, const char *where)
{
	uint64_t t0 = now_ms(), limit = 3ull * ctx->attr.cm_timeout_ms + 1000;
	bool abandoned = false;

	for (;;) {
		int st = atomic_load_explicit(&p->setup, memory_order_acquire);

		if (st == VBI_SETUP_CONNECTED && !abandoned)
			return 0;
		if (st == VBI_SETUP_CONNECTED) { /* it connected as we gave up */
			connect_give_up(p, p->setup_lane);
			break;
		}
		if (st == VBI_SETUP_FAILED) {
			if (abandoned)
				break;
			return vbi_err(p->setup_rc, "connect to %s: %s", where, p->setup_err);
		}
		if (!abandoned && now_ms() - t0 > limit) {
			vbi_mutex_lock(&p->txlock);
			p->dead = true;
			vbi_mutex_unlock(&p->txlock);
			vbi_maint_kick(p->node);
			abandoned = true;
		}
		vbi_progress_or_nap(ctx);
	}
	return vbi_err(-ETIMEDOUT, "connect to %s: not connected within %llu ms", where,
		       (unsigned long long)limit);
}

/* Connect to @addr and wait for the handshake; @alt (may be NULL): where to
 * go when this peer is given up later (vb_node_connect_backup). */
int vbi_node_connect_addr(struct vb_node *node, const struct sockaddr_storage *addr,
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
	if ((rc = connect_prepare(node, addr, alt, &p, &l)))
		return vbi_err_prefix(rc, "connect to %s", where);
	/* The conductor connects it (in steps, within 3 x cm_timeout_ms) and
	 * sends our HELLO; the handshake is complete when the peer's HELLO has
	 * arrived. */
	vbi_maint_connect_queue(node, p, l);
	if ((rc = connect_wait(ctx, p, where)))
		return rc;
	t0 = now_ms();
	while (!atomic_load(&p->up)) {
		if (vbi_lane_dead(l) || p->dead) {
			rc = connect_refusal(p, l, where);
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
	connect_give_up(p, l);
	return rc;
}

int vbi_node_connect_backup(struct vb_node *node, const struct sockaddr_storage *a,
			    const struct sockaddr_storage *b)
{
	char first[VBI_ERRMSG_MAX], ip[INET6_ADDRSTRLEN + 8], backup[INET6_ADDRSTRLEN + 8];
	int rc;

	addr_str(a, ip, sizeof(ip));
	addr_str(b, backup, sizeof(backup));
	if (!vbi_node_connect_addr(node, a, b))
		return 0;
	snprintf(first, sizeof(first), "%s", vbi_errmsg());
	vbi_warn("primary %s not reachable (%s): trying the backup %s", ip, first, backup);
	if (!(rc = vbi_node_connect_addr(node, b, a))) {
		vbi_event(node->ctx, VB_EV_PEER_SWITCHED, "", "primary %s not reachable: "
			  "connected to the backup %s", ip, backup);
		return 0;
	}
	return vbi_err(rc, "neither the primary (%s) nor the backup (%s) could be reached",
		       first, vbi_errmsg());
}

/*
 * The conductor: peers given up that have an alternative
 * (vb_node_connect_backup) are replaced by a connection to it, then, while
 * that fails, to the original again, up to VBI_BACKUP_TRIES attempts 250 ms
 * apart; their subscriptions follow (SUBs go with every new connection).
 * Each attempt is a new peer whose primary lane the conductor connects in
 * steps (vbi_maint_connect), so a switch blocks nothing meanwhile; the
 * switch itself (struct vbi_switch, node->switches) is the conductor's.
 */
#define VBI_BACKUP_TRIES 8
#define VBI_BACKUP_PAUSE_NS 250000000ull

struct vbi_switch {
	struct vbi_switch *next;
	char name[VBI_NAME_MAX];               /* the peer given up */
	char was[INET6_ADDRSTRLEN + 8];        /* its address */
	struct sockaddr_storage to, back;      /* this attempt's address, the other */
	unsigned attempts;                     /* made so far */
	uint64_t t0_ns, next_ns, deadline_ns;
	struct vbi_peer *q;                    /* this attempt's peer (on node->peers) */
	struct vbi_lane *l;                    /* its primary lane (in_setup) */
};

static void switch_start(struct vb_node *node, struct vbi_switch *w, uint64_t now)
{
	struct vb_ctx *ctx = node->ctx;
	int rc = connect_prepare(node, &w->to, &w->back, &w->q, &w->l);

	if (rc) {
		w->q = NULL;
		return;
	}
	vbi_maint_connect(node, w->q, w->l);
	/* the connection's own bound, then the HELLO's */
	w->deadline_ns = now + 4ull * ctx->attr.cm_timeout_ms * 1000000ull;
}

/* One step of switch @w: true when it is over (connected, or out of
 * attempts). */
static bool switch_step(struct vb_node *node, struct vbi_switch *w, uint64_t now)
{
	struct vb_ctx *ctx = node->ctx;
	char at[INET6_ADDRSTRLEN + 8];

	if (!w->q) {
		if (now < w->next_ns)
			return false;
		switch_start(node, w, now);
		if (!w->q)
			goto failed;
	}
	switch (atomic_load_explicit(&w->q->setup, memory_order_acquire)) {
	case VBI_SETUP_FAILED: /* the lane was destroyed with its connection */
		vbi_err(w->q->setup_rc, "%s", w->q->setup_err);
		w->l = NULL;
		goto failed;
	case VBI_SETUP_CONNECTED:
		break;
	default:
		return false; /* still connecting (bounded by vbi_maint_connect) */
	}
	if (atomic_load(&w->q->up)) {
		atomic_store(&w->l->in_setup, false); /* the last touch: retire may take it */
		atomic_fetch_add(&ctx->st->peer_switches, 1);
		vbi_event(ctx, VB_EV_PEER_SWITCHED, w->name,
			  "%s given up: connected to %s instead after %.3f ms", w->was,
			  addr_str(&w->to, at, sizeof(at)), (double)(now - w->t0_ns) / 1e6);
		return true;
	}
	if (!vbi_lane_dead(w->l) && !w->q->dead && now <= w->deadline_ns)
		return false;
	if (now > w->deadline_ns)
		vbi_err(-ETIMEDOUT, "no HELLO from %s in time", addr_str(&w->to, at, sizeof(at)));
	else
		connect_refusal(w->q, w->l, addr_str(&w->to, at, sizeof(at)));
	connect_give_up(w->q, w->l);
failed:
	vbi_warn("'%s' given up; %s not reachable (attempt %u): %s", w->name,
		 addr_str(&w->to, at, sizeof(at)), w->attempts + 1, vbi_errmsg());
	w->q = NULL;
	w->l = NULL;
	{
		struct sockaddr_storage t = w->to;

		w->to = w->back;
		w->back = t;
	}
	w->next_ns = now + VBI_BACKUP_PAUSE_NS;
	if (++w->attempts < VBI_BACKUP_TRIES)
		return false;
	vbi_event(ctx, VB_EV_PATH_DOWN, w->name,
		  "%s given up and neither it nor its alternative could be reached in %u "
		  "attempts", w->was, VBI_BACKUP_TRIES);
	return true;
}

void vbi_node_backup_step(struct vb_node *node)
{
	uint64_t now = vbi_mono_ns();

	if (atomic_load(&node->stop))
		return;
	pthread_rwlock_rdlock(&node->lock);
	for (struct vbi_peer *p = node->peers; p; p = p->next) {
		struct vbi_switch *w;

		if (!atomic_load(&p->alt_pending) || !atomic_exchange(&p->alt_pending, false))
			continue;
		w = calloc(1, sizeof(*w));
		if (!w) {
			vbi_warn("'%s' given up: no memory to switch to its backup", p->name);
			continue;
		}
		snprintf(w->name, sizeof(w->name), "%s", p->name);
		addr_str(&p->addr, w->was, sizeof(w->was));
		w->to = p->alt_addr;
		w->back = p->addr;
		w->t0_ns = w->next_ns = now;
		w->next = node->switches;
		node->switches = w;
	}
	pthread_rwlock_unlock(&node->lock);
	for (struct vbi_switch **q = &node->switches; *q;) {
		struct vbi_switch *w = *q;

		if (switch_step(node, w, vbi_mono_ns())) {
			*q = w->next;
			free(w);
		} else {
			q = &w->next;
		}
	}
}

int vbi_node_destroy(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_peer *peers;
	struct vbi_lane *pending;

	pthread_rwlock_rdlock(&node->lock);
	if (node->pubs || node->subs) {
		pthread_rwlock_unlock(&node->lock);
		return vbi_err(-EBUSY, "node '%s' still has publishers or subscribers", node->name);
	}
	pthread_rwlock_unlock(&node->lock);
	vbi_maint_stop(node); /* sets stop, joins the conductor */
	vbi_accept_fini(node);

	pthread_rwlock_wrlock(&node->lock);
	peers = node->peers;
	vbi_rcu_assign(node->peers, NULL);
	pending = node->pending;
	node->pending = NULL;
	pthread_rwlock_unlock(&node->lock);
	vbi_rcu_synchronize(); /* the per-peer round that saw them is done */
	for (struct vbi_peer *p = peers; p; p = p->next)
		peer_say_bye(p);
	for (struct vbi_peer *p = peers; p; p = p->next) {
		vbi_mutex_lock(&p->txlock);
		p->closing = true;
		vbi_path_switch(&p->path, NULL, vbi_mono_ns(), NULL);
		vbi_path_take_standby(&p->path); /* freed with p->lanes below */
		vbi_mutex_unlock(&p->txlock);
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

			vbi_mutex_lock(&p->txlock);
			l = p->lanes;
			vbi_mutex_unlock(&p->txlock);
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
			vbi_rcu_assign(*pp, node->next); /* a round standing on it goes on */
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	/* the progress thread's rounds and the FANOUT delivery, which walk
	 * ctx->nodes with no lock, are past it */
	vbi_rcu_synchronize();
	while (node->switches) { /* their peers went with the others */
		struct vbi_switch *w = node->switches;

		node->switches = w->next;
		free(w);
	}
	vbi_maint_fini(node);
	pthread_rwlock_destroy(&node->lock);
	free(node);
	return 0;
}
