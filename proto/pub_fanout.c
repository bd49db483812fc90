/* SPDX-License-Identifier: MIT */
/*
 * FANOUT publishing: one sequence per publisher, datagrams laid out in the
 * message's own registered buffer at an MTU stride, posted once per
 * unicast subscriber's address handle and once to the topic's multicast
 * group (when the device joined one), small messages batched into one
 * datagram; heartbeats announce the tail so subscribers see a lost last
 * message as a gap.
 *
 * Threads: any publishing thread batches under pub->lock and posts under
 * ctx->ud_lock (taken first, pub->lock inside it) when the UD QP is idle;
 * the progress thread posts what they batched meanwhile, marks the send
 * completions and sends heartbeats.
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
#include "proto/proto.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

/* ---- FANOUT ---------------------------------------------------------------------------------- */

/* Live FANOUT unicast targets of @pub (subscribers not reached through its
 * group). ud_lock and pub->lock held. */
static unsigned fanout_targets(struct vb_pub *pub, struct vbi_peer **t, unsigned max)
{
	unsigned n = 0;

	for (struct vbi_pubpeer *pp = pub->peers; pp && n < max; pp = pp->next_in_pub)
		if (!pp->dead && !pp->peer->dead && pp->peer->ah && !pp->mcast)
			t[n++] = pp->peer;
	return n;
}

/* Free entries of the UD send ring, once what completed is released (the
 * progress thread only marks completions: vbi_sring_complete). ud_lock
 * held. */
static uint32_t ud_room(struct vb_ctx *ctx)
{
	vbi_sring_reclaim(&ctx->ud_sr);
	return ctx->ud_sr.n - ctx->ud_sr.outstanding;
}

/*
 * Post @ndg datagrams laid out at an MTU stride in @m (lengths in @len) to
 * each of @nt targets and, with @grp, once to the group. ud_lock held; the
 * caller checked ring space. Takes one reference per post and drops the
 * caller's. A failed post is loss the subscribers will see as a gap.
 */
static void fanout_post(struct vb_ctx *ctx, struct vb_pub *pub, struct vbi_msg *m, uint32_t ndg,
			const uint32_t *len, struct vbi_peer **targets, unsigned nt,
			const struct vbt_mcast *grp)
{
	unsigned nd = nt + (grp != NULL);

	atomic_fetch_add(&m->refs, (int)(nd * ndg));
	for (unsigned t = 0; t < nd; t++) {
		struct vbt_ah *ah = t < nt ? targets[t]->ah : grp->ah;
		uint32_t qpn = t < nt ? targets[t]->ud.qpn : grp->remote_qpn;
		uint32_t qkey = t < nt ? targets[t]->ud.qkey : grp->qkey;
		uint32_t posted = 0;

		for (uint32_t i = 0; i < ndg; i++) {
			struct vbi_sctx *s = vbi_sring_take(&ctx->ud_sr);
			struct vbt_sge sge = { (uintptr_t)m->buf.addr + (size_t)i * ctx->ud_mtu, len[i],
					       m->buf.lkey };
			struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge,
						  .num_sge = 1, .opcode = VBT_WR_SEND, .ah = ah,
						  .remote_qpn = qpn, .remote_qkey = qkey };
			const struct vbt_send_wr *bad;
			bool last = t + 1 == nd && i + 1 == ndg;

			if (last || ++ctx->ud_sr.since_signal >= ctx->ud_sr.n / 4) {
				wr.flags |= VBT_SEND_SIGNALED;
				ctx->ud_sr.since_signal = 0;
			}
			if (sge.length <= ctx->ud_qp->cap.max_inline_data)
				wr.flags |= VBT_SEND_INLINE;
			s->ud_ref = m;
			if (wr.flags & VBT_SEND_SIGNALED)
				vbi_sring_signaled(&ctx->ud_sr, s); /* before: see sring.h */
			/* counted before the post, taken back if it fails */
			vbi_st_count_send(ctx->st, wr.flags & VBT_SEND_INLINE,
					  wr.flags & VBT_SEND_SIGNALED, 1);
			if (vbt_post_send(ctx->ud_qp, &wr, &bad)) {
				vbi_st_count_send(ctx->st, wr.flags & VBT_SEND_INLINE,
						  wr.flags & VBT_SEND_SIGNALED, -1);
				s->ud_ref = NULL;
				vbi_sring_untake(&ctx->ud_sr);
				vbi_msg_put(m);
				vbi_warn("'%s': datagram post failed: %s", pub->topic, vbi_errmsg());
				continue;
			}
			posted++;
		}
		if (t >= nt && posted)
			vbi_mcast_sent(ctx, posted);
	}
	vbi_msg_put(m);
}

