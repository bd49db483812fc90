/* SPDX-License-Identifier: MIT */
/*
 * SUB / UNSUB: the input is a received SEND; every SUB frame goes through
 * vbi_wire_sub_decode() as on_sub() (proto/peer_frames.c) does. Checks: an
 * accepted SUB has a class, a NUL-free name of h->len - 1 bytes whose id is
 * the frame's topic; vbi_wire_sub_encode() of it (what vbi_peer_send_subs
 * sends) parses and decodes to the same subscription.
 */
#include <string.h>

#include "fuzz.h"

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	uint8_t buf[VBI_WIRE_HDR_LEN + VBI_WIRE_TOPIC_MAX + 8];
	struct vbi_wire_sub d, d2;
	struct vbi_wire_hdr h2;
	size_t nl, sz;
	long r;
	int rc;

	(void)arg;
	if (h->type != VBI_WT_SUB)
		return;
	rc = vbi_wire_sub_decode(h, pl, &d);
	FUZZ_CHECK(rc == VBI_WSUB_OK || rc == VBI_WSUB_MALFORMED || rc == VBI_WSUB_TOPIC);
	if (rc != VBI_WSUB_OK)
		return;
	nl = strlen(d.name);
	FUZZ_CHECK(nl + 1 == h->len && nl >= 1 && nl <= VBI_WIRE_TOPIC_MAX);
	FUZZ_CHECK(d.cls <= VBI_WIRE_CLASS_FANOUT && vbi_topic_id(d.name) == h->topic);
	FUZZ_CHECK(d.mcast_group == (d.cls == VBI_WIRE_CLASS_FANOUT ? h->epoch : 0));
	sz = vbi_wire_sub_encode(buf, d.topic, d.mcast_group, d.cls, d.name, nl);
	FUZZ_CHECK(sz == vbi_wire_frame_size(h->len) && sz <= sizeof(buf));
	r = vbi_wire_parse(buf, sz, 0, &h2);
	FUZZ_CHECK(r == (long)sz && h2.type == VBI_WT_SUB);
	FUZZ_CHECK(vbi_wire_sub_decode(&h2, buf + VBI_WIRE_HDR_LEN, &d2) == VBI_WSUB_OK);
	FUZZ_CHECK(d2.cls == d.cls && d2.topic == d.topic && d2.mcast_group == d.mcast_group);
	FUZZ_CHECK(!strcmp(d2.name, d.name));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > UINT32_MAX)
		return 0;
	fuzz_walk(data, (uint32_t)size, on_frame, NULL);
	return 0;
}
