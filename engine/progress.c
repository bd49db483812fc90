/* SPDX-License-Identifier: MIT */
/*
 * The progress engine: CQ polling and demultiplexing, the per-peer round,
 * the second half of a device's hot removal, and the idle strategy of the
 * progress thread.
 */
#define _GNU_SOURCE /* pthread_tryjoin_np */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/events.h"
#include "engine/lane.h"
#include "engine/lanepool.h"
#include "engine/mcast.h"
#include "engine/progress.h"
#include "engine/ud.h"
#include "engine/upcalls.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

/* ---- progress --------------------------------------------------------------------------- */

#define AFTER_POLL_NS 200000ull /* per-peer round of an idle progress context */

void vbi_ctx_wake(struct vb_ctx *ctx)
{
	if (atomic_load(&ctx->sleeping) && ctx->wake_fd >= 0) {
		uint64_t one = 1;

		/* only EAGAIN at a count near 2^64: it is awake by then */
		(void)!write(ctx->wake_fd, &one, sizeof(one));
	}
}

void vbi_ctx_kick(struct vb_ctx *ctx)
{
	atomic_store(&ctx->kick, true);
	vbi_ctx_wake(ctx);
}

/* An accepted UD lane's HELLO answer deferred until its accept() returned
 * (vbi_lane_send_hello): sent once its address is known; one still
 * waiting keeps ctx->hellos_deferred set. */
static void send_deferred_hello(struct vbi_peer *p)
{
	struct vb_ctx *ctx = p->node->ctx;
	struct vbi_lane *hl = NULL;
	bool waiting = false;

	if (p->dead || p->closing || !p->up)
		return;
	vbi_rcu_enter(); /* lanes are freed after a grace period */
	vbi_mutex_lock(&p->txlock);
	for (struct vbi_lane *o = p->lanes; o && !hl; o = o->next) {
		if (!atomic_load(&o->hello_deferred) || vbi_lane_dead(o))
			continue;
		if (atomic_load(&o->conn_ready))
			hl = o;
		else
			waiting = true;
	}
	vbi_mutex_unlock(&p->txlock);
	if (waiting || hl)
		atomic_store(&ctx->hellos_deferred, true); /* looked at again next time */
	if (hl)
		ctx->up->lane_send_hello(hl);
	vbi_rcu_leave();
}

static void for_each_peer_after_poll(struct vb_ctx *ctx, bool idle, bool full)
{
	/* cleared before the look, set again by a HELLO deferred meanwhile or
	 * still waiting (send_deferred_hello) */
	bool hellos = full && atomic_load_explicit(&ctx->hellos_deferred, memory_order_relaxed) &&
		      atomic_exchange(&ctx->hellos_deferred, false);

	/* No ctx->lock or node->lock: the nodes, the peers and what the round
	 * reaches through them (subscribers, their streams) are freed after a
	 * grace period (vb_node_destroy, vbi_node_reap, vb_sub_destroy) */
	vbi_rcu_enter();
	for (struct vb_node *n = vbi_rcu_deref(ctx->nodes); n; n = vbi_rcu_deref(n->next))
		for (struct vbi_peer *p = vbi_rcu_deref(n->peers); p; p = vbi_rcu_deref(p->next)) {
			if (hellos)
				send_deferred_hello(p);
			vbi_peer_after_poll(p, idle, full);
		}
	vbi_rcu_leave();
}

/* A failed completion on lane @l: classify, count, and report a disruptive
 * verdict (flushes of a lane we are retiring are only reclaimed). */
static void lane_wc_error(struct vb_ctx *ctx, struct vbi_lane *l, const struct vbt_wc *wc,
			  struct vbi_sctx *s)
{
	bool draining = vbi_lane_dead(l);
	struct vbi_err_verdict v = vbi_errpol_wc(&ctx->errpol, wc->status,
						 draining ? VBI_ERRPOL_DRAINING : 0);

