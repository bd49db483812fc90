/* SPDX-License-Identifier: MIT */
/*
 * verbus wire format, version 3 (documented in docs/wire.md).
 *
 * A SEND (RC/UC) or datagram (UD) carries one or more frames back to back;
 * each frame is a 40-byte little-endian header followed by `len` payload
 * bytes, padded to a multiple of 8. Every field read from the wire is
 * validated by vbi_wire_parse() before anything trusts it.
 *
 * Thread-safety: all functions are pure (no shared state); any thread may
 * call them concurrently on different buffers.
 */
#ifndef VERBUS_CORE_WIRE_H
#define VERBUS_CORE_WIRE_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define VBI_WIRE_MAGIC 0x5642u /* "BV" on the wire (little-endian "VB") */
#define VBI_WIRE_VERSION 3u /* 2: BATCH frames; 3: compact BATCH frames (RC) */
#define VBI_WIRE_HDR_LEN 40u
#define VBI_WIRE_ALIGN 8u
/* Hard upper bound on a message a peer may announce (msg_len). */
#define VBI_WIRE_MAX_MSG (64u << 20)

enum vbi_wire_type {
	VBI_WT_DATA = 1,      /* payload (a whole message or one fragment) */
	VBI_WT_ACK = 2,       /* seq = cumulative ack; frag_off = credits granted */
	VBI_WT_NAK = 3,       /* seq = first missing; msg_len = how many missing */
	VBI_WT_HELLO = 4,     /* session/epoch announcement; payload = attributes */
	VBI_WT_HEARTBEAT = 5, /* seq = last sent (lets receivers see tail loss) */
	VBI_WT_SUB = 6,       /* subscribe: topic id; payload = class byte + name */
	VBI_WT_UNSUB = 7,     /* unsubscribe: topic id */
	VBI_WT_BYE = 8,       /* the sender closes this connection on purpose */
	VBI_WT_LANE = 9,      /* the sender now transmits on the connection this
			       * frame arrived on (failover): switch to it too */
	VBI_WT_UDADDR = 10,   /* the sender's UD endpoint (FANOUT) moved to another
			       * device: payload = qpn, qkey (le32), gid[16] */
	VBI_WT_END = 11,      /* the publisher cut our ORDERED stream (session,
			       * topic): seq = last message it sent us,
			       * frag_off = reason (1: slow subscriber) */
	VBI_WT_AUTH = 12,     /* peer authentication in the handshake:
			       * frag_off = op (0 proof, 1 answer, 2 refusal,
			       * seq = reason); docs/wire.md */
	VBI_WT_BATCH = 13,    /* consecutive whole DATA messages of one stream in
			       * one frame: seq = the first one's, msg_len =
			       * how many, len = bytes of the records that
			       * follow, each [le32 length | payload | pad to
			       * 4] (docs/wire.md "BATCH") */
	VBI_WT__MAX = 13,
};

enum vbi_wire_flags {
	VBI_WF_FIRST = 1 << 0,   /* first fragment (or whole message) */
	VBI_WF_LAST = 1 << 1,    /* last fragment (or whole message) */
	VBI_WF_ACK_REQ = 1 << 2, /* publisher asks for a delivery ack */
	VBI_WF_RETRANS = 1 << 3, /* a retransmission (after failover or NAK) */
	VBI_WF__ALL = 0xf,
};

/* Host-order view of a frame header. */
struct vbi_wire_hdr {
	uint8_t type;
	uint16_t flags;
	uint32_t session; /* publisher instance id; a new one starts a new stream */
	uint32_t topic;
	uint32_t epoch;   /* path epoch: bumps on failover; seq continues */
	uint32_t len;     /* payload bytes in this frame */
	uint64_t seq;     /* per (session, topic) message sequence, from 1 */
	uint32_t frag_off;
	uint32_t msg_len; /* whole message length */
};

/* Why a frame was refused (index into per-reason drop counters). */
enum vbi_wire_err {
	VBI_WE_OK = 0,
	VBI_WE_TRUNCATED,  /* fewer bytes than a header, or than header + len */
	VBI_WE_MAGIC,
	VBI_WE_VERSION,
	VBI_WE_TYPE,
	VBI_WE_FLAGS,      /* unknown flag bits or non-zero reserved field */
	VBI_WE_OVERSIZED,  /* msg_len above the limit */
	VBI_WE_FRAGMENT,   /* frag_off/len/msg_len/FIRST/LAST inconsistent */
	VBI_WE_RECORD,     /* a BATCH record runs past its frame, is above the
			    * limit, or the records do not fill the frame */
	VBI_WE_CONTEXT,    /* a compact BATCH frame where no stream context
			    * holds (not on RC, or no BATCH before it) */
	VBI_WE__COUNT
};

