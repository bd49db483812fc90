/* SPDX-License-Identifier: MIT */
/*
 * The node's conductor thread (vb-maint; one per vb_node). It owns the
 * node's topology and never blocks on a peer's handshake: each cycle it
 * waits in poll() on its wake-up eventfd (vbi_maint_kick), the
 * descriptors of the accept duty (engine/accept.c: listeners, handshakes
 * in progress) and those of the lanes it is connecting, then
 *   - runs the accept duty,
 *   - steps the connections it is setting up (build_step),
 *   - when kicked, or at its next round (50 ms after the last one while
 *     something is pending; each round that finds nothing to do doubles
 *     that, up to 500 ms, so that an idle node's conductor sleeps): drops
 *     accepted connections that sent no
 *     HELLO in time, begins retiring old lanes (QP to ERR, drain marker),
 *     switches given-up peers to their backup node, reaps dead peers, and
 *     for every live peer warms a standby, starts a replacement lane after
 *     a failure, probes RC while degraded, and gives up a peer that cannot
 *     be reached (the recovery timeout, or the dead-peer evidence rule:
 *     docs/recovery.md),
 *   - frees the retired lanes whose WRs all completed (drain_step: one
 *     grace period for those of the cycle), checking every 1 ms while
 *     some drain.
 * What still blocks it: an RCU grace period and the QP pool's refill. The
 * switch to a backup node (vbi_node_backup_step) connects its new peers
 * through vbi_maint_connect, in steps too.
 *
 * Threads: only this thread builds lanes for the connecting side and
 * frees lanes and peers (besides node destruction, after it is joined);
 * what it changes on a peer it changes under the peer's txlock.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "engine/accept.h"
#include "engine/engine.h"
#include "engine/events.h"
#include "engine/lane.h"
#include "engine/lanepool.h"
#include "engine/progress.h"
#include "engine/upcalls.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

/* ---- maintenance thread ------------------------------------------------------------------- */

void vbi_maint_kick(struct vb_node *node)
{
	uint64_t one = 1;

	if (node->wake_fd >= 0)
		(void)!write(node->wake_fd, &one, sizeof(one));
}

static uint64_t recover_timeout_ns(struct vb_ctx *ctx)
{
	return (uint64_t)ctx->attr.cm_timeout_ms * 3 * 1000000ull;
}

/* Within the quiet time after a switch of connection (vbi_ctx_quiet): the
 * work that can wait (retiring lanes, refilling the QP pool, warming a
 * standby or a probe) waits, unless the node is stopping. Its end is the
 * conductor's next round (maint_main). */
static bool maint_quiet(struct vb_node *node, uint64_t now)
{
	return now < atomic_load(&node->ctx->quiet_until_ns) && !atomic_load(&node->stop);
}

