/* SPDX-License-Identifier: MIT */
/* Retransmit window, k-of-n quorum, subscriber sequence tracking, reassembly. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/stream.h"

struct released {
	uint64_t seqs[64];
	int n;
};

static void on_release(void *ctx, uint64_t seq, void *arg)
{
	struct released *r = arg;

	assert_int_equal((uintptr_t)ctx, seq * 10);
	r->seqs[r->n++] = seq;
}

static void test_txwin_backpressure_and_ack(void **state)
{
	struct vbi_txwin w;
	struct released r = { .n = 0 };
	uint64_t seq;

	assert_int_equal(vbi_txwin_init(&w, 3, 1), 0); /* rounds to 4 */
	assert_int_equal(w.cap, 4);
	for (uint64_t i = 1; i <= 4; i++) {
		assert_int_equal(vbi_txwin_push(&w, (void *)(uintptr_t)(i * 10), 100, &seq), 0);
		assert_int_equal(seq, i);
	}
	assert_int_equal(vbi_txwin_inflight(&w), 4);
	assert_int_equal(vbi_txwin_push(&w, NULL, 1, &seq), -EAGAIN);
	assert_non_null(vbi_txwin_get(&w, 3));
	assert_int_equal(vbi_txwin_get(&w, 3)->len, 100);
	assert_null(vbi_txwin_get(&w, 5));

	assert_int_equal(vbi_txwin_ack(&w, 2, on_release, &r), 2);
	assert_int_equal(r.n, 2);
	assert_int_equal(r.seqs[0], 1);
	assert_int_equal(r.seqs[1], 2);
	assert_null(vbi_txwin_get(&w, 2));
	assert_int_equal(vbi_txwin_ack(&w, 2, on_release, &r), 0); /* duplicate ack */
	assert_int_equal(vbi_txwin_ack(&w, 9, on_release, &r), -EPROTO); /* never sent */
	assert_int_equal(vbi_txwin_inflight(&w), 2);

	/* wraps around the ring */
	assert_int_equal(vbi_txwin_push(&w, (void *)(uintptr_t)50, 1, &seq), 0);
	assert_int_equal(vbi_txwin_push(&w, (void *)(uintptr_t)60, 1, &seq), 0);
	assert_int_equal(seq, 6);
	assert_int_equal(vbi_txwin_push(&w, NULL, 1, &seq), -EAGAIN);
	assert_int_equal(vbi_txwin_get(&w, 5)->seq, 5);
	assert_int_equal(vbi_txwin_drain(&w, on_release, &r), 4);
	assert_int_equal(r.n, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(r.seqs[i], (uint64_t)i + 1);
	vbi_txwin_fini(&w);

	assert_int_equal(vbi_txwin_init(&w, 0, 1), -EINVAL);
	assert_int_equal(vbi_txwin_init(&w, 8, 0), -EINVAL);
}

static void test_quorum(void **state)
{
	uint64_t acks[3] = { 10, 7, 12 }, q;

	assert_int_equal(vbi_quorum_seq(acks, 3, 1, &q), 0);
	assert_int_equal(q, 12);
	assert_int_equal(vbi_quorum_seq(acks, 3, 2, &q), 0);
	assert_int_equal(q, 10);
	assert_int_equal(vbi_quorum_seq(acks, 3, 3, &q), 0);
	assert_int_equal(q, 7);
	uint64_t ties[4] = { 5, 5, 0, 0 };
	assert_int_equal(vbi_quorum_seq(ties, 4, 2, &q), 0);
	assert_int_equal(q, 5);
	assert_int_equal(vbi_quorum_seq(ties, 4, 3, &q), 0);
	assert_int_equal(q, 0);
	assert_int_equal(vbi_quorum_seq(acks, 3, 0, &q), -EINVAL);
	assert_int_equal(vbi_quorum_seq(acks, 3, 4, &q), -EINVAL);
}

static void test_rx_fanout_gaps_and_late_join(void **state)
{
	struct vbi_rxstream s;
	uint64_t lost;

	vbi_rx_init(&s, VBI_RX_FANOUT);
	/* late joiner: starts at 100, no gap for 1..99 */
	assert_int_equal(vbi_rx_accept(&s, 1, 0, 100, &lost), VBI_RX_DELIVER);
	assert_int_equal(lost, 0);
	assert_int_equal(vbi_rx_accept(&s, 1, 0, 101, &lost), VBI_RX_DELIVER);
	assert_int_equal(vbi_rx_accept(&s, 1, 0, 105, &lost), VBI_RX_GAP);
	assert_int_equal(lost, 3);
	assert_int_equal(vbi_rx_accept(&s, 1, 0, 103, &lost), VBI_RX_DUPLICATE); /* late */
	assert_int_equal(vbi_rx_accept(&s, 1, 0, 106, &lost), VBI_RX_DELIVER);
	assert_int_equal(s.st.delivered, 4);
	assert_int_equal(s.st.lost, 3);
	assert_int_equal(s.st.gap_events, 1);
	assert_int_equal(s.st.duplicates, 1);
	/* new publisher session restarts the stream */
	assert_int_equal(vbi_rx_accept(&s, 2, 0, 1, &lost), VBI_RX_DELIVER);
	assert_int_equal(s.st.sessions, 2);
	assert_true(vbi_rx_is_duplicate(&s, 2, 1));
	assert_false(vbi_rx_is_duplicate(&s, 2, 2));
	assert_false(vbi_rx_is_duplicate(&s, 1, 1));
}

