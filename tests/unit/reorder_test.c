/* SPDX-License-Identifier: MIT */
/* Reorder buffer + NAK logic: loss patterns, duplicates, reordering, the
 * bound (drop newest + NAK), timer-driven re-NAK, session change, the
 * sender-side resend helper, and an end-to-end run over a lossy, reordering,
 * duplicating channel (lost NAKs, ACKs and retransmissions too). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/reorder.h"

struct sink {
	uint64_t expect; /* next seq the application must see */
	uint64_t n;
	int out_of_order;
	uint64_t released;
};

static void on_deliver(void *msg, uint64_t seq, void *arg)
{
	struct sink *k = arg;

	/* messages carry their own seq: checks the buffer hands back the right one */
	if (seq != k->expect || (uintptr_t)msg != seq * 3)
		k->out_of_order++;
	k->expect = seq + 1;
	k->n++;
}

static void on_release(void *msg, uint64_t seq, void *arg)
{
	struct sink *k = arg;

	assert_int_equal((uintptr_t)msg, seq * 3);
	k->released++;
}

#define M(s) ((void *)(uintptr_t)((s) * 3))

static enum vbi_ro_verdict push(struct vbi_reorder *r, struct sink *k, uint64_t seq)
{
	return vbi_reorder_push(r, 7, 1, seq, M(seq), on_deliver, k);
}

static void test_in_order_and_single_loss(void **state)
{
	struct vbi_reorder r;
	struct sink k = { .expect = 1 };
	struct vbi_nak nk[4];

	assert_int_equal(vbi_reorder_init(&r, 16, 100, on_release, &k), 0);
	for (uint64_t s = 1; s <= 5; s++)
		assert_int_equal(push(&r, &k, s), VBI_RO_DELIVERED);
	assert_int_equal(vbi_reorder_naks(&r, 0, nk, 4), 0);
	assert_int_equal(vbi_reorder_deadline(&r), UINT64_MAX);

	/* 6 lost */
	assert_int_equal(push(&r, &k, 7), VBI_RO_HELD);
	assert_int_equal(push(&r, &k, 8), VBI_RO_HELD);
	assert_int_equal(k.n, 5);
	assert_int_equal(vbi_reorder_missing(&r), 1);
	assert_int_equal(vbi_reorder_deadline(&r), 0); /* a fresh gap: NAK now */
	assert_int_equal(vbi_reorder_naks(&r, 1000, nk, 4), 1);
	assert_int_equal(nk[0].first, 6);
	assert_int_equal(nk[0].count, 1);
	/* not again before the interval */
	assert_int_equal(vbi_reorder_naks(&r, 1050, nk, 4), 0);
	assert_int_equal(vbi_reorder_deadline(&r), 1100);
	assert_int_equal(vbi_reorder_naks(&r, 1099, nk, 4), 0);
	/* timer: re-NAK */
	assert_int_equal(vbi_reorder_naks(&r, 1100, nk, 4), 1);
	assert_int_equal(nk[0].first, 6);
	assert_int_equal(r.st.renaks, 1);
	/* duplicate of a held message, and of a delivered one */
	assert_int_equal(push(&r, &k, 8), VBI_RO_DUPLICATE);
	assert_int_equal(push(&r, &k, 3), VBI_RO_DUPLICATE);
	/* the retransmission fills the gap: 6, 7, 8 in order */
	assert_int_equal(push(&r, &k, 6), VBI_RO_DELIVERED);
	assert_int_equal(k.n, 8);
	assert_int_equal(k.out_of_order, 0);
	assert_int_equal(vbi_reorder_missing(&r), 0);
	assert_int_equal(vbi_reorder_naks(&r, 5000, nk, 4), 0);
	assert_int_equal(vbi_reorder_deadline(&r), UINT64_MAX);
	assert_int_equal(r.st.held, 2);
	assert_int_equal(r.st.held_now, 0);
	assert_int_equal(r.st.duplicates, 2);
	assert_int_equal(r.st.delivered, 8);
	vbi_reorder_fini(&r);
	assert_int_equal(k.released, 0);
}

