/* SPDX-License-Identifier: MIT */
/* Wire format: round trip, every validation rule, and hostile input. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <endian.h>
#include <string.h>
#include <cmocka.h>

#include "core/wire.h"
#include "core/wire_msg.h"

static struct vbi_wire_hdr data_hdr(uint32_t len, uint32_t off, uint32_t msg_len)
{
	struct vbi_wire_hdr h = {
		.type = VBI_WT_DATA, .session = 0xabcdef01, .topic = 7, .epoch = 3,
		.len = len, .seq = 42, .frag_off = off, .msg_len = msg_len,
	};

	if (off == 0)
		h.flags |= VBI_WF_FIRST;
	if (off + len == msg_len)
		h.flags |= VBI_WF_LAST;
	return h;
}

static void test_roundtrip(void **state)
{
	uint8_t buf[VBI_WIRE_HDR_LEN + 16];
	struct vbi_wire_hdr in = data_hdr(13, 0, 13), out;

	in.flags |= VBI_WF_ACK_REQ;
	vbi_wire_put(buf, &in);
	assert_int_equal(buf[0], 0x42); /* little-endian on the wire */
	assert_int_equal(buf[1], 0x56);
	assert_int_equal(vbi_wire_parse(buf, sizeof(buf), 0, &out), VBI_WIRE_HDR_LEN + 16);
	assert_int_equal(out.type, VBI_WT_DATA);
	assert_int_equal(out.flags, VBI_WF_FIRST | VBI_WF_LAST | VBI_WF_ACK_REQ);
	assert_int_equal(out.session, 0xabcdef01);
	assert_int_equal(out.topic, 7);
	assert_int_equal(out.epoch, 3);
	assert_int_equal(out.len, 13);
	assert_int_equal(out.seq, 42);
	assert_int_equal(out.msg_len, 13);
	/* the last frame of a buffer may omit its padding */
	assert_int_equal(vbi_wire_parse(buf, VBI_WIRE_HDR_LEN + 13, 0, &out), VBI_WIRE_HDR_LEN + 13);
	assert_int_equal(vbi_wire_frame_size(0), 40);
	assert_int_equal(vbi_wire_frame_size(1), 48);
	assert_int_equal(vbi_wire_frame_size(8), 48);
}

static long parse_mut(struct vbi_wire_hdr h, size_t avail, int byte, uint8_t val)
{
	uint8_t buf[256] = { 0 };
	struct vbi_wire_hdr out;

	vbi_wire_put(buf, &h);
	if (byte >= 0)
		buf[byte] = val;
	return vbi_wire_parse(buf, avail, 1024, &out);
}

