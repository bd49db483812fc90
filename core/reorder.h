/* SPDX-License-Identifier: MIT */
/*
 * Software reliability for ORDERED over an unreliable lane (UC or UD after
 * the path degraded): a bounded receive-side reorder buffer on top of
 * vbi_rxstream's AHEAD verdict, NAK generation with a retry timer, and the
 * sender-side helper that turns a NAK into retransmissions from the
 * publisher's window (core/stream.h). Pure logic: no I/O, no clock (the
 * caller passes now in ns), one allocation at init.
 *
 * Receiver:
 *   vbi_reorder_push(msg seq)  DELIVERED  the message, and every held one it
 *                                         unblocked, went to @deliver in order
 *                              HELD       ahead of a gap: kept (the buffer
 *                                         owns @msg until it delivers it)
 *                              DUPLICATE  delivered or held already: the
 *                                         caller drops @msg
 *                              DROPPED    beyond the bound (next + cap): the
 *                                         newest is dropped, the caller
 *                                         frees @msg; it is NAKed once the
 *                                         window reaches it
 *   vbi_reorder_naks(now)      NAK ranges (first missing, count) due now:
 *                              a gap seen nak_delay ago and never NAKed, or
 *                              NAKed nak_interval ago and still missing
 *                              (the retry timer). Ranges
 *                              stop at the window's end (next + cap - 1).
 *   vbi_reorder_deadline()     when the next NAK is due (for the caller's
 *                              timer): 0 = now, UINT64_MAX = no gap.
 * A NAK is not an acknowledgement: only the first range starts at the
 * stream's next seq, later ranges follow other gaps. Cumulative ACKs
 * (rx.next - 1) go separately.
 *
 * Cost: push is O(1) plus the messages it releases; naks/deadline scan the
 * gap region (at most cap slots) and are O(1) with no gap.
 *
 * Without vbi_reorder_start() the stream starts at the first message seen
 * (vbi_rxstream's late-join rule). A new publisher session releases every held
 * message of the old one through @release (they can no longer be completed)
 * and restarts the window.
 *
 * Thread-safety: none inside; one owner at a time (the connection's
 * progress context), like vbi_rxstream. Different buffers are independent.
 *
 * Ownership: a HELD message belongs to the buffer until it is passed to
 * @deliver (then the deliver callback owns it) or to @release (session
 * change, fini).
 *
 * Return codes: 0 / a count / a verdict (>= 0), or negative errno with
 * vb_errmsg() set (-EINVAL, -ENOMEM, -EPROTO).
 */
#ifndef VERBUS_CORE_REORDER_H
#define VERBUS_CORE_REORDER_H

#include <stdint.h>

#include "core/stream.h"

struct vbi_nak {
	uint64_t first;  /* first missing seq */
	uint32_t count;  /* how many from first (wire: VBI_WT_NAK seq, msg_len) */
};

typedef void (*vbi_reorder_deliver_fn)(void *msg, uint64_t seq, void *arg);
typedef void (*vbi_reorder_release_fn)(void *msg, uint64_t seq, void *arg);

enum vbi_ro_verdict {
	VBI_RO_DELIVERED = 0,
	VBI_RO_HELD,
	VBI_RO_DUPLICATE,
	VBI_RO_DROPPED,
};

struct vbi_ro_stats {
	uint64_t delivered;     /* to @deliver, directly or released from hold */
	uint64_t held;          /* messages that had to wait for a gap */
	uint64_t duplicates;    /* already delivered, or already held */
	uint64_t dropped;       /* beyond the bound */
	uint64_t naks;          /* NAK ranges produced */
	uint64_t nak_seqs;      /* seqs named in them */
	uint64_t renaks;        /* seqs NAKed again by the timer */
	uint64_t released;      /* held messages given to @release */
	uint32_t held_now, held_max;
};