/* fanout_fuzz regression (tests/fuzz/corpus/fanout/regress-seq-max): a
 * message or HEARTBEAT with seq 2^64 - 1 wrapped the next expected seq to
 * 0, so what followed was delivered again, with a gap of ~2^64. */
static void test_rx_seq_max_refused(void **state)
{
	struct vbi_rxstream s;
	uint64_t lost;

	for (int mode = VBI_RX_ORDERED; mode <= VBI_RX_FANOUT; mode++) {
		vbi_rx_init(&s, (enum vbi_rx_mode)mode);
		assert_int_equal(vbi_rx_accept(&s, 1, 0, UINT64_MAX, &lost), VBI_RX_INVALID);
		assert_false(s.started);
		assert_int_equal(vbi_rx_accept(&s, 1, 0, 0, &lost), VBI_RX_INVALID);
		assert_int_equal(vbi_rx_accept(&s, 1, 0, 5, &lost), VBI_RX_DELIVER);
		assert_int_equal(vbi_rx_accept(&s, 1, 0, UINT64_MAX, &lost), VBI_RX_INVALID);
		assert_int_equal(s.next, 6);
		assert_int_equal(vbi_rx_heartbeat(&s, UINT64_MAX), 0);
		assert_int_equal(s.next, 6);
		assert_int_equal(s.st.invalid, 4);
		assert_int_equal(vbi_rx_heartbeat(&s, 7), 2);
		assert_int_equal(s.next, 8);
		assert_int_equal(vbi_rx_accept(&s, 1, 0, 6, &lost), VBI_RX_DUPLICATE);
		assert_int_equal(vbi_rx_accept(&s, 1, 0, VBI_SEQ_MAX, &lost),
				 mode == VBI_RX_FANOUT ? VBI_RX_GAP : VBI_RX_AHEAD);
	}
}

static void test_txcursor_nak(void **state)
{
	struct vbi_txcursor c = { .sent = 10, .high = 10, .acked = 4 };
	uint64_t n;

	assert_int_equal(vbi_txcursor_nak(&c, 4, 100, 50, &n), 0); /* acknowledged */
	assert_int_equal(vbi_txcursor_nak(&c, 12, 100, 50, &n), 0); /* beyond high + 1 */
	assert_int_equal(vbi_txcursor_nak(&c, 7, 100, 50, &n), 1);
	assert_int_equal(n, 4);
	assert_int_equal(c.sent, 6);
	assert_int_equal(vbi_txcursor_nak(&c, 7, 120, 50, &n), 0); /* repeated, too soon */
	assert_int_equal(n, 0);
	c.sent = 8;
	assert_int_equal(vbi_txcursor_nak(&c, 7, 150, 50, &n), 1); /* repeated, later */
	assert_int_equal(n, 2);
	/* 7 partly framed (fragments): it restarts, nothing whole to resend */
	c.frag_sent = 100;
	assert_int_equal(vbi_txcursor_nak(&c, 7, 300, 50, &n), 1);
	assert_int_equal(n, 0);
	assert_int_equal(c.frag_sent, 0);
	assert_int_equal(vbi_txcursor_nak(&c, 8, 400, 50, &n), 0); /* not framed yet */
}

static void test_rx_ordered_dedup_across_failover(void **state)
{
	struct vbi_rxstream s;
	uint64_t lost;
	uint64_t delivered = 0;

	vbi_rx_init(&s, VBI_RX_ORDERED);
	for (uint64_t q = 1; q <= 10; q++)
		delivered += vbi_rx_accept(&s, 9, 1, q, NULL) == VBI_RX_DELIVER;
	/* failover: epoch 2 retransmits 6..12 from the window */
	for (uint64_t q = 6; q <= 12; q++) {
		enum vbi_rx_verdict v = vbi_rx_accept(&s, 9, 2, q, NULL);

		assert_int_equal(v, q <= 10 ? VBI_RX_DUPLICATE : VBI_RX_DELIVER);
		delivered += v == VBI_RX_DELIVER;
	}
	assert_int_equal(delivered, 12);
	assert_int_equal(s.epoch, 2);
	assert_int_equal(s.st.duplicates, 5);
	/* ahead: the stream does not move, the caller asks for 13..14 */
	assert_int_equal(vbi_rx_accept(&s, 9, 2, 15, &lost), VBI_RX_AHEAD);
	assert_int_equal(lost, 2);
	assert_int_equal(s.next, 13);
	assert_int_equal(vbi_rx_accept(&s, 9, 2, 13, &lost), VBI_RX_DELIVER);
}

