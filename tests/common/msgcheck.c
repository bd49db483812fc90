/* SPDX-License-Identifier: MIT */
#include "tests/common/msgcheck.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC 0x76627473u /* "stbv" */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

size_t vbt_msg_len(uint32_t stream, uint64_t counter, size_t lo, size_t hi)
{
	return lo + (size_t)(mix(((uint64_t)stream << 40) ^ counter) % (hi - lo + 1));
}

/* Body byte i is byte (i % 8) of mix(seed + i / 8): any block can be
 * regenerated on its own. */
static void body_at(uint8_t *p, size_t n, uint32_t stream, uint64_t counter, size_t from)
{
	uint64_t seed = mix(((uint64_t)stream << 48) ^ counter ^ 0x5bd1e995u);

	uint64_t w = mix(seed + from / 8);

	for (size_t i = from; i < from + n; i++) {
		if (!(i & 7) && i != from)
			w = mix(seed + i / 8);
		p[i - from] = (uint8_t)(w >> ((i & 7) * 8));
	}
}

static void body(uint8_t *p, size_t n, uint32_t stream, uint64_t counter)
{
	body_at(p, n, stream, counter, 0);
}

void vbt_msg_fill(void *buf, size_t len, uint32_t stream, uint64_t counter)
{
	uint8_t *p = buf;
	uint32_t v32;
	uint64_t v64;

	if (len < VBT_MSG_MIN) {
		body(p, len, stream, counter);
		return;
	}
	body(p + VBT_MSG_MIN, len - VBT_MSG_MIN, stream, counter);
	v32 = htole32(MAGIC);
	memcpy(p, &v32, 4);
	v32 = htole32(stream);
	memcpy(p + 4, &v32, 4);
	v64 = htole64(counter);
	memcpy(p + 8, &v64, 8);
	v32 = htole32((uint32_t)len);
	memcpy(p + 16, &v32, 4);
	v32 = 0; /* reserved */
	memcpy(p + 20, &v32, 4);
}

int vbt_msg_peek(const void *buf, size_t len, uint32_t *stream, uint64_t *counter)
{
	const uint8_t *p = buf;
	uint32_t v32;
	uint64_t v64;

	if (len < VBT_MSG_MIN)
		return -1;
	memcpy(&v32, p, 4);
	if (le32toh(v32) != MAGIC)
		return -1;
	memcpy(&v32, p + 4, 4);
	*stream = le32toh(v32);
	memcpy(&v64, p + 8, 8);
	*counter = le64toh(v64);
	return 0;
}

int vbt_msg_verify(const void *buf, size_t len, uint32_t stream, uint64_t counter,
		   const char **why)
{
	const uint8_t *p = buf;
	uint8_t tmp[64];
	uint32_t s, v32;
	uint64_t c;
	size_t n;

	*why = NULL;
	if (len < VBT_MSG_MIN) {
		body(tmp, len, stream, counter);
		if (memcmp(tmp, p, len))
			return *why = "short message bytes differ", -1;
		return 0;
	}
	if (vbt_msg_peek(buf, len, &s, &c))
		return *why = "bad magic", -1;
	if (s != stream || c != counter)
		return *why = "not the (stream, counter) expected", -1;
	memcpy(&v32, p + 16, 4);
	if (le32toh(v32) != len)
		return *why = "length differs from the one sent", -1;
	/* every body byte, regenerated in blocks (cheaper than a CRC under TCG) */
	for (size_t off = VBT_MSG_MIN; off < len; off += n) {
		n = len - off < sizeof(tmp) ? len - off : sizeof(tmp);
		body_at(tmp, n, stream, counter, off - VBT_MSG_MIN);
		if (memcmp(tmp, p + off, n))
			return *why = "body bytes differ from the ones sent", -1;
	}
	return 0;
}

uint64_t vbt_scaled(uint64_t n)
{
	const char *s = getenv("VERBUS_TEST_SCALE");
	double f = s ? strtod(s, NULL) : 1.0;
	uint64_t v;

	if (!(f > 0))
		f = 1.0;
	v = (uint64_t)((double)n * f);
	return v ? v : 1;
}