static void timer_arm(struct vb_node *node, uint64_t at_ns)
{
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(at_ns / 1000000000ull),
						.tv_nsec = (long)(at_ns % 1000000000ull) } };

	(void)timerfd_settime(node->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Have the conductor run a round by @at_ns (CLOCK_MONOTONIC) without
 * waking it now: the earliest time asked for is the one armed. Any
 * thread. */
static void maint_wake_at(struct vb_node *node, uint64_t at_ns)
{
	uint64_t cur = atomic_load(&node->wake_at_ns);

	if (node->timer_fd < 0)
		return; /* no conductor (nor wake_fd): nothing to wake */
	do {
		if (cur && cur <= at_ns)
			return; /* an earlier one is armed (or fired, not yet taken) */
	} while (!atomic_compare_exchange_weak(&node->wake_at_ns, &cur, at_ns));
	timer_arm(node, at_ns);
	/* another thread may have lowered it after our exchange and armed
	 * before us: the earliest is armed last */
	while ((cur = atomic_load(&node->wake_at_ns)) && cur < at_ns) {
		timer_arm(node, cur);
		at_ns = cur;
	}
}

/* Within the quiet time the work a switch leaves for the conductor waits
 * for its end anyway: the conductor is not woken now (it would take the
 * CPU from the threads carrying the switch: docs/benchmarks.md, "A
 * failover, thread by thread"); its timer is armed for that end instead,
 * in case it sleeps longer (an idle conductor's rounds are up to
 * MAINT_IDLE_NS apart). */
void vbi_maint_kick_unless_quiet(struct vb_node *node)
{
	uint64_t until = atomic_load(&node->ctx->quiet_until_ns);

	if (!maint_quiet(node, vbi_mono_ns()))
		vbi_maint_kick(node);
	else
		maint_wake_at(node, until);
}

/* Begin retiring the lanes marked so: peers' lanes and pending (unbound)
 * ones; one still in its set-up thread's hands is left for a later round.
 * They wait on node->drain for their WRs (drain_step). Within the quiet
 * time the peers' lanes wait: the caller looked at it before, but a switch
 * (which starts it, then marks the old lane, both under the peer's txlock)
 * may have come since; looked at again under each txlock, the old lane is
 * either not marked yet or the quiet time is seen. */
static void maint_retire(struct vb_node *node)
{
	for (;;) {
		struct vbi_lane *victim = NULL;

		pthread_rwlock_wrlock(&node->lock);
		for (struct vbi_lane **q = &node->pending; *q; q = &(*q)->next) {
			if (!vbi_lane_dead(*q) && !atomic_load(&(*q)->fail_act))
				continue;
			if (atomic_load(&(*q)->in_setup))
				continue;
			victim = *q;
			*q = victim->next;
			victim->next = NULL;
			vbi_lane_life_raise(victim, VBI_LANE_RETIRING);
			break;
		}
		for (struct vbi_peer *p = node->peers; p && !victim; p = p->next) {
			vbi_mutex_lock(&p->txlock);
			if (maint_quiet(node, vbi_mono_ns())) {
				vbi_mutex_unlock(&p->txlock);
				break;
			}
			for (struct vbi_lane *l = p->lanes; l; l = l->next) {
				if (atomic_load(&l->life) != VBI_LANE_RETIRING)
					continue;
				if (atomic_load(&l->in_setup))
					continue;
				vbi_lane_life_raise(l, VBI_LANE_DRAINING);
				victim = l;
				break;
			}
			vbi_mutex_unlock(&p->txlock);
		}
		pthread_rwlock_unlock(&node->lock);
		if (!victim)
			return;
		vbi_lane_retire_start(victim);
		victim->drain_next = node->drain;
		node->drain = victim;
	}
}

/* The lanes on node->drain whose WRs all completed: unlinked, then, after
 * one grace period for all of them, freed. Every conductor cycle; the
 * conductor waits at most 1 ms while lanes drain (conductor_wait). Returns
 * true when it freed some (their peers may be reaped now). */
static bool drain_step(struct vb_node *node)
{
	struct vbi_lane *done = NULL;

	for (struct vbi_lane **q = &node->drain; *q;) {
		struct vbi_lane *l = *q;

		if (!vbi_lane_retire_drained(l)) {
			q = &l->drain_next;
			continue;
		}
		*q = l->drain_next;
		vbi_lane_unlink(l);
		l->drain_next = done;
		done = l;
	}
	if (!done)
		return false;
	vbi_rcu_synchronize(); /* posters that read them before they were unpublished */
	while (done) {
		struct vbi_lane *l = done;

		done = l->drain_next;
		vbi_lane_free(l);
	}
	return true;
}

static struct vbi_devres *pick_dev(struct vb_ctx *ctx, struct vbi_peer *p, bool standby,
				   const struct sockaddr_storage **dst)
{
	struct vbi_lane *active = vbi_path_lane(&p->path);
	int order[2] = { 0, 1 };

	/* A standby goes on the other device than the active lane when it can. */
	if (standby && active && active->dr->idx == 0)
		order[0] = 1, order[1] = 0;
	for (int i = 0; i < 2; i++) {
		struct vbi_devres *dr = &ctx->dr[order[i]];
		const struct sockaddr_storage *a = order[i] ? &p->sb_addr : &p->addr;

		if ((unsigned)order[i] >= ctx->ndev || !a->ss_family)
			continue;
		if (atomic_load(&dr->fatal) || atomic_load(&dr->port_down))
			continue;
		*dst = a;
		return dr;
	}
	return NULL;
}

/* A lane whose connection could not be set up: unbound from the probe
 * slot and destroyed (the error message is kept). Conductor thread. */
static void build_abandon(struct vbi_peer *p, struct vbi_lane *l)
{
	char msg[VBI_ERRMSG_MAX];

	snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
	vbi_mutex_lock(&p->txlock);
	if (p->probe == l)
		p->probe = NULL;
	vbi_mutex_unlock(&p->txlock);
	atomic_store(&l->in_setup, false);
	vbi_lane_destroy_now(l);
	vbi_err(-EIO, "%s", msg);
}

/* A new peer's primary lane could not be connected (@rc, the message in
 * vbi_errmsg()): destroyed, the peer dead, the error kept for the thread
 * that waits (p->setup). Conductor thread. */
static void primary_failed(struct vbi_peer *p, struct vbi_lane *l, int rc)
{
	snprintf(p->setup_err, sizeof(p->setup_err), "%s", vbi_errmsg());
	p->setup_rc = rc < 0 ? rc : -EIO;
	build_abandon(p, l);
	vbi_mutex_lock(&p->txlock);
	p->dead = true;
	vbi_mutex_unlock(&p->txlock);
	atomic_store_explicit(&p->setup, VBI_SETUP_FAILED, memory_order_release);
}

/* Start connecting @l (bound to @p, in_setup) to @dst; build_step steps it
 * until @deadline_ns (0: 3 x cm_timeout_ms from now). 0, or a negative
 * errno (nothing started: @l is still the caller's). */
static int build_begin(struct vbi_peer *p, struct vbi_lane *l, uint8_t role,
		       const struct sockaddr_storage *dst, uint64_t deadline_ns)
{
	struct vb_ctx *ctx = p->node->ctx;
	int rc = ctx->ops->connect_start(l->dr->dev, l->qp, (const struct sockaddr *)dst,
					 &ctx->cp, &l->conn);

	if (rc != -EINPROGRESS)
		return rc ? rc : vbi_err(-EPROTO, "connect_start: no step to take");
	p->building = l;
	p->build_role = role;
	p->build_deadline_ns = deadline_ns ? deadline_ns
					   : vbi_mono_ns() + 3ull * ctx->attr.cm_timeout_ms * 1000000ull;
	return 0;
}

/* Connector: start building a lane of @role and @mode to @p (p->building,
 * stepped by build_step). Degraded (UC/UD) lanes go to the peer's UC/UD
 * listener on its primary address, from our primary device. A
 * replacement's attempt ends by the peer's recovery deadline
 * (@deadline_ns), so the peer is given up on time and not one attempt
 * later (net_link_cut_test: 54.8 s instead of 45); any other by three CM
 * steps' cm_timeout_ms. 0 (started) or a negative errno. Conductor
 * thread, no lock held. */
static int build_start(struct vb_node *node, struct vbi_peer *p, uint8_t role,
		       enum vb_qp_type mode, uint64_t deadline_ns)
{
	struct vb_ctx *ctx = node->ctx;
	const struct sockaddr_storage *dst = NULL;
	struct sockaddr_storage dm;
	struct vbi_devres *dr;
	struct vbi_lane *l;
	int rc;

	vbi_mutex_lock(&p->txlock);
	if (mode == VB_QPT_RC) {
		dr = pick_dev(ctx, p, role == VBI_LANE_STANDBY, &dst);
	} else {
		uint16_t port = mode == VB_QPT_UC ? p->uc_port : p->ud_port;

		dr = &ctx->dr[0];
		dm = p->addr;
		if (dm.ss_family == AF_INET)
			((struct sockaddr_in *)&dm)->sin_port = htons(port);
		else
			((struct sockaddr_in6 *)&dm)->sin6_port = htons(port);
		dst = &dm;
		if (!port || atomic_load(&dr->fatal) || atomic_load(&dr->port_down))
			dr = NULL;
	}
	vbi_mutex_unlock(&p->txlock);
	if (!dr)
		return vbi_err(-ENETDOWN, "no device or %s listener towards '%s'",
			       vbi_path_mode_name(mode), p->name);
	rc = vbi_lane_new(node, dr, mode, false, &l);
	if (rc)
		return rc;
	/* bound before it connects: the peer's HELLO may arrive first; ours
	 * (in_setup) until the connection is set up */
	atomic_store(&l->in_setup, true);
	vbi_mutex_lock(&p->txlock);
	l->id = p->next_lane_id++;
	l->role = role;
	vbi_lane_bind(l, p);
	if (role == VBI_LANE_PROBE)
		p->probe = l;
	vbi_mutex_unlock(&p->txlock);
	if ((rc = build_begin(p, l, role, dst, deadline_ns)))
		build_abandon(p, l);
	return rc;
}

/*
 * Degraded (connector): probe RC with an idle RC lane; every probe
 * interval it is alive counts as a successful probe (core/path); when the
 * policy says the hold has passed, it becomes the active lane (promotion:
 * rewind, LANE frame, the peer follows). Maintenance thread.
 */
static void maint_probe(struct vb_node *node, struct vbi_peer *p, uint64_t now)
{
	struct vb_ctx *ctx = node->ctx;
	uint64_t ival = vbi_rto_ns();
	struct vbi_lane *pl, *old = NULL;
	int due;

	vbi_mutex_lock(&p->txlock);
	pl = p->probe;
	if (!pl || !atomic_load(&pl->hello_rcvd) || vbi_lane_dead(pl) ||
	    vbi_path_recovering(&p->path) || now - p->probe_ns < ival) {
		vbi_mutex_unlock(&p->txlock);
		return;
	}
	p->probe_ns = now;
	atomic_fetch_add(&ctx->st->probes, 1);
	due = vbi_path_probe(&p->path, VB_QPT_RC, 1, now);
	if (due == 1) {
		old = vbi_peer_activate(p, pl, true, true);
		if (old)
			vbi_lane_retire(old);
	}
	vbi_mutex_unlock(&p->txlock);
	if (due == 1) {
		vbi_peer_pev_flush(p);
		vbi_maint_kick(node);
	}
}

static unsigned keepalive_or(const struct vb_ctx *ctx, unsigned dflt)
{
	return ctx->attr.keepalive_ms ? ctx->attr.keepalive_ms : dflt;
}

/* Connector: building a lane of @role to @p failed with @rc (the message
 * in vbi_errmsg()): the dead-peer rule, or a retry after a backoff.
 * Conductor thread, no lock held. */
static void build_failed(struct vb_node *node, struct vbi_peer *p, int rc, uint8_t role)
{
	struct vb_ctx *ctx = node->ctx;
	uint64_t now = vbi_mono_ns();
	uint64_t back = 50000000ull << (p->warm_failures < 5 ? p->warm_failures : 5);
	bool silent;

	/* Its active connection failed, nothing arrived from it since (for
	 * two keepalive periods at least: a live peer answers a switch at
	 * once), and now its node refuses a connection (no listener: the
	 * process is gone) or cannot be reached: it is dead, not slow. Give
	 * it up now rather than after recover_timeout (docs/recovery.md,
	 * "Detecting a dead peer"). */
	uint64_t rx_ns = atomic_load_explicit(&p->last_rx_ns, memory_order_relaxed);

	vbi_mutex_lock(&p->txlock);
	silent = p->fail_watch && rx_ns == p->rx_ns_at_fail &&
		 vbi_now_ns() - rx_ns >= 2 * (uint64_t)keepalive_or(ctx, 100) * 1000000ull;
	vbi_mutex_unlock(&p->txlock);
	if (silent && (rc == -ECONNREFUSED || rc == -EHOSTUNREACH || rc == -ENETUNREACH)) {
		char why[VBI_ERRMSG_MAX + 96];

		snprintf(why, sizeof(why), "its connection failed, it sent nothing since, "
			 "and a new one was %s (%s)",
			 rc == -ECONNREFUSED ? "refused" : "unreachable", vbi_errmsg());
		vbi_mutex_lock(&p->txlock);
		vbi_path_fail(&p->path, vbi_path_epoch(&p->path), now, VBI_PATH_F_NO_STANDBY);
		vbi_mutex_unlock(&p->txlock);
		vbi_peer_pev_flush(p);
		atomic_fetch_add(&ctx->st->path_downs, 1);
		ctx->up->peer_failed(p, why);
		return;
	}
	if (role == VBI_LANE_PROBE)
		vbi_path_probe(&p->path, VB_QPT_RC, 0, now);
	p->warm_failures++;
	p->warm_after_ns = vbi_mono_ns() + back;
	vbi_info("peer '%s': %s lane not built (retry in %llu ms): %s", p->name,
		 role == VBI_LANE_REPLACE ? "replacement"
					  : role == VBI_LANE_PROBE ? "RC probe" : "standby",
		 (unsigned long long)(back / 1000000), vbi_errmsg());
}

/* One live peer's round. Returns true while it needs the conductor's
 * rounds to come at the busy pace: a lane missing (standby, replacement,
 * probe), one being built or waiting for its HELLO, a probe lane, or a
 * replaced standby not yet retired. */
static bool maint_peer(struct vb_node *node, struct vbi_peer *p)
{
	struct vb_ctx *ctx = node->ctx;
	uint64_t now, since;
	bool need_lane, need_standby, need_probe, waiting_hello = false, replaced = false, busy;
	enum vb_qp_type mode;
	struct vbi_lane *act;
	int rc;

	vbi_mutex_lock(&p->txlock);
	/* read once the lock is held: the progress thread stamps a failure
	 * (recover_since_ns), a HELLO (replaced_ns) and a new lane under it,
	 * and an earlier reading is older than those stamps (now - since
	 * would wrap: a peer given up 5 ms into its recovery) */
	now = vbi_mono_ns();
	/* read with the lane under txlock (failures are decided under it): a
	 * DEGRADE in between must not leave us building the old mode */
	mode = vbi_path_mode(&p->path);
	since = p->recover_since_ns;
	act = vbi_path_lane(&p->path);
	need_lane = !act && since;
	need_standby = !need_lane && ctx->attr.standby && !vbi_path_has_standby(&p->path) && act &&
		       act->mode == VB_QPT_RC && mode == VB_QPT_RC;
	need_probe = !need_lane && act && mode != VB_QPT_RC && !p->probe &&
		     !vbi_path_recovering(&p->path);
	for (struct vbi_lane *l = p->lanes; l; l = l->next) {
		if (!vbi_lane_dead(l) && !atomic_load(&l->hello_rcvd)) {
			waiting_hello = true;
			/* an unreliable lane's HELLO may be lost: give up on it */
			if (l->mode != VB_QPT_RC && now - l->created_ns > recover_timeout_ns(ctx))
				vbi_lane_retire(l);
		}
		/* a replaced standby no LANE frame came for */
		if (l->replaced_ns && l != act && !vbi_lane_dead(l)) {
			replaced = true;
			if (now - l->replaced_ns > VBI_REPLACED_KEEP_NS)
				vbi_lane_retire(l);
		}
	}
	vbi_mutex_unlock(&p->txlock);

	if (need_lane && now - since > recover_timeout_ns(ctx)) {
		vbi_mutex_lock(&p->txlock);
		vbi_path_fail(&p->path, vbi_path_epoch(&p->path), now, VBI_PATH_F_NO_STANDBY);
		vbi_mutex_unlock(&p->txlock);
		vbi_peer_pev_flush(p);
		atomic_fetch_add(&ctx->st->path_downs, 1);
		ctx->up->peer_failed(p, "no connection could be rebuilt in time");
		return true;
	}
	if (p->connector && !need_lane && mode != VB_QPT_RC)
		maint_probe(node, p, now);
	/* the accepting side waits for the connector's standby or probe */
	busy = need_lane || waiting_hello || replaced || p->building || p->probe ||
	       (p->connector && (need_standby || need_probe));
	if (!p->connector || p->building || waiting_hello ||
	    (!need_lane && !need_standby && !need_probe) || now < p->warm_after_ns ||
	    atomic_load(&node->stop) || (!need_lane && maint_quiet(node, now)))
		return busy;
	{
		uint8_t role = need_lane ? VBI_LANE_REPLACE
					 : need_probe ? VBI_LANE_PROBE : VBI_LANE_STANDBY;

		rc = build_start(node, p, role, need_lane ? mode : VB_QPT_RC,
				 need_lane ? since + recover_timeout_ns(ctx) : 0);
		if (rc)
			build_failed(node, p, rc, role);
	}
	return true;
}

/* ---- the connections the conductor sets up --------------------------------------------------- */

/* Peers with a lane being connected (node->lock held for reading): at most
 * @max into @out. They are not reaped while they have it. */
static unsigned builds_list(struct vb_node *node, struct vbi_peer **out, unsigned max)
{
	unsigned n = 0;

	for (struct vbi_peer *p = node->peers; p && n < max; p = p->next)
		if (p->building)
			out[n++] = p;
	return n;
}

/* The lane of @p connected: it says HELLO. Or it failed, timed out, or is
 * no longer wanted: destroyed, and (the first two) counted as a failed
 * attempt. Conductor thread, no lock held. */
static void build_step(struct vb_node *node, struct vbi_peer *p)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_lane *l = p->building;
	uint8_t role = p->build_role;
	int rc;

	if (atomic_load(&node->stop) || atomic_load(&p->dead) || atomic_load(&p->closing) ||
	    vbi_lane_dead(l)) {
		rc = vbi_err(-ECANCELED, "peer '%s': lane set-up abandoned", p->name);
	} else {
		rc = ctx->ops->conn_step(l->conn);
		if (rc == -EINPROGRESS) {
			if (vbi_mono_ns() < p->build_deadline_ns)
				return;
			rc = vbi_err(-ETIMEDOUT, "connection not set up by its deadline");
		}
	}
	p->building = NULL;
	if (rc && role == VBI_LANE_PRIMARY) {
		primary_failed(p, l, rc);
		return;
	}
	if (rc) {
		build_abandon(p, l);
		if (rc != -ECANCELED)
			build_failed(node, p, rc, role);
		return;
	}
	atomic_store(&l->conn_ready, true);
	vbi_ctx_kick(ctx);
	ctx->up->lane_send_hello(l);
	if (role == VBI_LANE_PRIMARY)
		atomic_store_explicit(&p->setup, VBI_SETUP_CONNECTED, memory_order_release);
	else
		atomic_store(&l->in_setup, false);
	p->warm_failures = 0;
}