	if (v.action == VBI_ACT_REREGISTER_AND_RESET && s) {
		/* Re-validate the failing WR's buffers against the pool: a
		 * stale lkey would fail again on the next lane. */
		uint32_t lkey;

		if (s->buf.addr && vbi_mempool_lkey(l->dr->pool, s->buf.addr, 1, &lkey, NULL) == 0 &&
		    lkey != s->buf.lkey) {
			vbi_warn("lane %u: send buffer lkey %#x is stale (pool: %#x): fixed", l->id,
				 s->buf.lkey, lkey);
			s->buf.lkey = lkey;
		}
	}
	if (vbi_err_action_disrupts(v.action))
		vbi_lane_report(l, v, vbt_wc_status_str(wc->status));
}

static int poll_cq(struct vb_ctx *ctx, struct vbi_devres *dr)
{
	struct vbt_wc wc[32];
	int n = vbt_cq_poll(dr->cq, wc, 32);

	if (n < 0) {
		vbi_error("completion queue poll failed: %s", vbi_errmsg());
		return n;
	}
	if (n)
		(void)atomic_load_explicit(&ctx->init_gen, memory_order_acquire);
	for (int i = 0; i < n; i++) {
		uint8_t kind = *(uint8_t *)(uintptr_t)wc[i].wr_id;
		bool ok = wc[i].status == VBT_WC_SUCCESS;

		switch (kind) {
		/* A lane being drained is freed as soon as its last WR is
		 * accounted for: the decrement / release is the last touch. */
		case VBI_WR_RC_RECV: {
			struct vbi_slot *s = (void *)(uintptr_t)wc[i].wr_id;
			struct vbi_lane *l = s->lane;

			if (ok)
				vbi_lane_rc_recv(l, s, wc[i].byte_len);
			else
				lane_wc_error(ctx, l, &wc[i], NULL);
			atomic_fetch_sub(&l->posted_recvs, 1);
			break;
		}
		case VBI_WR_RC_SEND: {
			struct vbi_sctx *s = (void *)(uintptr_t)wc[i].wr_id;
			struct vbi_lane *l = s->lane;

			if (!ok)
				lane_wc_error(ctx, l, &wc[i], s);
			vbi_mutex_lock(l->lk);
			vbi_sring_release_upto(&l->sr, s);
			vbi_mutex_unlock(l->lk);
			break;
		}
		case VBI_WR_UD_RECV: {
			struct vbi_slot *s = (void *)(uintptr_t)wc[i].wr_id;

			atomic_fetch_sub_explicit(&ctx->ud_posted, 1, memory_order_relaxed);
			if (ok)
				vbi_ud_recv(ctx, s, wc[i].byte_len);
			else if (!atomic_load(&ctx->stop))
				vbi_warn("UD receive completion: %s", vbt_wc_status_str(wc[i].status));
			break;
		}
		case VBI_WR_MC_RECV:
			vbi_mcast_recv(ctx, (void *)(uintptr_t)wc[i].wr_id, &wc[i]);
			break;
		case VBI_WR_UD_SEND: {
			struct vbi_sctx *s = (void *)(uintptr_t)wc[i].wr_id;

			/* no ud_lock: its holder may be inside a post (rxe
			 * carries the datagram there); ud_reclaim below */
			vbi_sring_complete(&ctx->ud_sr, s);
			ctx->ud_reclaim_due = true;
			if (!ok && !atomic_load(&ctx->stop))
				vbi_warn("UD send completion: %s", vbt_wc_status_str(wc[i].status));
			break;
		}
		default:
			vbi_error("completion with unknown wr_id kind %u", kind);
			break;
		}
	}
	/* fewer than asked for: the CQ was empty, and what it held is handled */
	if (n < 32)
		atomic_fetch_add_explicit(&dr->cq_sweeps, 1, memory_order_release);
	return n;
}

/*
 * Hot removal, second half (the first: vbi_dev_event marks the device
 * fatal + removed, and its lanes fail over off it). Progress context, the
 * owner of the CQs. Closes the UD endpoint (FANOUT) and the peers' FANOUT
 * address handles when the device is the primary, then, once no lane and no
 * listener is left on it, everything else: the pool's registrations (its
 * memory stays: messages in retransmit windows live there), CQ, PD and the
 * device itself. Nothing is waited for here: it is tried again each round.
 */
/* Wake every node's conductor. Progress context. */
static void kick_conductors(struct vb_ctx *ctx)
{
	vbi_rcu_enter();
	for (struct vb_node *n = vbi_rcu_deref(ctx->nodes); n; n = vbi_rcu_deref(n->next))
		vbi_maint_kick(n);
	vbi_rcu_leave();
}

