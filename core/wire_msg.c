/* SPDX-License-Identifier: MIT */
#include "core/wire_msg.h"

#include <endian.h>
#include <string.h>

static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* ---- batch walk ------------------------------------------------------------ */

void vbi_wire_walk_init(struct vbi_wire_walk *w, const void *buf, uint32_t len, uint32_t max_msg)
{
	memset(w, 0, sizeof(*w));
	w->buf = buf;
	w->len = len;
	w->max_msg = max_msg;
}

void vbi_wire_walk_bctx(struct vbi_wire_walk *w, struct vbi_wire_bctx *bctx)
{
	w->bctx = bctx;
}

/* The walk stops at error @e: sticky, and the stream context is no longer
 * trusted (what a compact BATCH after this would continue is unknown). */
static int walk_fail(struct vbi_wire_walk *w, int e)
{
	if (w->bctx)
		w->bctx->next_seq = 0;
	return w->err = e;
}

/* The next record of the BATCH frame the walk is in (inlined in its three
 * callers: one runs per message). */
static inline __attribute__((always_inline)) int batch_next(struct vbi_wire_walk *w, struct vbi_wire_hdr *h, const uint8_t **pl)
{
	uint32_t rlen;
	size_t rs;

	if (w->rec_left < VBI_WIRE_REC_HDR)
		return walk_fail(w, -VBI_WE_RECORD);
	rlen = get32(w->rec);
	rs = vbi_wire_rec_size(rlen);
	/* the last record may omit its padding */
	if (rlen > w->rec_left - VBI_WIRE_REC_HDR ||
	    rlen > (w->max_msg && w->max_msg < VBI_WIRE_MAX_MSG ? w->max_msg : VBI_WIRE_MAX_MSG))
		return walk_fail(w, -VBI_WE_RECORD);
	*h = w->batch;
	h->type = VBI_WT_DATA;
	h->seq = w->batch.seq + w->rec_i;
	if (w->compact && (h->seq < w->batch.seq || h->seq == UINT64_MAX))
		return walk_fail(w, -VBI_WE_RECORD); /* a sequence past the last valid one */
	h->len = h->msg_len = rlen;
	h->frag_off = 0;
	*pl = w->rec + VBI_WIRE_REC_HDR;
	if (rs > w->rec_left)
		rs = w->rec_left;
	w->rec += rs;
	w->rec_left -= (uint32_t)rs;
	w->rec_i++;
	if (w->compact) { /* records to the end of the buffer */
		if (!w->rec_left)
			w->recs_left = 0;
		else if (w->rec_left < VBI_WIRE_REC_HDR)
			return walk_fail(w, -VBI_WE_RECORD);
	} else if (!--w->recs_left && w->rec_left >= VBI_WIRE_REC_HDR) {
		return walk_fail(w, -VBI_WE_RECORD); /* bytes left over: records do not fill it */
	}
	if (w->bctx)
		w->bctx->next_seq = h->seq + 1;
	w->from_batch = true;
	return 1;
}

/* A compact BATCH at w->off: it continues the stream context and runs to
 * the end of the buffer. */
static int compact_begin(struct vbi_wire_walk *w, struct vbi_wire_hdr *h, const uint8_t **pl)
{
	const uint8_t *p = w->buf + w->off;
	uint32_t avail = w->len - w->off;

	if (!w->bctx || !w->bctx->next_seq)
		return walk_fail(w, -VBI_WE_CONTEXT);
	if (avail < VBI_WIRE_CHDR_LEN + VBI_WIRE_REC_HDR)
		return walk_fail(w, -VBI_WE_TRUNCATED);
	if ((p[2] & ~(VBI_WF_ACK_REQ | VBI_WF_RETRANS)) || p[3])
		return walk_fail(w, -VBI_WE_FLAGS);
	w->batch = (struct vbi_wire_hdr){ .type = VBI_WT_BATCH,
					  .flags = (uint16_t)(VBI_WF_FIRST | VBI_WF_LAST | p[2]),
					  .session = w->bctx->session, .topic = w->bctx->topic,
					  .epoch = w->bctx->epoch, .seq = w->bctx->next_seq,
					  .len = avail - VBI_WIRE_CHDR_LEN };
	w->rec = p + VBI_WIRE_CHDR_LEN;
	w->rec_left = avail - VBI_WIRE_CHDR_LEN;
	w->recs_left = UINT32_MAX; /* until the end (batch_next) */
	w->rec_i = 0;
	w->compact = true;
	w->off = w->len;
	return batch_next(w, h, pl);
}

