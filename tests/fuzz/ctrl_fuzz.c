/* SPDX-License-Identifier: MIT */
/*
 * UDADDR, BYE (refusal reason), AUTH and END frames of a received SEND,
 * through vbi_wire_udaddr_decode (vbi_peer_on_udaddr), vbi_wire_bye_reason
 * (vbi_dispatch_frames' refusal), vbi_wire_auth_decode
 * (vbi_hello_auth_on_frame) and vbi_wire_end_ok (vbi_sub_on_end). Checks:
 * what is borrowed lies inside the payload; the reason is printable, NUL-terminated, at most 128 bytes; each
 * re-encodes (the library's encoders) to a frame that decodes the same.
 */
#include <string.h>

#include "fuzz.h"

static void udaddr(const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	uint8_t buf[VBI_WIRE_HDR_LEN + VBI_WIRE_UDADDR_LEN];
	struct vbi_wire_udaddr a, b;
	struct vbi_wire_hdr h2;

	if (vbi_wire_udaddr_decode(h, pl, &a)) {
		FUZZ_CHECK(h->len < VBI_WIRE_UDADDR_LEN);
		return;
	}
	FUZZ_CHECK(vbi_wire_udaddr_encode(buf, &a) == sizeof(buf));
	FUZZ_CHECK(vbi_wire_parse(buf, sizeof(buf), 0, &h2) == (long)sizeof(buf));
	FUZZ_CHECK(vbi_wire_udaddr_decode(&h2, buf + VBI_WIRE_HDR_LEN, &b) == 0);
	FUZZ_CHECK(a.qpn == b.qpn && a.qkey == b.qkey && !memcmp(a.gid, b.gid, 16));
	FUZZ_CHECK(!memcmp(pl, buf + VBI_WIRE_HDR_LEN, VBI_WIRE_UDADDR_LEN));
}

static void bye(const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	char why[VBI_WIRE_REFUSE_MAX + 1];
	uint8_t buf[VBI_WIRE_HDR_LEN + VBI_WIRE_REFUSE_MAX];
	struct vbi_wire_hdr h2;
	uint32_t n = vbi_wire_bye_reason(h, pl, why), m;

	FUZZ_CHECK(n == (h->len < VBI_WIRE_REFUSE_MAX ? h->len : VBI_WIRE_REFUSE_MAX));
	FUZZ_CHECK(why[n] == '\0');
	for (uint32_t i = 0; i < n; i++)
		FUZZ_CHECK(why[i] >= 0x20 && why[i] <= 0x7e);
	/* what vbi_lane_refuse sends: it parses, and reads back the same */
	m = vbi_wire_bye_encode(buf, why);
	FUZZ_CHECK(m == VBI_WIRE_HDR_LEN + n);
	FUZZ_CHECK(vbi_wire_parse(buf, m, 0, &h2) == (long)m && h2.type == VBI_WT_BYE);
	{
		char again[VBI_WIRE_REFUSE_MAX + 1];

		FUZZ_CHECK(vbi_wire_bye_reason(&h2, buf + VBI_WIRE_HDR_LEN, again) == n);
		FUZZ_CHECK(!strcmp(again, why));
	}
}

static void auth(const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	struct vbi_wire_auth a, b;
	uint8_t buf[VBI_WIRE_HDR_LEN + VBI_WIRE_NONCE + VBI_WIRE_AUTH_MAC];
	struct vbi_wire_hdr h2;
	uint32_t n;

	if (vbi_wire_auth_decode(h, pl, &a)) {
		FUZZ_CHECK(h->frag_off > VBI_WAUTH_REFUSE ||
			   (h->frag_off == VBI_WAUTH_PROOF &&
			    h->len < VBI_WIRE_NONCE + VBI_WIRE_AUTH_MAC) ||
			   (h->frag_off == VBI_WAUTH_ANSWER && h->len < VBI_WIRE_AUTH_MAC));
		return;
	}
	FUZZ_CHECK(a.op == h->frag_off);
	switch (a.op) {
	case VBI_WAUTH_PROOF:
		FUZZ_CHECK(a.nonce == pl && a.mac == pl + VBI_WIRE_NONCE);
		FUZZ_CHECK(a.slots == 0 || (a.slots >= 2 && a.slots <= (1u << 20)));
		n = vbi_wire_auth_encode(buf, a.op, 0, a.slots, a.nonce, VBI_WIRE_NONCE, a.mac,
					 VBI_WIRE_AUTH_MAC);
		break;
	case VBI_WAUTH_ANSWER:
		FUZZ_CHECK(a.mac == pl && a.nonce == NULL);
		n = vbi_wire_auth_encode(buf, a.op, 0, 0, a.mac, VBI_WIRE_AUTH_MAC, NULL, 0);
		break;
	default:
		FUZZ_CHECK(a.op == VBI_WAUTH_REFUSE && a.reason == h->seq && !a.mac);
		n = vbi_wire_auth_encode(buf, a.op, a.reason, 0, NULL, 0, NULL, 0);
		break;
	}
	FUZZ_CHECK(vbi_wire_parse(buf, n, 0, &h2) == (long)n && h2.type == VBI_WT_AUTH);
	FUZZ_CHECK(vbi_wire_auth_decode(&h2, buf + VBI_WIRE_HDR_LEN, &b) == 0);
	FUZZ_CHECK(b.op == a.op && b.slots == a.slots && b.reason == a.reason);
	if (a.mac)
		FUZZ_CHECK(!memcmp(a.mac, b.mac, VBI_WIRE_AUTH_MAC));
	if (a.nonce)
		FUZZ_CHECK(!memcmp(a.nonce, b.nonce, VBI_WIRE_NONCE));
}

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	(void)arg;
	if (h->type == VBI_WT_UDADDR)
		udaddr(h, pl);
	else if (h->type == VBI_WT_BYE)
		bye(h, pl);
	else if (h->type == VBI_WT_AUTH)
		auth(h, pl);
	else if (h->type == VBI_WT_END)
		FUZZ_CHECK(vbi_wire_end_ok(h) == (h->session != 0 && h->frag_off == VBI_WIRE_END_SLOW));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > UINT32_MAX)
		return 0;
	fuzz_walk(data, (uint32_t)size, on_frame, NULL);
	return 0;
}