static void dev_reap(struct vb_ctx *ctx)
{
	bool pending = false;
	uint64_t now = vbi_mono_ns();

	if (now - ctx->reap_ns < 1000000)
		return; /* a millisecond between tries */
	ctx->reap_ns = now;

	for (unsigned d = 0; d < ctx->ndev; d++) {
		struct vbi_devres *dr = &ctx->dr[d];
		int n;

		if (!atomic_load(&dr->removed) || dr->closed)
			continue;
		if (dr == ctx->ud_dr && !dr->ud_closed) {
			vbi_ud_move(ctx);
			dr->ud_closed = true;
		}
		if (d == 0 && vbi_mcast_uses_dev(ctx)) {
			if (!dr->mc_warned)
				vbi_warn("%s removed: multicast memberships (vb_ctx_attr_t.mcast) keep "
					 "it open until they end or vb_ctx_destroy()", dr->name);
			dr->mc_warned = true;
			pending = true;
			continue;
		}
		if (atomic_load(&dr->nlanes) || atomic_load(&dr->nlisteners)) {
			if (now - dr->wait_log_ns > 1000000000ull) {
				dr->wait_log_ns = now;
				vbi_info("%s removed: waiting for %d connection(s) and %d listener(s) "
					 "on it to close", dr->name, atomic_load(&dr->nlanes),
					 atomic_load(&dr->nlisteners));
				/* the conductors close the listeners (their accept
				 * duty) and retire the lanes: an idle one sleeps */
				kick_conductors(ctx);
			}
			pending = true;
			continue;
		}
		vbi_lanepool_close(dr); /* its parked QPs */
		n = vbi_mempool_detach(dr->pool);
		if (n < 0)
			vbi_warn("%s: %s", dr->name, vbi_errmsg());
		ctx->ops->cq_destroy(dr->cq);
		dr->cq = NULL;
		if (ctx->ops->pd_free(dr->pd))
			vbi_warn("%s: %s", dr->name, vbi_errmsg());
		dr->pd = NULL;
		ctx->ops->dev_close(dr->dev);
		dr->dev = NULL;
		dr->closed = true;
		atomic_fetch_add(&ctx->st->devices_released, 1);
		vbi_warn("%s released: %d registration(s) dropped, CQ, PD and device closed, "
			 "%.1f ms after the removal began", dr->name, n < 0 ? 0 : n,
			 (vbi_mono_ns() - dr->removed_ns) / 1e6);
	}
	if (!pending)
		atomic_store(&ctx->dev_removing, false);
}

/* Release the UD send entries that completed (their datagrams' message
 * references), unless a publisher holds ud_lock: it releases them itself
 * before it posts (ud_room, pub_fanout.c), and this is tried again next
 * round. */
static void ud_reclaim(struct vb_ctx *ctx)
{
	if (pthread_mutex_trylock(&ctx->ud_lock))
		return;
	vbi_sring_reclaim(&ctx->ud_sr);
	ctx->ud_reclaim_due = false;
	pthread_mutex_unlock(&ctx->ud_lock);
}