const char *vbi_wire_err_name(enum vbi_wire_err e);

/* Bytes a frame with @len payload bytes occupies (header + padded payload). */
static inline size_t vbi_wire_frame_size(uint32_t len)
{
	return VBI_WIRE_HDR_LEN + (((size_t)len + VBI_WIRE_ALIGN - 1) & ~(size_t)(VBI_WIRE_ALIGN - 1));
}

/* BATCH records: a 4-byte length, the payload, zero padding to 4. */
#define VBI_WIRE_REC_HDR 4u
static inline size_t vbi_wire_rec_size(uint32_t len)
{
	return VBI_WIRE_REC_HDR + (((size_t)len + 3) & ~(size_t)3);
}

/*
 * Compact BATCH frame (version 3, RC connections only; docs/wire.md): a
 * 4-byte header -- u16 magic VBI_WIRE_CMAGIC, u8 flags (ACK_REQ, RETRANS;
 * FIRST|LAST implied), u8 reserved 0 -- then records as in BATCH, to the
 * end of the SEND (it is always the SEND's last frame). Its messages
 * continue the stream of the BATCH or compact BATCH before it on the same
 * connection: that one's session, topic and epoch, the sequence after its
 * last. A 64-byte message then costs 72 bytes on the wire instead of 108.
 */
#define VBI_WIRE_CMAGIC 0x5643u /* "CV" on the wire */
#define VBI_WIRE_CHDR_LEN 4u

/* The stream a compact BATCH continues: the last BATCH or compact BATCH
 * sent (or received) on one RC connection. Zeroed: none yet. Owned by
 * whoever sends on (receives from) that connection, one thread at a time. */
struct vbi_wire_bctx {
	uint32_t session, topic, epoch;
	uint64_t next_seq; /* the sequence a continuation starts with; 0: none */
};

/* Write the compact BATCH header with @flags (ACK_REQ, RETRANS) at @buf. */
void vbi_wire_cput(void *buf, uint16_t flags);

/* @v little-endian at @p (any alignment): the 32-bit fields of verbus's
 * frames (headers, records, HELLO, the UD address, auth). */
static inline void vbi_wire_put_le32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

/* Write one record of @len bytes at @dst (payload from @payload, which is
 * either where the record's payload goes, dst + VBI_WIRE_REC_HDR, or does
 * not overlap it) and return its size (vbi_wire_rec_size). Inline: one
 * per message, and under TCG a call costs more than this does. */
static inline size_t vbi_wire_rec_put(uint8_t *dst, const void *payload, uint32_t len)
{
	size_t n = vbi_wire_rec_size(len), pad = n - VBI_WIRE_REC_HDR - len; /* 0..3 */
	uint8_t *z = dst + VBI_WIRE_REC_HDR + len;

	vbi_wire_put_le32(dst, len);
	if (payload != dst + VBI_WIRE_REC_HDR) /* in place: nothing to copy */
		memcpy(dst + VBI_WIRE_REC_HDR, payload, len);
	/* the padding byte by byte: a memset() is a call */
	if (pad > 0)
		z[0] = 0;
	if (pad > 1)
		z[1] = 0;
	if (pad > 2)
		z[2] = 0;
	return n;
}

/* Encode @h into the first VBI_WIRE_HDR_LEN bytes of @buf (payload not
 * touched). @buf must have room for the header. */
void vbi_wire_put(void *buf, const struct vbi_wire_hdr *h);

/*
 * Parse and validate the frame at @buf with @avail bytes available (the rest
 * of a received SEND). @max_msg bounds msg_len (0: VBI_WIRE_MAX_MSG).
 * Returns the frame's size (>= VBI_WIRE_HDR_LEN; the next frame starts
 * there) and fills @h; or a negative enum vbi_wire_err value (never trusts
 * a field before checking it). The payload is at buf + VBI_WIRE_HDR_LEN.
 * The final frame of a buffer may omit its padding.
 */
long vbi_wire_parse(const void *buf, size_t avail, uint32_t max_msg, struct vbi_wire_hdr *h);

#endif
