/* SPDX-License-Identifier: MIT */
/*
 * FANOUT over IB multicast (docs/transport.md, "FANOUT and multicast").
 *
 * Mapping: topic id -> IPv4 group = the network part of
 * vb_ctx_attr_t.mcast_prefix ("239.192.0.0/14" by default, RFC 2365's
 * organization-local scope) | the topic id's low (32 - N) bits. rdma_cm maps
 * the group to an MGID (RoCE: the IPv4-mapped address). Two topics whose
 * ids share those bits share a group: each subscriber drops the other
 * topic's frames by the full 32-bit topic id in the frame header.
 *
 * Subscriber side: the context has one multicast UD QP, created at the
 * first FANOUT subscription, with the group's Q_Key (rdma_cm's
 * RDMA_UDP_QKEY: every group has the same one; a join reporting another is
 * treated as a failed join), its own receive slots (kind VBI_WR_MC_RECV,
 * dispatched by vbi_ud_recv like the unicast UD QP's) and one membership
 * per subscribed topic, shared by the context's subscribers of the topic
 * (reference counted). The group a subscriber's context joined travels in
 * its SUB frame (the header's epoch field, 0 = not joined).
 *
 * Publisher side: a FANOUT publisher joins its topic's group without
 * attaching a QP (the membership gives the AH, QPN 0xffffff and Q_Key a
 * send needs). A subscriber whose SUB names that same group is reached
 * through the group (vbi_pubpeer.mcast): its publisher posts each datagram
 * once to the group when any such subscriber is live, plus once per
 * subscriber that did not join. When the publisher's join fails, or
 * mcast is 0, every subscriber gets unicast. Join failures are logged once
 * per context and counted (vb_stats_t.mcast_join_failures).
 *
 * No duplicates: a subscriber gets a publisher's datagram either through
 * the group or by unicast, never both. rxe loops a group datagram back to
 * every attached QP of the device, the sender's own included; the
 * publisher sends from the unicast UD QP, which is never attached, so the
 * only local copy is the one the context's multicast QP takes for its own
 * subscribers. Multicast also reaches joined subscribers that are not
 * connected to the publisher (members of the group on the fabric): their
 * streams are per publisher session like any other.
 *
 * Thread-safety: mc->lock serializes joins, leaves, the QP's creation and
 * the retired list; it is taken by sub/pub create and destroy only (joins
 * block up to cm_timeout_ms), never by the progress thread. The receive
 * path (vbi_mcast_recv/_repost) runs in the progress context without it.
 * vbi_mcast_pub_group (proto/mcast_pub.c) runs under pub->lock (with
 * ud_lock) on the publish path and reads only what pub create fixed.
 * Counters are atomics.
 *
 * Layers: this file (engine) holds the mapping, the multicast QP and its
 * slots, every membership (vbi_mcast_pub_join/_retire for a publisher's)
 * and the counters; what reads a publisher's cursors or a peer's
 * subscriptions (which subscriber is reached through the group:
 * vbi_mcast_peer_joined, vbi_mcast_pub_group) and the vb_pub wrappers
 * (vbi_mcast_pub_open/_close) are the protocol's, proto/mcast_pub.c.
 *
 * A publisher's group AH may still be named by a datagram in flight when
 * the publisher goes: its membership is retired and left once the UD send
 * ring is empty (checked at every publisher create/destroy) or at context
 * destroy, after the UD QP has been drained.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/events.h"
#include "engine/lane.h"
#include "engine/mcast.h"
#include "engine/progress.h"
#include "engine/ud.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

struct vbi_mcast_grp {
	struct vbi_mcast_grp *next;
	uint32_t topic;
	uint32_t group;          /* host order; 0 when the join failed */
	unsigned refs;
	struct vbt_mcast *mc;
};

struct vbi_mcast_retired {
	struct vbi_mcast_retired *next;
	struct vbt_mcast *mc;
};