static void test_each_rule(void **state)
{
	struct vbi_wire_hdr ok = data_hdr(8, 0, 8);

	assert_int_equal(parse_mut(ok, 48, -1, 0), 48);
	assert_int_equal(parse_mut(ok, 39, -1, 0), -VBI_WE_TRUNCATED);
	assert_int_equal(parse_mut(ok, 47, -1, 0), -VBI_WE_TRUNCATED); /* payload cut */
	assert_int_equal(parse_mut(ok, 48, 0, 0x00), -VBI_WE_MAGIC);
	assert_int_equal(parse_mut(ok, 48, 2, 1), -VBI_WE_VERSION); /* a version 1 peer */
	assert_int_equal(parse_mut(ok, 48, 2, VBI_WIRE_VERSION + 1), -VBI_WE_VERSION);
	assert_int_equal(parse_mut(ok, 48, 3, 0), -VBI_WE_TYPE);
	assert_int_equal(parse_mut(ok, 48, 3, VBI_WT__MAX + 1), -VBI_WE_TYPE);
	assert_int_equal(parse_mut(ok, 48, 5, 0x80), -VBI_WE_FLAGS); /* unknown flag */
	assert_int_equal(parse_mut(ok, 48, 6, 1), -VBI_WE_FLAGS);    /* reserved */

	struct vbi_wire_hdr big = data_hdr(8, 0, 8);
	big.msg_len = 4096; /* above max_msg 1024 */
	big.flags &= ~VBI_WF_LAST;
	assert_int_equal(parse_mut(big, 48, -1, 0), -VBI_WE_OVERSIZED);

	struct vbi_wire_hdr f = data_hdr(8, 8, 32); /* middle fragment */
	assert_int_equal(parse_mut(f, 48, -1, 0), 48);
	f.flags |= VBI_WF_FIRST; /* FIRST with offset 8 */
	assert_int_equal(parse_mut(f, 48, -1, 0), -VBI_WE_FRAGMENT);
	f = data_hdr(8, 24, 32);
	f.flags &= ~VBI_WF_LAST; /* reaches the end without LAST */
	assert_int_equal(parse_mut(f, 48, -1, 0), -VBI_WE_FRAGMENT);
	f = data_hdr(8, 30, 32); /* runs past msg_len */
	assert_int_equal(parse_mut(f, 48, -1, 0), -VBI_WE_FRAGMENT);
	f = data_hdr(0, 0, 32); /* empty non-final fragment */
	assert_int_equal(parse_mut(f, 40, -1, 0), -VBI_WE_FRAGMENT);
	f = data_hdr(8, 0, 8);
	f.seq = 0;
	assert_int_equal(parse_mut(f, 48, -1, 0), -VBI_WE_FRAGMENT);

	struct vbi_wire_hdr ack = { .type = VBI_WT_ACK, .seq = 9, .frag_off = 16 };
	assert_int_equal(parse_mut(ack, 40, -1, 0), 40);
	ack.flags = VBI_WF_LAST;
	assert_int_equal(parse_mut(ack, 40, -1, 0), -VBI_WE_FLAGS);
	assert_string_equal(vbi_wire_err_name(VBI_WE_FRAGMENT), "inconsistent fragment fields");
}

/* A BATCH frame of @n records of lengths @lens (payload byte k of record i
 * is i + k) in @buf; its header's fields can be spoiled by the caller.
 * Returns the bytes used. */
static uint32_t batch_build(uint8_t *buf, struct vbi_wire_hdr *h, const uint32_t *lens,
			    unsigned n, uint32_t count)
{
	uint8_t pl[64] = { 0 };
	uint32_t off = VBI_WIRE_HDR_LEN;

	for (unsigned i = 0; i < n; i++) {
		for (uint32_t k = 0; k < lens[i]; k++)
			pl[k] = (uint8_t)(i + k);
		off += (uint32_t)vbi_wire_rec_put(buf + off, pl, lens[i]);
	}
	*h = (struct vbi_wire_hdr){ .type = VBI_WT_BATCH, .flags = VBI_WF_FIRST | VBI_WF_LAST |
				    VBI_WF_ACK_REQ, .session = 9, .topic = 4, .epoch = 2,
				    .seq = 100, .len = off - VBI_WIRE_HDR_LEN, .msg_len = count };
	vbi_wire_put(buf, h);
	return off;
}

/* Walk @len bytes at @buf with stream context @bctx; records' payloads are
 * checked as cbatch_build/batch_build made them, numbered from *@n on. */
static int walk_ctx(const uint8_t *buf, uint32_t len, struct vbi_wire_bctx *bctx,
		    struct vbi_wire_hdr *got, unsigned max, unsigned *n)
{
	struct vbi_wire_walk w;
	struct vbi_wire_hdr h;
	const uint8_t *pl;
	int r;

	vbi_wire_walk_init(&w, buf, len, 1024);
	vbi_wire_walk_bctx(&w, bctx);
	while ((r = vbi_wire_walk_next(&w, &h, &pl)) > 0) {
		if (h.type != VBI_WT_DATA)
			continue;
		assert_true(w.from_batch);
		for (uint32_t k = 0; k < h.len; k++)
			assert_int_equal(pl[k], (uint8_t)(*n + k));
		if (*n < max)
			got[*n] = h;
		(*n)++;
	}
	return r;
}

