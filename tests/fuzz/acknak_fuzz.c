/* SPDX-License-Identifier: MIT */
/*
 * ACK / NAK against the publisher's retransmit window and the lane's
 * credits: the input is one byte (bits 0-5: window size - 1; bit 6: the
 * lane is unreliable, UC/UD) and then a SEND of frames. DATA frames stand
 * for our own sends (vbi_txwin_push, one credit each); ACK frames return
 * credits (vbi_wire_credit_return, as vbi_dispatch_frames does) and
 * acknowledge (as vbi_pub_on_ack: an ack beyond what was sent is refused,
 * else vbi_txwin_ack); a NAK acknowledges everything before its seq and
 * rewinds the subscriber's cursor (vbi_pub_on_nak: vbi_txcursor_nak; the
 * frame's epoch stands for the clock). A DATA fragment that is not the
 * last leaves its message partly framed (frag_sent). Checks: acked never
 * exceeds sent; entries are released exactly once, in order; the window
 * never holds more than its size; returned credits never exceed the sends;
 * a rewind goes back to seq - 1, never below what was acknowledged nor
 * above what was framed, and resends what was framed after it.
 */
#include <errno.h>
#include <string.h>

#include "core/stream.h"
#include "fuzz.h"

struct pubstate {
	struct vbi_txwin w;
	uint64_t high;          /* highest seq sent */
	uint64_t released_upto; /* the release callback's last seq */
	uint64_t sends, returned;
	bool reliable;
	struct vbi_txcursor c; /* the one subscriber's go-back-N cursor */
};

static void release(void *ctx, uint64_t seq, void *arg)
{
	struct pubstate *s = arg;

	FUZZ_CHECK(seq == s->released_upto + 1);
	FUZZ_CHECK((uintptr_t)ctx == (uintptr_t)seq); /* what push stored */
	s->released_upto = seq;
}

static void ack(struct pubstate *s, uint64_t seq)
{
	uint64_t before = s->w.acked;
	int n;

	if (seq > s->high) /* "never sent to this peer": counted, ignored */
		return;
	n = vbi_txwin_ack(&s->w, seq, release, s);
	FUZZ_CHECK(n >= 0);
	FUZZ_CHECK((uint64_t)n == (seq > before ? seq - before : 0));
	FUZZ_CHECK(s->w.acked == (seq > before ? seq : before));
	if (seq > s->c.acked)
		s->c.acked = seq;
}

static void nak(struct pubstate *s, const struct vbi_wire_hdr *h)
{
	struct vbi_txcursor before = s->c;
	uint64_t resend = 7;
	int acted = vbi_txcursor_nak(&s->c, h->seq, h->epoch, 4, &resend);

	if (!acted) {
		FUZZ_CHECK(resend == 0 && !memcmp(&before, &s->c, sizeof(before)));
		return;
	}
	FUZZ_CHECK(h->seq > before.acked && h->seq <= before.high + 1);
	FUZZ_CHECK(s->c.sent == h->seq - 1 && s->c.sent >= s->c.acked && s->c.sent <= s->c.high);
	FUZZ_CHECK(resend == before.sent - s->c.sent && s->c.frag_sent == 0);
	FUZZ_CHECK(s->c.nak_seq == h->seq && s->c.nak_ns == h->epoch);
	FUZZ_CHECK(before.nak_seq != h->seq || h->epoch - before.nak_ns >= 4);
}

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	struct pubstate *s = arg;

	(void)pl;
	switch (h->type) {
	case VBI_WT_DATA: {
		uint64_t seq;
		uint32_t inflight = vbi_txwin_inflight(&s->w);
		int rc = vbi_txwin_push(&s->w, (void *)(uintptr_t)s->w.next_seq, h->len, &seq);

		if (rc == -EAGAIN) {
			FUZZ_CHECK(inflight == s->w.cap);
			break;
		}
		FUZZ_CHECK(rc == 0 && seq == s->high + 1);
		FUZZ_CHECK(vbi_txwin_get(&s->w, seq) && vbi_txwin_get(&s->w, seq)->seq == seq);
		s->high = seq;
		s->sends++;
		/* framed to the subscriber: whole, or its first fragments only */
		s->c.high = seq;
		if (h->flags & VBI_WF_LAST) {
			s->c.sent = seq;
			s->c.frag_sent = 0;
		} else {
			s->c.sent = seq - 1;
			s->c.frag_sent = h->len + 1;
		}
		break;
	}
	case VBI_WT_ACK:
		if (h->frag_off) {
			uint64_t before = s->returned;
			int rc = vbi_wire_credit_return(&s->returned, s->sends, h->frag_off,
							s->reliable);

			FUZZ_CHECK(rc != -1 || (s->reliable && s->returned == before));
			FUZZ_CHECK(rc != 1 || (!s->reliable && s->returned == s->sends));
			FUZZ_CHECK(rc != 0 || s->returned == before + h->frag_off);
		}
		if (h->session)
			ack(s, h->seq);
		break;
	case VBI_WT_NAK:
		if (!h->session || !h->seq)
			break;
		if (h->seq > 1)
			ack(s, h->seq - 1);
		nak(s, h);
		break;
	default:
		break;
	}
	FUZZ_CHECK(s->returned <= s->sends);
	FUZZ_CHECK(s->w.acked <= s->w.next_seq - 1 && s->w.next_seq - 1 == s->high);
	FUZZ_CHECK(vbi_txwin_inflight(&s->w) <= s->w.cap);
	FUZZ_CHECK(s->released_upto == s->w.acked);
	FUZZ_CHECK(!vbi_txwin_get(&s->w, s->w.acked) && !vbi_txwin_get(&s->w, s->w.next_seq));
	FUZZ_CHECK(s->c.acked <= s->c.high && s->c.sent <= s->c.high);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pubstate s;

	if (size < 1 || size > UINT32_MAX)
		return 0;
	memset(&s, 0, sizeof(s));
	s.reliable = !(data[0] & 0x40);
	FUZZ_CHECK(vbi_txwin_init(&s.w, (data[0] & 0x3f) + 1u, 1) == 0);
	fuzz_walk(data + 1, (uint32_t)(size - 1), on_frame, &s);
	FUZZ_CHECK(vbi_txwin_drain(&s.w, release, &s) >= 0);
	FUZZ_CHECK(s.released_upto == s.high && vbi_txwin_inflight(&s.w) == 0);
	vbi_txwin_fini(&s.w);
	return 0;
}
