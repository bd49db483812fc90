/* SPDX-License-Identifier: MIT */
#include "core/reorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

static inline struct vbi_ro_slot *slot_of(const struct vbi_reorder *r, uint64_t seq)
{
	return &r->ring[seq & (r->cap - 1)];
}

static inline int is_held(const struct vbi_ro_slot *s, uint64_t seq)
{
	return s->held && s->seq == seq;
}

int vbi_reorder_init(struct vbi_reorder *r, uint32_t cap, uint64_t nak_interval_ns,
		     vbi_reorder_release_fn release, void *arg)
{
	uint32_t c = 2;

	if (cap < 2 || cap > (1u << 24))
		return vbi_err(-EINVAL, "reorder window %u outside 2..%u", cap, 1u << 24);
	if (!nak_interval_ns)
		return vbi_err(-EINVAL, "NAK interval is 0");
	while (c < cap)
		c <<= 1;
	memset(r, 0, sizeof(*r));
	r->ring = calloc(c, sizeof(*r->ring));
	if (!r->ring)
		return vbi_err(-ENOMEM, "reorder window of %u slots", c);
	r->cap = c;
	r->nak_interval_ns = nak_interval_ns;
	r->release = release;
	r->arg = arg;
	vbi_rx_init(&r->rx, VBI_RX_ORDERED);
	return 0;
}

/* Give every held message to @release and empty the ring. */
static void release_all(struct vbi_reorder *r)
{
	for (uint32_t i = 0; i < r->cap; i++) {
		struct vbi_ro_slot *s = &r->ring[i];

		if (s->held) {
			r->st.released++;
			if (r->release)
				r->release(s->msg, s->seq, r->arg);
		}
		memset(s, 0, sizeof(*s));
	}
	r->st.held_now = 0;
	r->high = 0;
}

void vbi_reorder_fini(struct vbi_reorder *r)
{
	if (!r->ring)
		return;
	release_all(r);
	free(r->ring);
	r->ring = NULL;
}

/* Deliver held messages that the stream's next seq now reaches. */
static void drain(struct vbi_reorder *r, vbi_reorder_deliver_fn deliver, void *arg)
{
	for (;;) {
		uint64_t seq = r->rx.next;
		struct vbi_ro_slot *s = slot_of(r, seq);
		void *m;

		if (!is_held(s, seq))
			return;
		m = s->msg;
		s->held = 0;
		s->msg = NULL;
		/* advances rx.next; DELIVER by construction */
		(void)vbi_rx_accept(&r->rx, r->rx.session, r->rx.epoch, seq, NULL);
		r->st.held_now--;
		r->st.delivered++;
		deliver(m, seq, arg);
	}
}

enum vbi_ro_verdict vbi_reorder_push(struct vbi_reorder *r, uint32_t session, uint32_t epoch,
				     uint64_t seq, void *msg, vbi_reorder_deliver_fn deliver,
				     void *arg)
{
	struct vbi_ro_slot *s;
	enum vbi_rx_verdict v;

	if (r->rx.started && session != r->rx.session)
		release_all(r); /* the old publisher's held messages cannot complete */
	v = vbi_rx_accept(&r->rx, session, epoch, seq, NULL);
	if (seq > r->high)
		r->high = seq;
	switch (v) {
	case VBI_RX_DELIVER:
		r->st.delivered++;
		deliver(msg, seq, arg);
		drain(r, deliver, arg);
		return VBI_RO_DELIVERED;
	case VBI_RX_AHEAD:
		if (seq - r->rx.next >= r->cap) {
			r->st.dropped++;
			return VBI_RO_DROPPED;
		}
		s = slot_of(r, seq);
		if (is_held(s, seq)) {
			r->st.duplicates++;
			return VBI_RO_DUPLICATE;
		}
		s->seq = seq;
		s->msg = msg;
		s->held = 1;
		r->st.held++;
		if (++r->st.held_now > r->st.held_max)
			r->st.held_max = r->st.held_now;
		return VBI_RO_HELD;
	case VBI_RX_DUPLICATE:
	case VBI_RX_GAP: /* not produced in ORDERED mode */
	default:
		r->st.duplicates++;
		return VBI_RO_DUPLICATE;
	}
}