/* *@mp's block is in the pool of another device than the UD endpoint's (it
 * moved: dev_reap, progress.c): copy it over, since datagrams are posted from the
 * message's own buffer; *@mp is the copy then. Nothing was posted from
 * the message yet (its only reference is the caller's). Any thread:
 * vbi_fanout_send for the caller's message, fanout_post_taken (ud_lock
 * held) for a batch made before the endpoint moved. */
static int fanout_rehome(struct vb_ctx *ctx, struct vbi_msg **mp)
{
	struct vbi_devres *dr = ctx->ud_dr;
	struct vbi_msg *m = *mp, *n;
	int rc;

	if (m->dr == dr)
		return 0;
	rc = vbi_msg_new(dr->pool, dr, m->buf.len, &n);
	if (rc)
		return rc;
	memcpy(n->buf.addr, m->buf.addr, m->buf.len);
	n->len = m->len;
	n->flags = m->flags;
	n->seq = m->seq;
	n->owner = m->owner;
	vbi_msg_put(m);
	*mp = n;
	return 0;
}

/* Seal @pub's batch: its BATCH header written, it joins the datagrams
 * waiting to be posted (the caller checked there is room). pub->lock held. */
static void seal_batch(struct vb_ctx *ctx, struct vb_pub *pub)
{
	struct vbi_msg *m = pub->batch;
	struct vbi_wire_hdr h = {
		.type = VBI_WT_BATCH, .flags = VBI_WF_FIRST | VBI_WF_LAST,
		.session = pub->session, .topic = pub->topic_id,
		.seq = pub->fanout_seq - pub->batch_frames + 1, /* records: seq .. fanout_seq */
		.len = pub->batch_off - VBI_WIRE_HDR_LEN, .msg_len = pub->batch_frames,
	};
	unsigned i = (pub->ready_head + pub->ready_n) % VBI_FANOUT_READY;

	vbi_wire_put(m->buf.addr, &h);
	pub->ready[i] = (struct vbi_fdgram){ m, pub->batch_off, pub->batch_frames };
	pub->ready_n++;
	pub->batch = NULL;
	if (pub->batch_frames > 1)
		atomic_fetch_add_explicit(&ctx->st->batched_frames, pub->batch_frames,
					  memory_order_relaxed);
	atomic_fetch_add_explicit(&ctx->st->frames_sent, pub->batch_frames, memory_order_relaxed);
}

/* What fanout_take leaves behind (bits). */
enum { LEFT_PARTIAL = 1, LEFT_SEALED = 2 };

/* Datagrams stay (@left, LEFT_*): the progress thread is to post them
 * (vbi_pub_fanout_flush). A relaxed look first: a store is a locked
 * instruction. The progress thread clears the flags before it takes
 * pub->lock to look, so it sees what stays, or the look sees them cleared. */
static void fanout_mark_left(struct vb_ctx *ctx, unsigned left)
{
	if ((left & LEFT_SEALED) && !atomic_load_explicit(&ctx->fanout_sealed, memory_order_relaxed))
		atomic_store(&ctx->fanout_sealed, true);
	if (left && !atomic_load_explicit(&ctx->fanout_pending, memory_order_relaxed))
		atomic_store(&ctx->fanout_pending, true);
}

