/* SPDX-License-Identifier: MIT */
#include "core/stream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

/* ---- retransmit window ---------------------------------------------------- */

int vbi_txwin_init(struct vbi_txwin *w, uint32_t cap, uint64_t first_seq)
{
	uint32_t c = 2;

	memset(w, 0, sizeof(*w));
	if (!cap || cap > (1u << 30) || !first_seq)
		return vbi_err(-EINVAL, "retransmit window: cap %u / first seq %llu out of range",
			       cap, (unsigned long long)first_seq);
	while (c < cap)
		c <<= 1;
	w->ring = calloc(c, sizeof(*w->ring));
	if (!w->ring)
		return vbi_err(-ENOMEM, "retransmit window of %u entries", c);
	w->cap = c;
	w->next_seq = first_seq;
	w->acked = first_seq - 1;
	return 0;
}

void vbi_txwin_fini(struct vbi_txwin *w)
{
	free(w->ring);
	w->ring = NULL;
	w->cap = 0;
}

int vbi_txwin_push(struct vbi_txwin *w, void *ctx, uint32_t len, uint64_t *seq)
{
	struct vbi_txent *e;

	if (vbi_txwin_inflight(w) >= w->cap)
		return -EAGAIN;
	e = &w->ring[w->next_seq & (w->cap - 1)];
	e->seq = w->next_seq;
	e->ctx = ctx;
	e->len = len;
	*seq = w->next_seq++;
	return 0;
}

int vbi_txwin_ack(struct vbi_txwin *w, uint64_t seq, vbi_txwin_release_fn release, void *arg)
{
	int n = 0;

	if (seq >= w->next_seq)
		return -EPROTO;
	while (w->acked < seq) {
		struct vbi_txent *e = &w->ring[++w->acked & (w->cap - 1)];

		if (release)
			release(e->ctx, e->seq, arg);
		e->ctx = NULL;
		n++;
	}
	return n;
}

int vbi_txwin_drain(struct vbi_txwin *w, vbi_txwin_release_fn release, void *arg)
{
	if (w->next_seq - 1 == w->acked)
		return 0;
	return vbi_txwin_ack(w, w->next_seq - 1, release, arg);
}

/* ---- go-back-N cursor --------------------------------------------------------- */

int vbi_txcursor_nak(struct vbi_txcursor *c, uint64_t seq, uint64_t now_ns, uint64_t hold_ns,
		     uint64_t *resend)
{
	*resend = 0;
	if (!seq || seq > c->high + 1 || seq <= c->acked)
		return 0;
	if (!(c->sent >= seq || (c->frag_sent && c->sent + 1 == seq)))
		return 0;
	if (seq == c->nak_seq && now_ns - c->nak_ns < hold_ns)
		return 0;
	*resend = c->sent - (seq - 1);
	c->sent = seq - 1;
	c->frag_sent = 0;
	c->nak_seq = seq;
	c->nak_ns = now_ns;
	return 1;
}

/* ---- k-of-n --------------------------------------------------------------- */

int vbi_quorum_seq(const uint64_t *acked, unsigned n, unsigned k, uint64_t *out)
{
	uint64_t best = 0;

	if (k < 1 || k > n)
		return vbi_err(-EINVAL, "quorum %u of %u receivers", k, n);
	/* The k-th largest ack: the highest seq that >= k receivers reached.
	 * n is a replica count (small): O(n^2) without allocation. */
	for (unsigned i = 0; i < n; i++) {
		unsigned at_least = 0;

		for (unsigned j = 0; j < n; j++)
			at_least += acked[j] >= acked[i];
		if (at_least >= k && acked[i] > best)
			best = acked[i];
	}
	*out = best;
	return 0;
}

/* ---- subscriber stream ------------------------------------------------------ */

void vbi_rx_init(struct vbi_rxstream *s, enum vbi_rx_mode mode)
{
	memset(s, 0, sizeof(*s));
	s->mode = mode;
}

static void rx_start(struct vbi_rxstream *s, uint32_t session, uint32_t epoch, uint64_t seq)
{
	s->started = true;
	s->session = session;
	s->epoch = epoch;
	s->next = seq;
	s->st.sessions++;
}