struct vbi_mcast_ctx {
	pthread_mutex_t lock;
	uint32_t net, mask;      /* host order */
	bool warned;             /* a failed join was logged */
	struct vbt_qp *qp;       /* receives the groups' datagrams; NULL until needed */
	bool qp_broken;          /* creating it failed: subscribers use unicast */
	uint32_t qkey;           /* the QP's (= the groups') Q_Key */
	struct vbi_slot *slots;
	uint32_t nslots;
	atomic_uint posted;      /* outstanding receive WRs on qp */
	/* consumed slots not yet posted again (progress: vbi_mcast_repost_held) */
	struct vbi_slot *held[VBI_REPOST_BATCH];
	uint32_t nheld;
	struct vbi_mcast_grp *groups;
	struct vbi_mcast_retired *retired;
};

/* ---- attributes ------------------------------------------------------------------- */

void vbi_mcast_attr_init(vb_ctx_attr_t *a)
{
	vbi_cfg_int(VBI_CFG_MCAST, &a->mcast);
	vbi_cfg_str(VBI_CFG_MCAST_PREFIX, &a->mcast_prefix);
}

/* "A.B.C.D/N" inside 224.0.0.0/4, N in 4..28. */
static int parse_prefix(const char *s, uint32_t *net, uint32_t *mask)
{
	char ip[INET_ADDRSTRLEN];
	const char *slash = s ? strchr(s, '/') : NULL;
	struct in_addr a;
	unsigned long n;
	char *end;

	if (!slash || (size_t)(slash - s) >= sizeof(ip))
		return vbi_err(-EINVAL, "mcast_prefix '%s': expected A.B.C.D/N", s ? s : "(null)");
	memcpy(ip, s, (size_t)(slash - s));
	ip[slash - s] = '\0';
	n = strtoul(slash + 1, &end, 10);
	if (inet_pton(AF_INET, ip, &a) != 1 || *end || n < 4 || n > 28)
		return vbi_err(-EINVAL, "mcast_prefix '%s': expected A.B.C.D/N with N 4..28", s);
	*mask = ~(0xffffffffu >> n);
	*net = ntohl(a.s_addr) & *mask;
	if (!IN_MULTICAST(*net))
		return vbi_err(-EINVAL, "mcast_prefix '%s' is not in 224.0.0.0/4", s);
	return 0;
}

static uint32_t group_of(const struct vbi_mcast_ctx *m, uint32_t topic)
{
	return m->net | (topic & ~m->mask);
}

static void group_sockaddr(uint32_t group, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(group);
}

