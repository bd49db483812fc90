/* SPDX-License-Identifier: MIT */
/*
 * FANOUT publishing: one sequence per publisher, datagrams laid out in the
 * message's own registered buffer at an MTU stride, posted once per
 * unicast subscriber's address handle and once to the topic's multicast
 * group (when the device joined one), small messages batched into one
 * datagram; heartbeats announce the tail so subscribers see a lost last
 * message as a gap.
 *
 * Threads: any publishing thread (under ctx->ud_lock, then pub->lock); the
 * progress thread flushes due batches and sends heartbeats.
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
			if (sge.length <= ctx->ud_qp->cap.max_inline_data) {
				wr.flags |= VBT_SEND_INLINE;
				atomic_fetch_add_explicit(&ctx->st->inline_sends, 1, memory_order_relaxed);
			}
			s->ud_ref = m;
			if (vbt_post_send(ctx->ud_qp, &wr, &bad)) {
				s->ud_ref = NULL;
				vbi_sring_untake(&ctx->ud_sr);
				vbi_msg_put(m);
				vbi_warn("'%s': datagram post failed: %s", pub->topic, vbi_errmsg());
				continue;
			}
			if (wr.flags & VBT_SEND_SIGNALED)
				vbi_sring_signaled(&ctx->ud_sr, s);
			atomic_fetch_add_explicit(&ctx->st->sends_posted, 1, memory_order_relaxed);
			posted++;
		}
		if (t >= nt && posted)
			vbi_mcast_sent(ctx, posted);
	}
	vbi_msg_put(m);
}

/* *@mp's block is in the pool of another device than the UD endpoint's (it
 * moved: dev_reap, progress.c): copy it over, since datagrams are posted from the
 * message's own buffer; *@mp is the copy then. ud_lock held; nothing was
 * posted from the message yet (its only reference is the caller's). */
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

/* Post @pub's pending batch datagram, if any. ud_lock and pub->lock held.
 * -EAGAIN when the ring has no room for it (it stays pending). */
static int fanout_flush_batch(struct vb_ctx *ctx, struct vb_pub *pub)
{
	struct vbi_peer *targets[VBI_MAX_PEERS];
	struct vbi_msg *m = pub->batch;
	const struct vbt_mcast *grp;
	unsigned nt;

	if (!m)
		return 0;
	if (!ctx->ud_qp) { /* its device was removed (dev_reap): nowhere to post */
		vbi_warn("'%s': %u FANOUT message(s) batched when the device went: not sent",
			 pub->topic, pub->batch_frames);
		atomic_fetch_add(&ctx->st->lost, pub->batch_frames);
		pub->batch = NULL;
		vbi_msg_put(m);
		return 0;
	}
	if (fanout_rehome(ctx, &pub->batch))
		return -EAGAIN; /* stays pending */
	m = pub->batch;
	nt = fanout_targets(pub, targets, VBI_MAX_PEERS);
	grp = vbi_mcast_pub_group(pub);
	if (ctx->ud_sr.n - ctx->ud_sr.outstanding < nt + (grp != NULL))
		return -EAGAIN;
	{	/* one BATCH frame: its records are seqs fanout_seq - frames + 1.. */
		struct vbi_wire_hdr h = {
			.type = VBI_WT_BATCH, .flags = VBI_WF_FIRST | VBI_WF_LAST,
			.session = pub->session, .topic = pub->topic_id,
			.seq = pub->fanout_seq - pub->batch_frames + 1,
			.len = pub->batch_off - VBI_WIRE_HDR_LEN, .msg_len = pub->batch_frames,
		};

		vbi_wire_put(m->buf.addr, &h);
	}
	pub->batch = NULL;
	if (pub->batch_frames > 1)
		atomic_fetch_add_explicit(&ctx->st->batched_frames, pub->batch_frames,
					  memory_order_relaxed);
	atomic_fetch_add_explicit(&ctx->st->frames_sent, pub->batch_frames, memory_order_relaxed);
	fanout_post(ctx, pub, m, 1, &pub->batch_off, targets, nt, grp);
	return 0;
}

/* Progress thread: post the FANOUT batches corked behind a datagram in
 * flight once no signaled datagram is (and the queue has room). */