static void test_nak_delay(void **state)
{
	struct vbi_reorder r;
	struct sink k = { .expect = 1 };
	struct vbi_nak nk[4];

	assert_int_equal(vbi_reorder_init(&r, 16, 100, on_release, &k), 0);
	r.nak_delay_ns = 30;
	push(&r, &k, 1);
	push(&r, &k, 3); /* 2 may only be late */
	assert_int_equal(vbi_reorder_deadline(&r), 0);
	assert_int_equal(vbi_reorder_naks(&r, 1000, nk, 4), 0); /* seen now */
	assert_int_equal(vbi_reorder_deadline(&r), 1030);
	assert_int_equal(vbi_reorder_naks(&r, 1029, nk, 4), 0);
	push(&r, &k, 5); /* 4: a newer gap, seen later */
	assert_int_equal(vbi_reorder_naks(&r, 1030, nk, 4), 1);
	assert_int_equal(nk[0].first, 2);
	assert_int_equal(nk[0].count, 1);
	assert_int_equal(vbi_reorder_deadline(&r), 1060);
	assert_int_equal(vbi_reorder_naks(&r, 1060, nk, 4), 1);
	assert_int_equal(nk[0].first, 4);
	assert_int_equal(vbi_reorder_deadline(&r), 1130); /* re-NAK of 2 */
	/* 2 was only late: it arrives, no re-NAK for it */
	push(&r, &k, 2);
	assert_int_equal(vbi_reorder_deadline(&r), 1160);
	assert_int_equal(r.st.renaks, 0);
	push(&r, &k, 4);
	assert_int_equal(k.n, 5);
	assert_int_equal(k.out_of_order, 0);
	vbi_reorder_fini(&r);
}

static void test_multiple_gaps_and_max(void **state)
{
	struct vbi_reorder r;
	struct sink k = { .expect = 1 };
	struct vbi_nak nk[4];

	assert_int_equal(vbi_reorder_init(&r, 30, 100, on_release, &k), 0);
	assert_int_equal(r.cap, 32);
	/* 1 . 3 . . 6 7 . . 10 */
	static const uint64_t got[] = { 1, 3, 6, 7, 10 };
	for (size_t i = 0; i < sizeof(got) / sizeof(got[0]); i++)
		push(&r, &k, got[i]);
	assert_int_equal(k.n, 1);
	assert_int_equal(vbi_reorder_missing(&r), 5);
	/* only two ranges fit: the third stays due */
	assert_int_equal(vbi_reorder_naks(&r, 10, nk, 2), 2);
	assert_int_equal(nk[0].first, 2);
	assert_int_equal(nk[0].count, 1);
	assert_int_equal(nk[1].first, 4);
	assert_int_equal(nk[1].count, 2);
	assert_int_equal(vbi_reorder_deadline(&r), 0);
	assert_int_equal(vbi_reorder_naks(&r, 10, nk, 4), 1);
	assert_int_equal(nk[0].first, 8);
	assert_int_equal(nk[0].count, 2);
	/* 4 arrives: the re-NAK of 4..5 shrinks to 5 */
	assert_int_equal(push(&r, &k, 4), VBI_RO_HELD);
	assert_int_equal(vbi_reorder_naks(&r, 110, nk, 4), 3);
	assert_int_equal(nk[0].first, 2);
	assert_int_equal(nk[1].first, 5);
	assert_int_equal(nk[1].count, 1);
	assert_int_equal(nk[2].first, 8);
	assert_int_equal(nk[2].count, 2);
	/* fill everything in reverse */
	static const uint64_t fill[] = { 9, 8, 5, 2 };
	for (size_t i = 0; i < sizeof(fill) / sizeof(fill[0]); i++)
		push(&r, &k, fill[i]);
	assert_int_equal(k.n, 10);
	assert_int_equal(k.out_of_order, 0);
	assert_int_equal(r.st.held_max, 8);
	vbi_reorder_fini(&r);
}