void vbi_maint_connect(struct vb_node *node, struct vbi_peer *p, struct vbi_lane *l)
{
	int rc;

	atomic_store(&p->setup, VBI_SETUP_CONNECTING);
	if (atomic_load(&p->dead) || atomic_load(&node->stop))
		rc = vbi_err(-ECANCELED, "connection abandoned");
	else
		rc = build_begin(p, l, VBI_LANE_PRIMARY, &p->addr, 0);
	if (rc)
		primary_failed(p, l, rc);
}

void vbi_maint_connect_queue(struct vb_node *node, struct vbi_peer *p, struct vbi_lane *l)
{
	p->setup_lane = l;
	atomic_store(&p->setup, VBI_SETUP_QUEUED);
	vbi_llist_add(&node->connects, &p->connect_node); /* publishes setup_lane */
	vbi_maint_kick(node);
}

/* Start connecting what other threads handed over, in the order they did. */
static void connects_take(struct vb_node *node)
{
	struct vbi_llnode *n = vbi_llist_take(&node->connects);

	while (n) {
		struct vbi_peer *p = vbi_llist_entry(n, struct vbi_peer, connect_node);

		n = n->next;
		vbi_maint_connect(node, p, p->setup_lane);
	}
}

static void builds_step(struct vb_node *node)
{
	struct vbi_peer *todo[VBI_MAX_PEERS];
	unsigned n;

	pthread_rwlock_rdlock(&node->lock);
	n = builds_list(node, todo, VBI_MAX_PEERS);
	pthread_rwlock_unlock(&node->lock);
	for (unsigned i = 0; i < n; i++)
		build_step(node, todo[i]);
}

