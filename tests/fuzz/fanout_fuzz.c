/* SPDX-License-Identifier: MIT */
/*
 * The FANOUT datagram path: the input is a sequence of UD receives, each
 * a little-endian u16 byte count and that many bytes of the receive slot
 * (40-byte GRH, then frames). Each goes as in vbi_ud_recv(): the GRH
 * stripped (vbi_wire_ud_frames), the frames walked, DATA and HEARTBEAT
 * handed to the publisher session's stream as vbi_sub_data() does for a
 * FANOUT subscriber: HEARTBEAT -> vbi_rx_heartbeat, a whole message ->
 * vbi_rx_accept, a fragment -> vbi_reasm_push and, once complete,
 * vbi_rx_accept. Checks, per session: delivered seqs strictly increase;
 * the stream's delivered and lost counters match what was delivered and
 * reported; FANOUT never holds a message back (no AHEAD).
 */
#include <string.h>

#include "core/stream.h"
#include "fuzz.h"

#define NSTREAMS 8

struct fstream {
	bool used;
	uint32_t session;
	struct vbi_rxstream rx;
	struct vbi_reasm reasm;
	bool any;
	uint64_t last;                /* last delivered seq */
	uint64_t delivered, lost;     /* as reported to the application */
};

struct fstate {
	struct fstream s[NSTREAMS];
};

static void *ralloc(size_t len, void *arg)
{
	(void)arg;
	return malloc(len ? len : 1);
}

static void rfree(void *buf, void *arg)
{
	(void)arg;
	free(buf);
}

static struct fstream *stream_get(struct fstate *f, uint32_t session)
{
	for (int i = 0; i < NSTREAMS; i++)
		if (f->s[i].used && f->s[i].session == session)
			return &f->s[i];
	for (int i = 0; i < NSTREAMS; i++)
		if (!f->s[i].used) {
			struct fstream *s = &f->s[i];

			memset(s, 0, sizeof(*s));
			s->used = true;
			s->session = session;
			vbi_rx_init(&s->rx, VBI_RX_FANOUT);
			vbi_reasm_init(&s->reasm, ralloc, rfree, NULL);
			return s;
		}
	return NULL; /* the library's bound: refused */
}

static void check(const struct fstream *s)
{
	FUZZ_CHECK(s->rx.st.delivered == s->delivered);
	FUZZ_CHECK(s->rx.st.lost == s->lost);
	FUZZ_CHECK(s->rx.st.ahead == 0);
}

static void deliver(struct fstream *s, const struct vbi_wire_hdr *h)
{
	uint64_t lost = 0;
	enum vbi_rx_verdict v = vbi_rx_accept(&s->rx, h->session, h->epoch, h->seq, &lost);

	FUZZ_CHECK(v != VBI_RX_AHEAD);
	FUZZ_CHECK((v == VBI_RX_INVALID) == (h->seq > VBI_SEQ_MAX));
	if (v == VBI_RX_DUPLICATE || v == VBI_RX_INVALID) {
		FUZZ_CHECK(lost == 0);
		return;
	}
	FUZZ_CHECK(!s->any || h->seq > s->last); /* strictly increasing */
	FUZZ_CHECK(v == VBI_RX_GAP ? lost > 0 : lost == 0);
	FUZZ_CHECK(!s->any || h->seq == s->last + 1 + lost);
	FUZZ_CHECK(s->rx.next == h->seq + 1 && s->rx.next > h->seq);
	s->any = true;
	s->last = h->seq;
	s->delivered++;
	s->lost += lost;
}

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	struct fstate *f = arg;
	struct fstream *s;

	if (h->type != VBI_WT_DATA && h->type != VBI_WT_HEARTBEAT)
		return;
	s = stream_get(f, h->session);
	if (!s)
		return;
	if (h->type == VBI_WT_HEARTBEAT) {
		uint64_t next = s->rx.next, lost = vbi_rx_heartbeat(&s->rx, h->seq);

		if (lost) {
			FUZZ_CHECK(s->rx.started && h->seq >= next && lost == h->seq - next + 1);
			FUZZ_CHECK(s->rx.next == h->seq + 1 && s->rx.next > h->seq);
			s->lost += lost;
			/* the next delivery must come after the heartbeat's seq */
			s->any = true;
			s->last = h->seq;
		}
	} else if ((h->flags & (VBI_WF_FIRST | VBI_WF_LAST)) == (VBI_WF_FIRST | VBI_WF_LAST)) {
		deliver(s, h);
	} else {
		void *whole;

		if (vbi_reasm_push(&s->reasm, h, pl, &whole) == 1) {
			deliver(s, h);
			rfree(whole, NULL);
		}
	}
	check(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fstate f;
	size_t off = 0;

	memset(&f, 0, sizeof(f));
	while (off + 2 <= size) {
		uint32_t n = (uint32_t)data[off] | (uint32_t)data[off + 1] << 8;
		const uint8_t *frames;
		uint8_t *slot;
		uint32_t len;

		off += 2;
		if (n > size - off)
			n = (uint32_t)(size - off);
		/* the receive slot, exactly the datagram's size (ASan bounds) */
		slot = malloc(n ? n : 1);
		FUZZ_CHECK(slot);
		memcpy(slot, data + off, n);
		off += n;
		len = vbi_wire_ud_frames(slot, n, &frames);
		FUZZ_CHECK(len == (n > VBI_WIRE_UD_GRH ? n - VBI_WIRE_UD_GRH : 0));
		if (len)
			fuzz_walk(frames, len, on_frame, &f);
		free(slot);
	}
	for (int i = 0; i < NSTREAMS; i++)
		if (f.s[i].used)
			vbi_reasm_fini(&f.s[i].reasm);
	return 0;
}