static int progress_round(struct vb_ctx *ctx)
{
	uint64_t now;
	int n = 0;

	if (atomic_load_explicit(&ctx->dev_removing, memory_order_relaxed))
		dev_reap(ctx);
	/* the datagrams' slots the last round held */
	if (ctx->ud_nheld)
		vbi_ud_repost_held(ctx);
	if (ctx->mc_held)
		vbi_mcast_repost_held(ctx);
	/* The per-peer round (flush, ACKs, credits, keepalives, control
	 * frames) owed by the last round's completions, when another thread
	 * asked for it (vbi_ctx_kick), or every AFTER_POLL_NS: an empty poll
	 * changes no credit, ring or receive state, so all it can find due
	 * is a timer (ms scale). This keeps an empty poll to the CQ reads.
	 * It runs first, before this round polls, rather than at the end of
	 * the round that polled: a round that delivered returns to its caller
	 * (vb_progress()) straight after the callbacks, and the caller's
	 * reaction (a publish) does not wait for the housekeeping; a publish
	 * meanwhile carries the ACKs owed itself. The kicked and timed rounds
	 * are full: they also look at what only another thread's flag or a
	 * hint says (deferred HELLOs, data a missed tx_pending hint would
	 * leave), at least every AFTER_POLL_NS however busy the CQs are; a
	 * round for completions alone trusts the hints. */
	now = vbi_now_ns();
	{
		bool due = ctx->peer_round_due;
		bool full = (atomic_load_explicit(&ctx->kick, memory_order_relaxed) &&
			     atomic_exchange(&ctx->kick, false)) ||
			    now - ctx->after_poll_ns >= AFTER_POLL_NS;

		if (full)
			ctx->after_poll_ns = now;
		ctx->peer_round_due = false;
		if (due || full)
			for_each_peer_after_poll(ctx, !due, full);
	}
	for (unsigned d = 0; d < ctx->ndev; d++) {
		int r;

		if (atomic_load_explicit(&ctx->dr[d].fatal, memory_order_relaxed))
			continue; /* a removed device's CQ completes nothing */
		r = poll_cq(ctx, &ctx->dr[d]);
		if (r < 0)
			return r;
		n += r;
	}
	/* What follows has nothing to do in most rounds: each step's own
	 * first test is made here, so an empty round costs no call for it
	 * (a call is what costs under TCG, not the test) */
	if (ctx->ud_reclaim_due)
		ud_reclaim(ctx);
	if (atomic_load_explicit(&ctx->fail_pending, memory_order_relaxed))
		vbi_peer_handle_failures(ctx);
	/* events from every thread, no lock held (vbi_cb_flush's own test) */
	if (ctx->cbq_n || ctx->cb_zombies || !vbi_llist_empty(&ctx->evq))
		ctx->up->cb_flush(ctx);
	ctx->peer_round_due = n > 0; /* the next round's first step */
	if (atomic_load_explicit(&ctx->fanout_pending, memory_order_relaxed))
		ctx->up->fanout_flush(ctx, n == 0);
	if (now - ctx->slow_check_ns >= VBI_SLOW_CHECK_NS)
		ctx->up->slow_check(ctx, now);
	/* heartbeats in their own (coarse ms) clock, looked at every 20 ms
	 * of this round's clock: an empty poll reads one clock, not two */
	if (n == 0 && now - ctx->hb_check_ns >= 20000000ull) {
		uint64_t now_ms = vbi_now_ms();

		ctx->hb_check_ns = now;
		if (now_ms - ctx->last_hb_ms >= 20) {
			ctx->last_hb_ms = now_ms;
			ctx->up->heartbeats(ctx, now_ms);
		}
	}
	return n;
}

/* Set while this thread runs a progress round (vbi_in_progress_round). */
static _Thread_local bool in_round;

bool vbi_in_progress_round(void)
{
	return in_round;
}

int vbi_progress_once(struct vb_ctx *ctx)
{
	bool outer = in_round;
	int n;

	in_round = true;
	/* what a round logs (a failed connection, a switch) is written by the
	 * log thread: a slow stderr does not hold the data path */
	vbi_log_defer_begin();
	n = progress_round(ctx);
	vbi_log_defer_end();
	in_round = outer;
	return n;
}

/* APP mode, on every 64th empty vb_progress() call, progress_lock held:
 * true once the context has completed nothing for idle_spin_us (0: at
 * once). The clock is read on those calls only. */
static bool app_idle_long(struct vb_ctx *ctx)
{
	uint64_t now = vbi_now_ns();

	if (!ctx->app_idle) {
		ctx->app_idle = true;
		ctx->app_idle_ns = now;
		return !ctx->attr.idle_spin_us;
	}
	return now - ctx->app_idle_ns >= (uint64_t)ctx->attr.idle_spin_us * 1000;
}

