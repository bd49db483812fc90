/* SPDX-License-Identifier: MIT */
/*
 * Publishers. ORDERED: every message goes into the publisher's retransmit
 * window (core/stream) and is framed to each subscriber peer from there, as
 * that peer's credits and send queue allow — small messages batched into one
 * SEND when more than one is waiting, large ones fragmented with a
 * registered header plus a zero-copy slice of the message. A message leaves
 * the window when every live subscriber has acknowledged it; with
 * VB_SLOW_CUT a subscriber that acknowledged nothing for slow_sub_ms is cut
 * (no longer waited for) and told so with an END frame ("slow subscribers").
 * FANOUT: datagrams (fragmented to the path MTU) posted on the context's UD
 * QP once to the topic's multicast group for the subscribers that joined it
 * (mcast.c), and to the address handle of each subscriber that did not.
 *
 * This file has what the public functions (api/src/pub.c: attributes and
 * argument checks) call: create, claim, commit, publish, wait, destroy. The ORDERED window, acknowledgements,
 * retransmission and slow subscribers are in pub_ordered.c, the framing to
 * a peer in pub_frame.c, FANOUT sending in pub_fanout.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <sys/random.h>
#include <time.h>

#include "proto/pub_ordered.h"
#include "proto/proto.h"
#include "proto/statfile.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

static uint32_t random_session(void)
{
	uint32_t v = 0;

	while (!v) {
		if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			v = (uint32_t)(ts.tv_nsec ^ ts.tv_sec ^ (uintptr_t)&v);
		}
	}
	return v;
}

/* ---- claim / commit / publish ---------------------------------------------------------------- */

static int check_len(struct vb_pub *pub, size_t len)
{
	if (len > pub->node->ctx->attr.max_msg)
		return vbi_err(-EMSGSIZE, "'%s': %zu bytes > max_msg %zu", pub->topic, len,
			       pub->node->ctx->attr.max_msg);
	return 0;
}