static void test_bound_drops_newest(void **state)
{
	struct vbi_reorder r;
	struct sink k = { .expect = 1 };
	struct vbi_nak nk[4];

	assert_int_equal(vbi_reorder_init(&r, 8, 100, on_release, &k), 0);
	assert_int_equal(vbi_reorder_start(&r, 7, 1, 0), -EINVAL);
	/* started from the HELLO: losing the very first message is a gap */
	assert_int_equal(vbi_reorder_start(&r, 7, 1, 1), 0);
	assert_int_equal(vbi_reorder_deadline(&r), UINT64_MAX);
	/* 1 lost; 2..8 fill the window [1, 8] */
	for (uint64_t s = 2; s <= 8; s++)
		assert_int_equal(push(&r, &k, s), VBI_RO_HELD);
	assert_int_equal(push(&r, &k, 9), VBI_RO_DROPPED);
	assert_int_equal(push(&r, &k, 12), VBI_RO_DROPPED);
	assert_int_equal(r.st.dropped, 2);
	assert_int_equal(r.st.held_now, 7);
	/* only the window is NAKed */
	assert_int_equal(vbi_reorder_naks(&r, 0, nk, 4), 1);
	assert_int_equal(nk[0].first, 1);
	assert_int_equal(nk[0].count, 1);
	assert_int_equal(push(&r, &k, 1), VBI_RO_DELIVERED);
	assert_int_equal(k.n, 8);
	/* now the dropped ones are inside the window: NAKed at once */
	assert_int_equal(vbi_reorder_deadline(&r), 0);
	assert_int_equal(vbi_reorder_naks(&r, 1, nk, 4), 1);
	assert_int_equal(nk[0].first, 9);
	assert_int_equal(nk[0].count, 4);
	for (uint64_t s = 9; s <= 12; s++)
		assert_int_equal(push(&r, &k, s), VBI_RO_DELIVERED);
	assert_int_equal(k.out_of_order, 0);
	assert_int_equal(k.n, 12);
	vbi_reorder_fini(&r);
}

static void test_tail_loss_heartbeat_and_session(void **state)
{
	struct vbi_reorder r;
	struct sink k = { .expect = 1 };
	struct vbi_nak nk[4];

	assert_int_equal(vbi_reorder_init(&r, 16, 100, on_release, &k), 0);
	for (uint64_t s = 1; s <= 3; s++)
		push(&r, &k, s);
	/* 4 and 5 lost at the tail: invisible until the heartbeat */
	assert_int_equal(vbi_reorder_naks(&r, 0, nk, 4), 0);
	vbi_reorder_heartbeat(&r, 99, 5); /* another session: ignored */
	assert_int_equal(vbi_reorder_naks(&r, 0, nk, 4), 0);
	vbi_reorder_heartbeat(&r, 7, 5);
	assert_int_equal(vbi_reorder_naks(&r, 0, nk, 4), 1);
	assert_int_equal(nk[0].first, 4);
	assert_int_equal(nk[0].count, 2);
	/* 5 arrives and waits; then a new publisher session starts: the held
	 * message is released, the new stream starts where it joins */
	assert_int_equal(push(&r, &k, 5), VBI_RO_HELD);
	assert_int_equal(vbi_reorder_push(&r, 8, 1, 100, M(100), on_deliver, &k),
			 VBI_RO_DELIVERED);
	assert_int_equal(k.released, 1);
	assert_int_equal(r.st.held_now, 0);
	assert_int_equal(vbi_reorder_naks(&r, 1000, nk, 4), 0); /* old gaps forgotten */
	/* a held message at fini is released too */
	k.expect = 101;
	assert_int_equal(vbi_reorder_push(&r, 8, 1, 102, M(102), on_deliver, &k), VBI_RO_HELD);
	vbi_reorder_fini(&r);
	assert_int_equal(k.released, 2);
	assert_int_equal(k.out_of_order, 1); /* the session jump 4 -> 100, nothing else */
}

struct resent {
	uint64_t seqs[16];
	int n;
	int fail_at; /* fail on this call index (-1 never) */
};

static int on_resend(const struct vbi_txent *e, void *arg)
{
	struct resent *rs = arg;

	if (rs->n == rs->fail_at)
		return -EAGAIN;
	assert_int_equal((uintptr_t)e->ctx, e->seq * 3);
	rs->seqs[rs->n++] = e->seq;
	return 0;
}

static void no_release(void *ctx, uint64_t seq, void *arg)
{
	(void)ctx;
	(void)seq;
	(void)arg;
}