static const char *group_str(uint32_t group, char *buf, size_t len)
{
	struct in_addr a = { .s_addr = htonl(group) };

	if (!inet_ntop(AF_INET, &a, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

/* A join failed: count it, say so once per context (then at debug level). */
static void join_failed(struct vb_ctx *ctx, const char *who, uint32_t group)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	char g[INET_ADDRSTRLEN];

	atomic_fetch_add(&ctx->st->mcast_join_failures, 1);
	if (!m->warned) {
		m->warned = true;
		vbi_warn("FANOUT %s: multicast group %s unusable, falling back to unicast per "
			 "subscriber (further failures are logged at debug level): %s", who,
			 group_str(group, g, sizeof(g)), vbi_errmsg());
	} else {
		vbi_debug("FANOUT %s: group %s unusable: %s", who, group_str(group, g, sizeof(g)),
			  vbi_errmsg());
	}
}

/* ---- context ---------------------------------------------------------------------- */

int vbi_mcast_ctx_init(struct vb_ctx *ctx)
{
	struct vbi_mcast_ctx *m;
	uint32_t net = 0, mask = 0;
	int rc;

	if (!ctx->attr.mcast)
		return 0;
	if ((rc = parse_prefix(ctx->attr.mcast_prefix, &net, &mask)))
		return rc;
	m = calloc(1, sizeof(*m));
	if (!m)
		return vbi_err(-ENOMEM, "multicast state");
	pthread_mutex_init(&m->lock, NULL);
	m->net = net;
	m->mask = mask;
	ctx->mc = m;
	return 0;
}

static int post_slot(struct vb_ctx *ctx, struct vbi_slot *s)
{
	int rc;

	if (vbi_slots_post(ctx->mc->qp, &s, 1, VBI_UD_GRH + ctx->ud_mtu, &rc))
		atomic_fetch_add(&ctx->mc->posted, 1);
	return rc;
}

void vbi_mcast_repost_held(struct vb_ctx *ctx)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	uint32_t n, ok;
	int rc;

	ctx->mc_held = false;
	if (!m || !(n = m->nheld))
		return;
	m->nheld = 0;
	if (!m->qp || atomic_load(&ctx->stop))
		return;
	ok = vbi_slots_post(m->qp, m->held, n, VBI_UD_GRH + ctx->ud_mtu, &rc);
	atomic_fetch_add(&m->posted, ok);
	if (rc)
		vbi_warn("multicast receive repost failed (%u of %u slots lost): %s", n - ok, n,
			 vbi_errmsg());
}

void vbi_mcast_repost(struct vb_ctx *ctx, struct vbi_slot *s)
{
	struct vbi_mcast_ctx *m = ctx->mc;

	if (atomic_load(&ctx->stop))
		return;
	m->held[m->nheld++] = s; /* the next round's start posts it */
	ctx->mc_held = true;
	if (m->nheld >= vbi_repost_batch(m->nslots))
		vbi_mcast_repost_held(ctx);
}

void vbi_mcast_recv(struct vb_ctx *ctx, struct vbi_slot *s, const struct vbt_wc *wc)
{
	atomic_fetch_sub(&ctx->mc->posted, 1);
	if (wc->status == VBT_WC_SUCCESS)
		vbi_ud_recv(ctx, s, wc->byte_len); /* dispatches, then vbi_ud_repost() */
	else if (!atomic_load(&ctx->stop))
		vbi_warn("multicast receive completion: %s", vbt_wc_status_str(wc->status));
}

/* The receiving QP, brought up with @qkey and its slots posted. m->lock held. */
static int qp_open(struct vb_ctx *ctx, uint32_t qkey)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	struct vbt_peer local;
	int rc;

	if ((rc = vbt_qp_local_peer(m->qp, qkey, &local)) ||
	    (rc = vbt_qp_bring_up(m->qp, &ctx->cp, &local, NULL)))
		return vbi_err_prefix(rc, "multicast QP %u bring-up", m->qp->qpn);
	m->qkey = qkey;
	m->nslots = m->qp->cap.max_recv_wr;
	m->slots = calloc(m->nslots, sizeof(*m->slots));
	if (!m->slots)
		return vbi_err(-ENOMEM, "multicast receive slots");
	for (uint32_t i = 0; i < m->nslots; i++) {
		m->slots[i].kind = VBI_WR_MC_RECV;
		if ((rc = vbi_mempool_alloc(ctx->pool, VBI_UD_GRH + ctx->ud_mtu, &m->slots[i].buf)))
			return vbi_err_prefix(rc, "multicast receive slot %u", i);
	}
	atomic_fetch_add_explicit(&ctx->init_gen, 1, memory_order_release);
	for (uint32_t i = 0; i < m->nslots; i++)
		if ((rc = post_slot(ctx, &m->slots[i])))
			return vbi_err_prefix(rc, "multicast receive slot %u", i);
	return 0;
}

/* Reap the receiving QP: flush, wait for every receive (bounded), destroy.
 * The progress thread is stopped (context destroy). */
static void qp_close(struct vb_ctx *ctx)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	struct timespec t0, t;

	if (!m->qp)
		return;
	if (vbt_qp_state(m->qp) != VB_QPS_RESET) {
		vbt_qp_set_state(m->qp, VB_QPS_ERR);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (atomic_load(&m->posted)) {
			if (vbi_progress_once(ctx) < 0)
				break;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 5) {
				vbi_warn("multicast QP drain: %u receives still outstanding",
					 atomic_load(&m->posted));
				break;
			}
		}
	}
	if (ctx->ops->qp_destroy(m->qp))
		vbi_warn("multicast QP: %s", vbi_errmsg());
	m->qp = NULL;
	m->nheld = 0; /* they are m->slots */
	vbi_slots_free(ctx->pool, m->slots, m->nslots);
	m->slots = NULL;
}

static void leave(struct vb_ctx *ctx, struct vbt_mcast *mc)
{
	ctx->ops->mcast_leave(mc);
	atomic_fetch_sub(&ctx->st->mcast_groups, 1);
}

/* Leave retired publisher memberships once no UD send can name their AH.
 * m->lock held; takes ud_lock. @force: the UD QP is gone. */
