/* SPDX-License-Identifier: MIT */
/* Wire format: round trip, every validation rule, and hostile input. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/wire.h"

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
	assert_int_equal(parse_mut(ok, 48, 2, 2), -VBI_WE_VERSION);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_each_rule),
		cmocka_unit_test(test_len_overflow_is_truncated_not_trusted),
		cmocka_unit_test(test_hostile_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