static unsigned builds_pollfds(struct vb_node *node, struct pollfd *pfd)
{
	const struct vbt_ops *ops = node->ctx->ops;
	struct vbi_peer *todo[VBI_MAX_PEERS];
	unsigned n;

	pthread_rwlock_rdlock(&node->lock);
	n = builds_list(node, todo, VBI_MAX_PEERS);
	for (unsigned i = 0; i < n; i++)
		pfd[i] = (struct pollfd){ .fd = ops->conn_fd(todo[i]->building->conn),
					  .events = POLLIN };
	pthread_rwlock_unlock(&node->lock);
	return n;
}

/* ---- the conductor ---------------------------------------------------------------------------- */

#define MAINT_ROUND_NS 50000000ull /* the next round while something is pending */
#define MAINT_IDLE_NS 500000000ull /* at most this long between an idle node's rounds */

/* The maintenance round (when kicked, or at the time maint_main set).
 * Returns true when something is pending that needs the next round soon
 * (MAINT_ROUND_NS): accepted connections waiting for their HELLO, a
 * switch to a backup node, peers being set up, given up or closing (to be
 * reaped), QPs just made for the pool, the quiet time, or a live peer's
 * (maint_peer). False: an idle node, whose next round may wait longer. */
static bool maint_round(struct vb_node *node)
{
	struct vb_ctx *ctx = node->ctx;
	struct vbi_peer *todo[VBI_MAX_PEERS];
	unsigned n = 0;
	bool busy = true; /* within the quiet time: what it leaves comes at its end */

	/* maint_retire below sees every lane marked so far (also those
	 * another thread destroys itself, or leaves for a later round) */
	atomic_store(&node->retiring, 0);
	ctx->up->node_pending_expire(node);
	if (!maint_quiet(node, vbi_mono_ns())) {
		maint_retire(node);
		/* QPs ahead of demand, after the recycled ones */
		busy = vbi_lanepool_refill(ctx) > 0;
	}
	ctx->up->node_backup_step(node);
	ctx->up->node_reap(node);
	/* Peers are freed by vbi_node_reap, on this thread, above: the
	 * snapshot stays valid until the next round. */
	pthread_rwlock_rdlock(&node->lock);
	busy = busy || node->pending || node->switches;
	for (struct vbi_peer *p = node->peers; p && n < VBI_MAX_PEERS; p = p->next)
		if (atomic_load(&p->up) && !atomic_load(&p->dead) && !atomic_load(&p->closing))
			todo[n++] = p;
		else
			busy = true;
	pthread_rwlock_unlock(&node->lock);
	for (unsigned i = 0; i < n && !atomic_load(&node->stop); i++)
		busy = maint_peer(node, todo[i]) || busy;
	return busy;
}

