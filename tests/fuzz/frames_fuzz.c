/* SPDX-License-Identifier: MIT */
/*
 * Frame header and batch walk: the input is one received SEND (RC/UC), as
 * vbi_dispatch_frames() walks it (vbi_wire_walk_next -> vbi_wire_parse).
 * Checks: every frame and payload lies inside the buffer, offsets only
 * grow, an error is sticky, and a header that parsed re-encodes
 * (vbi_wire_put) to the very bytes it came from.
 */
#include <string.h>

#include "fuzz.h"

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	const uint8_t *hdr = pl - VBI_WIRE_HDR_LEN;
	uint8_t again[VBI_WIRE_HDR_LEN];

	(void)arg;
	if (fuzz_in_batch)
		return; /* a BATCH record: no header of its own */
	vbi_wire_put(again, h);
	FUZZ_CHECK(memcmp(again, hdr, VBI_WIRE_HDR_LEN) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > UINT32_MAX)
		return 0;
	fuzz_walk(data, (uint32_t)size, on_frame, NULL);
	return 0;
}