static void test_sender_resend(void **state)
{
	struct vbi_txwin w;
	struct resent rs = { .n = 0, .fail_at = -1 };
	uint64_t seq;

	assert_int_equal(vbi_txwin_init(&w, 16, 1), 0);
	for (uint64_t s = 1; s <= 10; s++)
		assert_int_equal(vbi_txwin_push(&w, M(s), 8, &seq), 0);
	assert_int_equal(vbi_txwin_ack(&w, 3, no_release, NULL), 3);
	/* 2..5: 2 and 3 acked meanwhile, 4 and 5 resent */
	assert_int_equal(vbi_nak_resend(&w, 2, 4, on_resend, &rs), 2);
	assert_int_equal(rs.seqs[0], 4);
	assert_int_equal(rs.seqs[1], 5);
	/* entirely acked: nothing */
	assert_int_equal(vbi_nak_resend(&w, 1, 3, on_resend, &rs), 0);
	assert_int_equal(vbi_nak_resend(&w, 5, 0, on_resend, &rs), 0);
	/* names seqs never sent / seq 0 / wraps */
	assert_int_equal(vbi_nak_resend(&w, 9, 5, on_resend, &rs), -EPROTO);
	assert_int_equal(vbi_nak_resend(&w, 0, 2, on_resend, &rs), -EPROTO);
	assert_int_equal(vbi_nak_resend(&w, UINT64_MAX, 2, on_resend, &rs), -EPROTO);
	assert_int_equal(rs.n, 2);
	/* the send path pushes back after one */
	rs.fail_at = 3;
	assert_int_equal(vbi_nak_resend(&w, 8, 3, on_resend, &rs), -EAGAIN);
	assert_int_equal(rs.n, 3);
	assert_int_equal(rs.seqs[2], 8);
	vbi_txwin_fini(&w);
}

/* ---- end to end over a lossy channel ----------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

enum { P_DATA, P_NAK, P_ACK, P_HB };

struct pkt {
	uint64_t at;
	int type;
	uint64_t seq;
	uint32_t count;
};

#define MAXPKT 8192

struct chan {
	struct pkt q[MAXPKT];
	int n;
	uint64_t sent, lost, duped;
};

/* 10% loss, 2% duplication, up to 20 ticks of reordering: in both
 * directions, retransmissions and NAKs included. */
static void chan_send(struct chan *c, uint64_t now, int type, uint64_t seq, uint32_t count)
{
	int copies = rnd(100) < 2 ? 2 : 1;

	c->sent++;
	if (rnd(100) < 10) {
		c->lost++;
		return;
	}
	if (copies == 2)
		c->duped++;
	for (int i = 0; i < copies; i++) {
		assert_true(c->n < MAXPKT);
		c->q[c->n++] = (struct pkt){ .at = now + 1 + rnd(20), .type = type, .seq = seq,
					     .count = count };
	}
}

struct e2e {
	struct chan ch;
	struct vbi_txwin w;
	struct vbi_reorder r;
	struct sink k;
	uint64_t now, resent;
};

static int e2e_resend(const struct vbi_txent *e, void *arg)
{
	struct e2e *x = arg;

	chan_send(&x->ch, x->now, P_DATA, e->seq, 0);
	x->resent++;
	return 0;
}

