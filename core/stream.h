/* SPDX-License-Identifier: MIT */
/*
 * Stream logic shared by every transport: the publisher's retransmit window,
 * the subscriber's per-stream sequence tracking (duplicates, gaps,
 * late join, new publisher session), fragment reassembly, and the k-of-n
 * quorum used for acknowledged writes. Pure bookkeeping: no I/O, no
 * allocation except through caller-supplied callbacks.
 *
 * Sequence numbers are per (publisher session, topic), start at 1 and never
 * wrap in practice (64 bits). A path failover bumps the epoch but the
 * sequence continues, so a receiver drops retransmitted duplicates by seq.
 *
 * Thread-safety: none inside. Each object is owned by one thread at a time
 * (the connection's progress context, or a caller-held lock); the functions
 * may run concurrently on different objects.
 */
#ifndef VERBUS_CORE_STREAM_H
#define VERBUS_CORE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wire.h"

/* ---- publisher: retransmit window -------------------------------------- */

struct vbi_txent {
	uint64_t seq;
	void *ctx;    /* caller's reference (e.g. the pool buffer holding the frame) */
	uint32_t len;
};

struct vbi_txwin {
	struct vbi_txent *ring;
	uint32_t cap;       /* power of two */
	uint64_t acked;     /* highest cumulatively acknowledged seq */
	uint64_t next_seq;  /* seq the next push gets */
};

/* Ring of @cap entries (rounded up to a power of two, >= 2); the first
 * message gets seq @first_seq (>= 1). 0, -EINVAL, or -ENOMEM. */
int vbi_txwin_init(struct vbi_txwin *w, uint32_t cap, uint64_t first_seq);
void vbi_txwin_fini(struct vbi_txwin *w);

/* Messages sent and not yet acknowledged. */
static inline uint32_t vbi_txwin_inflight(const struct vbi_txwin *w)
{
	return (uint32_t)(w->next_seq - 1 - w->acked);
}

/* Append a message: 0 and *@seq, or -EAGAIN when the window is full
 * (back-pressure: nothing is dropped; retry after acks arrive). */
int vbi_txwin_push(struct vbi_txwin *w, void *ctx, uint32_t len, uint64_t *seq);

/* The unacknowledged entry for @seq, or NULL (acked already or never sent).
 * Inline: read for every message framed. */
static inline const struct vbi_txent *vbi_txwin_get(const struct vbi_txwin *w, uint64_t seq)
{
	if (seq <= w->acked || seq >= w->next_seq)
		return NULL;
	return &w->ring[seq & (w->cap - 1)];
}

typedef void (*vbi_txwin_release_fn)(void *ctx, uint64_t seq, void *arg);

/*
 * Cumulative ack up to and including @seq: @release is called once per
 * newly acknowledged entry, oldest first. Returns how many were released
 * (0 for an old/duplicate ack), or -EPROTO when @seq acknowledges a message
 * never sent (a misbehaving peer: the caller counts it, nothing changes).
 */
int vbi_txwin_ack(struct vbi_txwin *w, uint64_t seq, vbi_txwin_release_fn release, void *arg);

/* Release every entry (teardown); returns how many. */
int vbi_txwin_drain(struct vbi_txwin *w, vbi_txwin_release_fn release, void *arg);

/* ---- publisher: go-back-N cursor toward one subscriber (NAK) ----------- */

/* What a NAK is judged against (a copy of the caller's per-subscriber state). */
struct vbi_txcursor {
	uint64_t sent;      /* highest seq framed to the subscriber */
	uint64_t high;      /* highest seq ever framed (sent may be rewound below it) */
	uint64_t acked;     /* highest seq it acknowledged */
	uint32_t frag_sent; /* bytes of message sent + 1 already framed (0: none) */
	uint64_t nak_seq;   /* the last NAK acted upon ... */
	uint64_t nak_ns;    /* ... and when */
};