static void reap_retired(struct vb_ctx *ctx, bool force)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	bool idle;

	if (!m->retired)
		return;
	pthread_mutex_lock(&ctx->ud_lock);
	vbi_sring_reclaim(&ctx->ud_sr);
	idle = force || ctx->ud_sr.outstanding == 0;
	pthread_mutex_unlock(&ctx->ud_lock);
	if (!idle)
		return;
	while (m->retired) {
		struct vbi_mcast_retired *r = m->retired;

		m->retired = r->next;
		leave(ctx, r->mc);
		free(r);
	}
}

void vbi_mcast_ctx_fini(struct vb_ctx *ctx)
{
	struct vbi_mcast_ctx *m = ctx->mc;

	if (!m)
		return;
	/* Subscribers are gone (nodes were destroyed first), so are their
	 * memberships; a leftover one is left before its QP goes. */
	while (m->groups) {
		struct vbi_mcast_grp *g = m->groups;

		m->groups = g->next;
		if (g->mc)
			leave(ctx, g->mc);
		free(g);
	}
	reap_retired(ctx, true);
	qp_close(ctx);
	pthread_mutex_destroy(&m->lock);
	free(m);
	ctx->mc = NULL;
}

void vbi_mcast_dump(struct vb_ctx *ctx, FILE *f)
{
	struct vbi_mcast_ctx *m = ctx->mc;

	if (!m || pthread_mutex_trylock(&m->lock))
		return; /* none, or a join is running (it may block for a while) */
	if (m->qp)
		fprintf(f, "  FANOUT multicast UD QP %u recvs %u/%u\n", m->qp->qpn,
			atomic_load(&m->posted), m->nslots);
	pthread_mutex_unlock(&m->lock);
}

bool vbi_mcast_uses_dev(struct vb_ctx *ctx)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	bool used;

	if (!m)
		return false;
	if (pthread_mutex_trylock(&m->lock))
		return true; /* a join or leave is running: ask again later */
	used = m->qp || m->groups || m->retired;
	pthread_mutex_unlock(&m->lock);
	return used;
}

void vbi_mcast_sent(struct vb_ctx *ctx, unsigned datagrams)
{
	atomic_fetch_add_explicit(&ctx->st->mcast_datagrams, datagrams, memory_order_relaxed);
}

/* ---- subscribers ------------------------------------------------------------------ */

/* Join (or share) the group of @topic_id for this context's multicast QP.
 * Returns the group (host order) to announce in SUB frames, or 0: the
 * subscribers of this topic get unicast. Blocking (a join); any thread. */