/* The same without a stream context, counting from 0. */
static int walk_all(const uint8_t *buf, uint32_t len, struct vbi_wire_hdr *got, unsigned max,
		    unsigned *n)
{
	*n = 0;
	return walk_ctx(buf, len, NULL, got, max, n);
}

static void test_batch(void **state)
{
	uint8_t buf[512];
	struct vbi_wire_hdr h, got[8];
	const uint32_t lens[] = { 0, 5, 8, 1 };
	unsigned n;
	uint32_t len;

	(void)state;
	assert_int_equal(vbi_wire_rec_size(0), 4);
	assert_int_equal(vbi_wire_rec_size(5), 12);
	len = batch_build(buf, &h, lens, 4, 4);
	assert_int_equal(walk_all(buf, len, got, 8, &n), 0);
	assert_int_equal(n, 4);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(got[i].type, VBI_WT_DATA);
		assert_int_equal(got[i].seq, 100 + i);
		assert_int_equal(got[i].len, lens[i]);
		assert_int_equal(got[i].msg_len, lens[i]);
		assert_int_equal(got[i].frag_off, 0);
		assert_int_equal(got[i].flags, VBI_WF_FIRST | VBI_WF_LAST | VBI_WF_ACK_REQ);
		assert_int_equal(got[i].session, 9);
		assert_int_equal(got[i].topic, 4);
		assert_int_equal(got[i].epoch, 2);
	}
	/* the last record may omit its padding (1 byte + 3 of pad): the
	 * frame's len then ends with the last payload byte */
	h.len -= 3;
	vbi_wire_put(buf, &h);
	assert_int_equal(walk_all(buf, len - 3, got, 8, &n), 0);
	assert_int_equal(n, 4);
	h.len += 3;
	vbi_wire_put(buf, &h);
	/* a frame after the batch is walked on */
	{
		struct vbi_wire_hdr a = { .type = VBI_WT_ACK, .seq = 7 };
		struct vbi_wire_walk w;
		const uint8_t *pl;

		uint32_t next = (uint32_t)vbi_wire_frame_size(h.len); /* 8-aligned, as every frame */

		memset(buf + len, 0, next - len);
		vbi_wire_put(buf + next, &a);
		vbi_wire_walk_init(&w, buf, next + VBI_WIRE_HDR_LEN, 1024);
		for (unsigned i = 0; i < 4; i++)
			assert_int_equal(vbi_wire_walk_next(&w, &h, &pl), 1);
		assert_int_equal(vbi_wire_walk_next(&w, &h, &pl), 1);
		assert_false(w.from_batch);
		assert_int_equal(h.type, VBI_WT_ACK);
		assert_int_equal(vbi_wire_walk_next(&w, &h, &pl), 0);
	}
	/* more records announced than there are: the batch's error, sticky */
	len = batch_build(buf, &h, lens, 3, 4);
	assert_int_equal(walk_all(buf, len, got, 8, &n), -VBI_WE_RECORD);
	assert_int_equal(n, 3);
	/* fewer announced than there are: bytes left over */
	len = batch_build(buf, &h, lens, 4, 3);
	assert_int_equal(walk_all(buf, len, got, 8, &n), -VBI_WE_RECORD);
	/* a record longer than the frame */
	len = batch_build(buf, &h, lens, 2, 2);
	buf[VBI_WIRE_HDR_LEN + 4] = 200; /* record 1's length: 200 */
	assert_int_equal(walk_all(buf, len, got, 8, &n), -VBI_WE_RECORD);
	/* header rules: no records, a fragment, a seq past the last valid one */
	len = batch_build(buf, &h, lens, 4, 4);
	h.msg_len = 0;
	vbi_wire_put(buf, &h);
	assert_int_equal(walk_all(buf, len, got, 8, &n), -VBI_WE_FRAGMENT);
	h.msg_len = 4;
	h.flags = VBI_WF_FIRST;
	vbi_wire_put(buf, &h);
	assert_int_equal(walk_all(buf, len, got, 8, &n), -VBI_WE_FRAGMENT);
	h.flags = VBI_WF_FIRST | VBI_WF_LAST;
	h.seq = UINT64_MAX - 3; /* the 4th record would be 2^64 - 1 */
	vbi_wire_put(buf, &h);
	assert_int_equal(walk_all(buf, len, got, 8, &n), -VBI_WE_FRAGMENT);
	h.seq = UINT64_MAX - 4;
	vbi_wire_put(buf, &h);
	len = batch_build(buf, &h, lens, 4, 4);
	h.seq = UINT64_MAX - 4;
	vbi_wire_put(buf, &h);
	assert_int_equal(walk_all(buf, len, got, 8, &n), 0);
	assert_int_equal(got[3].seq, UINT64_MAX - 1);
	/* a record above the walk's limit (1024) */
	{
		uint8_t big[VBI_WIRE_HDR_LEN + 8];
		struct vbi_wire_hdr b = { .type = VBI_WT_BATCH, .flags = VBI_WF_FIRST | VBI_WF_LAST,
					  .seq = 1, .len = 8, .msg_len = 1 };
		uint32_t l = htole32(2000);

		vbi_wire_put(big, &b);
		memcpy(big + VBI_WIRE_HDR_LEN, &l, 4);
		memset(big + VBI_WIRE_HDR_LEN + 4, 0, 4);
		assert_int_equal(walk_all(big, sizeof(big), got, 8, &n), -VBI_WE_RECORD);
	}
}