static void end_to_end(uint32_t rcap, uint64_t delay)
{
	enum { N = 20000, TXWIN = 256 };
	struct e2e *x = calloc(1, sizeof(*x));
	struct vbi_nak nk[8];
	uint64_t seq, last_sent = 0;

	assert_non_null(x);
	x->k.expect = 1;
	assert_int_equal(vbi_txwin_init(&x->w, TXWIN, 1), 0);
	assert_int_equal(vbi_reorder_init(&x->r, rcap, 40, on_release, &x->k), 0);
	assert_int_equal(vbi_reorder_start(&x->r, 7, 1, 1), 0);
	x->r.nak_delay_ns = delay;

	for (x->now = 1; x->k.n < N && x->now < 1000000; x->now++) {
		/* publisher: up to 4 new messages per tick, within its window */
		for (int i = 0; i < 4 && last_sent < N; i++) {
			if (vbi_txwin_push(&x->w, M(last_sent + 1), 8, &seq) == -EAGAIN)
				break;
			last_sent = seq;
			chan_send(&x->ch, x->now, P_DATA, seq, 0);
		}
		if (x->now % 20 == 0 && last_sent)
			chan_send(&x->ch, x->now, P_HB, last_sent, 0);
		/* arrivals */
		for (int i = 0; i < x->ch.n;) {
			struct pkt p = x->ch.q[i];

			if (p.at > x->now) {
				i++;
				continue;
			}
			x->ch.q[i] = x->ch.q[--x->ch.n];
			switch (p.type) {
			case P_DATA:
				vbi_reorder_push(&x->r, 7, 1, p.seq, M(p.seq), on_deliver, &x->k);
				break;
			case P_HB:
				vbi_reorder_heartbeat(&x->r, 7, p.seq);
				break;
			case P_NAK:
				/* not an ack: a later range's first-1 may be missing too */
				assert_true(vbi_nak_resend(&x->w, p.seq, p.count, e2e_resend, x) >= 0);
				break;
			case P_ACK:
				vbi_txwin_ack(&x->w, p.seq, no_release, NULL);
				break;
			}
		}
		/* subscriber: NAKs when due, a cumulative ack every 10 ticks */
		if (vbi_reorder_deadline(&x->r) <= x->now) {
			int n = vbi_reorder_naks(&x->r, x->now, nk, 8);

			for (int i = 0; i < n; i++)
				chan_send(&x->ch, x->now, P_NAK, nk[i].first, nk[i].count);
		}
		if (x->now % 10 == 0 && x->r.rx.started)
			chan_send(&x->ch, x->now, P_ACK, x->r.rx.next - 1, 0);
	}
	if (x->k.n != N)
		printf("stuck: now %llu next %llu high %llu acked %llu next_seq %llu missing %u q %d\n",
		       (unsigned long long)x->now, (unsigned long long)x->r.rx.next,
		       (unsigned long long)x->r.high, (unsigned long long)x->w.acked,
		       (unsigned long long)x->w.next_seq, vbi_reorder_missing(&x->r), x->ch.n);
	assert_int_equal(x->k.n, N);
	assert_int_equal(x->k.out_of_order, 0);
	assert_int_equal(x->r.st.delivered, N);
	assert_true(x->ch.lost > 0);
	assert_true(x->r.st.naks > 0);
	assert_true(x->r.st.renaks > 0);  /* some NAKs or retransmissions were lost */
	assert_true(x->r.st.duplicates > 0);
	assert_true(x->r.st.held_max < x->r.cap);
	/* a window as wide as the publisher's never drops at the bound */
	if (rcap >= TXWIN)
		assert_int_equal(x->r.st.dropped, 0);
	else
		assert_true(x->r.st.dropped > 0);
	printf("e2e (window %u vs publisher %d, NAK delay %llu): %d messages in %llu ticks: %llu packets sent, %llu lost, %llu duplicated; "
	       "%llu NAK ranges (%llu seqs, %llu re-NAKed), %llu resent, %llu dropped at the "
	       "bound, held max %u\n",
	       rcap, TXWIN, (unsigned long long)delay, N, (unsigned long long)x->now, (unsigned long long)x->ch.sent,
	       (unsigned long long)x->ch.lost, (unsigned long long)x->ch.duped,
	       (unsigned long long)x->r.st.naks, (unsigned long long)x->r.st.nak_seqs,
	       (unsigned long long)x->r.st.renaks, (unsigned long long)x->resent,
	       (unsigned long long)x->r.st.dropped, x->r.st.held_max);
	vbi_reorder_fini(&x->r);
	vbi_txwin_fini(&x->w);
	free(x);
}

static void test_end_to_end_lossy(void **state)
{
	end_to_end(64, 0);  /* narrower than the publisher's window: drops at the bound */
	end_to_end(256, 0);
	end_to_end(256, 25); /* tolerate the channel's reordering before NAKing */
}

static void test_init_errors(void **state)
{
	struct vbi_reorder r;

	assert_int_equal(vbi_reorder_init(&r, 1, 100, NULL, NULL), -EINVAL);
	assert_int_equal(vbi_reorder_init(&r, (1u << 24) + 1, 100, NULL, NULL), -EINVAL);
	assert_int_equal(vbi_reorder_init(&r, 8, 0, NULL, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_order_and_single_loss),
		cmocka_unit_test(test_nak_delay),
		cmocka_unit_test(test_multiple_gaps_and_max),
		cmocka_unit_test(test_bound_drops_newest),
		cmocka_unit_test(test_tail_loss_heartbeat_and_session),
		cmocka_unit_test(test_sender_resend),
		cmocka_unit_test(test_end_to_end_lossy),
		cmocka_unit_test(test_init_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
