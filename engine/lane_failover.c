/* SPDX-License-Identifier: MIT */
/*
 * Failover: error classification of completions and async events
 * (core/errpolicy), the switch to a pre-warmed standby lane (core/path:
 * RCU-published active lane, epoch, policy). The lanes themselves are in
 * lane.c, the HELLO that binds a connection to its peer in lane_hello.c.
 * The per-node maintenance thread that retires old lanes, warms standbys
 * and rebuilds a lane when no standby was left is in maint.c.
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
 *  Steps 3 and 4 wait until the switch has settled: for
 *  VERBUS_FAILOVER_QUIET_MS (50 ms) after it the conductors leave them
 *  (vbi_ctx_quiet, maint.c), so that the LANE frame, the retransmission
 *  and the first deliveries do not queue for the CPU behind a QP's
 *  teardown, a new connection's set-up and the pool's QP creation.
 *
 * Thread-safety: vbi_lane_report and vbi_dev_event may run on any thread
 * (atomics only); everything that changes which lane is active runs with
 * the peer's txlock held; lanes are freed only by the maintenance thread or
 * node destruction, after their WRs are reaped and a grace period passed.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/events.h"
#include "engine/lane.h"
#include "engine/progress.h"
#include "engine/upcalls.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

/* ---- failure reports (any thread) ----------------------------------------------------- */

