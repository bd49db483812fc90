/* SPDX-License-Identifier: MIT */
/*
 * The node's listeners and its accept agent.
 *
 * One thread per listening node ("vb-accept") takes the connection
 * requests of all four listeners (RC on the primary and the standby
 * device, UC and UD for degraded lanes) and drives every handshake in
 * steps that never block (transport: accept_start, conn_step), so a
 * requester that stops half-way (no RTU) holds up nothing but its own
 * handshake, which is given up after cm_timeout_ms
 * (tests/rxe/accept_stall_test). An accepted connection becomes a lane,
 * pending on the node until its HELLO says which peer it belongs to (a new
 * one, or a standby / replacement for a known one).
 *
 * Duty cycle: wait (poll) until a listener or a handshake in progress has
 * an event, the agent is woken (stop), the next handshake deadline, or
 * 500 ms (a removed device is noticed then); take every waiting request;
 * step every handshake in progress; give up those past their deadline.
 *
 * State: struct accept_agent below is the agent thread's alone. The lanes
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

#include "proto/proto.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

#define ACCEPT_IDLE_MS 500

/* The accept agent's state. Owner: the accept agent thread. */
struct accept_agent {
	struct vb_node *node;
	struct vbi_lane *ready[4];   /* a lane prepared for listener i's next request */
	struct vbi_lane **busy;      /* handshakes in progress, oldest first */
	unsigned char *busy_idx;     /* their listeners */
	unsigned nbusy, cap;         /* cap: max_pending */
	struct pollfd *pfd;          /* [wake | 4 listeners | busy] */
};

static struct vbi_devres *listener_dev(struct vb_node *node, unsigned idx)
{
	return &node->ctx->dr[idx == 1 ? 1 : 0];
}

/* Close listener @idx (the agent thread, or set-up and teardown when it
 * does not run). */