static void test_len_overflow_is_truncated_not_trusted(void **state)
{
	struct vbi_wire_hdr h = data_hdr(8, 0, 8);
	uint8_t buf[64];
	struct vbi_wire_hdr out;

	vbi_wire_put(buf, &h);
	/* len = 0xffffffff: must not wrap the bounds check */
	memset(buf + 20, 0xff, 4);
	assert_int_equal(vbi_wire_parse(buf, sizeof(buf), 0, &out), -VBI_WE_TRUNCATED);
}

/* Random and mutated input: the parser answers, never reads out of bounds
 * (ASan run), and whatever it accepts is self-consistent. */
static void test_hostile_input(void **state)
{
	uint8_t *buf;
	unsigned seed = 12345;
	long accepted = 0;

	for (int i = 0; i < 200000; i++) {
		size_t n = (size_t)(rand_r(&seed) % 128);
		struct vbi_wire_hdr out;
		long r;

		buf = malloc(n ? n : 1);
		assert_non_null(buf);
		if (i & 1) {
			struct vbi_wire_hdr h = data_hdr((uint32_t)(rand_r(&seed) % 64), 0, 64);
			uint8_t tmp[VBI_WIRE_HDR_LEN];

			h.msg_len = h.len;
			h.flags = VBI_WF_FIRST | VBI_WF_LAST;
			vbi_wire_put(tmp, &h);
			memcpy(buf, tmp, n < sizeof(tmp) ? n : sizeof(tmp));
			for (size_t k = sizeof(tmp); k < n; k++)
				buf[k] = (uint8_t)rand_r(&seed);
			if (n)
				buf[rand_r(&seed) % n] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
		} else {
			for (size_t k = 0; k < n; k++)
				buf[k] = (uint8_t)rand_r(&seed);
		}
		r = vbi_wire_parse(buf, n, 0, &out);
		if (r > 0) {
			accepted++;
			assert_true((size_t)r <= n);
			assert_true(VBI_WIRE_HDR_LEN + (size_t)out.len <= n);
			if (out.type == VBI_WT_DATA)
				assert_true(out.frag_off + out.len <= out.msg_len);
		} else {
			assert_true(-r > VBI_WE_OK && -r < VBI_WE__COUNT);
		}
		free(buf);
	}
	assert_true(accepted > 0); /* the mutated half is often still valid */
}

/* LANE rules (docs/wire.md "Rules"), on the accepting side: a probe lane 2
 * of a peer whose highest lane so far is 4 (a standby built after the
 * promotion whose HELLO came first). */