void vbi_lane_report(struct vbi_lane *l, struct vbi_err_verdict v, const char *why)
{
	struct vb_ctx *ctx = l->node->ctx;
	int cur;

	if (vbi_lane_dead(l) ||
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
	vbi_ctx_wake(ctx); /* from the async-event or an application thread */
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
		/* fail over off it, then close it all (dev_reap, progress.c) */
		dr->removed_ns = vbi_mono_ns();
		atomic_store(&dr->fatal, true);
		atomic_store(&dr->removed, true);
		atomic_store(&ctx->dev_removing, true);
		atomic_fetch_add(&ctx->st->devices_removed, 1);
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
	vbi_ctx_wake(ctx);
}

/* ---- path events: recorded under txlock, reported after ------------------------------- */

static void path_event(const struct vbi_path_event *ev, void *arg)
{
	struct vbi_peer *p = arg;

	/* mode changes are reported by the lanes' modes (vbi_peer_switch_to), on both
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

	vbi_mutex_lock(&p->txlock);
	n = p->npev;
	memcpy(ev, p->pev, n * sizeof(ev[0]));
	p->npev = 0;
	vbi_mutex_unlock(&p->txlock);
	for (unsigned i = 0; i < n; i++) {
		const char *r = ev[i].reason ? ev[i].reason : "";

		switch (ev[i].type) {
		case VBI_PATH_EV_FAILOVER:
			vbi_event(ctx, VB_EV_FAILOVER, p->name, "switched to the standby connection%s%s",
				  *r ? ": " : "", r);
			break;
		case VBI_PATH_EV_RECOVERED: {
			uint64_t o = ev[i].outage_ns;

			vbi_st_last_max(&ctx->st->recover_last_ns, &ctx->st->recover_max_ns, o);
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
	union vbi_cfg_val q;

	vbi_path_cfg_init(&cfg);
	/* Lanes are RC; the connecting side's path may degrade to UC and UD
	 * (vbi_peer_allow_degrade: it builds the lanes); the accepting side
	 * follows the lanes it is given and never degrades on its own. */
	cfg.best = VB_QPT_RC;
	cfg.worst = VB_QPT_RC;
	/* While recovering, publishes queue in the retransmit windows (they are
	 * the bound); beyond them -EAGAIN. A valid VERBUS_RECOVERY_QUEUE (read
	 * by vbi_path_cfg_init, which logs a malformed one) overrides that. */
	if (vbi_cfg_read(VBI_CFG_RECOVERY_QUEUE, &q, NULL, 0))
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

void vbi_ctx_quiet(struct vb_ctx *ctx, uint64_t now)
{
	uint64_t until = now + ctx->quiet_ns, cur = atomic_load(&ctx->quiet_until_ns);

	while (ctx->quiet_ns && cur < until &&
	       !atomic_compare_exchange_weak(&ctx->quiet_until_ns, &cur, until))
		;
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
	n = ctx->up->peer_rewind(p);
	s->replaced_ns = 0; /* a replaced standby the peer switched to: kept */
	if (s->mode != VB_QPT_RC) {
		/* degraded lanes have no standby: an RC one left from before is
		 * stale (its other end was retired with the degradation) */
		struct vbi_lane *sb = vbi_path_take_standby(&p->path);

		if (sb && sb != s)
			vbi_lane_retire(sb);
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
		atomic_fetch_add(worse ? &ctx->st->degrades : &ctx->st->promotions, 1);
		vbi_warn("peer '%s': %s from %s to %s", p->name, worse ? "degraded" : "promoted",
			 vbi_path_mode_name((enum vb_qp_type)p->mode),
			 vbi_path_mode_name((enum vb_qp_type)s->mode));
		__atomic_store_n(&p->mode, s->mode, __ATOMIC_RELAXED);
	}
	if (p->probe == s)
		p->probe = NULL;

	atomic_fetch_add(&ctx->st->retransmits, n);
	atomic_fetch_add_explicit(&p->retransmits, n, memory_order_relaxed);
	/* What we received from it is acknowledged again at once (our ACKs
	 * in flight on the old lane are lost), so its retransmission skips
	 * it. Telling it from the progress context (which owns the receive
	 * streams; its callers hold node->lock or, the failure round, an RCU
	 * read-side section): those ACKs go first in the
	 * LANE frame's SEND, so it rewinds to what we have before it resends
	 * (vbi_peer_send_switch). Otherwise the progress thread does it on
	 * its next pass, after the LANE frame, on the same lane: what it
	 * resends meanwhile comes twice (dropped by sequence). */
	bool acked = false; /* the ACKs went with the LANE frame */

	if (tell) {
		uint8_t buf[VBI_WIRE_HDR_LEN];
		struct vbi_wire_hdr h = { .type = VBI_WT_LANE, .seq = s->id, .epoch = s->epoch };
		bool inline_acks = vbi_in_progress_round();
		int rc;

		vbi_wire_put(buf, &h);
		rc = inline_acks ? ctx->up->peer_send_switch(p, s, buf, sizeof(buf))
				 : vbi_lane_send_ctrl(s, buf, sizeof(buf));
		if (rc)
			vbi_warn("peer '%s': LANE frame on lane %u not sent: %s", p->name, s->id,
				 vbi_errmsg());
		acked = inline_acks && !rc;
	}
	if (!acked) /* txlock held: the progress pass that reads it waits for it */
		atomic_store(&p->ack_all, true);
	vbi_ctx_kick(ctx);
	vbi_path_resume(&p->path, now);
	p->recover_since_ns = 0;
	vbi_ctx_quiet(ctx, now);
	/* the peer's DATA now comes on @s: older lanes are stale for it */
	vbi_info("peer '%s': lane %u (%s QP %u on %s) active, epoch %u, %llu messages to "
		 "retransmit", p->name, s->id, vbi_path_mode_name((enum vb_qp_type)s->mode),
		 s->qp->qpn, s->dr->dev->caps.name, s->epoch, (unsigned long long)n);
	return old != s ? old : NULL;
}

struct vbi_lane *vbi_peer_switch_to(struct vbi_peer *p, struct vbi_lane *s, bool tell)
{
	return vbi_peer_activate(p, s, tell, false);
}

static void log_failed(struct vbi_peer *p, struct vbi_lane *l, enum vbi_err_action act,
		       const struct vbi_lane *to)
{
	char sw[48] = "";

	p->last_fail_why = atomic_load(&l->fail_why);
	p->last_fail_act = (uint8_t)act;
	p->last_fail_lane = l->id;
	p->last_fail_ns = vbi_mono_ns();
	if (to)
		snprintf(sw, sizeof(sw), "; switched to standby lane %u", to->id);
	vbi_warn("peer '%s': lane %u (QP %u on %s) failed: %s -> %s%s", p->name, l->id,
		 l->qp->qpn, l->dr->dev->caps.name,
		 atomic_load(&l->fail_why) ? atomic_load(&l->fail_why) : "?",
		 vbi_err_action_name(act), sw);
}

/* The failure of lane @l (disruptive action @act): txlock held (also for
 * log_failed, which keeps it as the peer's last failure). Returns
 * true when the peer must be given up (no lane can be had). A switch to
 * the standby is logged once done: the LANE frame goes before the log
 * line's write (to a slow log file, a pipe). */
static bool lane_failed_locked(struct vbi_peer *p, struct vbi_lane *l, enum vbi_err_action act)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbi_lane *active = vbi_path_lane(&p->path);
	struct vbi_path_decision d;
	uint64_t now = vbi_mono_ns();

	if (l != active) {
		struct vbi_lane *sb = vbi_path_take_standby(&p->path);

		log_failed(p, l, act, NULL);
		if (l == p->probe) { /* the RC probe failed: the better mode is not back */
			p->probe = NULL;
			vbi_path_probe(&p->path, VB_QPT_RC, 0, now);
		}
		if (sb && sb != l) /* not the one that failed: keep it */
			vbi_path_set_standby(&p->path, sb);
		vbi_lane_retire(l);
		return false;
	}
	d = vbi_path_fail(&p->path, l->epoch, now, 0);
	if (d.action != VBI_PATH_SWITCH_TO_STANDBY)
		log_failed(p, l, act, NULL);
	/* the dead-peer rule (maint_peer): watch from the first failure since
	 * the peer was last heard from */
	uint64_t rx_ns = atomic_load_explicit(&p->last_rx_ns, memory_order_relaxed);

	if (!p->fail_watch || rx_ns != p->rx_ns_at_fail) {
		p->fail_watch = true;
		p->rx_ns_at_fail = rx_ns;
	}
	switch (d.action) {
	case VBI_PATH_SWITCH_TO_STANDBY: {
		struct vbi_lane *s = d.lane, *old;

		if (vbi_lane_dead(s)) { /* failed too (same port): no switch */
			log_failed(p, l, act, NULL);
			vbi_lane_retire(s);
			goto rebuild;
		}
		atomic_fetch_add(&ctx->st->failovers, 1);
		old = vbi_peer_switch_to(p, s, true);
		log_failed(p, l, act, s);
		if (old)
			vbi_lane_retire(old);
		return false;
	}
	case VBI_PATH_REBUILD:
	case VBI_PATH_DEGRADE:
		if (d.lane)
			vbi_lane_retire(d.lane);
rebuild: {
		struct vbi_lane *old = vbi_path_switch(&p->path, NULL, now, NULL);

		if (old)
			vbi_lane_retire(old);
		vbi_lane_retire(l);
		if (!p->recover_since_ns)
			p->recover_since_ns = now;
		atomic_fetch_add(&ctx->st->rebuilds, 1);
		return false;
	}
	case VBI_PATH_DOWN:
		return true;
	case VBI_PATH_STALE:
	case VBI_PATH_IN_PROGRESS:
		vbi_lane_retire(l);
		return false;
	}
	return false;
}

/* Progress thread: act on every lane marked failed (completions, events,
 * port/device failures). */
void vbi_peer_handle_failures(struct vb_ctx *ctx)
{
	bool any = false, dev_failed[2] = { false, false };

	/* a plain load first: the exchange is a locked write on every poll */
	if (!atomic_load_explicit(&ctx->fail_pending, memory_order_relaxed) ||
	    !atomic_exchange(&ctx->fail_pending, false))
		return;
	/* taken before the walk: a device failure reported meanwhile sets its
	 * flag and fail_pending again, for the next round (cleared after the
	 * walk, it would be lost) */
	for (unsigned i = 0; i < ctx->ndev; i++)
		dev_failed[i] = atomic_exchange(&ctx->dr[i].failed, false);
	/* no ctx->lock or node->lock: nodes, peers (and the subscribers a
	 * switch acknowledges again) are freed after a grace period */
	vbi_rcu_enter();
	for (struct vb_node *n = vbi_rcu_deref(ctx->nodes); n; n = vbi_rcu_deref(n->next)) {
		bool urgent = false;

		for (struct vbi_peer *p = vbi_rcu_deref(n->peers); p; p = vbi_rcu_deref(p->next)) {
			bool down = false, acted = false;

			vbi_mutex_lock(&p->txlock);
			for (struct vbi_lane *l = p->lanes; l; l = l->next) {
				int act;

				if (dev_failed[l->dr == &ctx->dr[1]])
					vbi_lane_report(l, (struct vbi_err_verdict){ VBI_ACT_FAILOVER,
						VBI_SCOPE_PORT, "port or device failed" },
						atomic_load(&l->dr->fatal) ? "device fatal" : "port down");
				act = atomic_exchange(&l->fail_act, 0);
				if (!act || vbi_lane_dead(l))
					continue;
				acted = true;
				if (!p->dead && !p->closing)
					down |= lane_failed_locked(p, l, (enum vbi_err_action)act);
				else
					vbi_lane_retire(l);
			}
			/* no connection left: the conductor builds one at once,
			 * even within the quiet time (maint_peer) */
			urgent |= acted && !vbi_path_lane(&p->path);
			vbi_mutex_unlock(&p->txlock);
			if (acted) {
				any = true;
				vbi_peer_pev_flush(p);
			}
			if (down)
				ctx->up->peer_failed(p, "no connection can be had");
		}
		if (urgent)
			vbi_maint_kick(n);
		else if (any) /* switched to a standby: the rest waits */
			vbi_maint_kick_unless_quiet(n);
	}
	vbi_rcu_leave();
}

/* The peer sent a LANE frame on @l: it transmits there now; follow. Progress
 * context, node->lock held for reading (the dispatch's frame_lock). */
void vbi_lane_on_switch(struct vbi_lane *l)
{
	struct vbi_peer *p = l->peer;
	struct vbi_lane *old = NULL;

	if (!p)
		return;
	vbi_mutex_lock(&p->txlock);
	if (vbi_lane_dead(l) || p->dead)
		vbi_warn("peer '%s': LANE on lane %u ignored: %s", p->name, l->id,
			 p->dead ? "peer given up" : "that lane is being retired here");
	if (!vbi_lane_dead(l) && vbi_path_lane(&p->path) != l && !p->dead) {
		struct vbi_lane *sb = vbi_path_take_standby(&p->path);

		if (sb && sb != l)
			vbi_path_set_standby(&p->path, sb);
		old = vbi_peer_switch_to(p, l, false);
		atomic_fetch_add(&p->node->ctx->st->failovers, 1);
		if (old)
			vbi_lane_retire(old);
	}
	vbi_mutex_unlock(&p->txlock);
	vbi_peer_pev_flush(p);
	vbi_maint_kick_unless_quiet(p->node);
}