int vbi_reorder_start(struct vbi_reorder *r, uint32_t session, uint32_t epoch, uint64_t next_seq)
{
	if (!next_seq)
		return vbi_err(-EINVAL, "sequence numbers start at 1");
	release_all(r);
	r->rx.started = true;
	r->rx.session = session;
	r->rx.epoch = epoch;
	r->rx.next = next_seq;
	r->rx.st.sessions++;
	r->high = next_seq - 1;
	return 0;
}

void vbi_reorder_heartbeat(struct vbi_reorder *r, uint32_t session, uint64_t last_sent)
{
	if (r->rx.started && session == r->rx.session && last_sent > r->high)
		r->high = last_sent;
}

/* Last seq the window may hold or NAK right now, or 0 when there is no gap. */
static uint64_t gap_limit(const struct vbi_reorder *r)
{
	uint64_t next = r->rx.next, last = next + r->cap - 1;

	if (!r->rx.started || r->high < next)
		return 0;
	return r->high < last ? r->high : last;
}

/* When the missing @seq (slot @s) is due for a NAK; marks a gap first seen
 * now. */
static uint64_t due_at(struct vbi_reorder *r, struct vbi_ro_slot *s, uint64_t seq, uint64_t now)
{
	if (s->seq != seq) {
		s->seq = seq;
		s->held = 0;
		s->msg = NULL;
		s->nak_ns = 0;
		s->seen_ns = now;
	}
	if (!s->nak_ns)
		return s->seen_ns + r->nak_delay_ns;
	return s->nak_ns + r->nak_interval_ns;
}

int vbi_reorder_naks(struct vbi_reorder *r, uint64_t now, struct vbi_nak *out, int max)
{
	uint64_t limit = gap_limit(r);
	int n = 0, open = 0;

	if (!limit || max <= 0)
		return 0;
	for (uint64_t seq = r->rx.next; seq <= limit; seq++) {
		struct vbi_ro_slot *s = slot_of(r, seq);

		if (is_held(s, seq) || due_at(r, s, seq, now) > now) {
			open = 0;
			continue;
		}
		if (open && out[n - 1].count < UINT32_MAX) {
			out[n - 1].count++;
		} else {
			if (n == max)
				break;
			out[n].first = seq;
			out[n].count = 1;
			n++;
			open = 1;
		}
		if (s->nak_ns)
			r->st.renaks++;
		s->nak_ns = now ? now : 1;
		r->st.nak_seqs++;
	}
	r->st.naks += (uint64_t)n;
	return n;
}

uint64_t vbi_reorder_deadline(const struct vbi_reorder *r)
{
	uint64_t limit = gap_limit(r), due = UINT64_MAX;

	if (!limit)
		return UINT64_MAX;
	for (uint64_t seq = r->rx.next; seq <= limit; seq++) {
		const struct vbi_ro_slot *s = slot_of(r, seq);
		uint64_t t;

		if (is_held(s, seq))
			continue;
		if (s->seq != seq)
			return 0; /* no scan has seen this gap yet */
		t = s->nak_ns ? s->nak_ns + r->nak_interval_ns : s->seen_ns + r->nak_delay_ns;
		if (t < due)
			due = t;
	}
	return due;
}

uint32_t vbi_reorder_missing(const struct vbi_reorder *r)
{
	uint64_t limit = gap_limit(r);
	uint32_t n = 0;

	if (!limit)
		return 0;
	for (uint64_t seq = r->rx.next; seq <= limit; seq++)
		n += !is_held(slot_of(r, seq), seq);
	return n;
}

int vbi_nak_resend(const struct vbi_txwin *w, uint64_t first, uint32_t count, vbi_resend_fn fn,
		   void *arg)
{
	uint64_t last, from;
	int n = 0;

	if (!count)
		return 0;
	last = first + count - 1;
	if (!first || last < first || last >= w->next_seq)
		return vbi_err(-EPROTO, "NAK %llu+%u names seqs never sent (next %llu)",
			       (unsigned long long)first, count, (unsigned long long)w->next_seq);
	from = first > w->acked ? first : w->acked + 1;
	for (uint64_t seq = from; seq <= last; seq++) {
		const struct vbi_txent *e = vbi_txwin_get(w, seq);
		int rc;

		if (!e)
			continue;
		rc = fn(e, arg);
		if (rc < 0)
			return rc;
		n++;
	}
	return n;
}