int vbi_pub_claim(struct vb_pub *pub, size_t len, vb_claim_t *claim)
{
	struct vb_ctx *ctx;
	struct vbi_msg *m;
	size_t need;
	int rc;

	if ((rc = check_len(pub, len)))
		return rc;
	ctx = pub->node->ctx;
	need = VBI_WIRE_HDR_LEN + len;
	if (pub->cls == VB_FANOUT) {
		/* room to lay every datagram out at an MTU stride */
		uint32_t fmax = ctx->ud_mtu - VBI_WIRE_HDR_LEN;
		size_t nfrag = len ? (len + fmax - 1) / fmax : 1;

		need = nfrag * ctx->ud_mtu;
		if (need > VBI_MEMPOOL_MAX_ALLOC - VBI_MSG_DESC)
			return vbi_err(-EMSGSIZE, "'%s': %zu bytes need %zu datagrams", pub->topic,
				       len, nfrag);
	}
	{
		/* the primary device is gone (its pool may be detached already):
		 * ORDERED goes on over the standby; FANOUT is posted zero-copy by
		 * the UD endpoint, wherever it is (fanout_rehome if it moves
		 * meanwhile) */
		struct vbi_devres *dr = &ctx->dr[0];

		if (ctx->ndev > 1 && atomic_load(&ctx->dr[0].fatal) && pub->cls == VB_ORDERED)
			dr = &ctx->dr[1];
		else if (pub->cls == VB_FANOUT)
			dr = ctx->ud_dr;
		rc = vbi_msg_new(dr->pool, dr, need, &m);
		if (rc == -ENODEV && pub->cls == VB_FANOUT && dr != ctx->ud_dr)
			rc = vbi_msg_new(ctx->ud_dr->pool, ctx->ud_dr, need, &m); /* the endpoint moved meanwhile */
	}
	if (rc) {
		if (rc == -EAGAIN)
			vbi_pub_refused(pub);
		return vbi_err_prefix(rc, "'%s': registered memory", pub->topic);
	}
	m->owner = pub;
	claim->data = (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN;
	claim->len = len;
	claim->priv_ = m;
	return 0;
}

/* What a publisher's -EAGAIN says, kept unformatted: a publisher retries at
 * full rate while its window is full, and formatting the message each time
 * cost more than the retry (vfprintf on the publishing thread's profile).
 * vb_errmsg() formats it (full_fmt) when it is read. */
struct full_why {
	char topic[96], who[64];
	bool bytes;             /* retain_bytes reached, else the window */
	bool block;             /* slow_policy BLOCK */
	unsigned inflight;
	size_t retained, cap;
	uint64_t held_ms;       /* UINT64_MAX: no holder known */
};
_Static_assert(sizeof(struct full_why) <= VBI_ERR_LAZY_MAX, "full_why fits the lazy error");
_Static_assert(VBI_TOPIC_MAX < 96 && VBI_NAME_MAX <= 64, "names fit full_why");

static void full_fmt(char *buf, size_t len, const void *data)
{
	const struct full_why *w = data;
	char who[256] = "";

	if (w->held_ms != UINT64_MAX)
		snprintf(who, sizeof(who), "; the oldest is held by '%s', which acknowledged "
			 "nothing new for %llu ms%s", w->who, (unsigned long long)w->held_ms,
			 w->block ? " (policy BLOCK)" : "");
	if (w->bytes)
		snprintf(buf, len, "vb_pub_commit: '%s': retained bytes at retain_bytes (%zu of %zu "
			 "bytes, %u messages not yet acknowledged by every subscriber)%s", w->topic,
			 w->retained, w->cap, w->inflight, who);
	else
		snprintf(buf, len, "vb_pub_commit: '%s': retransmit window full (%u messages not yet "
			 "acknowledged by every subscriber)%s", w->topic, w->inflight, who);
}

static void copy_name(char *dst, size_t len, const char *src, size_t srclen)
{
	size_t n = strnlen(src, len - 1 < srclen ? len - 1 : srclen);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* -EAGAIN from vb_pub_commit(): the window (or retain_bytes, @bytes) is
 * full; the message says which live subscriber holds the oldest message,
 * and for how long it has not advanced. Called with pub->lock held; drops
 * it. */
static int retain_full(struct vb_pub *pub, bool bytes)
{
	struct vbi_pubpeer *slow = NULL;
	struct full_why w = { .bytes = bytes, .inflight = vbi_txwin_inflight(&pub->win),
			      .retained = pub->retained, .cap = pub->attr.retain_bytes,
			      .held_ms = UINT64_MAX,
			      .block = pub->attr.slow_policy != VB_SLOW_CUT };

	copy_name(w.topic, sizeof(w.topic), pub->topic, sizeof(pub->topic));
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
		if (!pp->dead && (!slow || pp->acked < slow->acked))
			slow = pp;
	if (slow && slow->stall_ns) {
		uint64_t now = vbi_now_ns();

		copy_name(w.who, sizeof(w.who), slow->peer->name, sizeof(slow->peer->name));
		w.held_ms = now > slow->stall_ns ? (now - slow->stall_ns) / 1000000 : 0;
	}
	vbi_mutex_unlock(&pub->lock);
	vbi_pub_refused(pub);
	return vbi_err_lazy(-EAGAIN, full_fmt, &w, sizeof(w));
}

int vbi_pub_commit(struct vb_pub *pub, vb_claim_t *claim, size_t len, uint64_t *seq_out)
{
	struct vb_ctx *ctx;
	struct vbi_msg *m;
	struct vbi_peer *targets[VBI_MAX_PEERS];
	unsigned nt = 0;
	uint64_t seq;
	int rc;

	ctx = pub->node->ctx;
	m = claim->priv_;
	m->len = (uint32_t)len;
	if (pub->cls == VB_FANOUT) {
		rc = vbi_fanout_send(pub, &m, seq_out);
		if (rc == 0) {
			claim->priv_ = NULL; /* it is the library's now */
		} else { /* still the caller's, maybe moved to another pool (fanout_rehome) */
			claim->priv_ = m;
			claim->data = (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN;
		}
		return rc;
	}
	m->flags = VBI_WF_FIRST | VBI_WF_LAST;
	if (pub->attr.ack_quorum)
		m->flags |= VBI_WF_ACK_REQ;
	vbi_mutex_lock(&pub->lock);
	if (pub->attr.retain_bytes && pub->retained &&
	    pub->retained + m->len > pub->attr.retain_bytes) {
		rc = retain_full(pub, true);
		atomic_fetch_add(&ctx->st->retain_full, 1);
		return rc;
	}
	rc = vbi_txwin_push(&pub->win, m, m->len, &seq);
	if (rc) {
		atomic_store_explicit(&pub->win_full, true, memory_order_relaxed);
		return retain_full(pub, false);
	}
	pub->retained += m->len;
	m->seq = seq; /* framed when sent: a BATCH record, or DATA fragments (frame_one) */
	for (struct vbi_pubpeer *pp = pub->peers; pp && nt < VBI_MAX_PEERS; pp = pp->next_in_pub)
		if (!pp->dead) {
			targets[nt++] = pp->peer;
			if (!pp->stall_ns) /* it holds an unacknowledged message from now */
				pp->stall_ns = vbi_now_ns();
		}
	if (!nt)
		vbi_pub_release(pub); /* nobody to wait for */
	vbi_mutex_unlock(&pub->lock);
	claim->priv_ = NULL;
	atomic_fetch_add_explicit(&ctx->st->published, 1, memory_order_relaxed);
	/* Cork batching: a publish to a connection with no SEND in flight is
	 * posted now (no added latency when idle); one that finds a SEND in
	 * flight is queued, and the progress thread posts everything queued,
	 * packed, when that SEND completes (vbi_peer_after_poll). An answer
	 * (a SEND came in on the lane since its last post: rx_since_post) is
	 * never held: it is request/response traffic, nothing queues behind
	 * it, and the signaled SEND in flight may be one whose completion
	 * comes after the request it answers (vbi_lane_post makes the answer
	 * itself unsignaled). The flag is
	 * set before the second look at the count, and the progress thread
	 * clears the count before it looks at the flag (both seq_cst): either
	 * this thread sees the SEND completed and flushes, or the progress
	 * thread sees the flag. */
	/* the targets were read under pub->lock: a peer reaped since is freed
	 * only after this read-side section (vbi_node_reap) */
	vbi_rcu_enter();
	for (unsigned t = 0; t < nt; t++) {
		struct vbi_peer *p = targets[t];
		struct vbi_lane *l = ctx->cork ? vbi_path_lane(&p->path) : NULL;

		/* vbi_peer_cork sets tx_pending before its flag; a flush
		 * clears it first thing: no store of it here */
		if (l && !atomic_load_explicit(&l->rx_since_post, memory_order_relaxed) &&
		    vbi_peer_cork(p, l)) {
			atomic_fetch_add_explicit(&ctx->st->cork_holds, 1, memory_order_relaxed);
			continue;
		}
		vbi_peer_flush(p);
	}
	vbi_rcu_leave();
	if (seq_out)
		*seq_out = seq;
	return 0;
}

int vbi_publish(struct vb_pub *pub, const void *data, size_t len, uint64_t *seq)
{
	vb_claim_t c;
	int rc;

	if (atomic_load_explicit(&pub->win_full, memory_order_relaxed)) {
		/* A publisher retrying while its window is still full (no ACK
		 * released anything since the push that found it full):
		 * refused before a buffer is claimed, and without the lock the
		 * progress thread needs to release the window. The message
		 * names no holder (the refusal that set the flag did). */
		struct full_why w = { .inflight = pub->win.cap, .held_ms = UINT64_MAX };

		copy_name(w.topic, sizeof(w.topic), pub->topic, sizeof(pub->topic));
		vbi_pub_refused(pub);
		return vbi_err_lazy(-EAGAIN, full_fmt, &w, sizeof(w));
	}
	rc = vbi_pub_claim(pub, len, &c);
	if (rc)
		return rc;
	if (len)
		memcpy(c.data, data, len);
	rc = vbi_pub_commit(pub, &c, len, seq);
	if (rc)
		vbi_msg_put(c.priv_);
	return rc;
}

/* ---- waiting for k-of-n ------------------------------------------------------------------------ */

static unsigned acked_by(struct vb_pub *pub, uint64_t seq)
{
	unsigned n = 0;

	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
		n += !pp->dead && pp->joined < seq && pp->acked >= seq;
	return n;
}

int vbi_pub_wait_acked(struct vb_pub *pub, uint64_t seq, int timeout_ms)
{
	struct vb_ctx *ctx = pub->node->ctx;
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	vbi_mutex_lock(&pub->lock);
	/* k connected subscribers have it, or k had it when they acknowledged
	 * (the k-of-n sequence never goes back: one that delivered it and left
	 * since still counts) */
	while (acked_by(pub, seq) < pub->attr.ack_quorum && pub->quorum_seq < seq) {
		if (ctx->thread_running) {
			rc = vbi_cond_timedwait(&pub->acked_cv, &pub->lock, &dl);
		} else {
			struct timespec now;

			vbi_mutex_unlock(&pub->lock);
			vbi_progress_app(ctx);
			vbi_mutex_lock(&pub->lock);
			clock_gettime(CLOCK_REALTIME, &now);
			if (now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec))
				rc = ETIMEDOUT;
		}
		if (rc == ETIMEDOUT) {
			unsigned have = acked_by(pub, seq);

			vbi_mutex_unlock(&pub->lock);
			return vbi_err(-ETIMEDOUT, "'%s' seq %llu: %u of %u acknowledgements after %d ms "
				       "(%u subscribers)", pub->topic, (unsigned long long)seq, have,
				       pub->attr.ack_quorum, timeout_ms, pub->npeers);
		}
	}
	vbi_mutex_unlock(&pub->lock);
	return 0;
}

/* ---- create / destroy --------------------------------------------------------------------------- */

int vbi_check_topic(const char *topic)
{
	size_t n;

	if (!topic)
		return vbi_err(-EINVAL, "NULL topic");
	n = strlen(topic);
	if (!n || n > VBI_TOPIC_MAX)
		return vbi_err(-EINVAL, "topic '%s': 1..%d bytes", topic, VBI_TOPIC_MAX);
	return 0;
}

int vbi_pub_create(struct vb_node *node, const char *topic, vb_class_t cls,
		   const vb_pub_attr_t *attr, struct vb_pub **out)
{
	struct vb_pub *pub;
	int rc;

	*out = NULL;
	pub = calloc(1, sizeof(*pub) + (size_t)attr->ack_quorum * sizeof(pub->left[0]));
	if (!pub)
		return vbi_err(-ENOMEM, "publisher");
	pub->node = node;
	snprintf(pub->topic, sizeof(pub->topic), "%s", topic);
	pub->topic_id = vbi_topic_id(topic);
	pub->cls = cls;
	pub->attr = *attr;
	pub->backpressure = &pub->bp_own;
	pub->stat_slot = -1;
	pub->session = random_session();
	vbi_mutex_init(&pub->lock);
	vbi_cond_init(&pub->acked_cv);
	if (cls == VB_ORDERED && (rc = vbi_txwin_init(&pub->win, node->ctx->attr.window, 1))) {
		free(pub);
		return rc;
	}
	if (cls == VB_FANOUT)
		vbi_mcast_pub_open(pub); /* on failure: unicast to every subscriber */
	pthread_rwlock_wrlock(&node->lock);
	for (struct vb_pub *o = node->pubs; o; o = o->next)
		if (o->topic_id == pub->topic_id) {
			pthread_rwlock_unlock(&node->lock);
			vbi_mcast_pub_close(pub);
			vbi_txwin_fini(&pub->win);
			free(pub);
			return vbi_err(-EEXIST, "node '%s' already publishes '%s'%s", node->name,
				       topic, strcmp(o->topic, topic) ? " (topic id collision)" : "");
		}
	vbi_statfile_pub_attach(node->ctx->statf, pub); /* before it counts */
	pub->next = node->pubs;
	vbi_rcu_assign(node->pubs, pub); /* the progress thread's rounds read with no lock */
	/* subscribers already known */
	for (struct vbi_peer *p = node->peers; p; p = p->next)
		for (struct vbi_rsub *r = p->rsubs; r; r = r->next)
			if (r->topic == pub->topic_id && r->cls == (uint8_t)cls)
				vbi_pub_attach(pub, p);
	pthread_rwlock_unlock(&node->lock);
	*out = pub;
	return 0;
}

int vbi_pub_subscribers(struct vb_pub *pub)
{
	int n = 0;

	vbi_mutex_lock(&pub->lock);
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
		n += !pp->dead;
	vbi_mutex_unlock(&pub->lock);
	return n;
}

/* Messages some live subscriber has not acknowledged. pub->lock held. */
static uint64_t unacked(struct vb_pub *pub)
{
	uint64_t last = pub->win.next_seq - 1, n = 0;

	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub) {
		uint64_t from = pp->acked > pp->joined ? pp->acked : pp->joined;

		if (!pp->dead && !atomic_load(&pp->peer->dead) && last > from && last - from > n)
			n = last - from;
	}
	return n;
}

/* vb_pub_destroy()'s linger: until every live subscriber acknowledged
 * everything, or @ms passed. Returns what is left unacknowledged. */
static uint64_t linger(struct vb_pub *pub, unsigned ms)
{
	struct vb_ctx *ctx = pub->node->ctx;
	uint64_t end = vbi_now_ns() + (uint64_t)ms * 1000000, left;

	vbi_mutex_lock(&pub->lock);
	while ((left = unacked(pub)) && vbi_now_ns() < end) {
		if (ctx->thread_running) {
			/* short slices: a subscriber given up wakes nobody */
			struct timespec dl;

			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += 10000000;
			if (dl.tv_nsec >= 1000000000) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000;
			}
			vbi_cond_timedwait(&pub->acked_cv, &pub->lock, &dl);
		} else {
			vbi_mutex_unlock(&pub->lock);
			vbi_progress_app(ctx);
			vbi_mutex_lock(&pub->lock);
		}
	}
	vbi_mutex_unlock(&pub->lock);
	return left;
}