/* Wait for something to do: a wake-up, an accept or connection event, the
 * next round (@round_ns), or what the accept duty asked (@accept_ms).
 * Returns true when woken or a lane waits for retirement. */
static bool conductor_wait(struct vb_node *node, uint64_t round_ns, int accept_ms)
{
	struct pollfd *pfd = node->maint_pfd;
	uint64_t now = vbi_mono_ns(), v;
	int timeout = round_ns > now ? (int)((round_ns - now) / 1000000ull) + 1 : 0;
	unsigned retiring;
	nfds_t n = 0;

	pfd[n++] = (struct pollfd){ .fd = node->wake_fd, .events = POLLIN };
	pfd[n++] = (struct pollfd){ .fd = node->timer_fd, .events = POLLIN };
	n += vbi_accept_pollfds(node, pfd + n);
	n += builds_pollfds(node, pfd + n);
	retiring = atomic_load(&node->retiring);
	if (retiring || accept_ms < timeout)
		timeout = retiring ? 0 : accept_ms;
	if (node->drain && timeout > 1)
		timeout = 1; /* the progress thread reaps their WRs meanwhile */
	if (poll(pfd, n, timeout) <= 0)
		return retiring != 0;
	if (pfd[1].revents & POLLIN) {
		/* cleared first: a time asked for from now on is armed again */
		atomic_store(&node->wake_at_ns, 0);
		(void)!read(node->timer_fd, &v, sizeof(v));
	}
	if (pfd[0].revents & POLLIN)
		(void)!read(node->wake_fd, &v, sizeof(v));
	return retiring != 0 || (pfd[0].revents & POLLIN) || (pfd[1].revents & POLLIN);
}