int vbi_wire_walk_next(struct vbi_wire_walk *w, struct vbi_wire_hdr *h, const uint8_t **pl)
{
	long r;

	if (w->err)
		return w->err;
	w->from_batch = false;
	if (w->recs_left)
		return batch_next(w, h, pl);
	if (w->off >= w->len)
		return 0;
	if (w->len - w->off >= 2 && get16(w->buf + w->off) == VBI_WIRE_CMAGIC)
		return compact_begin(w, h, pl);
	r = vbi_wire_parse(w->buf + w->off, w->len - w->off, w->max_msg, h);
	if (r < 0)
		return walk_fail(w, (int)r);
	*pl = w->buf + w->off + VBI_WIRE_HDR_LEN;
	w->off += (uint32_t)r;
	if (h->type == VBI_WT_BATCH) {
		w->batch = *h;
		w->rec = *pl;
		w->rec_left = h->len;
		w->recs_left = h->msg_len;
		w->rec_i = 0;
		w->compact = false;
		if (w->bctx)
			*w->bctx = (struct vbi_wire_bctx){ .session = h->session, .topic = h->topic,
							   .epoch = h->epoch, .next_seq = h->seq };
		return batch_next(w, h, pl);
	}
	return 1;
}

uint32_t vbi_wire_ud_frames(const void *slot, uint32_t byte_len, const uint8_t **frames)
{
	*frames = (const uint8_t *)slot + VBI_WIRE_UD_GRH;
	return byte_len > VBI_WIRE_UD_GRH ? byte_len - VBI_WIRE_UD_GRH : 0;
}

/* ---- HELLO ------------------------------------------------------------------ */

/* Payload offsets (docs/wire.md, HELLO versions 1-3 and the auth section). */
enum {
	HELLO_VERSION = 0, HELLO_UD_QPN = 4, HELLO_UD_QKEY = 8, HELLO_GID = 12,
	HELLO_SLOTS = 28, HELLO_SLOT_SIZE = 32, HELLO_MAX_MSG = 36, HELLO_NAME = 40,
	HELLO_UID = HELLO_NAME + VBI_WIRE_NAME_MAX, /* 72: the sender node's random id */
	HELLO_LANE = 80, HELLO_ROLE = 84, HELLO_SB_FAMILY = 88, HELLO_SB_PORT = 92,
	HELLO_SB_ADDR = 96, HELLO_MODE = 112, HELLO_UC_PORT = 116, HELLO_UD_PORT = 120,
};
_Static_assert(HELLO_UD_PORT + 4 == VBI_WIRE_HELLO_LEN, "HELLO layout");
_Static_assert(HELLO_NAME == VBI_WIRE_HELLO_NAME_OFF, "HELLO name offset");
_Static_assert(VBI_WIRE_HELLO_NONCE_OFF + VBI_WIRE_NONCE == VBI_WIRE_HELLO_LEN_AUTH,
	       "HELLO auth section");

int vbi_wire_hello_decode(const uint8_t *pl, uint32_t len, struct vbi_wire_hello *o)
{
	memset(o, 0, sizeof(*o));
	if (len < VBI_WIRE_HELLO_LEN || get32(pl + HELLO_VERSION) != VBI_WIRE_HELLO_VERSION)
		return VBI_WHELLO_BAD;
	o->version = get32(pl + HELLO_VERSION);
	o->ud_qpn = get32(pl + HELLO_UD_QPN);
	o->ud_qkey = get32(pl + HELLO_UD_QKEY);
	memcpy(o->gid, pl + HELLO_GID, 16);
	o->slots = get32(pl + HELLO_SLOTS);
	o->slot_size = get32(pl + HELLO_SLOT_SIZE);
	o->max_msg = get32(pl + HELLO_MAX_MSG);
	memcpy(o->name, pl + HELLO_NAME, VBI_WIRE_NAME_MAX);
	o->uid = get64(pl + HELLO_UID);
	o->lane = get32(pl + HELLO_LANE);
	o->role = get32(pl + HELLO_ROLE);
	o->sb_family = get32(pl + HELLO_SB_FAMILY);
	o->sb_port = get32(pl + HELLO_SB_PORT);
	memcpy(o->sb_addr, pl + HELLO_SB_ADDR, 16);
	o->mode = get32(pl + HELLO_MODE);
	o->uc_port = get32(pl + HELLO_UC_PORT);
	o->ud_port = get32(pl + HELLO_UD_PORT);
	if (len >= VBI_WIRE_HELLO_LEN_AUTH) {
		o->has_auth = true;
		o->auth_flags = get32(pl + VBI_WIRE_HELLO_AUTH_OFF);
		memcpy(o->nonce, pl + VBI_WIRE_HELLO_NONCE_OFF, VBI_WIRE_NONCE);
	}
	if (!o->slots || o->slots > (1u << 20) || o->slot_size < 1024 ||
	    o->slot_size > (1u << 20) || o->slot_size % 64 || o->role > VBI_WIRE_ROLE_MAX)
		return VBI_WHELLO_GEOMETRY;
	return VBI_WHELLO_OK;
}

