/* SPDX-License-Identifier: MIT */
/*
 * The accept duty of the node's conductor (engine/maint.c).
 *
 * The conductor takes the connection requests of all four listeners of a
 * node (RC on the primary and the standby device, UC and UD for degraded
 * lanes) and drives every handshake in steps that never block
 * (transport: accept_start, conn_step), so a requester that stops half-way
 * (no RTU) holds up nothing but its own handshake, which is given up after
 * cm_timeout_ms (tests/rxe/accept_stall_test). An accepted connection
 * becomes a lane, pending on the node until its HELLO says which peer it
 * belongs to (a new one, or a standby / replacement for a known one).
 *
 * Each conductor cycle: vbi_accept_pollfds adds the listeners' and the
 * handshakes' descriptors to its poll(); vbi_accept_duty takes every
 * waiting request, steps every handshake, gives up those past their
 * deadline, and closes a removed device's listeners.
 *
 * State: struct vbi_accept below is the conductor thread's alone. The lanes
 * it sets up carry in_setup until they are handed over (node->pending,
 * under node->lock, or bound to a peer by their HELLO meanwhile).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "engine/accept.h"
#include "engine/lane.h"
#include "engine/progress.h"
#include "core/clock.h"
#include "core/path.h"
#include "core/err.h"
#include "core/log.h"

/* The accept duty's state. Owner: the node's conductor thread. */
struct vbi_accept {
	struct vb_node *node;
	struct vbi_lane *ready[4];   /* a lane prepared for listener i's next request */
	struct vbi_lane **busy;      /* handshakes in progress, oldest first */
	unsigned char *busy_idx;     /* their listeners */
	unsigned nbusy, cap;         /* cap: max_pending */
	bool starved[4];             /* no lane could be made for its request */
	uint64_t starved_ns;         /* when that was last tried */
};

struct vbi_devres *vbi_listener_dev(struct vb_node *node, unsigned idx)
{
	return &node->ctx->dr[idx == 1 ? 1 : 0];
}

void vbi_listener_drop(struct vb_node *node, unsigned idx)
{
	if (!node->listener[idx])
		return;
	atomic_store(&node->lport[idx], 0);
	node->ctx->ops->listener_close(node->listener[idx]);
	node->listener[idx] = NULL;
	atomic_fetch_sub(&vbi_listener_dev(node, idx)->nlisteners, 1);
}

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
		if (!vbi_lane_dead(l) && !atomic_load(&l->hello_rcvd) && !l->refused_ns) {
			n++;
			oldest = l;
		}
	if (n <= ctx->attr.max_pending || !oldest)
		return;
	atomic_fetch_add(&ctx->st->pending_dropped, 1);
	vbi_info("node '%s': %u connections without a HELLO (max_pending %u): the oldest "
		 "(QP %u) dropped", node->name, n, ctx->attr.max_pending, oldest->qp->qpn);
	vbi_lane_retire(oldest);
}

/* A lane for listener @idx's next request, made ahead (its QP, lean
 * receive slots): NULL when it cannot be made now (warned; the request
 * waits for a later round). */
static struct vbi_lane *agent_ready(struct vbi_accept *a, unsigned idx)
{
	struct vb_node *node = a->node;
	struct vbi_lane *l = a->ready[idx];

	if (l)
		return l;
	if (vbi_lane_new(node, vbi_listener_dev(node, idx), node->listener[idx]->type, true, &l)) {
		vbi_warn("accept: cannot prepare a connection: %s", vbi_errmsg());
		return NULL;
	}
	atomic_store(&l->in_setup, true);
	a->ready[idx] = l;
	return l;
}

/*
 * A request waits for lane @l: registered room for its commit, made now. Its
 * HELLO is handled by the progress thread, which must not register memory
 * for it, nor for the other accepted connections whose commit is still to
 * come (pending without a HELLO, or still in their handshake): they take
 * from the same room. One connection more is kept ahead, for the next
 * request and for what the data path takes from the pool meanwhile
 * (pubsub_hot_reg_test: a standby accepted while a stream runs). Only
 * lanes with a request are counted, not the ones made ahead (agent_ready):
 * so the pool grows to what the connections need, not with the order in
 * which the conductor happened to prepare its lanes (peer_reap_test).
 */