/* A compact BATCH of @n records of lengths @lens (payload byte k of record
 * i is @first + i + k) at @buf with @flags. Returns the bytes used. */
static uint32_t cbatch_build(uint8_t *buf, uint16_t flags, const uint32_t *lens, unsigned n,
			     unsigned first)
{
	uint8_t pl[64] = { 0 };
	uint32_t off = VBI_WIRE_CHDR_LEN;

	vbi_wire_cput(buf, flags);
	for (unsigned i = 0; i < n; i++) {
		for (uint32_t k = 0; k < lens[i]; k++)
			pl[k] = (uint8_t)(first + i + k);
		off += (uint32_t)vbi_wire_rec_put(buf + off, pl, lens[i]);
	}
	return off;
}

/* Compact BATCH (wire version 3): it continues the stream of the BATCH
 * before it on the connection, in the same SEND or a later one; it runs
 * to the end of the SEND; without a context, after a walk error, or
 * malformed, it is refused and the context is dropped. */
static void test_compact(void **state)
{
	uint8_t buf[512], buf2[128];
	struct vbi_wire_hdr h, got[16];
	struct vbi_wire_bctx bctx = { 0 };
	const uint32_t l2[] = { 0, 5 }, l3[] = { 8, 1, 64 };
	unsigned n = 0;
	uint32_t len, len2;

	(void)state;
	/* BATCH (seq 100, 101), an ACK, then a compact BATCH (102..104) */
	len = batch_build(buf, &h, l2, 2, 2);
	len = (uint32_t)vbi_wire_frame_size(h.len);
	memset(buf + VBI_WIRE_HDR_LEN + h.len, 0, len - VBI_WIRE_HDR_LEN - h.len);
	vbi_wire_put(buf + len, &(struct vbi_wire_hdr){ .type = VBI_WT_ACK, .seq = 7 });
	len += VBI_WIRE_HDR_LEN;
	len += cbatch_build(buf + len, VBI_WF_RETRANS, l3, 3, 2);
	assert_int_equal(walk_ctx(buf, len, &bctx, got, 16, &n), 0);
	assert_int_equal(n, 5);
	for (unsigned i = 0; i < 5; i++) {
		assert_int_equal(got[i].seq, 100 + i);
		assert_int_equal(got[i].session, 9);
		assert_int_equal(got[i].topic, 4);
		assert_int_equal(got[i].epoch, 2);
		assert_int_equal(got[i].flags, VBI_WF_FIRST | VBI_WF_LAST |
					       (i < 2 ? VBI_WF_ACK_REQ : VBI_WF_RETRANS));
	}
	assert_int_equal(got[4].len, 64);
	assert_int_equal(bctx.next_seq, 105);
	/* the next SEND: a compact BATCH alone continues at 105 */
	len2 = cbatch_build(buf2, 0, l3, 1, 5);
	assert_int_equal(walk_ctx(buf2, len2, &bctx, got, 16, &n), 0);
	assert_int_equal(n, 6);
	assert_int_equal(got[5].seq, 105);
	assert_int_equal(got[5].session, 9);
	assert_int_equal(bctx.next_seq, 106);
	/* no context: refused (UC, UD, or nothing walked before) */
	n = 0;
	assert_int_equal(walk_all(buf2, len2, got, 16, &n), -VBI_WE_CONTEXT);
	assert_int_equal(n, 0);
	{
		struct vbi_wire_bctx none = { 0 };

		assert_int_equal(walk_ctx(buf2, len2, &none, got, 16, &n), -VBI_WE_CONTEXT);
		assert_int_equal(n, 0);
	}
	/* bytes after its last record that are not a record: refused, and
	 * the context is gone (so is every compact BATCH after it) */
	memset(buf2 + len2, 0, 3);
	n = 5;
	assert_int_equal(walk_ctx(buf2, len2 + 3, &bctx, got, 16, &n), -VBI_WE_RECORD);
	assert_int_equal(n, 5); /* refused at the record they follow, as in BATCH */
	assert_int_equal(bctx.next_seq, 0);
	n = 5;
	assert_int_equal(walk_ctx(buf2, len2, &bctx, got, 16, &n), -VBI_WE_CONTEXT);
	/* a header with no record, unknown flags, a reserved byte */
	bctx = (struct vbi_wire_bctx){ .session = 1, .topic = 2, .epoch = 3, .next_seq = 10 };
	n = 5;
	assert_int_equal(walk_ctx(buf2, VBI_WIRE_CHDR_LEN, &bctx, got, 16, &n), -VBI_WE_TRUNCATED);
	bctx.next_seq = 10;
	buf2[2] = VBI_WF_FIRST;
	assert_int_equal(walk_ctx(buf2, len2, &bctx, got, 16, &n), -VBI_WE_FLAGS);
	bctx.next_seq = 10;
	buf2[2] = 0;
	buf2[3] = 1;
	assert_int_equal(walk_ctx(buf2, len2, &bctx, got, 16, &n), -VBI_WE_FLAGS);
	/* a sequence that would reach 2^64 - 1 */
	buf2[3] = 0;
	bctx.next_seq = UINT64_MAX;
	assert_int_equal(walk_ctx(buf2, len2, &bctx, got, 16, &n), -VBI_WE_RECORD);
	assert_string_equal(vbi_wire_err_name(VBI_WE_CONTEXT),
			    "compact BATCH with no stream before it on the connection");
}