static void *maint_main(void *arg)
{
	struct vb_node *node = arg;
	uint64_t round_ns = 0, period = MAINT_ROUND_NS;
	int accept_ms = 0;

	vbi_lib_thread_enter();
	while (!atomic_load(&node->stop)) {
		bool kicked = conductor_wait(node, round_ns, accept_ms);
		uint64_t now;

		if (atomic_load(&node->stop))
			break;
		now = vbi_mono_ns();
		accept_ms = vbi_accept_duty(node, now);
		connects_take(node);
		builds_step(node);
		if (kicked || now >= round_ns) {
			uint64_t quiet = atomic_load(&node->ctx->quiet_until_ns);

			/* idle rounds come further apart, up to MAINT_IDLE_NS:
			 * whatever needs one sooner wakes it (vbi_maint_kick,
			 * the timer of vbi_maint_kick_unless_quiet, its
			 * descriptors) */
			if (maint_round(node))
				period = MAINT_ROUND_NS;
			else if ((period *= 2) > MAINT_IDLE_NS)
				period = MAINT_IDLE_NS;
			round_ns = vbi_mono_ns() + period;
			if (quiet > now && quiet < round_ns)
				round_ns = quiet; /* what it left waits for this */
		}
		if (drain_step(node))
			round_ns = 0; /* a round now: their peers may be reaped */
	}
	connects_take(node); /* stop: what is being connected is abandoned */
	builds_step(node);
	while (node->drain) { /* stop: what drains goes before the node */
		drain_step(node);
		if (node->drain)
			vbi_progress_or_nap(node->ctx);
	}
	return NULL;
}