static void agent_room(struct vbi_accept *a, struct vbi_lane *l)
{
	struct vb_node *node = a->node;
	unsigned others = a->nbusy + 1;

	pthread_rwlock_rdlock(&node->lock);
	for (struct vbi_lane *o = node->pending; o; o = o->next)
		others += o->lean && !vbi_lane_dead(o);
	pthread_rwlock_unlock(&node->lock);
	if (vbi_lane_commit_prepare(l, others))
		vbi_info("accept: no registered room made ahead: %s", vbi_errmsg());
}

/* The handshake of @l is complete: hand it over. The peer's HELLO may have
 * been processed already (it can arrive as soon as our QP is in RTR): then
 * it is bound. Our HELLO answers it, from the progress thread, once the
 * lane is bound (one thread, one lock: the lane's lock changes then). */
static void agent_accepted(struct vb_node *node, struct vbi_lane *l)
{
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
}

/* Forget handshake @i: its lane, the caller's now. */
static struct vbi_lane *busy_take(struct vbi_accept *a, unsigned i)
{
	struct vbi_lane *l = a->busy[i];

	memmove(&a->busy[i], &a->busy[i + 1], (a->nbusy - i - 1) * sizeof(a->busy[0]));
	memmove(&a->busy_idx[i], &a->busy_idx[i + 1], a->nbusy - i - 1);
	a->nbusy--;
	return l;
}

/* Give up handshake @i: counted with the connections dropped before their
 * HELLO (vb_stats_t.pending_dropped). */
static void busy_drop(struct vbi_accept *a, unsigned i, const char *why)
{
	struct vbi_lane *l = busy_take(a, i);

	atomic_fetch_add(&a->node->ctx->st->pending_dropped, 1);
	vbi_warn("node '%s': a connection's handshake %s: dropped (QP %u)", a->node->name, why,
		 l->qp->qpn);
	vbi_lane_destroy_now(l);
}

/* A request that could not be accepted (@rc, vbi_errmsg() says why): one
 * its requester withdrew (a peer that closed while it connected) is no
 * fault, counted and logged as info; anything else is a warning. */
static void accept_failed(struct vb_node *node, int rc)
{
	if (rc == -ECONNABORTED) {
		atomic_fetch_add(&node->ctx->st->handshakes_withdrawn, 1);
		vbi_info("node '%s': %s", node->name, vbi_errmsg());
	} else if (!atomic_load(&node->stop)) {
		vbi_warn("accept failed: %s", vbi_errmsg());
	}
}

/* Take every request waiting on listener @idx. Returns false when a lane
 * could not be prepared for one (it waits). */
static bool agent_take(struct vbi_accept *a, unsigned idx)
{
	struct vb_node *node = a->node;
	struct vb_ctx *ctx = node->ctx;
	struct vbi_lane *l;
	int rc;

	while (!atomic_load(&node->stop)) {
		struct pollfd pfd = { .fd = ctx->ops->listener_fd(node->listener[idx]),
				      .events = POLLIN };

		if (!(l = agent_ready(a, idx)))
			return false;
		if (poll(&pfd, 1, 0) <= 0)
			return true; /* nothing waits */
		/* before the accept: the requester's HELLO may follow its RTU
		 * before a registration made after it would be done */
		agent_room(a, l);
		rc = ctx->ops->accept_start(node->listener[idx], l->qp, &ctx->cp, &l->conn);
		if (rc == -EAGAIN)
			return true;
		a->ready[idx] = NULL;
		if (rc == 0) {
			agent_accepted(node, l);
		} else if (rc == -EINPROGRESS) {
			if (a->nbusy == a->cap) /* a flood: the oldest makes room */
				busy_drop(a, 0, "was still incomplete past max_pending");
			l->accepted_ns = vbi_mono_ns(); /* the handshake's start */
			a->busy[a->nbusy] = l;
			a->busy_idx[a->nbusy++] = (unsigned char)idx;
		} else {
			accept_failed(node, rc);
			vbi_lane_destroy_now(l); /* its QP may be in any state */
		}
	}
	return true;
}

/* Step every handshake in progress; give up those past cm_timeout_ms.
 * Returns the ms until the next deadline (VBI_ACCEPT_IDLE_MS at most). */