void vbi_wire_hello_encode(const struct vbi_wire_hello *in, uint8_t *pl)
{
	memset(pl, 0, VBI_WIRE_HELLO_LEN_AUTH);
	vbi_wire_put_le32(pl + HELLO_VERSION, in->version);
	vbi_wire_put_le32(pl + HELLO_UD_QPN, in->ud_qpn);
	vbi_wire_put_le32(pl + HELLO_UD_QKEY, in->ud_qkey);
	memcpy(pl + HELLO_GID, in->gid, 16);
	vbi_wire_put_le32(pl + HELLO_SLOTS, in->slots);
	vbi_wire_put_le32(pl + HELLO_SLOT_SIZE, in->slot_size);
	vbi_wire_put_le32(pl + HELLO_MAX_MSG, in->max_msg);
	memcpy(pl + HELLO_NAME, in->name, strnlen(in->name, VBI_WIRE_NAME_MAX - 1));
	put64(pl + HELLO_UID, in->uid);
	vbi_wire_put_le32(pl + HELLO_LANE, in->lane);
	vbi_wire_put_le32(pl + HELLO_ROLE, in->role);
	vbi_wire_put_le32(pl + HELLO_SB_FAMILY, in->sb_family);
	vbi_wire_put_le32(pl + HELLO_SB_PORT, in->sb_port);
	memcpy(pl + HELLO_SB_ADDR, in->sb_addr, 16);
	vbi_wire_put_le32(pl + HELLO_MODE, in->mode);
	vbi_wire_put_le32(pl + HELLO_UC_PORT, in->uc_port);
	vbi_wire_put_le32(pl + HELLO_UD_PORT, in->ud_port);
	vbi_wire_put_le32(pl + VBI_WIRE_HELLO_AUTH_OFF, in->auth_flags);
	memcpy(pl + VBI_WIRE_HELLO_NONCE_OFF, in->nonce, VBI_WIRE_NONCE);
}

/* ---- SUB ---------------------------------------------------------------------- */

uint32_t vbi_topic_id(const char *name)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h ? h : 1;
}

int vbi_wire_sub_decode(const struct vbi_wire_hdr *h, const uint8_t *pl, struct vbi_wire_sub *o)
{
	o->name[0] = '\0';
	if (h->len < 2 || h->len > VBI_WIRE_TOPIC_MAX + 1 || pl[0] > VBI_WIRE_CLASS_FANOUT)
		return VBI_WSUB_MALFORMED;
	memcpy(o->name, pl + 1, h->len - 1);
	o->name[h->len - 1] = '\0';
	if (vbi_topic_id(o->name) != h->topic || strlen(o->name) != h->len - 1)
		return VBI_WSUB_TOPIC;
	o->cls = pl[0];
	o->topic = h->topic;
	o->mcast_group = o->cls == VBI_WIRE_CLASS_FANOUT ? h->epoch : 0;
	return VBI_WSUB_OK;
}

size_t vbi_wire_sub_encode(void *buf, uint32_t topic, uint32_t mcast_group, uint8_t cls,
			   const char *name, size_t nl)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_SUB, .topic = topic, .epoch = mcast_group,
				  .len = (uint32_t)(1 + nl) };
	uint8_t *p = buf;
	size_t sz = vbi_wire_frame_size(h.len);

	memset(p, 0, sz);
	vbi_wire_put(p, &h);
	p[VBI_WIRE_HDR_LEN] = cls;
	memcpy(p + VBI_WIRE_HDR_LEN + 1, name, nl);
	return sz;
}

/* ---- UDADDR --------------------------------------------------------------------- */

int vbi_wire_udaddr_decode(const struct vbi_wire_hdr *h, const uint8_t *pl,
			   struct vbi_wire_udaddr *o)
{
	if (h->len < VBI_WIRE_UDADDR_LEN)
		return -1;
	o->qpn = get32(pl);
	o->qkey = get32(pl + 4);
	memcpy(o->gid, pl + 8, 16);
	return 0;
}

uint32_t vbi_wire_udaddr_encode(void *buf, const struct vbi_wire_udaddr *a)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_UDADDR, .len = VBI_WIRE_UDADDR_LEN };
	uint8_t *pl = (uint8_t *)buf + VBI_WIRE_HDR_LEN;

	vbi_wire_put(buf, &h);
	vbi_wire_put_le32(pl, a->qpn);
	vbi_wire_put_le32(pl + 4, a->qkey);
	memcpy(pl + 8, a->gid, 16);
	return VBI_WIRE_HDR_LEN + VBI_WIRE_UDADDR_LEN;
}

/* ---- BYE -------------------------------------------------------------------------- */