static void test_lane_renumber(void **state)
{
	struct vbi_wire_lanes st = { .max_lane_id = 4, .epoch_rx = 5 };
	struct vbi_wire_hdr h = { .type = VBI_WT_LANE, .seq = 3, .epoch = 6 };
	struct vbi_wire_lanes before;

	(void)state;
	/* the connector renumbered it 3 when it promoted it, then built 4 */
	assert_int_equal(vbi_wire_lane_rule(&st, false, true, 2, &h), VBI_WLANE_RENUMBER);
	assert_int_equal(st.max_lane_id, 4); /* never goes down */
	assert_int_equal(st.epoch_rx, 6);
	/* above every lane: the highest number moves with it */
	h.seq = 9;
	h.epoch = 7;
	assert_int_equal(vbi_wire_lane_rule(&st, false, true, 3, &h), VBI_WLANE_RENUMBER);
	assert_int_equal(st.max_lane_id, 9);
	/* its own number: no renumbering */
	h.epoch = 8;
	assert_int_equal(vbi_wire_lane_rule(&st, false, true, 9, &h), VBI_WLANE_OK);
	before = st;
	/* refused, nothing changes: below its own number, beyond the slack,
	 * not a probe, on the connecting side */
	h.epoch = 9;
	h.seq = 8;
	assert_int_equal(vbi_wire_lane_rule(&st, false, true, 9, &h), VBI_WLANE_RANGE);
	h.seq = 9 + VBI_WIRE_LANE_ID_SLACK + 1;
	assert_int_equal(vbi_wire_lane_rule(&st, false, true, 9, &h), VBI_WLANE_RANGE);
	h.seq = 10;
	assert_int_equal(vbi_wire_lane_rule(&st, false, false, 9, &h), VBI_WLANE_NAME);
	assert_int_equal(vbi_wire_lane_rule(&st, true, true, 9, &h), VBI_WLANE_NAME);
	assert_memory_equal(&st, &before, sizeof(st));
	h.seq = 9 + VBI_WIRE_LANE_ID_SLACK;
	assert_int_equal(vbi_wire_lane_rule(&st, false, true, 9, &h), VBI_WLANE_RENUMBER);
	assert_int_equal(st.max_lane_id, 9 + VBI_WIRE_LANE_ID_SLACK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_each_rule),
		cmocka_unit_test(test_len_overflow_is_truncated_not_trusted),
		cmocka_unit_test(test_hostile_input),
		cmocka_unit_test(test_batch),
		cmocka_unit_test(test_compact),
		cmocka_unit_test(test_lane_renumber),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