int vbi_maint_start(struct vb_node *node)
{
	unsigned nfd = 2 + (node->accept ? vbi_accept_maxfds(node) : 0) + VBI_MAX_PEERS;
	int rc;

	node->maint_pfd = calloc(nfd, sizeof(*node->maint_pfd));
	if (!node->maint_pfd)
		return vbi_err(-ENOMEM, "conductor");
	node->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (node->wake_fd < 0) {
		rc = vbi_err(-errno, "conductor eventfd: %s", strerror(errno));
		goto err;
	}
	node->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (node->timer_fd < 0) {
		rc = vbi_err(-errno, "conductor timerfd: %s", strerror(errno));
		goto err;
	}
	rc = -pthread_create(&node->maint_thread, NULL, maint_main, node);
	if (rc) {
		vbi_err(rc, "conductor thread: %s", strerror(-rc));
		goto err;
	}
	vbi_thread_name(node->maint_thread, "vb-maint");
	node->maint_running = true;
	return 0;
err:
	vbi_maint_fini(node);
	return rc;
}

void vbi_maint_stop(struct vb_node *node)
{
	atomic_store(&node->stop, true);
	if (node->maint_running) {
		vbi_maint_kick(node);
		vbi_join_progressing(node->ctx, node->maint_thread);
		node->maint_running = false;
	}
}

void vbi_maint_fini(struct vb_node *node)
{
	if (node->wake_fd >= 0)
		close(node->wake_fd);
	node->wake_fd = -1;
	if (node->timer_fd >= 0)
		close(node->timer_fd);
	node->timer_fd = -1;
	free(node->maint_pfd);
	node->maint_pfd = NULL;
}
