/* SPDX-License-Identifier: MIT */
/*
 * Receive-side parsing of what a peer sends, above the frame header
 * (core/wire.h): the batch walk over a SEND or a UD datagram, the payload
 * codecs of the control frames (HELLO, SUB, UDADDR, BYE reason, AUTH), and
 * the pure protocol rules the library applies to them (LANE numbering and
 * epochs, credit returns). docs/wire.md describes every format and rule.
 *
 * These are the functions proto calls on received bytes (peer_frames.c,
 * lane_hello.c, lane.c, ud.c, auth.c, sub.c) and the encoders it sends
 * with; tests/fuzz feeds them the same way. Nothing here touches verbs objects or api/ state.
 *
 * Thread-safety: every function is pure (no shared state, no allocation);
 * any thread may call them concurrently on different buffers / structs.
 * Ownership: pointers into a received buffer (payloads, nonces, MACs) are
 * borrowed and valid as long as that buffer is.
 */
#ifndef VERBUS_CORE_WIRE_MSG_H
#define VERBUS_CORE_WIRE_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "core/wire.h"

/* ---- batch walk ------------------------------------------------------------ */

#define VBI_WIRE_UD_GRH 40u /* a UD receive starts with the 40-byte GRH */

struct vbi_wire_walk {
	const uint8_t *buf;
	uint32_t len;
	uint32_t off;     /* offset of the next frame; of the bad one after an error */
	uint32_t max_msg; /* vbi_wire_parse's limit (0: VBI_WIRE_MAX_MSG) */
	int err;          /* sticky: the error that stopped the walk (0: none) */
	/* inside a BATCH frame (off is past it already): its header, the next
	 * record, the bytes and records left */
	struct vbi_wire_hdr batch;
	const uint8_t *rec;
	uint32_t rec_left, recs_left, rec_i;
	bool from_batch;  /* the frame just returned is a BATCH record */
	bool compact;     /* the BATCH being walked is a compact one */
	struct vbi_wire_bctx *bctx; /* the connection's stream context, or NULL */
};

/* Walk the @len bytes at @buf (borrowed, not copied). */
void vbi_wire_walk_init(struct vbi_wire_walk *w, const void *buf, uint32_t len,
			uint32_t max_msg);

/* Walk with @bctx, the stream context of the RC connection the bytes came
 * from (borrowed; the caller owns it across the connection's SENDs, in
 * their order): every BATCH and compact BATCH record walked sets it, a
 * compact BATCH continues it, a walk error clears it. Without one (UC,
 * UD, or not called) a compact BATCH is refused (VBI_WE_CONTEXT). */
void vbi_wire_walk_bctx(struct vbi_wire_walk *w, struct vbi_wire_bctx *bctx);

/*
 * The next frame: returns 1 and fills *@h and *@pl (its payload: h->len
 * bytes, all inside the buffer), w->off then points past the frame; 0 at
 * the end of the buffer; or a negative enum vbi_wire_err for a frame that
 * does not parse (w->off stays at it, and every later call returns the same
 * error: frame boundaries after a bad header cannot be trusted).
 * A BATCH frame is returned as its records, one call each, every one as the
 * DATA frame of a whole message (type DATA, FIRST|LAST and the batch's
 * other flags, the batch's session, topic and epoch, seq = the batch's seq
 * + its index, len = msg_len = the record's length), with w->from_batch
 * set; a bad record is the batch's error (VBI_WE_RECORD) and w->off stays
 * past the batch, which ends the walk like any other error. A compact
 * BATCH (w->compact) is returned the same way, its w->batch filled from
 * the stream context (msg_len 0: its count is the records to the end).
 */
int vbi_wire_walk_next(struct vbi_wire_walk *w, struct vbi_wire_hdr *h, const uint8_t **pl);

/* True when vbi_wire_walk_next() would return 0 (the end, no error): inline,
 * so the end of a buffer costs no call. */
static inline bool vbi_wire_walk_done(const struct vbi_wire_walk *w)
{
	return !w->err && !w->recs_left && w->off >= w->len;
}

/* The frames of a UD receive of @byte_len bytes at @slot: *@frames gets
 * slot + VBI_WIRE_UD_GRH; returns their length (0: nothing after the GRH,
 * an empty datagram). */
uint32_t vbi_wire_ud_frames(const void *slot, uint32_t byte_len, const uint8_t **frames);

/* ---- HELLO ------------------------------------------------------------------ */

#define VBI_WIRE_HELLO_VERSION 3   /* versions must match (docs/wire.md) */
#define VBI_WIRE_HELLO_LEN 124     /* version 3 without the authentication section */
#define VBI_WIRE_HELLO_LEN_AUTH 160
#define VBI_WIRE_HELLO_AUTH_OFF 124
#define VBI_WIRE_HELLO_NONCE_OFF 128
#define VBI_WIRE_HELLO_NAME_OFF 40
#define VBI_WIRE_NAME_MAX 32
#define VBI_WIRE_NONCE 32
#define VBI_WIRE_ROLE_MAX 3        /* roles 0 primary .. 3 probe */