/* Take @pub's sealed datagrams, and with @partial its batch too (sealed
 * now), as many as the ring has room for, oldest first, into @out (at most
 * VBI_FANOUT_READY + 1). ud_lock and pub->lock held. Returns how many;
 * *@left says what stays. */
static unsigned fanout_take(struct vb_ctx *ctx, struct vb_pub *pub, bool partial, unsigned nd,
			    struct vbi_fdgram *out, unsigned *left)
{
	uint32_t room = ctx->ud_qp ? ud_room(ctx) : UINT32_MAX; /* no QP: all go (lost) */
	unsigned k = 0;

	if (partial && pub->batch && pub->ready_n < VBI_FANOUT_READY)
		seal_batch(ctx, pub);
	while (pub->ready_n && (uint64_t)(k + 1) * nd <= room) {
		out[k++] = pub->ready[pub->ready_head];
		pub->ready_head = (pub->ready_head + 1) % VBI_FANOUT_READY;
		pub->ready_n--;
	}
	*left = (pub->ready_n ? LEFT_SEALED : 0) | (pub->batch ? LEFT_PARTIAL : 0);
	return k;
}

/* Sealed datagram @d of @pub will not go out (@why): counted lost, logged,
 * its reference dropped. */
static void fdgram_drop(struct vb_ctx *ctx, struct vb_pub *pub, struct vbi_fdgram *d,
			const char *why)
{
	vbi_warn("'%s': %u FANOUT message(s) %s: not sent", pub->topic, d->frames, why);
	atomic_fetch_add(&ctx->st->lost, d->frames);
	vbi_msg_put(d->m);
}

/* Post @k datagrams taken by fanout_take to @pub's targets. ud_lock held
 * (pub->lock need not be: the targets are peers, which are freed only after
 * an RCU grace period, and address handles, destroyed under ud_lock). */
static void fanout_post_taken(struct vb_ctx *ctx, struct vb_pub *pub, struct vbi_fdgram *d,
			      unsigned k, struct vbi_peer **targets, unsigned nt,
			      const struct vbt_mcast *grp)
{
	for (unsigned i = 0; i < k; i++) {
		if (!ctx->ud_qp) /* its device was removed (dev_reap): nowhere to post */
			fdgram_drop(ctx, pub, &d[i], "batched when the device went");
		else if (fanout_rehome(ctx, &d[i].m)) /* no memory on the new device */
			fdgram_drop(ctx, pub, &d[i], "could not move to the new device");
		else
	fanout_post(ctx, pub, d[i].m, 1, &d[i].len, targets, nt, grp);
	}
}

/*
 * Post what @pub has waiting: its sealed datagrams and, with @partial, its
 * batch. ud_lock held, pub->lock not: it is taken only to take the
 * datagrams, so the publishing threads go on batching while this thread
 * carries the posts (rxe does the transfer inside ibv_post_send). Returns
 * what stays (LEFT_*).
 */
static unsigned fanout_post_ready(struct vb_ctx *ctx, struct vb_pub *pub, bool partial)
{
	struct vbi_peer *targets[VBI_MAX_PEERS];
	struct vbi_fdgram d[VBI_FANOUT_READY + 1];
	const struct vbt_mcast *grp;
	unsigned nt, nd, k, left;

	vbi_rcu_enter(); /* the targets stay (vbi_node_reap) */
	vbi_mutex_lock(&pub->lock);
	nt = fanout_targets(pub, targets, VBI_MAX_PEERS);
	grp = vbi_mcast_pub_group(pub);
	nd = nt + (grp != NULL);
	k = fanout_take(ctx, pub, partial, nd ? nd : 1, d, &left);
	vbi_mutex_unlock(&pub->lock);
	fanout_post_taken(ctx, pub, d, k, targets, nt, grp);
	vbi_rcu_leave();
	return left;
}