static int allocs, frees;
static void *t_alloc(size_t n, void *arg)
{
	if (arg && n > *(size_t *)arg)
		return NULL;
	allocs++;
	return malloc(n);
}
static void t_free(void *p, void *arg)
{
	frees++;
	free(p);
}

static struct vbi_wire_hdr frag(uint64_t seq, uint32_t off, uint32_t len, uint32_t total)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_DATA, .session = 1, .seq = seq, .frag_off = off,
				  .len = len, .msg_len = total };

	if (!off)
		h.flags |= VBI_WF_FIRST;
	if (off + len == total)
		h.flags |= VBI_WF_LAST;
	return h;
}

static void test_reassembly(void **state)
{
	struct vbi_reasm r;
	uint8_t src[1000];
	void *msg;
	struct vbi_wire_hdr h;

	for (int i = 0; i < 1000; i++)
		src[i] = (uint8_t)(i * 13);
	allocs = frees = 0;
	vbi_reasm_init(&r, t_alloc, t_free, NULL);
	for (uint32_t off = 0; off < 1000; off += 300) {
		uint32_t len = 1000 - off < 300 ? 1000 - off : 300;
		int rc;

		h = frag(5, off, len, 1000);
		rc = vbi_reasm_push(&r, &h, src + off, &msg);
		assert_int_equal(rc, off + len == 1000 ? 1 : 0);
	}
	assert_non_null(msg);
	assert_memory_equal(msg, src, 1000);
	t_free(msg, NULL);

	/* a lost middle fragment: the rest is stray, the partial is released */
	h = frag(6, 0, 300, 1000);
	assert_int_equal(vbi_reasm_push(&r, &h, src, &msg), 0);
	h = frag(6, 600, 300, 1000);
	assert_int_equal(vbi_reasm_push(&r, &h, src, &msg), -EPROTO);
	assert_false(r.active);
	h = frag(6, 900, 100, 1000);
	assert_int_equal(vbi_reasm_push(&r, &h, src, &msg), -EPROTO);
	/* a new FIRST while one is open abandons the old one */
	h = frag(7, 0, 300, 1000);
	assert_int_equal(vbi_reasm_push(&r, &h, src, &msg), 0);
	h = frag(8, 0, 300, 1000);
	assert_int_equal(vbi_reasm_push(&r, &h, src, &msg), 0);
	assert_int_equal(r.abandoned, 2);
	assert_int_equal(r.stray, 2);
	assert_int_equal(r.completed, 1);
	vbi_reasm_fini(&r);
	assert_int_equal(allocs, frees);

	/* allocation refused: -EAGAIN, nothing held */
	size_t cap = 100;
	vbi_reasm_init(&r, t_alloc, t_free, &cap);
	h = frag(9, 0, 300, 1000);
	assert_int_equal(vbi_reasm_push(&r, &h, src, &msg), -EAGAIN);
	assert_false(r.active);
	vbi_reasm_fini(&r);
}

/* When the ACKs a receiver owes ride the next DATA SEND (vbi_ack_rides).
 * Times in ns: T is "now", MS one millisecond. */
#define MS 1000000ull
#define T (100 * MS)