int vbi_progress_app(struct vb_ctx *ctx)
{
	bool yield = false;
	int n;

	if (!vbi_mutex_trylock(&ctx->progress_lock))
		return 0;
	n = vbi_progress_once(ctx);
	/* A spinning caller gives the CPU away now and then once the context
	 * has been idle for idle_spin_us: where cores are shared (a VM,
	 * Soft-RoCE's kernel work in softirq context) a spin that never
	 * enters the kernel can starve the very work it waits for until the
	 * next scheduler tick. Not while it is busy: in a ping-pong the side
	 * waiting for the answer yielded in about every other round trip when
	 * this went by the count of empty calls alone, a system call and a
	 * pass through the scheduler while the answer may already be there
	 * (pubsub_app_yield_test; docs/benchmarks.md, "vb_progress() keeps
	 * its CPU while busy"). With a core of its own, sched_yield() returns
	 * at once. */
	if (n > 0)
		ctx->app_idle = false;
	else if (!(++ctx->app_empty & 63))
		yield = app_idle_long(ctx);
	vbi_mutex_unlock(&ctx->progress_lock);
	if (yield)
		sched_yield();
	return n;
}

/* The idle strategy after an empty poll (vb_ctx_attr_t.idle): true when
 * the thread should block on the completion channel now. @idle counts the
 * empty polls in a row, @since_ns is when the first of them was. */
static bool idle_wait(struct vb_ctx *ctx, unsigned idle, uint64_t since_ns)
{
	switch (ctx->attr.idle) {
	case VB_IDLE_SPIN:
		return false;
	case VB_IDLE_YIELD:
		sched_yield();
		return false;
	case VB_IDLE_BLOCK:
		return true;
	case VB_IDLE_BACKOFF:
	default:
		if (idle < ctx->attr.progress_spin ||
		    vbi_now_ns() - since_ns < (uint64_t)ctx->attr.idle_spin_us * 1000) {
			if (!(idle & 63))
				sched_yield(); /* see vbi_progress_app() */
			return false;
		}
		return true;
	}
}

/* A FANOUT batch waits for ud_lock (vbi_pub_fanout_flush only tries it),
 * not for a completion: no CQ event would end a block, so keep polling. */
static bool fanout_unblocked(struct vb_ctx *ctx)
{
	return atomic_load(&ctx->fanout_pending) && !atomic_load(&ctx->ud_sr.sig_inflight);
}

/*
 * VB_PROGRESS_THREAD: the only thread that runs progress while it lives (no
 * other does: vb_progress() refuses this mode, vbi_progress_or_nap() only
 * naps, and vb_ctx_destroy() runs its last rounds after joining it), so it
 * takes no lock for it: callbacks run with no verbus lock held at all.
 * progress_lock serializes the APP mode's callers only.
 */
static void *progress_main(void *arg)
{
	struct vb_ctx *ctx = arg;
	unsigned idle = 0;
	uint64_t since = 0;

	vbi_lib_thread_enter();
	while (!atomic_load_explicit(&ctx->stop, memory_order_relaxed)) {
		int n;

		n = vbi_progress_once(ctx);
		if (n > 0) {
			idle = 0;
			continue;
		}
		if (!idle++)
			since = vbi_now_ns();
		if (!idle_wait(ctx, idle, since))
			continue;
		/* Block: arm every live device's CQ, say we sleep, poll once
		 * more (a completion may have slipped in before the arm, a
		 * kick or a failure report before `sleeping`), then sleep
		 * until one of them completes something or another thread
		 * wakes us (vbi_ctx_wake), bounded so that stop and timed work
		 * are noticed. */
		struct vbt_cq *cqs[2];
		unsigned ncq = 0;

		for (unsigned d = 0; d < ctx->ndev; d++) {
			struct vbt_cq *cq = ctx->dr[d].cq;

			if (!atomic_load(&ctx->dr[d].fatal) && cq->ops->cq_arm(cq, 0) == 0)
				cqs[ncq++] = cq;
		}
		if (ncq) {
			atomic_store(&ctx->sleeping, true);
			n = vbi_progress_once(ctx);
			if (n == 0 && !atomic_load(&ctx->kick) && !atomic_load(&ctx->fail_pending) &&
			    !fanout_unblocked(ctx))
				cqs[0]->ops->cq_wait_any(cqs, ncq, ctx->wake_fd, 20);
			atomic_store(&ctx->sleeping, false);
		} else {
			struct timespec ts = { 0, 200000 };

			nanosleep(&ts, NULL);
		}
		idle = 0;
	}
	return NULL;
}

/* Set on the library's own threads (progress, maintenance, accept). */
static _Thread_local bool lib_thread;

