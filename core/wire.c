/* SPDX-License-Identifier: MIT */
#include "core/wire.h"

#include <endian.h>
#include <string.h>

static const char *const err_names[VBI_WE__COUNT] = {
	[VBI_WE_OK] = "ok",
	[VBI_WE_TRUNCATED] = "truncated",
	[VBI_WE_MAGIC] = "bad magic",
	[VBI_WE_VERSION] = "unsupported version",
	[VBI_WE_TYPE] = "unknown frame type",
	[VBI_WE_FLAGS] = "unknown flags or reserved bits set",
	[VBI_WE_OVERSIZED] = "message length above limit",
	[VBI_WE_FRAGMENT] = "inconsistent fragment fields",
	[VBI_WE_RECORD] = "BATCH record does not fit its frame",
	[VBI_WE_CONTEXT] = "compact BATCH with no stream before it on the connection",
};

const char *vbi_wire_err_name(enum vbi_wire_err e)
{
	if ((unsigned)e >= VBI_WE__COUNT)
		return "?";
	return err_names[e];
}

static void put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* Offsets (docs/wire.md). */
enum {
	OFF_MAGIC = 0, OFF_VERSION = 2, OFF_TYPE = 3, OFF_FLAGS = 4, OFF_RSVD = 6,
	OFF_SESSION = 8, OFF_TOPIC = 12, OFF_EPOCH = 16, OFF_LEN = 20, OFF_SEQ = 24,
	OFF_FRAG_OFF = 32, OFF_MSG_LEN = 36,
};
_Static_assert(OFF_MSG_LEN + 4 == VBI_WIRE_HDR_LEN, "header layout");

void vbi_wire_put(void *buf, const struct vbi_wire_hdr *h)
{
	uint8_t *p = buf;

	put16(p + OFF_MAGIC, VBI_WIRE_MAGIC);
	p[OFF_VERSION] = VBI_WIRE_VERSION;
	p[OFF_TYPE] = h->type;
	put16(p + OFF_FLAGS, h->flags);
	put16(p + OFF_RSVD, 0);
	vbi_wire_put_le32(p + OFF_SESSION, h->session);
	vbi_wire_put_le32(p + OFF_TOPIC, h->topic);
	vbi_wire_put_le32(p + OFF_EPOCH, h->epoch);
	vbi_wire_put_le32(p + OFF_LEN, h->len);
	put64(p + OFF_SEQ, h->seq);
	vbi_wire_put_le32(p + OFF_FRAG_OFF, h->frag_off);
	vbi_wire_put_le32(p + OFF_MSG_LEN, h->msg_len);
}

void vbi_wire_cput(void *buf, uint16_t flags)
{
	uint8_t *p = buf;

	put16(p, VBI_WIRE_CMAGIC);
	p[2] = (uint8_t)(flags & (VBI_WF_ACK_REQ | VBI_WF_RETRANS));
	p[3] = 0;
}

long vbi_wire_parse(const void *buf, size_t avail, uint32_t max_msg, struct vbi_wire_hdr *h)
{
	const uint8_t *p = buf;
	size_t need;

	if (!max_msg || max_msg > VBI_WIRE_MAX_MSG)
		max_msg = VBI_WIRE_MAX_MSG;
	if (avail < VBI_WIRE_HDR_LEN)
		return -VBI_WE_TRUNCATED;
	if (get16(p + OFF_MAGIC) != VBI_WIRE_MAGIC)
		return -VBI_WE_MAGIC;
	if (p[OFF_VERSION] != VBI_WIRE_VERSION)
		return -VBI_WE_VERSION;
	h->type = p[OFF_TYPE];
	if (h->type < VBI_WT_DATA || h->type > VBI_WT__MAX)
		return -VBI_WE_TYPE;
	h->flags = get16(p + OFF_FLAGS);
	if ((h->flags & ~VBI_WF__ALL) || get16(p + OFF_RSVD))
		return -VBI_WE_FLAGS;
	h->session = get32(p + OFF_SESSION);
	h->topic = get32(p + OFF_TOPIC);
	h->epoch = get32(p + OFF_EPOCH);
	h->len = get32(p + OFF_LEN);
	h->seq = get64(p + OFF_SEQ);
	h->frag_off = get32(p + OFF_FRAG_OFF);
	h->msg_len = get32(p + OFF_MSG_LEN);

	/* len is bounded by what arrived before it is used for anything. */
	if (h->len > avail - VBI_WIRE_HDR_LEN)
		return -VBI_WE_TRUNCATED;
	if (h->type == VBI_WT_DATA) {
		if (h->msg_len > max_msg)
			return -VBI_WE_OVERSIZED;
		if (h->frag_off > h->msg_len || h->len > h->msg_len - h->frag_off)
			return -VBI_WE_FRAGMENT;
		if (!!(h->flags & VBI_WF_FIRST) != (h->frag_off == 0))
			return -VBI_WE_FRAGMENT;
		if (!!(h->flags & VBI_WF_LAST) != (h->frag_off + h->len == h->msg_len))
			return -VBI_WE_FRAGMENT;
		/* A non-final fragment must carry data (no zero-length loops). */
		if (!(h->flags & VBI_WF_LAST) && h->len == 0)
			return -VBI_WE_FRAGMENT;
		if (h->seq == 0)
			return -VBI_WE_FRAGMENT;
	} else if (h->type == VBI_WT_BATCH) {
		/* whole messages only; at least one, each taking 4 bytes at
		 * least; the last one's seq is a valid one (below 2^64 - 1) */
		if ((h->flags & (VBI_WF_FIRST | VBI_WF_LAST)) != (VBI_WF_FIRST | VBI_WF_LAST) ||
		    h->frag_off || !h->msg_len || h->seq == 0 ||
		    h->len / VBI_WIRE_REC_HDR < h->msg_len ||
		    h->seq + (h->msg_len - 1) < h->seq || h->seq + (h->msg_len - 1) == UINT64_MAX)
			return -VBI_WE_FRAGMENT;
	} else if (h->flags & (VBI_WF_FIRST | VBI_WF_LAST)) {
		return -VBI_WE_FLAGS;
	}
	need = vbi_wire_frame_size(h->len);
	return (long)(need <= avail ? need : avail);
}