/* Progress thread: post the FANOUT datagrams the publishers sealed, and the
 * batches corked behind a datagram in flight once none is. ud_lock is only
 * tried: a publisher holding it is posting (the next round looks again;
 * progress does not block while a batch waits so: fanout_unblocked). */
void vbi_pub_fanout_flush(struct vb_ctx *ctx, bool idle)
{
	bool partial;

	(void)idle;
	if (!atomic_load_explicit(&ctx->fanout_pending, memory_order_relaxed))
		return;
	partial = !atomic_load(&ctx->ud_sr.sig_inflight);
	if (!partial && !atomic_load_explicit(&ctx->fanout_sealed, memory_order_relaxed))
		return; /* corked behind the datagram in flight */
	atomic_store(&ctx->fanout_pending, false);
	atomic_store(&ctx->fanout_sealed, false);
	/* no ctx->lock or node->lock: nodes and publishers go after a grace
	 * period */
	vbi_rcu_enter();
	for (struct vb_node *n = vbi_rcu_deref(ctx->nodes); n; n = vbi_rcu_deref(n->next)) {
		for (struct vb_pub *pub = vbi_rcu_deref(n->pubs); pub; pub = vbi_rcu_deref(pub->next)) {
			unsigned left = LEFT_SEALED;

			if (pub->cls != VB_FANOUT)
				continue;
			if (!pthread_mutex_trylock(&ctx->ud_lock)) {
				left = fanout_post_ready(ctx, pub, partial);
				pthread_mutex_unlock(&ctx->ud_lock);
			}
			fanout_mark_left(ctx, left);
		}
	}
	vbi_rcu_leave();
}

/* How long vbi_pub_fanout_close waits for room in the datagram queue. */
#define CLOSE_POST_MS 1000

/* Before @pub goes (vbi_pub_destroy, still attached): what it batched is
 * posted, waiting up to CLOSE_POST_MS for room in the queue; what still
 * finds none is counted lost. */
void vbi_pub_fanout_close(struct vb_pub *pub)
{
	struct vb_ctx *ctx = pub->node->ctx;
	uint64_t t0 = vbi_now_ms();
	unsigned left;

	for (;;) {
		pthread_mutex_lock(&ctx->ud_lock);
		left = fanout_post_ready(ctx, pub, true);
		pthread_mutex_unlock(&ctx->ud_lock);
		if (!left || vbi_now_ms() - t0 > CLOSE_POST_MS)
			break;
		vbi_progress_or_nap(ctx); /* completions make room */
	}
	vbi_mutex_lock(&pub->lock);
	if (pub->batch && pub->ready_n < VBI_FANOUT_READY)
		seal_batch(ctx, pub);
	while (pub->ready_n) {
		fdgram_drop(ctx, pub, &pub->ready[pub->ready_head], "found no room to go out at close");
		pub->ready_head = (pub->ready_head + 1) % VBI_FANOUT_READY;
		pub->ready_n--;
	}
	vbi_mutex_unlock(&pub->lock);
}

/* @m, which fits one datagram, as the next record of @pub's batch (its
 * header is written when it is sealed); a full batch is sealed for posting
 * first. *@seq gets its sequence. pub->lock held. 0, or -EAGAIN when the
 * sealed datagrams fill their queue (nothing taken from @m then). */