uint32_t vbi_mcast_sub_join(struct vb_ctx *ctx, uint32_t topic_id)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	struct vbi_mcast_grp *g;
	struct sockaddr_in sa;
	struct vbt_mcast *mc = NULL;
	uint32_t group;
	int rc;

	if (!m)
		return 0;
	pthread_mutex_lock(&m->lock);
	if (atomic_load(&ctx->dr[0].removed)) { /* its PD may be gone (dev_reap) */
		pthread_mutex_unlock(&m->lock);
		return 0;
	}
	for (g = m->groups; g; g = g->next)
		if (g->topic == topic_id) {
			g->refs++;
			pthread_mutex_unlock(&m->lock);
			return g->group;
		}
	g = calloc(1, sizeof(*g));
	if (!g) {
		pthread_mutex_unlock(&m->lock);
		return 0;
	}
	g->topic = topic_id;
	g->refs = 1;
	g->next = m->groups;
	m->groups = g;
	group = group_of(m, topic_id);
	group_sockaddr(group, &sa);
	if (m->qp_broken) {
		vbi_err(-EIO, "the multicast QP could not be set up earlier");
		goto fail;
	}
	if (!m->qp) {
		struct vbt_qp_init_attr qa = {
			.type = VB_QPT_UD, .send_cq = ctx->cq, .recv_cq = ctx->cq,
			.cap = { .max_send_wr = 1, .max_recv_wr = ctx->sz.rq_depth,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};

		if ((rc = ctx->ops->qp_create(ctx->pd, &qa, &m->qp))) {
			vbi_err_prefix(rc, "multicast QP");
			goto fail;
		}
	}
	rc = ctx->ops->mcast_join(ctx->dev, NULL, m->qp, (struct sockaddr *)&sa, &ctx->cp, &mc);
	if (rc)
		goto fail;
	atomic_fetch_add(&ctx->st->mcast_groups, 1);
	if (vbt_qp_state(m->qp) == VB_QPS_RESET) {
		if ((rc = qp_open(ctx, mc->qkey))) {
			char msg[VBI_ERRMSG_MAX];

			snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
			leave(ctx, mc);
			mc = NULL;
			/* Half set up: the QP stays until context destroy (it
			 * may hold posted receives); no more joins on it. */
			m->qp_broken = true;
			vbi_err(rc, "%s", msg);
			goto fail;
		}
	} else if (mc->qkey != m->qkey) {
		vbi_err(-EPROTO, "group Q_Key %#x differs from the multicast QP's %#x", mc->qkey,
			m->qkey);
		leave(ctx, mc);
		mc = NULL;
		goto fail;
	}
	g->mc = mc;
	g->group = group;
	atomic_fetch_add(&ctx->st->mcast_joins, 1);
	pthread_mutex_unlock(&m->lock);
	return group;
fail:
	join_failed(ctx, "subscriber", group);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* Drop one reference to @topic_id's membership (the last one leaves). */
void vbi_mcast_sub_leave(struct vb_ctx *ctx, uint32_t topic_id)
{
	struct vbi_mcast_ctx *m = ctx->mc;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	for (struct vbi_mcast_grp **pg = &m->groups; *pg; pg = &(*pg)->next) {
		struct vbi_mcast_grp *g = *pg;

		if (g->topic != topic_id)
			continue;
		if (--g->refs == 0) {
			*pg = g->next;
			if (g->mc)
				leave(ctx, g->mc);
			free(g);
		}
		break;
	}
	pthread_mutex_unlock(&m->lock);
}

/* ---- publishers ------------------------------------------------------------------- */

/* A FANOUT publisher's membership of its topic's group, to send to it (no
 * QP attached): *@group is set to the group, *@mcp to the membership or
 * NULL (the join failed: unicast only; @who names the publisher in the
 * log). Nothing is set when multicast is off. Blocking; any thread, before
 * the publisher is linked (proto/mcast_pub.c: vbi_mcast_pub_open). */
void vbi_mcast_pub_join(struct vb_ctx *ctx, uint32_t topic_id, const char *who, uint32_t *group,
			struct vbt_mcast **mcp)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	struct sockaddr_in sa;
	int rc;

	if (!m)
		return;
	*group = group_of(m, topic_id);
	group_sockaddr(*group, &sa);
	pthread_mutex_lock(&m->lock);
	if (atomic_load(&ctx->dr[0].removed)) { /* its PD may be gone (dev_reap) */
		pthread_mutex_unlock(&m->lock);
		*mcp = NULL;
		return;
	}
	reap_retired(ctx, false);
	rc = ctx->ops->mcast_join(ctx->dev, ctx->pd, NULL, (struct sockaddr *)&sa, &ctx->cp, mcp);
	if (rc) {
		*mcp = NULL;
		join_failed(ctx, who, *group);
	} else {
		atomic_fetch_add(&ctx->st->mcast_joins, 1);
		atomic_fetch_add(&ctx->st->mcast_groups, 1);
	}
	pthread_mutex_unlock(&m->lock);
}

/* A publisher's membership *@mcp (NULL: none) is retired, left when no
 * send can use it; *@mcp is NULL after. @who names the publisher in the
 * log. The publisher is unlinked (proto/mcast_pub.c: vbi_mcast_pub_close). */
void vbi_mcast_pub_retire(struct vb_ctx *ctx, struct vbt_mcast **mcp, const char *who)
{
	struct vbi_mcast_ctx *m = ctx->mc;
	struct vbi_mcast_retired *r;

	if (!m || !*mcp)
		return;
	pthread_mutex_lock(&m->lock);
	r = calloc(1, sizeof(*r));
	if (r) {
		r->mc = *mcp;
		r->next = m->retired;
		m->retired = r;
	} else {
		vbi_warn("'%s': out of memory retiring its multicast group: it stays joined", who);
	}
	*mcp = NULL;
	reap_retired(ctx, false);
	pthread_mutex_unlock(&m->lock);
}