/* Frees @pub, once nothing can count on it: its slot in the counters file
 * goes back first. */
static void pub_free(void *arg)
{
	struct vb_pub *pub = arg;

	vbi_statfile_pub_detach(pub->node->ctx->statf, pub);
	free(pub);
}

int vbi_pub_destroy(struct vb_pub *pub)
{
	struct vb_node *node = pub->node;
	uint64_t left = 0;
	bool in_cb;

	in_cb = vbi_in_callback(node->ctx);
	/* from a callback no acknowledgement can arrive while we wait (this
	 * thread reads them): no linger */
	if (pub->cls == VB_ORDERED && (left = linger(pub, in_cb ? 0 : pub->attr.linger_ms)))
		atomic_fetch_add(&node->ctx->st->unacked_on_close, left);
	if (!in_cb) /* the on_ack callbacks of what linger saw acknowledged run first */
		vbi_cb_wait_idle(&pub->cb_pending);
	if (pub->cls == VB_FANOUT)
		vbi_pub_fanout_close(pub);
	/* Its attachments point to peers: once it is off node->pubs the
	 * reaper (vbi_node_reap, on the conductor) no longer finds them, and
	 * would free the peers (a use after free that ASan caught in
	 * pubsub_close_ack_test when the attachments went after the wait
	 * below, before this count): it reaps nothing until they are gone. */
	atomic_fetch_add(&node->closing_objs, 1);
	pthread_rwlock_wrlock(&node->lock);
	for (struct vb_pub **pp = &node->pubs; *pp; pp = &(*pp)->next)
		if (*pp == pub) {
			vbi_rcu_assign(*pp, pub->next);
			break;
		}
	atomic_store(&pub->dead, true); /* queued on_ack callbacks are skipped */
	pthread_rwlock_unlock(&node->lock);
	/* the progress thread's rounds over node->pubs (slow subscribers,
	 * FANOUT flush and heartbeats), which take no node->lock, are past
	 * it (no lock held here; from a callback, outside those rounds) */
	vbi_rcu_synchronize();
	pthread_rwlock_wrlock(&node->lock);
	while (pub->peers) {
		struct vbi_pubpeer *pp = pub->peers;

		pub->peers = pp->next_in_pub;
		if (pub->cls == VB_ORDERED)
			vbi_pub_detach_pp(pp);
		free(pp);
	}
	pthread_rwlock_unlock(&node->lock);
	atomic_fetch_sub(&node->closing_objs, 1);
	if (!in_cb)
		vbi_cb_wait_idle(&pub->cb_pending);
	if (pub->cls == VB_ORDERED) {
		vbi_txwin_drain(&pub->win, vbi_pub_release_msg, pub);
		vbi_txwin_fini(&pub->win);
	}
	if (pub->batch)
		vbi_msg_put(pub->batch);
	vbi_mcast_pub_close(pub);
	vbi_mutex_destroy(&pub->lock);
	if (left) {
		int rc = vbi_err(-ETIMEDOUT, "'%s': %llu messages not acknowledged by every "
				 "subscriber within %u ms; released", pub->topic,
				 (unsigned long long)left, in_cb ? 0 : pub->attr.linger_ms);

		if (!in_cb || !atomic_load(&pub->cb_pending) ||
		    vbi_cb_defer_free(node->ctx, pub, pub_free))
			pub_free(pub);
		return rc;
	}
	if (!in_cb || !atomic_load(&pub->cb_pending) || vbi_cb_defer_free(node->ctx, pub, pub_free))
		pub_free(pub);
	return 0;
}