void vbi_pub_fanout_flush(struct vb_ctx *ctx, bool idle)
{
	(void)idle;
	if (!atomic_load_explicit(&ctx->fanout_pending, memory_order_relaxed) ||
	    atomic_load(&ctx->ud_sr.sig_inflight))
		return;
	atomic_store(&ctx->fanout_pending, false);
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vb_pub *pub = n->pubs; pub; pub = pub->next) {
			if (pub->cls != VB_FANOUT)
				continue;
			pthread_mutex_lock(&ctx->ud_lock);
			pthread_mutex_lock(&pub->lock);
			if (pub->batch && fanout_flush_batch(ctx, pub))
				atomic_store(&ctx->fanout_pending, true); /* no room yet */
			pthread_mutex_unlock(&pub->lock);
			pthread_mutex_unlock(&ctx->ud_lock);
		}
		pthread_rwlock_unlock(&n->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* @m, which fits one datagram, as the next record of @pub's BATCH datagram
 * (its header is written when it is posted: fanout_flush_batch), which is
 * posted now unless corked behind a datagram in flight. *@seq gets its
 * sequence. ud_lock and pub->lock held. 0, or -EAGAIN when the datagram
 * queue has no room (nothing taken from @m then). */
static int fanout_append(struct vb_ctx *ctx, struct vb_pub *pub, struct vbi_msg *m, unsigned nd,
			 uint64_t *seq)
{
	uint32_t mtu = ctx->ud_mtu;
	size_t rs = vbi_wire_rec_size(m->len);
	bool busy = ctx->cork && atomic_load(&ctx->ud_sr.sig_inflight);
	uint8_t *pl = (uint8_t *)m->buf.addr + VBI_WIRE_HDR_LEN;

	if (pub->batch && pub->batch_off + rs > mtu && fanout_flush_batch(ctx, pub))
		return -EAGAIN;
	if (!pub->batch) {
		if (ctx->ud_sr.n - ctx->ud_sr.outstanding < nd)
			return -EAGAIN;
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
	if ((busy && pub->batch_off + VBI_WIRE_REC_HDR + 8 <= mtu) || fanout_flush_batch(ctx, pub))
		atomic_store(&ctx->fanout_pending, true); /* corked, or no room yet */
	return 0;
}

/*
 * FANOUT publish. A message that fits one datagram is appended to the
 * publisher's batch datagram; the batch is posted at once when no signaled
 * datagram is in flight (no added latency when idle) or when the datagram
 * is full to the path MTU, else it is corked until the progress thread sees
 * the datagram in flight complete (vbi_pub_fanout_flush). Every datagram
 * count is read and changed under ud_lock, which the completion takes too.
 * Larger messages are fragmented into datagrams laid out in place.
 */
int vbi_fanout_send(struct vb_pub *pub, struct vbi_msg **mp, uint64_t *seq_out)
{
	struct vbi_msg *m = *mp;
	struct vb_ctx *ctx = pub->node->ctx;
	uint32_t mtu = ctx->ud_mtu, fmax = mtu - VBI_WIRE_HDR_LEN;
	uint32_t nfrag = m->len ? (m->len + fmax - 1) / fmax : 1;
	struct vbi_peer *targets[VBI_MAX_PEERS];
	uint32_t lens[VBI_MEMPOOL_MAX_ALLOC / 256 + 1];
	const struct vbt_mcast *grp;
	unsigned nt, nd;
	uint64_t seq;
	int rc = 0;

	pthread_mutex_lock(&ctx->ud_lock);
	if (!ctx->ud_qp) {
		pthread_mutex_unlock(&ctx->ud_lock);
		return vbi_err(-ENODEV, "'%s': the device that carried FANOUT (%s) was removed",
			       pub->topic, ctx->ud_dr->name);
	}
	if ((rc = fanout_rehome(ctx, mp))) {
		pthread_mutex_unlock(&ctx->ud_lock);
		if (rc == -EAGAIN)
			vbi_pub_refused(pub);
		return vbi_err_prefix(rc, "'%s': registered memory", pub->topic);
	}
	m = *mp;
	pthread_mutex_lock(&pub->lock);
	nt = fanout_targets(pub, targets, VBI_MAX_PEERS);
	grp = vbi_mcast_pub_group(pub);
	nd = nt + (grp != NULL); /* destinations: one per unicast target, one group */
	if (nfrag == 1 && VBI_WIRE_HDR_LEN + vbi_wire_rec_size(m->len) <= mtu) {
		if (fanout_append(ctx, pub, m, nd, &seq))
			goto full;
		goto done;
	}
	/* fragmented: the pending batch goes first, then every datagram */
	if (fanout_flush_batch(ctx, pub) || ctx->ud_sr.n - ctx->ud_sr.outstanding < nd * nfrag)
		goto full;
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
done:
	pthread_mutex_unlock(&pub->lock);
	pthread_mutex_unlock(&ctx->ud_lock);
	atomic_fetch_add_explicit(&ctx->st->published, 1, memory_order_relaxed);
	if (seq_out)
		*seq_out = seq;
	return rc;
full:
	pthread_mutex_unlock(&pub->lock);
	pthread_mutex_unlock(&ctx->ud_lock);
	vbi_pub_refused(pub);
	return vbi_err(-EAGAIN, "'%s': datagram send queue full (%u of %u in flight, %u needed)",
		       pub->topic, ctx->ud_sr.outstanding, ctx->ud_sr.n, nd * nfrag);
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
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vb_pub *pub = n->pubs; pub; pub = pub->next) {
			uint8_t hb[VBI_WIRE_HDR_LEN];
			const struct vbt_mcast *grp;
			struct vbi_wire_hdr h = { .type = VBI_WT_HEARTBEAT, .session = pub->session,
						  .topic = pub->topic_id };

			if (pub->cls != VB_FANOUT)
				continue;
			pthread_mutex_lock(&ctx->ud_lock);
			pthread_mutex_lock(&pub->lock);
			if (!ctx->ud_qp || !pub->fanout_seq || pub->batch || now - pub->last_pub_ms < 50 ||
			    (pub->hb_seq == pub->fanout_seq && now < pub->hb_due_ms)) {
				pthread_mutex_unlock(&pub->lock);
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
				if (ctx->ud_sr.outstanding < ctx->ud_sr.n &&
				    sizeof(hb) <= ctx->ud_qp->cap.max_inline_data) {
					sc = vbi_sring_take(&ctx->ud_sr);
					wr.wr_id = (uintptr_t)sc;
					ctx->ud_sr.since_signal = 0;
					if (vbt_post_send(ctx->ud_qp, &wr, &bad)) {
						vbi_sring_untake(&ctx->ud_sr);
					} else {
						vbi_sring_signaled(&ctx->ud_sr, sc);
						atomic_fetch_add_explicit(&ctx->st->heartbeats_sent, 1,
									  memory_order_relaxed);
					}
				}
				if (!pp)
					break;
			}
			pub->hb_sent++;
			pub->hb_due_ms = now + hb_interval_ms(pub->hb_sent);
			pthread_mutex_unlock(&pub->lock);
			pthread_mutex_unlock(&ctx->ud_lock);
		}
		pthread_rwlock_unlock(&n->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
}