struct vbi_ro_slot {
	uint64_t seq;    /* the seq this slot describes (else: stale, empty) */
	void *msg;
	uint64_t nak_ns; /* missing: last NAK of this seq (0 = not yet) */
	uint64_t seen_ns; /* missing: when a scan first saw the gap */
	uint8_t held;
};

struct vbi_reorder {
	struct vbi_rxstream rx; /* ORDERED; rx.next is the first undelivered seq */
	struct vbi_ro_slot *ring;
	uint32_t cap;           /* power of two: window = [next, next + cap) */
	uint64_t nak_interval_ns;
	uint64_t nak_delay_ns;  /* reorder tolerance: a gap is first NAKed once
				 * it has been seen this long (0 at init: at
				 * once; set it directly) */
	uint64_t high;          /* highest seq seen this session (0 = none) */
	vbi_reorder_release_fn release;
	void *arg;
	struct vbi_ro_stats st;
};

/* @cap: messages the window spans (rounded up to a power of two, 2..2^24);
 * @nak_interval_ns: the re-NAK timer (> 0). @release (may be NULL: held
 * messages are then forgotten) gets held messages that cannot be delivered.
 * 0, -EINVAL, -ENOMEM. */
int vbi_reorder_init(struct vbi_reorder *r, uint32_t cap, uint64_t nak_interval_ns,
		     vbi_reorder_release_fn release, void *arg);
/* Releases what is still held. */
void vbi_reorder_fini(struct vbi_reorder *r);

/* One received message (session/epoch/seq from its validated header). */
enum vbi_ro_verdict vbi_reorder_push(struct vbi_reorder *r, uint32_t session, uint32_t epoch,
				     uint64_t seq, void *msg, vbi_reorder_deliver_fn deliver,
				     void *arg);

/* Start (or restart) the stream of @session expecting @next_seq first, so
 * that a loss of the very first messages is a gap, not a late join (e.g.
 * from the publisher's HELLO, or carried over from the RC phase before the
 * path degraded). Held messages of a previous session are released.
 * 0 or -EINVAL (@next_seq 0). */
int vbi_reorder_start(struct vbi_reorder *r, uint32_t session, uint32_t epoch, uint64_t next_seq);

/* A HEARTBEAT (seq = the publisher's last sent) of @session: makes tail
 * loss visible (the missing tail is NAKed like any gap). Ignored for another
 * session or before the stream started. */
void vbi_reorder_heartbeat(struct vbi_reorder *r, uint32_t session, uint64_t last_sent);

/* Up to @max NAK ranges due at @now, oldest first; marks them NAKed at @now.
 * Returns how many (0 when nothing is due). */
int vbi_reorder_naks(struct vbi_reorder *r, uint64_t now, struct vbi_nak *out, int max);

/* When vbi_reorder_naks() should run next: 0 (now: a gap no scan has seen
 * yet), the earliest first-NAK or re-NAK time, or UINT64_MAX (no gap). */
uint64_t vbi_reorder_deadline(const struct vbi_reorder *r);

/* Missing seqs inside the window right now. */
uint32_t vbi_reorder_missing(const struct vbi_reorder *r);

/* ---- sender side -------------------------------------------------------- */

/* Called for each window entry to resend, oldest first; a negative return
 * (e.g. -EAGAIN: send queue full) stops the walk. */
typedef int (*vbi_resend_fn)(const struct vbi_txent *e, void *arg);

/*
 * A NAK (first, count) received: call @fn for every seq in it that is still
 * unacknowledged (seqs acked already are skipped: the NAK crossed an ack).
 * Returns how many were resent, @fn's negative return (stopped there: the
 * receiver's timer NAKs the rest again), or -EPROTO when the NAK names a seq
 * never sent or seq 0 (a misbehaving peer: count it; nothing resent).
 */
int vbi_nak_resend(const struct vbi_txwin *w, uint64_t first, uint32_t count, vbi_resend_fn fn,
		   void *arg);

#endif