void vbi_lib_thread_enter(void)
{
	lib_thread = true;
}

bool vbi_progress_waits_for_app(const struct vb_ctx *ctx)
{
	return !ctx->thread_running && lib_thread;
}

/* Reap completions: the progress thread does it; in APP mode this thread,
 * when it is the application's (callbacks run only there: verbus.h), else
 * the application's next vb_progress(). */
void vbi_progress_or_nap(struct vb_ctx *ctx)
{
	if (!ctx->thread_running && !lib_thread &&
	    vbi_mutex_trylock(&ctx->progress_lock)) {
		vbi_progress_once(ctx);
		vbi_mutex_unlock(&ctx->progress_lock);
	} else {
		struct timespec ts = { 0, 200000 };

		nanosleep(&ts, NULL);
	}
}

/* VB_PROGRESS_THREAD: the context's progress thread (vb_ctx_create). */
int vbi_progress_start(struct vb_ctx *ctx)
{
	int rc = -pthread_create(&ctx->thread, NULL, progress_main, ctx);

	if (!rc)
		vbi_thread_name(ctx->thread, "vb-progress");
	if (rc)
		return vbi_err(rc, "progress thread: %s", strerror(-rc));
	ctx->thread_running = true;
	return 0;
}

/* A credit-only ACK (session 0) on @l with the slots it reposted since the
 * last: 0 when sent, else the post's error (they stay owed). txlock held. */
static int return_credits(struct vbi_lane *l, uint8_t *buf)
{
	unsigned n = atomic_load_explicit(&l->to_return, memory_order_relaxed);
	struct vbi_wire_hdr h = { .type = VBI_WT_ACK, .frag_off = n };
	int rc;

	vbi_wire_put(buf, &h);
	rc = vbi_lane_send_ctrl(l, buf, VBI_WIRE_HDR_LEN);
	if (rc == 0)
		atomic_fetch_sub_explicit(&l->to_return, n, memory_order_relaxed);
	return rc;
}

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
	if (atomic_load_explicit(&l->sends_total, memory_order_relaxed) != l->ka_sends || !l->ka_ms) {
		l->ka_sends = atomic_load_explicit(&l->sends_total, memory_order_relaxed);
		l->ka_ms = now;
		return;
	}
	if (now - l->ka_ms < ka)
		return;
	if (return_credits(l, buf) == 0)
		atomic_fetch_add_explicit(&p->node->ctx->st->keepalives, 1, memory_order_relaxed);
	l->ka_sends = atomic_load_explicit(&l->sends_total, memory_order_relaxed);
	l->ka_ms = now;
}

/* The receive slots @p's lanes hold, posted again (vbi_lane_repost_held);
 * under p->txlock, taken here when @lock. */
static void repost_held(struct vbi_peer *p, bool lock)
{
	if (lock)
		vbi_mutex_lock(&p->txlock);
	for (struct vbi_lane *o = p->lanes; o; o = o->next)
		if (o->nheld)
			vbi_lane_repost_held(o);
	if (lock)
		vbi_mutex_unlock(&p->txlock);
}

/*
 * After each poll: flush queued data first (ACKs ride along in its batches),
 * then a standalone ACK when the protocol says one is due (upcall
 * peer_acks: vbi_peer_acks_due), then the keepalive. A round for
 * completions alone stops after the flush unless a hint says more is due
 * (see quiet below). Lanes other than the
 * active one return their credits on their own. Progress context, inside
 * an RCU read-side section, no lock held: @p, the node's subscribers and
 * their streams are freed after a grace period; a stream leaves @p's
 * dirty list under txlock before it goes (vb_sub_destroy), and a reaped
 * peer's publisher attachments and dirty list are emptied under txlock
 * (vbi_node_reap).
 */