enum vbi_rx_verdict vbi_rx_accept(struct vbi_rxstream *s, uint32_t session, uint32_t epoch,
				  uint64_t seq, uint64_t *lost)
{
	uint64_t missing;

	if (lost)
		*lost = 0;
	if (seq == 0 || seq > VBI_SEQ_MAX) {
		s->st.invalid++;
		return VBI_RX_INVALID;
	}
	if (!s->started || session != s->session)
		rx_start(s, session, epoch, seq);
	if (epoch > s->epoch)
		s->epoch = epoch;
	if (seq < s->next) {
		s->st.duplicates++;
		return VBI_RX_DUPLICATE;
	}
	if (seq == s->next) {
		s->next++;
		s->st.delivered++;
		return VBI_RX_DELIVER;
	}
	missing = seq - s->next;
	if (lost)
		*lost = missing;
	if (s->mode == VBI_RX_ORDERED) {
		s->st.ahead++;
		return VBI_RX_AHEAD;
	}
	s->st.gap_events++;
	s->st.lost += missing;
	s->st.delivered++;
	s->next = seq + 1;
	return VBI_RX_GAP;
}

uint64_t vbi_rx_heartbeat(struct vbi_rxstream *s, uint64_t seq)
{
	uint64_t lost;

	if (seq > VBI_SEQ_MAX) {
		s->st.invalid++;
		return 0;
	}
	if (!s->started || seq < s->next)
		return 0;
	lost = seq - s->next + 1;
	s->next = seq + 1;
	s->st.lost += lost;
	s->st.gap_events++;
	return lost;
}

bool vbi_rx_is_duplicate(const struct vbi_rxstream *s, uint32_t session, uint64_t seq)
{
	return s->started && session == s->session && seq < s->next;
}

/* ---- reassembly --------------------------------------------------------------- */

void vbi_reasm_init(struct vbi_reasm *r, vbi_reasm_alloc_fn alloc, vbi_reasm_free_fn free_fn,
		    void *arg)
{
	memset(r, 0, sizeof(*r));
	r->alloc = alloc;
	r->free = free_fn;
	r->arg = arg;
}

static void reasm_abandon(struct vbi_reasm *r)
{
	if (!r->active)
		return;
	r->free(r->buf, r->arg);
	r->buf = NULL;
	r->active = false;
	r->abandoned++;
}

void vbi_reasm_fini(struct vbi_reasm *r)
{
	reasm_abandon(r);
}

int vbi_reasm_push(struct vbi_reasm *r, const struct vbi_wire_hdr *h, const void *payload,
		   void **msg)
{
	*msg = NULL;
	if (h->flags & VBI_WF_FIRST) {
		reasm_abandon(r); /* an unfinished message before it is lost */
		r->buf = r->alloc(h->msg_len, r->arg);
		if (!r->buf)
			return -EAGAIN;
		r->active = true;
		r->session = h->session;
		r->seq = h->seq;
		r->msg_len = h->msg_len;
		r->got = 0;
	} else if (!r->active || h->session != r->session || h->seq != r->seq ||
		   h->frag_off != r->got || h->msg_len != r->msg_len) {
		/* A lost or reordered fragment makes the partial message
		 * unrecoverable: release it now rather than at the next FIRST. */
		reasm_abandon(r);
		r->stray++;
		return -EPROTO;
	}
	memcpy(r->buf + r->got, payload, h->len);
	r->got += h->len;
	if (!(h->flags & VBI_WF_LAST))
		return 0;
	*msg = r->buf;
	r->buf = NULL;
	r->active = false;
	r->completed++;
	return 1;
}

/* @since_ns is at least @o->delay_ms before @now_ns (a time in the future
 * counts as just now). */
static bool waited(const struct vbi_ack_owed *o, uint64_t since_ns, uint64_t now_ns)
{
	return now_ns > since_ns && now_ns - since_ns >= o->delay_ms * 1000000ull;
}

bool vbi_ack_rides(const struct vbi_ack_owed *o, uint64_t now_ns)
{
	uint32_t credit_batch = o->nslots / 8 ? o->nslots / 8 : 1;

	if (!o->streams && !o->to_return)
		return false;
	if (!o->reliable || o->urgent || o->to_return >= credit_batch)
		return true;
	return o->streams && (o->delivered >= VBI_ACK_EVERY || waited(o, o->owed_ns, now_ns));
}

bool vbi_ack_alone(const struct vbi_ack_owed *o, bool idle, uint64_t now_ns)
{
	if (o->urgent || o->to_return >= o->nslots / 4 || o->delivered >= VBI_ACK_ALONE_AFTER)
		return true;
	if (!idle || (!o->streams && o->to_return <= 1))
		return false;
	return (o->streams && waited(o, o->owed_ns, now_ns)) || waited(o, o->last_rx_ns, now_ns);
}