static int agent_step(struct vbi_accept *a)
{
	struct vb_ctx *ctx = a->node->ctx;
	uint64_t limit = (uint64_t)ctx->attr.cm_timeout_ms * 1000000ull, now = vbi_mono_ns();
	uint64_t next = (uint64_t)VBI_ACCEPT_IDLE_MS * 1000000ull;

	for (unsigned i = 0; i < a->nbusy;) {
		struct vbi_lane *l = a->busy[i];
		int rc = ctx->ops->conn_step(l->conn);

		if (rc == 0) {
			agent_accepted(a->node, busy_take(a, i));
		} else if (rc != -EINPROGRESS) {
			busy_take(a, i);
			accept_failed(a->node, rc);
			vbi_lane_destroy_now(l);
		} else if (now - l->accepted_ns >= limit) {
			char why[64];

			snprintf(why, sizeof(why), "did not complete within %d ms",
				 ctx->attr.cm_timeout_ms);
			busy_drop(a, i, why);
		} else {
			if (l->accepted_ns + limit - now < next)
				next = l->accepted_ns + limit - now;
			i++;
		}
	}
	return (int)(next / 1000000ull) + 1;
}

/* A device removed: its listeners close (their rdma_cm ids pin it), with
 * what was being accepted on them. */
static void agent_removed(struct vbi_accept *a)
{
	struct vb_node *node = a->node;

	for (unsigned idx = 0; idx < 4; idx++) {
		if (!node->listener[idx] || !atomic_load(&vbi_listener_dev(node, idx)->removed))
			continue;
		for (unsigned i = a->nbusy; i-- > 0;)
			if (a->busy_idx[i] == idx)
				vbi_lane_destroy_now(busy_take(a, i));
		if (a->ready[idx]) {
			vbi_lane_destroy_now(a->ready[idx]);
			a->ready[idx] = NULL;
		}
		vbi_info("node '%s': %s listener on %s closed (device removed)", node->name,
			 vbi_path_mode_name(node->listener[idx]->type), vbi_listener_dev(node, idx)->name);
		vbi_listener_drop(node, idx);
	}
}

unsigned vbi_accept_pollfds(struct vb_node *node, struct pollfd *pfd)
{
	struct vbi_accept *a = node->accept;
	const struct vbt_ops *ops = node->ctx->ops;
	unsigned n = 0;

	if (!a)
		return 0;
	for (unsigned idx = 0; idx < 4; idx++)
		if (node->listener[idx] && !a->starved[idx])
			pfd[n++] = (struct pollfd){ .fd = ops->listener_fd(node->listener[idx]),
						    .events = POLLIN };
	for (unsigned i = 0; i < a->nbusy; i++)
		pfd[n++] = (struct pollfd){ .fd = ops->conn_fd(a->busy[i]->conn), .events = POLLIN };
	return n;
}

unsigned vbi_accept_maxfds(const struct vb_node *node)
{
	return 4 + node->ctx->attr.max_pending;
}

int vbi_accept_duty(struct vb_node *node, uint64_t now_ns)
{
	struct vbi_accept *a = node->accept;
	int next;

	if (!a)
		return VBI_ACCEPT_IDLE_MS;
	for (unsigned idx = 0; idx < 4; idx++) {
		/* a listener whose request got no lane is retried every 100 ms
		 * (its descriptor stays readable: it is left out of the poll) */
		if (a->starved[idx] && now_ns - a->starved_ns < 100000000ull)
			continue;
		a->starved[idx] = node->listener[idx] && !agent_take(a, idx);
		if (a->starved[idx])
			a->starved_ns = now_ns;
	}
	next = agent_step(a);
	agent_removed(a);
	for (unsigned idx = 0; idx < 4; idx++)
		if (a->starved[idx] && next > 100)
			next = 100;
	return next;
}

int vbi_accept_init(struct vb_node *node)
{
	struct vbi_accept *a;
	unsigned cap = node->ctx->attr.max_pending;

	a = calloc(1, sizeof(*a));
	if (!a)
		return vbi_err(-ENOMEM, "accept state");
	a->node = node;
	a->cap = cap;
	a->busy = calloc(cap, sizeof(*a->busy));
	a->busy_idx = calloc(cap, 1);
	if (!a->busy || !a->busy_idx) {
		free(a->busy_idx);
		free(a->busy);
		free(a);
		return vbi_err(-ENOMEM, "accept state");
	}
	node->accept = a;
	return 0;
}

void vbi_accept_fini(struct vb_node *node)
{
	struct vbi_accept *a = node->accept;

	if (a) {
		while (a->nbusy)
			vbi_lane_destroy_now(busy_take(a, a->nbusy - 1));
		for (unsigned idx = 0; idx < 4; idx++)
			if (a->ready[idx])
				vbi_lane_destroy_now(a->ready[idx]);
		free(a->busy_idx);
		free(a->busy);
		free(a);
		node->accept = NULL;
	}
	for (unsigned i = 0; i < 4; i++)
		vbi_listener_drop(node, i);
}