static void listener_drop(struct vb_node *node, unsigned idx)
{
	if (!node->listener[idx])
		return;
	atomic_store(&node->lport[idx], 0);
	node->ctx->ops->listener_close(node->listener[idx]);
	node->listener[idx] = NULL;
	atomic_fetch_sub(&listener_dev(node, idx)->nlisteners, 1);
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

/* A lane for listener @idx's next request, made ahead (its QP, lean
 * receive slots, registered room for its HELLO): NULL when it cannot be
 * made now (warned; the request waits for a later round). */
static struct vbi_lane *agent_ready(struct accept_agent *a, unsigned idx)
{
	struct vb_node *node = a->node;
	struct vbi_lane *l = a->ready[idx];
	unsigned waiting = 0;

	if (l)
		return l;
	if (vbi_lane_new(node, listener_dev(node, idx), node->listener[idx]->type, true, &l)) {
		vbi_warn("accept: cannot prepare a connection: %s", vbi_errmsg());
		return NULL;
	}
	/* its HELLO is handled by the progress thread, which must not
	 * register memory for it, nor for those of the accepted connections
	 * still waiting for theirs (nor those being accepted) */
	pthread_rwlock_rdlock(&node->lock);
	for (struct vbi_lane *o = node->pending; o; o = o->next)
		waiting += o->lean;
	pthread_rwlock_unlock(&node->lock);
	if (vbi_lane_commit_prepare(l, waiting + a->nbusy))
		vbi_info("accept: no registered room made ahead: %s", vbi_errmsg());
	atomic_store(&l->in_setup, true);
	a->ready[idx] = l;
	return l;
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

/* Forget handshake @i (its lane is the caller's now). */
static void busy_remove(struct accept_agent *a, unsigned i)
{
	memmove(&a->busy[i], &a->busy[i + 1], (a->nbusy - i - 1) * sizeof(a->busy[0]));
	memmove(&a->busy_idx[i], &a->busy_idx[i + 1], a->nbusy - i - 1);
	a->nbusy--;
}

/* Give up handshake @i: counted with the connections dropped before their
 * HELLO (vb_stats_t.pending_dropped). */
static void busy_drop(struct accept_agent *a, unsigned i, const char *why)
{
	struct vbi_lane *l = a->busy[i];

	busy_remove(a, i);
	atomic_fetch_add(&a->node->ctx->st.pending_dropped, 1);
	vbi_warn("node '%s': a connection's handshake %s: dropped (QP %u)", a->node->name, why,
		 l->qp->qpn);
	vbi_lane_destroy_now(l);
}

/* Take every request waiting on listener @idx. Returns false when a lane
 * could not be prepared for one (it waits). */
static bool agent_take(struct accept_agent *a, unsigned idx)
{
	struct vb_node *node = a->node;
	struct vb_ctx *ctx = node->ctx;
	struct vbi_lane *l;
	int rc;

	while (!atomic_load(&node->stop)) {
		if (!(l = agent_ready(a, idx)))
			return false;
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
			if (!atomic_load(&node->stop))
				vbi_warn("accept failed: %s", vbi_errmsg());
			vbi_lane_destroy_now(l); /* its QP may be in any state */
		}
	}
	return true;
}

/* Step every handshake in progress; give up those past cm_timeout_ms.
 * Returns the ms until the next deadline (ACCEPT_IDLE_MS at most). */
static int agent_step(struct accept_agent *a)
{
	struct vb_ctx *ctx = a->node->ctx;
	uint64_t limit = (uint64_t)ctx->attr.cm_timeout_ms * 1000000ull, now = vbi_mono_ns();
	uint64_t next = (uint64_t)ACCEPT_IDLE_MS * 1000000ull;

	for (unsigned i = 0; i < a->nbusy;) {
		struct vbi_lane *l = a->busy[i];
		int rc = ctx->ops->conn_step(l->conn);

		if (rc == 0) {
			busy_remove(a, i);
			agent_accepted(a->node, l);
		} else if (rc != -EINPROGRESS) {
			busy_remove(a, i);
			if (!atomic_load(&a->node->stop))
				vbi_warn("accept failed: %s", vbi_errmsg());
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
static void agent_removed(struct accept_agent *a)
{
	struct vb_node *node = a->node;

	for (unsigned idx = 0; idx < 4; idx++) {
		if (!node->listener[idx] || !atomic_load(&listener_dev(node, idx)->removed))
			continue;
		for (unsigned i = a->nbusy; i-- > 0;)
			if (a->busy_idx[i] == idx) {
				struct vbi_lane *l = a->busy[i];

				busy_remove(a, i);
				vbi_lane_destroy_now(l);
			}
		if (a->ready[idx]) {
			vbi_lane_destroy_now(a->ready[idx]);
			a->ready[idx] = NULL;
		}
		vbi_info("node '%s': %s listener on %s closed (device removed)", node->name,
			 vbi_path_mode_name(node->listener[idx]->type), listener_dev(node, idx)->name);
		listener_drop(node, idx);
	}
}

static void agent_wait(struct accept_agent *a, int timeout_ms)
{
	struct vb_node *node = a->node;
	const struct vbt_ops *ops = node->ctx->ops;
	nfds_t n = 0;
	uint64_t v;

	a->pfd[n++] = (struct pollfd){ .fd = node->accept_wake, .events = POLLIN };
	for (unsigned idx = 0; idx < 4; idx++)
		if (node->listener[idx])
			a->pfd[n++] = (struct pollfd){ .fd = ops->listener_fd(node->listener[idx]),
						       .events = POLLIN };
	for (unsigned i = 0; i < a->nbusy; i++)
		a->pfd[n++] = (struct pollfd){ .fd = ops->conn_fd(a->busy[i]->conn),
					       .events = POLLIN };
	if (poll(a->pfd, n, timeout_ms) > 0 && (a->pfd[0].revents & POLLIN))
		(void)!read(node->accept_wake, &v, sizeof(v));
}

static void *accept_main(void *arg)
{
	struct accept_agent *a = arg;
	struct vb_node *node = a->node;
	int timeout_ms = 0;

	vbi_lib_thread_enter();
	while (!atomic_load(&node->stop)) {
		bool starved = false;

		agent_wait(a, timeout_ms);
		for (unsigned idx = 0; idx < 4; idx++)
			if (node->listener[idx] && !agent_take(a, idx))
				starved = true;
		timeout_ms = agent_step(a);
		agent_removed(a);
		if (starved) { /* its request stays readable: do not spin on it */
			struct timespec ts = { 0, 100000000 };

			nanosleep(&ts, NULL);
		}
	}
	for (unsigned i = a->nbusy; i-- > 0;) {
		struct vbi_lane *l = a->busy[i];

		busy_remove(a, i);
		vbi_lane_destroy_now(l);
	}
	for (unsigned idx = 0; idx < 4; idx++)
		if (a->ready[idx])
			vbi_lane_destroy_now(a->ready[idx]);
	return NULL;
}

/* ---- listening ----------------------------------------------------------------------------- */

int vbi_node_listen(struct vb_node *node, unsigned idx, const char *ip, uint16_t port)
{
	static const enum vb_qp_type types[4] = { VB_QPT_RC, VB_QPT_RC, VB_QPT_UC, VB_QPT_UD };
	struct vb_ctx *ctx = node->ctx;
	struct vbi_devres *dr = listener_dev(node, idx);
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

static void agent_free(struct vb_node *node, struct accept_agent *a)
{
	if (node->accept_wake >= 0)
		close(node->accept_wake);
	node->accept_wake = -1;
	free(a->pfd);
	free(a->busy_idx);
	free(a->busy);
	free(a);
}

int vbi_node_accept_start(struct vb_node *node)
{
	struct accept_agent *a;
	unsigned cap = node->ctx->attr.max_pending;
	int rc;

	a = calloc(1, sizeof(*a));
	if (!a)
		return vbi_err(-ENOMEM, "accept agent");
	a->node = node;
	a->cap = cap;
	a->busy = calloc(cap, sizeof(*a->busy));
	a->busy_idx = calloc(cap, 1);
	a->pfd = calloc(1 + 4 + cap, sizeof(*a->pfd));
	node->accept_wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!a->busy || !a->busy_idx || !a->pfd || node->accept_wake < 0) {
		rc = node->accept_wake < 0 ? vbi_err(-errno, "accept agent eventfd: %s",
						     strerror(errno))
					   : vbi_err(-ENOMEM, "accept agent");
		goto err;
	}
	rc = -pthread_create(&node->accept_thread, NULL, accept_main, a);
	if (rc) {
		vbi_err(rc, "accept thread: %s", strerror(-rc));
		goto err;
	}
	vbi_thread_name(node->accept_thread, "vb-accept");
	node->accept_agent = a;
	return 0;
err:
	agent_free(node, a);
	return rc;
}

void vbi_node_accept_stop(struct vb_node *node)
{
	struct accept_agent *a = node->accept_agent;
	uint64_t one = 1;

	if (a) {
		atomic_store(&node->stop, true);
		(void)!write(node->accept_wake, &one, sizeof(one));
		vbi_join_progressing(node->ctx, node->accept_thread);
		agent_free(node, a);
		node->accept_agent = NULL;
	}
	for (unsigned i = 0; i < 4; i++)
		listener_drop(node, i);
}