/* Host-order view of a HELLO payload. */
struct vbi_wire_hello {
	uint32_t version, ud_qpn, ud_qkey;
	uint8_t gid[16];
	uint32_t slots, slot_size, max_msg;
	char name[VBI_WIRE_NAME_MAX]; /* as on the wire: NUL-padded, maybe unterminated */
	uint64_t uid;
	uint32_t lane, role;
	uint32_t sb_family, sb_port; /* standby listener: family 0/4/6, port */
	uint8_t sb_addr[16];
	uint32_t mode, uc_port, ud_port;
	bool has_auth;               /* the payload had the authentication section */
	uint32_t auth_flags;         /* bit0: the sender has a key (0 without the section) */
	uint8_t nonce[VBI_WIRE_NONCE];
};

enum vbi_wire_hello_rc {
	VBI_WHELLO_OK = 0,
	VBI_WHELLO_BAD = -1,      /* too short or another version: dropped (counted) */
	VBI_WHELLO_GEOMETRY = -2, /* impossible slot geometry or role: the lane closes */
};

/*
 * Decode the HELLO payload @pl of @len bytes (the frame's h->len) into *@o.
 * Returns an enum vbi_wire_hello_rc; on VBI_WHELLO_BAD nothing of *@o is
 * meaningful, on VBI_WHELLO_GEOMETRY every field is filled.
 */
int vbi_wire_hello_decode(const uint8_t *pl, uint32_t len, struct vbi_wire_hello *o);

/* Encode *@in as a VBI_WIRE_HELLO_LEN_AUTH-byte payload at @pl (the version
 * field is written as in->version; the name is copied up to its first NUL,
 * at most VBI_WIRE_NAME_MAX - 1 bytes; unused bytes are zero). */
void vbi_wire_hello_encode(const struct vbi_wire_hello *in, uint8_t *pl);

/* ---- SUB / UNSUB -------------------------------------------------------------- */

#define VBI_WIRE_TOPIC_MAX 63
#define VBI_WIRE_CLASS_ORDERED 0
#define VBI_WIRE_CLASS_FANOUT 1

/* The topic id of @name (FNV-1a, never 0). */
uint32_t vbi_topic_id(const char *name);

struct vbi_wire_sub {
	uint8_t cls;          /* VBI_WIRE_CLASS_* */
	uint32_t topic;
	uint32_t mcast_group; /* FANOUT: the subscriber's group (h->epoch); else 0 */
	char name[VBI_WIRE_TOPIC_MAX + 1]; /* NUL-terminated */
};

enum vbi_wire_sub_rc {
	VBI_WSUB_OK = 0,
	VBI_WSUB_MALFORMED = -1, /* length or class out of range */
	VBI_WSUB_TOPIC = -2,     /* the name has a NUL, or its id is not h->topic */
};

/* Decode the payload of SUB frame @h at @pl. Returns an enum vbi_wire_sub_rc. */
int vbi_wire_sub_decode(const struct vbi_wire_hdr *h, const uint8_t *pl, struct vbi_wire_sub *o);

/* Encode a SUB frame for topic @name (@nl bytes, 1..VBI_WIRE_TOPIC_MAX) of
 * class @cls at @buf, header and zero padding included; @buf needs
 * vbi_wire_frame_size(1 + nl) bytes, which is what is returned. */
size_t vbi_wire_sub_encode(void *buf, uint32_t topic, uint32_t mcast_group, uint8_t cls,
			   const char *name, size_t nl);

/* ---- UDADDR --------------------------------------------------------------------- */

#define VBI_WIRE_UDADDR_LEN 24

struct vbi_wire_udaddr {
	uint32_t qpn, qkey;
	uint8_t gid[16];
};

/* Decode UDADDR frame @h's payload: 0, or -1 when it is shorter than
 * VBI_WIRE_UDADDR_LEN (ignored by the receiver). */
int vbi_wire_udaddr_decode(const struct vbi_wire_hdr *h, const uint8_t *pl,
			   struct vbi_wire_udaddr *o);

/* Encode a UDADDR frame at @buf (VBI_WIRE_HDR_LEN + VBI_WIRE_UDADDR_LEN bytes,
 * returned). */
uint32_t vbi_wire_udaddr_encode(void *buf, const struct vbi_wire_udaddr *a);

/* ---- BYE (refusal reason) ------------------------------------------------------ */

#define VBI_WIRE_REFUSE_MAX 128

/* The reason a refusal BYE @h carries, into @out: at most VBI_WIRE_REFUSE_MAX
 * bytes of the payload, every byte outside printable ASCII replaced by '?',
 * NUL-terminated. Returns its length (0: no reason given). */