/*
 * A NAK for @seq (the first message the subscriber misses) at @now_ns. It
 * is acted upon when @seq is unacknowledged, at most high + 1, and framed
 * already (or its fragments are being framed), unless it repeats the NAK
 * acted upon less than @hold_ns ago (what was resent is on its way). Then
 * the cursor goes back to @seq - 1 (frag_sent 0, nak_seq/nak_ns set),
 * *@resend gets the number of whole messages to send again (0 when only a
 * partly framed message restarts) and 1 is returned; else 0, nothing
 * changes. Pure; the caller holds what protects its cursor.
 */
int vbi_txcursor_nak(struct vbi_txcursor *c, uint64_t seq, uint64_t now_ns, uint64_t hold_ns,
		     uint64_t *resend);

/* ---- k-of-n acknowledgement -------------------------------------------- */

/*
 * Given each of @n receivers' cumulative acks, the highest seq that at least
 * @k of them have acknowledged (0 when none). -EINVAL unless 1 <= k <= n.
 */
int vbi_quorum_seq(const uint64_t *acked, unsigned n, unsigned k, uint64_t *out);

/* ---- subscriber: when acknowledgements ride a DATA SEND ---------------- */

/* What a receiving node owes one peer, as vbi_ack_rides() and
 * vbi_ack_alone() read it. Times are the data path's nanoseconds
 * (vbi_now_ns(): the TSC where there is one), never the coarse clock: its
 * tick (4 ms on Debian's kernel) is longer than the 2 ms delay, so any tick
 * made an ACK owed for microseconds look due. */
struct vbi_ack_owed {
	bool streams;       /* a stream from the peer has an ACK to send */
	bool urgent;        /* one must go now: asked for (ACK_REQ, k-of-n), a
			     * lane switch, a NAK */
	bool reliable;      /* the lane delivers in order and loses nothing (RC):
			     * no retransmission timer waits for the ACK */
	uint32_t to_return; /* receive slots reposted and not yet returned */
	uint32_t nslots;    /* the lane's receive slots */
	uint64_t delivered; /* messages delivered since the last ACK went */
	uint64_t owed_ns;   /* when @streams became true */
	uint64_t last_rx_ns; /* when data last arrived from the peer */
	uint64_t delay_ms;  /* how long one may wait (VERBUS_ACK_DELAY_MS) */
};

/* An RC lane's ACKs ride every VBI_ACK_EVERY-th delivery, or once one has
 * been owed delay_ms (VERBUS_ACK_DELAY_MS, default VBI_ACK_DELAY_MS). */
#define VBI_ACK_EVERY 16u
#define VBI_ACK_DELAY_MS 2u
/* Deliveries left unacknowledged after which an ACK goes alone. */
#define VBI_ACK_ALONE_AFTER 256u

/*
 * Whether a DATA SEND going to the peer at @now_ns should carry
 * the ACKs and credits owed (piggybacked) or leave them for a later one.
 * Over UC/UD every SEND carries them (go-back-N and the publisher's RTO run
 * on them); over RC they are coalesced: they go when urgent, when an eighth
 * of the slots wait to be returned (the sender's credits), every
 * VBI_ACK_EVERY deliveries, or @o->delay_ms after one became owed. An
 * ACK on RC only releases the publisher's window, and each one a ping-pong
 * carried cost 40 bytes on the wire and a window release per message.
 * What is held back goes with a later SEND or on its own (the idle and
 * threshold rules of the progress round). Pure.
 */
bool vbi_ack_rides(const struct vbi_ack_owed *o, uint64_t now_ns);

/*
 * Whether the per-peer round at @now_ns should send what is owed alone (a
 * standalone ACK): when urgent, a quarter of the slots wait to be returned,
 * or VBI_ACK_ALONE_AFTER messages went unacknowledged; and, when the poll found nothing
 * (@idle), once an ACK has been owed @o->delay_ms, or credits wait and
 * nothing has arrived for that long. A lone credit is not returned on its
 * own: the SEND carrying it would take one of the peer's slots, which it
 * would return the same way. Pure.
 */
bool vbi_ack_alone(const struct vbi_ack_owed *o, bool idle, uint64_t now_ns);

/* ---- subscriber: per-stream sequence tracking -------------------------- */

enum vbi_rx_mode {
	VBI_RX_ORDERED, /* reliable below: a gap means "hold and ask again" */
	VBI_RX_FANOUT,  /* unreliable below: a gap is reported and skipped */
};

