/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the libFuzzer targets (docs/testing.md, "Fuzzing and
 * static analysis"). Each target feeds its input through the same core/
 * functions proto calls on received bytes and checks invariants; a
 * broken invariant aborts (libFuzzer saves the input as a crash).
 */
#ifndef VERBUS_TESTS_FUZZ_H
#define VERBUS_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/wire.h"
#include "core/wire_msg.h"

#define FUZZ_CHECK(c)                                                                          \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #c, __FILE__,    \
				__LINE__);                                                     \
			abort();                                                               \
		}                                                                              \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The receive limit the targets walk with (ctx->attr.max_msg in the
 * library; 1 MiB keeps reassembly allocations small). */
#define FUZZ_MAX_MSG (1u << 20)

/* Walk @len bytes at @buf as the library does; checks the walk's own
 * invariants and calls @fn for every frame. Returns the walk's end code
 * (0 or a negative enum vbi_wire_err). */
typedef void (*fuzz_frame_fn)(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg);

/* Set while @fn runs for a record of a BATCH frame (no header of its own). */
static bool fuzz_in_batch;

static inline int fuzz_walk(const uint8_t *buf, uint32_t len, fuzz_frame_fn fn, void *arg)
{
	struct vbi_wire_walk w;
	struct vbi_wire_hdr h;
	const uint8_t *pl;
	uint32_t prev = 0;
	/* the stream context of an RC connection: a compact BATCH continues
	 * the BATCH before it in the input (the library attaches it on RC) */
	struct vbi_wire_bctx bctx = { 0 };
	int r;

	vbi_wire_walk_init(&w, buf, len, FUZZ_MAX_MSG);
	vbi_wire_walk_bctx(&w, &bctx);
	while ((r = vbi_wire_walk_next(&w, &h, &pl)) > 0) {
		if (w.from_batch) {
			/* a record of the BATCH frame that ends at w.off: inside it,
			 * a whole message with the batch's next seq; a compact
			 * one continues the context, which now points past it */
			FUZZ_CHECK(pl >= buf + (w.compact ? VBI_WIRE_CHDR_LEN : VBI_WIRE_HDR_LEN) +
						   VBI_WIRE_REC_HDR &&
				   pl + h.len <= buf + w.off && w.off <= len);
			FUZZ_CHECK(h.type == VBI_WT_DATA && h.frag_off == 0 && h.len == h.msg_len);
			FUZZ_CHECK(h.seq == w.batch.seq + w.rec_i - 1 && h.seq != 0 &&
				   h.seq != UINT64_MAX);
			FUZZ_CHECK(bctx.next_seq == h.seq + 1 && bctx.session == h.session &&
				   bctx.topic == h.topic && bctx.epoch == h.epoch);
			FUZZ_CHECK(!w.compact || w.off == len);
			FUZZ_CHECK(h.msg_len <= FUZZ_MAX_MSG);
		} else {
			FUZZ_CHECK(pl == buf + prev + VBI_WIRE_HDR_LEN);
			FUZZ_CHECK((size_t)prev + VBI_WIRE_HDR_LEN + h.len <= len);
			FUZZ_CHECK(w.off > prev && w.off <= len);
		}
		FUZZ_CHECK(h.type >= VBI_WT_DATA && h.type <= VBI_WT__MAX && h.type != VBI_WT_BATCH);
		if (h.type == VBI_WT_DATA) {
			FUZZ_CHECK(h.msg_len <= FUZZ_MAX_MSG && h.seq != 0);
			FUZZ_CHECK(h.frag_off <= h.msg_len && h.len <= h.msg_len - h.frag_off);
		}
		prev = w.off;
		fuzz_in_batch = w.from_batch;
		if (fn)
			fn(&h, pl, arg);
	}
	if (r < 0) {
		/* sticky: the rest of the buffer is never looked at (a bad
		 * record leaves the walk past its BATCH frame) */
		FUZZ_CHECK(w.off == prev || (r == -VBI_WE_RECORD && w.off >= prev));
		FUZZ_CHECK(vbi_wire_walk_next(&w, &h, &pl) == r);
		FUZZ_CHECK(bctx.next_seq == 0); /* an error leaves no context to continue */
	} else {
		FUZZ_CHECK(w.off >= len);
	}
	return r;
}

#endif
