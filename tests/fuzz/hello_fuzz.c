/* SPDX-License-Identifier: MIT */
/*
 * HELLO: the input is a received SEND; every HELLO frame in it goes through
 * vbi_wire_hello_decode() as vbi_lane_on_hello() does. Checks: a HELLO
 * accepted has a possible geometry and role; decode(encode(decode(x)))
 * equals decode(x) (the name up to its first NUL, at most 31 bytes: what
 * the encoder sends); the authentication section is read only when present.
 */
#include <string.h>

#include "fuzz.h"

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	struct vbi_wire_hello a, b;
	uint8_t enc[VBI_WIRE_HELLO_LEN_AUTH];
	int rc, rc2;

	(void)arg;
	if (h->type != VBI_WT_HELLO)
		return;
	rc = vbi_wire_hello_decode(pl, h->len, &a);
	FUZZ_CHECK(rc == VBI_WHELLO_OK || rc == VBI_WHELLO_BAD || rc == VBI_WHELLO_GEOMETRY);
	if (rc == VBI_WHELLO_BAD) {
		FUZZ_CHECK(h->len < VBI_WIRE_HELLO_LEN || a.version == 0);
		return;
	}
	FUZZ_CHECK(h->len >= VBI_WIRE_HELLO_LEN && a.version == VBI_WIRE_HELLO_VERSION);
	FUZZ_CHECK(a.has_auth == (h->len >= VBI_WIRE_HELLO_LEN_AUTH));
	if (rc == VBI_WHELLO_OK) {
		FUZZ_CHECK(a.slots >= 1 && a.slots <= (1u << 20));
		FUZZ_CHECK(a.slot_size >= 1024 && a.slot_size <= (1u << 20) && a.slot_size % 64 == 0);
		FUZZ_CHECK(a.role <= VBI_WIRE_ROLE_MAX);
	}
	vbi_wire_hello_encode(&a, enc);
	rc2 = vbi_wire_hello_decode(enc, sizeof(enc), &b);
	FUZZ_CHECK(rc2 == rc);
	FUZZ_CHECK(b.has_auth);
	FUZZ_CHECK(a.ud_qpn == b.ud_qpn && a.ud_qkey == b.ud_qkey && !memcmp(a.gid, b.gid, 16));
	FUZZ_CHECK(a.slots == b.slots && a.slot_size == b.slot_size && a.max_msg == b.max_msg);
	FUZZ_CHECK(a.uid == b.uid && a.lane == b.lane && a.role == b.role);
	FUZZ_CHECK(a.sb_family == b.sb_family && a.sb_port == b.sb_port &&
		   !memcmp(a.sb_addr, b.sb_addr, 16));
	FUZZ_CHECK(a.mode == b.mode && a.uc_port == b.uc_port && a.ud_port == b.ud_port);
	FUZZ_CHECK(a.auth_flags == b.auth_flags && !memcmp(a.nonce, b.nonce, VBI_WIRE_NONCE));
	{
		size_t n = strnlen(a.name, VBI_WIRE_NAME_MAX - 1);

		FUZZ_CHECK(strnlen(b.name, VBI_WIRE_NAME_MAX) == n);
		FUZZ_CHECK(!memcmp(a.name, b.name, n));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > UINT32_MAX)
		return 0;
	fuzz_walk(data, (uint32_t)size, on_frame, NULL);
	return 0;
}