uint32_t vbi_wire_bye_reason(const struct vbi_wire_hdr *h, const uint8_t *pl,
			     char out[VBI_WIRE_REFUSE_MAX + 1])
{
	uint32_t n = h->len < VBI_WIRE_REFUSE_MAX ? h->len : VBI_WIRE_REFUSE_MAX;

	for (uint32_t i = 0; i < n; i++)
		out[i] = pl[i] < 0x20 || pl[i] > 0x7e ? '?' : (char)pl[i];
	out[n] = '\0';
	return n;
}

uint32_t vbi_wire_bye_encode(void *buf, const char *why)
{
	uint32_t n = why ? (uint32_t)strnlen(why, VBI_WIRE_REFUSE_MAX) : 0;
	struct vbi_wire_hdr h = { .type = VBI_WT_BYE, .len = n };

	vbi_wire_put(buf, &h);
	if (n)
		memcpy((uint8_t *)buf + VBI_WIRE_HDR_LEN, why, n);
	return VBI_WIRE_HDR_LEN + n;
}

/* ---- END -------------------------------------------------------------------------- */

bool vbi_wire_end_ok(const struct vbi_wire_hdr *h)
{
	return h->session && h->frag_off == VBI_WIRE_END_SLOW;
}

/* ---- AUTH ------------------------------------------------------------------------- */

int vbi_wire_auth_decode(const struct vbi_wire_hdr *h, const uint8_t *pl, struct vbi_wire_auth *a)
{
	memset(a, 0, sizeof(*a));
	a->op = h->frag_off;
	switch (h->frag_off) {
	case VBI_WAUTH_PROOF:
		if (h->len < VBI_WIRE_NONCE + VBI_WIRE_AUTH_MAC)
			return -1;
		a->nonce = pl;
		a->mac = pl + VBI_WIRE_NONCE;
		if (h->msg_len >= 2 && h->msg_len <= (1u << 20))
			a->slots = h->msg_len;
		return 0;
	case VBI_WAUTH_ANSWER:
		if (h->len < VBI_WIRE_AUTH_MAC)
			return -1;
		a->mac = pl;
		return 0;
	case VBI_WAUTH_REFUSE:
		a->reason = h->seq;
		return 0;
	default:
		return -1;
	}
}

uint32_t vbi_wire_auth_encode(void *buf, uint32_t op, uint64_t reason, uint32_t slots,
			      const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_AUTH, .frag_off = op, .seq = reason,
				  .msg_len = slots, .len = alen + blen };
	uint8_t *p = buf;

	vbi_wire_put(p, &h);
	if (alen)
		memcpy(p + VBI_WIRE_HDR_LEN, a, alen);
	if (blen)
		memcpy(p + VBI_WIRE_HDR_LEN + alen, b, blen);
	return VBI_WIRE_HDR_LEN + alen + blen;
}

/* ---- LANE rules ------------------------------------------------------------------- */

int vbi_wire_lane_rule(struct vbi_wire_lanes *st, bool connector, bool probe, uint32_t lane_id,
		       const struct vbi_wire_hdr *h)
{
	int rc = VBI_WLANE_OK;

	if (h->seq > UINT32_MAX)
		return VBI_WLANE_WIDE;
	if (h->epoch <= st->epoch_rx)
		return VBI_WLANE_EPOCH;
	if (h->seq != lane_id) {
		/* only a promoted probe is renumbered, by the connector, to the
		 * number after every lane it had then: above the probe's own,
		 * and maybe below a lane built after it whose HELLO came first
		 * (another connection: no order between them) */
		if (connector || !probe)
			return VBI_WLANE_NAME;
		if (h->seq <= lane_id ||
		    h->seq > (uint64_t)st->max_lane_id + VBI_WIRE_LANE_ID_SLACK)
			return VBI_WLANE_RANGE;
		if (h->seq > st->max_lane_id)
			st->max_lane_id = (uint32_t)h->seq;
		rc = VBI_WLANE_RENUMBER;
	}
	st->epoch_rx = h->epoch;
	return rc;
}

bool vbi_wire_lane_new_ok(const struct vbi_wire_lanes *st, uint32_t id, uint32_t role)
{
	if (role == 0)
		return id == 1;
	return id > st->max_lane_id && id - st->max_lane_id <= VBI_WIRE_LANE_ID_SLACK;
}

/* ---- credits ------------------------------------------------------------------------ */

int vbi_wire_credit_return(uint64_t *returned, uint64_t sends, uint32_t n, bool reliable)
{
	if (*returned + n > sends) {
		if (reliable)
			return -1;
		/* after a credit resync (lost datagrams assumed): late returns only refill */
		*returned = sends;
		return 1;
	}
	*returned += n;
	return 0;
}
