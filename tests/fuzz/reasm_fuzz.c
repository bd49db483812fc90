/* SPDX-License-Identifier: MIT */
/*
 * Fragment reassembly: the input is a received SEND; its DATA fragments
 * (not whole FIRST|LAST messages, which need none) go through
 * vbi_reasm_push() as vbi_sub_data() does, END frames abandon the partial
 * message of their session as vbi_sub_on_end() does. The buffers come from
 * malloc of exactly msg_len bytes (ASan sees any byte outside), and every
 * 8th allocation fails. Checks: each verdict is what the protocol says
 * (docs/wire.md), a completed message is the concatenation of its
 * fragments, nothing leaks.
 */
#include <errno.h>
#include <string.h>

#include "core/stream.h"
#include "fuzz.h"

struct rstate {
	struct vbi_reasm r;
	unsigned allocs;
	uint8_t *shadow; /* what the fragments so far carried */
	uint32_t got;
};

static void *ralloc(size_t len, void *arg)
{
	struct rstate *s = arg;

	if (s->allocs++ % 8 == 7)
		return NULL;
	return malloc(len ? len : 1);
}

static void rfree(void *buf, void *arg)
{
	(void)arg;
	free(buf);
}

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	struct rstate *s = arg;
	bool was_active = s->r.active, cont;
	unsigned allocs = s->allocs;
	void *msg = (void *)1;
	int rc, want;

	if (h->type == VBI_WT_END) {
		if (vbi_wire_end_ok(h) && s->r.active && s->r.session == h->session) {
			vbi_reasm_fini(&s->r);
			vbi_reasm_init(&s->r, ralloc, rfree, s);
			FUZZ_CHECK(!s->r.active);
		}
		return;
	}
	if (h->type != VBI_WT_DATA ||
	    (h->flags & (VBI_WF_FIRST | VBI_WF_LAST)) == (VBI_WF_FIRST | VBI_WF_LAST))
		return;
	cont = was_active && h->session == s->r.session && h->seq == s->r.seq &&
	       h->frag_off == s->r.got && h->msg_len == s->r.msg_len;
	if (h->flags & VBI_WF_FIRST)
		want = allocs % 8 == 7 ? -EAGAIN : (h->flags & VBI_WF_LAST) ? 1 : 0;
	else
		want = !cont ? -EPROTO : (h->flags & VBI_WF_LAST) ? 1 : 0;
	rc = vbi_reasm_push(&s->r, h, pl, &msg);
	FUZZ_CHECK(rc == want);
	FUZZ_CHECK((rc == 1) == (msg != NULL));
	if (rc < 0) {
		FUZZ_CHECK(!s->r.active);
		s->got = 0;
		return;
	}
	if (h->flags & VBI_WF_FIRST) {
		free(s->shadow);
		s->shadow = malloc(h->msg_len ? h->msg_len : 1);
		FUZZ_CHECK(s->shadow);
		s->got = 0;
	}
	FUZZ_CHECK(s->got == h->frag_off && s->got + h->len <= h->msg_len);
	memcpy(s->shadow + s->got, pl, h->len);
	s->got += h->len;
	if (rc == 1) {
		FUZZ_CHECK(s->got == h->msg_len && !s->r.active);
		FUZZ_CHECK(!memcmp(msg, s->shadow, h->msg_len));
		rfree(msg, s);
	} else {
		FUZZ_CHECK(s->r.active && s->r.got == s->got && s->r.got < s->r.msg_len);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rstate s;

	if (size > UINT32_MAX)
		return 0;
	memset(&s, 0, sizeof(s));
	vbi_reasm_init(&s.r, ralloc, rfree, &s);
	fuzz_walk(data, (uint32_t)size, on_frame, &s);
	vbi_reasm_fini(&s.r);
	FUZZ_CHECK(!s.r.active && !s.r.buf);
	free(s.shadow);
	return 0;
}