void vbi_peer_after_poll(struct vbi_peer *p, bool idle, bool full)
{
	const struct vbi_upcalls *up = p->node->ctx->up;
	uint8_t buf[VBI_WIRE_HDR_LEN * 64];
	struct vbi_lane *l;
	bool held, quiet;

	if (p->dead || p->closing || !p->up) {
		repost_held(p, true); /* a closing peer still receives */
		return;
	}
	/* taken before the walk of the subscribers (both sequentially
	 * consistent), given back when the send failed: a vb_sub_create()
	 * that saw it set links its subscriber before, so this walk sees it
	 * (vbi_sub_create) */
	if (atomic_load_explicit(&p->subs_pending, memory_order_relaxed) &&
	    atomic_exchange(&p->subs_pending, false) && up->peer_send_subs(p, NULL))
		atomic_store(&p->subs_pending, true); /* retried until sent */
	/* Data corked behind a SEND in flight goes once that SEND completed
	 * (vb_pub_commit); anything else queued (waiting for credits or ring
	 * space) goes as soon as they allow. */
	{
		struct vbi_lane *al;

		vbi_rcu_enter();
		al = vbi_path_lane(&p->path);
		held = al && atomic_load(&p->corked) && atomic_load(&al->sr.sig_inflight);
		/* A round for completions alone (neither timed nor idle) has
		 * nothing more to do unless a hint says so: an ACK that must go
		 * alone (ack_due), a lane switch's ACKs (ack_all), our UD
		 * endpoint to announce, or a quarter of the active lane's slots
		 * to return. The rest (keepalives, UC/UD timers, credits of
		 * other lanes, held slots) is timed, and waits for the next
		 * full round (AFTER_POLL_NS). In a ping-pong this is every
		 * round trip's round: it takes no lock. */
		quiet = !full && !idle &&
			!atomic_load_explicit(&p->ack_due, memory_order_relaxed) &&
			!atomic_load_explicit(&p->ack_all, memory_order_relaxed) &&
			!atomic_load_explicit(&p->ud_announce, memory_order_relaxed) &&
			(!al || atomic_load_explicit(&al->to_return, memory_order_relaxed) <
					al->nslots / 4);
		vbi_rcu_leave();
	}
	if (!held && (full || atomic_load(&p->tx_pending)))
		up->peer_flush(p);
	if (quiet)
		return;
	vbi_mutex_lock(&p->txlock);
	/* held receive slots: only in the timed rounds (every AFTER_POLL_NS)
	 * and idle ones; a lane posts them itself once VBI_REPOST_BATCH
	 * wait. Not in the round that follows a delivery: that round comes
	 * before the next poll, and the next answer may already be there */
	if (full || idle)
		repost_held(p, false); /* first: the ACKs below return them */
	l = vbi_peer_lane(p);
	if (atomic_load_explicit(&p->ack_all, memory_order_relaxed) &&
	    atomic_exchange(&p->ack_all, false))
		up->peer_ack_all(p->node, p); /* urgent: goes below */
	/* our FANOUT endpoint moved: tell the peer, on a lane that stays */
	if (atomic_load_explicit(&p->ud_announce, memory_order_relaxed) && l &&
	    atomic_load(&l->hello_rcvd) && !atomic_load(&l->dr->fatal) &&
	    l->max_send >= VBI_WIRE_HDR_LEN + VBI_UDADDR_LEN &&
	    vbi_lane_send_ctrl(l, buf, up->udaddr_frame(p->node->ctx, buf)) == 0)
		atomic_store(&p->ud_announce, false);
	if (l && atomic_load(&l->hello_rcvd)) {
		uint32_t cap = l->max_send < sizeof(buf) ? l->max_send : (uint32_t)sizeof(buf);

		if (l->mode != VB_QPT_RC)
			vbi_lane_check_timers(p, l, vbi_now_ns());
		up->peer_acks(p, l, buf, cap, idle);
		keepalive(p, l, buf);
	}
	for (struct vbi_lane *o = p->lanes; o; o = o->next) {
		unsigned n = atomic_load_explicit(&o->to_return, memory_order_relaxed);

		if (o == l || vbi_lane_dead(o) || !atomic_load(&o->hello_rcvd) || n < 2 ||
		    (n < o->nslots / 4 && !idle))
			continue;
		return_credits(o, buf);
	}
	vbi_mutex_unlock(&p->txlock);
}

void vbi_join_progressing(struct vb_ctx *ctx, pthread_t t)
{
	if (ctx->thread_running || lib_thread) {
		pthread_join(t, NULL);
		return;
	}
	while (pthread_tryjoin_np(t, NULL) == EBUSY)
		vbi_progress_or_nap(ctx);
}