uint32_t vbi_wire_bye_reason(const struct vbi_wire_hdr *h, const uint8_t *pl,
			     char out[VBI_WIRE_REFUSE_MAX + 1]);

/* Encode a BYE frame carrying @why (at most VBI_WIRE_REFUSE_MAX bytes of it)
 * at @buf (room for VBI_WIRE_HDR_LEN + VBI_WIRE_REFUSE_MAX). Returns the
 * frame's length (header + reason, unpadded: it is sent alone). */
uint32_t vbi_wire_bye_encode(void *buf, const char *why);

/* ---- END ---------------------------------------------------------------------- */

#define VBI_WIRE_END_SLOW 1 /* reason: the subscriber acknowledged nothing for slow_sub_ms */

/* Whether END frame @h is well-formed: a publisher session and a known
 * reason (frag_off); vbi_sub_on_end refuses the others as malformed. */
bool vbi_wire_end_ok(const struct vbi_wire_hdr *h);

/* ---- AUTH ------------------------------------------------------------------------ */

#define VBI_WIRE_AUTH_MAC 32
enum vbi_wire_auth_op { VBI_WAUTH_PROOF = 0, VBI_WAUTH_ANSWER = 1, VBI_WAUTH_REFUSE = 2 };

struct vbi_wire_auth {
	uint32_t op;          /* enum vbi_wire_auth_op */
	const uint8_t *nonce; /* PROOF: the acceptor's nonce (VBI_WIRE_NONCE bytes) */
	const uint8_t *mac;   /* PROOF, ANSWER: VBI_WIRE_AUTH_MAC bytes */
	uint32_t slots;       /* PROOF: the sender's receive slots, 0 when out of 2..2^20 */
	uint64_t reason;      /* REFUSE: h->seq */
};

/* Decode AUTH frame @h (payload @pl, borrowed). Returns 0 when the frame
 * is well-formed for its op (PROOF: >= 64 bytes, ANSWER: >= 32, REFUSE:
 * any), -1 for a short payload or an unknown op (dropped as unexpected). */
int vbi_wire_auth_decode(const struct vbi_wire_hdr *h, const uint8_t *pl,
			 struct vbi_wire_auth *a);

/* Encode an AUTH frame (op, seq = @reason, msg_len = @slots, payload @a
 * then @b) at @buf (room for VBI_WIRE_HDR_LEN + alen + blen). Returns its
 * length. */
uint32_t vbi_wire_auth_encode(void *buf, uint32_t op, uint64_t reason, uint32_t slots,
			      const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen);

/* ---- LANE rules (docs/wire.md "Rules") ---------------------------------------- */

#define VBI_WIRE_LANE_ID_SLACK 64u

/* What a receiver remembers of a peer's lanes. */
struct vbi_wire_lanes {
	uint32_t max_lane_id; /* accepting side: highest lane number announced */
	uint32_t epoch_rx;    /* highest epoch of the LANE frames accepted */
};

enum vbi_wire_lane_rc {
	VBI_WLANE_OK = 0,        /* accepted; st->epoch_rx moved to h->epoch */
	VBI_WLANE_RENUMBER = 1,  /* accepted: a promoted probe, renumbered to h->seq
				  * (st->max_lane_id raised to it if below) */
	VBI_WLANE_WIDE = -1,     /* lane number beyond 32 bits */
	VBI_WLANE_EPOCH = -2,    /* epoch not after st->epoch_rx */
	VBI_WLANE_NAME = -3,     /* names another lane, and this is no promoted probe */
	VBI_WLANE_RANGE = -4,    /* renumbering outside lane_id + 1 .. max_lane_id
				  * + SLACK */
};

/*
 * The LANE frame @h arrived on lane number @lane_id (whose role is PROBE
 * when @probe); @connector: this end connected. On acceptance *@st is
 * updated; on refusal (negative) nothing changes.
 */
int vbi_wire_lane_rule(struct vbi_wire_lanes *st, bool connector, bool probe, uint32_t lane_id,
		       const struct vbi_wire_hdr *h);

/* A new lane's HELLO (accepting side): role PRIMARY (0) must be lane 1, any
 * other role a number above st->max_lane_id by at most the slack. */
bool vbi_wire_lane_new_ok(const struct vbi_wire_lanes *st, uint32_t id, uint32_t role);

/* ---- credits (ACK frag_off) ------------------------------------------------------ */

/*
 * An ACK returns @n receive credits of a lane that posted @sends SENDs, of
 * which *@returned came back already. Returns 0 (accepted, *@returned += n);
 * 1 on an unreliable lane when that is more than were used (after a credit
 * resync: *@returned = @sends); -1 on a reliable lane (a protocol error,
 * nothing changes). *@returned never exceeds @sends when it did not before.
 */
int vbi_wire_credit_return(uint64_t *returned, uint64_t sends, uint32_t n, bool reliable);

#endif