static int fanout_append(struct vb_ctx *ctx, struct vb_pub *pub, struct vbi_msg *m, uint64_t *seq)
{
	uint32_t mtu = ctx->ud_mtu;
	size_t rs = vbi_wire_rec_size(m->len);
	uint8_t *pl = (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN;

	if (pub->batch && pub->batch_off + rs > mtu) {
		if (pub->ready_n == VBI_FANOUT_READY)
			return -EAGAIN;
		seal_batch(ctx, pub);
		atomic_store(&ctx->fanout_sealed, true);
	}
	if (!pub->batch) {
		/* this message's buffer becomes the datagram: its payload
		 * moves up by the record's length field */
		pub->batch = m;
		pub->batch_off = VBI_WIRE_HDR_LEN;
		pub->batch_frames = 0;
		memmove(pl + VBI_WIRE_REC_HDR, pl, m->len);
		pl += VBI_WIRE_REC_HDR;
	}
	*seq = ++pub->fanout_seq;
	pub->last_pub_ms = vbi_now_ms();
	pub->batch_off += (uint32_t)vbi_wire_rec_put((uint8_t *)pub->batch->buf.addr +
						     pub->batch_off, pl, m->len);
	pub->batch_frames++;
	if (pub->batch != m)
		vbi_msg_put(m); /* copied into the batch */
	return 0;
}

/* A message that fits one datagram (vbi_fanout_send). Appended to the
 * batch under pub->lock alone; then, when no datagram is in flight and
 * nothing waits before it, this thread posts the batch at once (no added
 * latency when idle) if it gets ud_lock without waiting. Otherwise the
 * progress thread posts it: sealed datagrams at once, a partial batch when
 * the datagram in flight completes (cork). Only when the sealed datagrams
 * fill their queue does this thread wait for ud_lock and post them itself
 * (back-pressure). */
static int fanout_send_small(struct vb_ctx *ctx, struct vb_pub *pub, struct vbi_msg *m,
			     uint64_t *seq)
{
	unsigned left = LEFT_PARTIAL; /* what is appended, until posted */
	bool idle;
	int rc;

	for (int tries = 0;; tries++) {
		vbi_mutex_lock(&pub->lock);
		rc = fanout_append(ctx, pub, m, seq);
		idle = !rc && !pub->ready_n &&
		       (!ctx->cork || !atomic_load(&ctx->ud_sr.sig_inflight));
		vbi_mutex_unlock(&pub->lock);
		if (rc != -EAGAIN || tries)
			break;
		pthread_mutex_lock(&ctx->ud_lock); /* back-pressure: post them here */
		fanout_post_ready(ctx, pub, false);
		pthread_mutex_unlock(&ctx->ud_lock);
	}
	if (rc)
		return rc;
	if (idle && !pthread_mutex_trylock(&ctx->ud_lock)) {
		left = fanout_post_ready(ctx, pub, true);
		pthread_mutex_unlock(&ctx->ud_lock);
		if (!left)
			return 0;
	}
	fanout_mark_left(ctx, left);
	vbi_ctx_wake(ctx);
	return 0;
}

/* -ENODEV: no UD endpoint left for @pub's datagrams. */
static int ud_gone_err(struct vb_ctx *ctx, const struct vb_pub *pub)
{
	return vbi_err(-ENODEV, "'%s': the device that carried FANOUT (%s) was removed",
		       pub->topic, atomic_load(&ctx->ud_dr)->name);
}

/*
 * FANOUT publish. A message that fits one datagram joins the publisher's
 * batch datagram (fanout_send_small). Larger messages are fragmented into
 * datagrams laid out in place and posted by this thread under ud_lock,
 * after everything batched before them.
 */
int vbi_fanout_send(struct vb_pub *pub, struct vbi_msg **mp, uint64_t *seq_out)
{
	struct vbi_msg *m = *mp;
	struct vb_ctx *ctx = pub->node->ctx;
	uint32_t mtu = ctx->ud_mtu, fmax = mtu - VBI_WIRE_HDR_LEN;
	uint32_t nfrag = m->len ? (m->len + fmax - 1) / fmax : 1;
	struct vbi_peer *targets[VBI_MAX_PEERS];
	struct vbi_fdgram d[VBI_FANOUT_READY + 1];
	uint32_t lens[VBI_MEMPOOL_MAX_ALLOC / 256 + 1];
	const struct vbt_mcast *grp;
	unsigned nt, nd, k, left;
	uint64_t seq = 0; /* set by either way of sending (GCC cannot tell) */
	int rc = 0;

	if (atomic_load(&ctx->ud_gone))
		return ud_gone_err(ctx, pub);
	if ((rc = fanout_rehome(ctx, mp))) {
		if (rc == -EAGAIN)
			vbi_pub_refused(pub);
		return vbi_err_prefix(rc, "'%s': registered memory", pub->topic);
	}
	m = *mp;
	if (nfrag == 1 && VBI_WIRE_HDR_LEN + vbi_wire_rec_size(m->len) <= mtu) {
		if ((rc = fanout_send_small(ctx, pub, m, &seq)))
			goto full;
		goto done;
	}
	/* fragmented: what is batched goes first, then every datagram */
	pthread_mutex_lock(&ctx->ud_lock);
	vbi_rcu_enter();
	vbi_mutex_lock(&pub->lock);
	nt = fanout_targets(pub, targets, VBI_MAX_PEERS);
	grp = vbi_mcast_pub_group(pub);
	nd = nt + (grp != NULL); /* destinations: one per unicast target, one group */
	k = fanout_take(ctx, pub, true, nd ? nd : 1, d, &left);
	fanout_post_taken(ctx, pub, d, k, targets, nt, grp);
	if (left || !ctx->ud_qp || ud_room(ctx) < nd * nfrag) {
		vbi_mutex_unlock(&pub->lock);
		vbi_rcu_leave();
		pthread_mutex_unlock(&ctx->ud_lock);
		fanout_mark_left(ctx, left);
		rc = ctx->ud_qp ? -EAGAIN : -ENODEV;
		goto full;
	}
	seq = ++pub->fanout_seq;
	pub->last_pub_ms = vbi_now_ms();
	/* Lay the datagrams out in place: fragment i at i * mtu, each its own
	 * header, moving the payload up from the back so nothing is clobbered. */
	for (uint32_t i = nfrag; i-- > 0;) {
		uint32_t foff = i * fmax;
		uint32_t flen = m->len - foff < fmax ? m->len - foff : fmax;
		uint8_t *dg = (uint8_t *)m->buf.addr + (size_t)i * mtu;
		struct vbi_wire_hdr h = {
			.type = VBI_WT_DATA, .session = pub->session, .topic = pub->topic_id,
			.seq = seq, .len = flen, .frag_off = foff, .msg_len = m->len,
		};

		if (!foff)
			h.flags |= VBI_WF_FIRST;
		if (foff + flen == m->len)
			h.flags |= VBI_WF_LAST;
		memmove(dg + VBI_WIRE_HDR_LEN, (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN + foff, flen);
		vbi_wire_put(dg, &h);
		lens[i] = VBI_WIRE_HDR_LEN + flen;
	}
	atomic_fetch_add_explicit(&ctx->st->frames_sent, nfrag, memory_order_relaxed);
	fanout_post(ctx, pub, m, nfrag, lens, targets, nt, grp);
	vbi_mutex_unlock(&pub->lock);
	vbi_rcu_leave();
	pthread_mutex_unlock(&ctx->ud_lock);
done:
	atomic_fetch_add_explicit(&ctx->st->published, 1, memory_order_relaxed);
	if (seq_out)
		*seq_out = seq;
	return 0;
full:
	if (rc == -ENODEV)
		return ud_gone_err(ctx, pub);
	vbi_pub_refused(pub);
	return vbi_err(-EAGAIN, "'%s': datagram send queue full (%u in flight, %u datagram(s) "
		       "queued before this one)", pub->topic, atomic_load(&ctx->ud_sr.outstanding),
		       VBI_FANOUT_READY);
}

/* When the heartbeat after the @sent-th one of a tail is due: the first
 * three at the heartbeat round's pace (20 ms), then at doubling intervals
 * from 50 ms up to one a second, for as long as the publisher stays quiet. */
static uint64_t hb_interval_ms(unsigned sent)
{
	if (sent < 3)
		return 0;
	return sent - 3 >= 5 ? 1000 : 50u << (sent - 3);
}

/*
 * FANOUT tail-loss detection: once a publisher has been quiet for 50 ms
 * (so its datagrams have all landed or are lost, never merely late), tell
 * every subscriber its last sequence: three times at once, then again at
 * growing intervals (hb_interval_ms) while it stays quiet. A heartbeat is
 * a datagram too: one that finds a subscriber's receive queue full is
 * dropped like the data before it, and only a later one reports that
 * loss. A subscriber that has the tail ignores the repeats
 * (vbi_rx_heartbeat). Runs on the progress thread when it is idle.
 */
void vbi_pub_heartbeats(struct vb_ctx *ctx, uint64_t now)
{
	/* no ctx->lock or node->lock: nodes and publishers go after a grace
	 * period */
	vbi_rcu_enter();
	for (struct vb_node *n = vbi_rcu_deref(ctx->nodes); n; n = vbi_rcu_deref(n->next)) {
		for (struct vb_pub *pub = vbi_rcu_deref(n->pubs); pub; pub = vbi_rcu_deref(pub->next)) {
			uint8_t hb[VBI_WIRE_HDR_LEN];
			const struct vbt_mcast *grp;
			struct vbi_wire_hdr h = { .type = VBI_WT_HEARTBEAT, .session = pub->session,
						  .topic = pub->topic_id };

			if (pub->cls != VB_FANOUT)
				continue;
			pthread_mutex_lock(&ctx->ud_lock);
			vbi_mutex_lock(&pub->lock);
			if (!ctx->ud_qp || !pub->fanout_seq || pub->batch || pub->ready_n ||
			    now - pub->last_pub_ms < 50 ||
			    (pub->hb_seq == pub->fanout_seq && now < pub->hb_due_ms)) {
				vbi_mutex_unlock(&pub->lock);
				pthread_mutex_unlock(&ctx->ud_lock);
				continue;
			}
			if (pub->hb_seq != pub->fanout_seq) {
				pub->hb_seq = pub->fanout_seq;
				pub->hb_sent = 0;
			}
			h.seq = pub->hb_seq;
			vbi_wire_put(hb, &h);
			grp = vbi_mcast_pub_group(pub);
			/* each unicast subscriber, then (pp == NULL) the group once */
			for (struct vbi_pubpeer *pp = pub->peers;; pp = pp->next_in_pub) {
				struct vbt_sge sge = { (uintptr_t)hb, sizeof(hb), 0 };
				struct vbt_send_wr wr = {
					.sg_list = &sge, .num_sge = 1, .opcode = VBT_WR_SEND,
					.flags = VBT_SEND_INLINE | VBT_SEND_SIGNALED,
				};
				const struct vbt_send_wr *bad;
				struct vbi_sctx *sc;

				if (!pp && !grp)
					break;
				if (pp) {
					if (pp->dead || pp->peer->dead || !pp->peer->ah || pp->mcast)
						continue;
					wr.ah = pp->peer->ah;
					wr.remote_qpn = pp->peer->ud.qpn;
					wr.remote_qkey = pp->peer->ud.qkey;
				} else {
					wr.ah = grp->ah;
					wr.remote_qpn = grp->remote_qpn;
					wr.remote_qkey = grp->qkey;
				}
				if (ud_room(ctx) &&
				    sizeof(hb) <= ctx->ud_qp->cap.max_inline_data) {
					sc = vbi_sring_take(&ctx->ud_sr);
					wr.wr_id = (uintptr_t)sc;
					ctx->ud_sr.since_signal = 0;
					vbi_sring_signaled(&ctx->ud_sr, sc);
					if (vbt_post_send(ctx->ud_qp, &wr, &bad))
						vbi_sring_untake(&ctx->ud_sr);
					else
						atomic_fetch_add_explicit(&ctx->st->heartbeats_sent, 1,
									  memory_order_relaxed);
				}
				if (!pp)
					break;
			}
			pub->hb_sent++;
			pub->hb_due_ms = now + hb_interval_ms(pub->hb_sent);
			vbi_mutex_unlock(&pub->lock);
			pthread_mutex_unlock(&ctx->ud_lock);
		}
	}
	vbi_rcu_leave();
}