static void test_ack_rides(void **state)
{
	struct vbi_ack_owed o = { .reliable = true, .nslots = 256, .delay_ms = VBI_ACK_DELAY_MS };

	(void)state;
	assert_false(vbi_ack_rides(&o, T)); /* nothing owed */
	/* RC: one delivery's ACK waits for more, a credit or two as well */
	o.streams = true;
	o.delivered = 1;
	o.owed_ns = T;
	o.to_return = 1;
	assert_false(vbi_ack_rides(&o, T));
	assert_false(vbi_ack_rides(&o, T + VBI_ACK_DELAY_MS * MS - 1));
	/* ... until it has been owed VBI_ACK_DELAY_MS */
	assert_true(vbi_ack_rides(&o, T + VBI_ACK_DELAY_MS * MS));
	/* owed "later" than now (another thread's clock): just owed */
	assert_false(vbi_ack_rides(&o, T - 5 * MS));
	/* ... or VBI_ACK_EVERY deliveries wait */
	o.delivered = VBI_ACK_EVERY - 1;
	assert_false(vbi_ack_rides(&o, T));
	o.delivered = VBI_ACK_EVERY;
	assert_true(vbi_ack_rides(&o, T));
	/* ... or an eighth of the slots wait to be returned (credits alone too) */
	o.delivered = 1;
	o.to_return = 256 / 8 - 1;
	assert_false(vbi_ack_rides(&o, T));
	o.to_return = 256 / 8;
	assert_true(vbi_ack_rides(&o, T));
	o.streams = false;
	assert_true(vbi_ack_rides(&o, T));
	o.to_return = 256 / 8 - 1;
	assert_false(vbi_ack_rides(&o, T + 1000 * MS)); /* credits have no timer here */
	/* ... or it is urgent (k-of-n, a lane switch, a NAK) */
	o.streams = true;
	o.to_return = 0;
	o.urgent = true;
	assert_true(vbi_ack_rides(&o, T));
	/* a lane with 4 slots returns every credit at once */
	o.urgent = false;
	o.streams = false;
	o.nslots = 4;
	o.to_return = 1;
	assert_true(vbi_ack_rides(&o, T));
	/* UC/UD: whatever is owed rides every SEND (go-back-N, the RTO) */
	o.nslots = 256;
	o.reliable = false;
	assert_true(vbi_ack_rides(&o, T));
	o.to_return = 0;
	o.streams = true;
	assert_true(vbi_ack_rides(&o, T));
	o.streams = false;
	assert_false(vbi_ack_rides(&o, T));
}

/*
 * When the per-peer round sends what is owed alone (vbi_ack_alone). The
 * waits are measured in ns: an ACK owed 40 us ago in a ping-pong is not
 * due, whatever a coarse clock (a 4 ms tick) would have said of it; that
 * made about one lone ACK per tick (pubsub_ack_tick_test).
 */
static void test_ack_alone(void **state)
{
	struct vbi_ack_owed o = { .reliable = true, .nslots = 256, .delay_ms = VBI_ACK_DELAY_MS,
				  .streams = true, .delivered = 3, .to_return = 3,
				  .owed_ns = T - 40000, .last_rx_ns = T - 40000 };

	(void)state;
	/* a ping-pong: owed and heard from 40 us ago */
	assert_false(vbi_ack_alone(&o, true, T));
	assert_false(vbi_ack_alone(&o, false, T));
	/* owed for the delay: due, but only when the poll found nothing */
	o.owed_ns = T - VBI_ACK_DELAY_MS * MS + 1;
	assert_false(vbi_ack_alone(&o, true, T));
	o.owed_ns = T - VBI_ACK_DELAY_MS * MS;
	assert_true(vbi_ack_alone(&o, true, T));
	assert_false(vbi_ack_alone(&o, false, T));
	/* credits alone: after the delay with nothing received */
	o.streams = false;
	o.owed_ns = 0;
	assert_false(vbi_ack_alone(&o, true, T));
	o.last_rx_ns = T - VBI_ACK_DELAY_MS * MS;
	assert_true(vbi_ack_alone(&o, true, T));
	/* ... but never a lone credit (its SEND would take one of the peer's) */
	o.to_return = 1;
	assert_false(vbi_ack_alone(&o, true, T));
	/* received "later" than now (another thread's clock): just received */
	o.to_return = 3;
	o.last_rx_ns = T + MS;
	assert_false(vbi_ack_alone(&o, true, T));
	/* due at once, idle or not: urgent, a quarter of the slots, 256 messages */
	o.last_rx_ns = T;
	o.urgent = true;
	assert_true(vbi_ack_alone(&o, false, T));
	o.urgent = false;
	o.to_return = 256 / 4;
	assert_true(vbi_ack_alone(&o, false, T));
	o.to_return = 256 / 4 - 1;
	assert_false(vbi_ack_alone(&o, false, T));
	o.streams = true;
	o.delivered = 256;
	assert_true(vbi_ack_alone(&o, false, T));
	/* nothing owed at all */
	o = (struct vbi_ack_owed){ .reliable = true, .nslots = 256, .delay_ms = 2 };
	assert_false(vbi_ack_alone(&o, true, T));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_txwin_backpressure_and_ack),
		cmocka_unit_test(test_quorum),
		cmocka_unit_test(test_rx_fanout_gaps_and_late_join),
		cmocka_unit_test(test_rx_seq_max_refused),
		cmocka_unit_test(test_txcursor_nak),
		cmocka_unit_test(test_rx_ordered_dedup_across_failover),
		cmocka_unit_test(test_reassembly),
		cmocka_unit_test(test_ack_rides),
		cmocka_unit_test(test_ack_alone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