enum vbi_rx_verdict {
	VBI_RX_DELIVER,   /* next in order: deliver */
	VBI_RX_GAP,       /* FANOUT: *lost messages never came; deliver this one */
	VBI_RX_DUPLICATE, /* already delivered: drop */
	VBI_RX_AHEAD,     /* ORDERED: beyond the next expected; *lost are missing */
	VBI_RX_INVALID,   /* seq 0 or above VBI_SEQ_MAX: a peer's fault, drop */
};

/* The highest sequence number a stream accepts. Sequences start at 1 and
 * never reach 2^64 - 1 in practice; a peer announcing it would wrap the
 * next expected seq to 0 (everything after it taken for new messages:
 * duplicates delivered again, a gap of ~2^64 reported). */
#define VBI_SEQ_MAX (UINT64_MAX - 1)

struct vbi_rx_stats {
	uint64_t delivered, duplicates, gap_events, lost, ahead, sessions, invalid;
};

struct vbi_rxstream {
	enum vbi_rx_mode mode;
	bool started;
	uint32_t session;
	uint32_t epoch;     /* highest epoch seen in this session */
	uint64_t next;      /* next expected seq */
	struct vbi_rx_stats st;
};

void vbi_rx_init(struct vbi_rxstream *s, enum vbi_rx_mode mode);

/*
 * Classify message @seq of publisher session @session (epoch @epoch) and
 * advance the stream. A stream that has not started, or a new session,
 * starts at @seq: a late joiner begins with the next message it sees and
 * reports no gap for what came before it. *@lost (may be NULL) receives the
 * number of missing messages for GAP/AHEAD. AHEAD leaves the stream as is;
 * so does INVALID (@seq 0 or above VBI_SEQ_MAX, counted in st.invalid; it
 * starts no stream either).
 */
enum vbi_rx_verdict vbi_rx_accept(struct vbi_rxstream *s, uint32_t session, uint32_t epoch,
				  uint64_t seq, uint64_t *lost);

/*
 * FANOUT HEARTBEAT: the publisher's last message was @seq. When the stream
 * has started and has not seen @seq yet, everything from the next expected
 * message to @seq was lost: counted as one gap event, the stream moves past
 * @seq, and the number lost is returned; else 0 and nothing changes (also
 * for @seq above VBI_SEQ_MAX, counted in st.invalid).
 */
uint64_t vbi_rx_heartbeat(struct vbi_rxstream *s, uint64_t seq);

/* Would @seq be a duplicate? (no state change; lets a receiver skip
 * reassembling a retransmitted fragmented message) */
bool vbi_rx_is_duplicate(const struct vbi_rxstream *s, uint32_t session, uint64_t seq);

/* ---- fragment reassembly ------------------------------------------------ */

typedef void *(*vbi_reasm_alloc_fn)(size_t len, void *arg);
typedef void (*vbi_reasm_free_fn)(void *buf, void *arg);

struct vbi_reasm {
	bool active;
	uint32_t session;
	uint64_t seq;
	uint32_t msg_len, got;
	uint8_t *buf;
	vbi_reasm_alloc_fn alloc;
	vbi_reasm_free_fn free;
	void *arg;
	uint64_t completed, abandoned, stray; /* counters */
};

void vbi_reasm_init(struct vbi_reasm *r, vbi_reasm_alloc_fn alloc, vbi_reasm_free_fn free,
		    void *arg);
void vbi_reasm_fini(struct vbi_reasm *r);

/*
 * Feed one validated DATA fragment (not a whole FIRST|LAST message; those
 * need no reassembly). Returns 1 when the message is complete: *@msg gets
 * the buffer (msg_len bytes, the caller owns it and frees it with the free
 * callback); 0 when more fragments are needed; -EAGAIN when the alloc
 * callback refused (fragment dropped, nothing held); -EPROTO for a fragment
 * that does not continue the message being assembled (dropped and counted
 * as stray; a partial message it interrupts is abandoned).
 */
int vbi_reasm_push(struct vbi_reasm *r, const struct vbi_wire_hdr *h, const void *payload,
		   void **msg);

#endif
