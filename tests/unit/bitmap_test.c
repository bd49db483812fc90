/* SPDX-License-Identifier: MIT */
/*
 * core/bitmap.h, the memory pool's page bitmaps searched a word at a time:
 * against a reference that looks at one bit at a time (the code before),
 * on fixed cases and on random bitmaps of every shape the pool makes
 * (sizes not a multiple of 64, bits past the end set or clear, alignment
 * steps, requests larger than any run).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/bitmap.h"

#define MAXW 40 /* words: up to 2,560 bits */

static bool ref_get(const uint64_t *b, unsigned i)
{
	return (b[i >> 6] >> (i & 63)) & 1;
}

static long ref_best_fit(const uint64_t *b, unsigned npages, unsigned n, unsigned step,
			 unsigned *run)
{
	long best = -1;
	unsigned best_len = ~0u, i = 0;

	while (i < npages) {
		unsigned s, start;

		if (ref_get(b, i)) {
			i++;
			continue;
		}
		s = i;
		while (i < npages && !ref_get(b, i))
			i++;
		start = (s + step - 1) / step * step;
		if (start + n <= i && i - s < best_len) {
			best_len = i - s;
			best = start;
		}
	}
	*run = best_len;
	return best;
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* A bitmap of @npages made of runs (set and clear, lengths up to @maxrun),
 * with the bits past @npages all set, all clear or random (@tail 0, 1, 2). */
static void fill_runs(uint64_t *b, unsigned npages, unsigned maxrun, unsigned tail)
{
	bool on = rnd() & 1;

	for (unsigned w = 0; w < MAXW; w++)
		b[w] = tail == 0 ? ~0ull : tail == 1 ? 0 : rnd();
	for (unsigned i = 0; i < npages;) {
		unsigned len = 1 + (unsigned)(rnd() % maxrun);

		for (unsigned k = i; k < i + len && k < npages; k++) {
			if (on)
				b[k >> 6] |= 1ull << (k & 63);
			else
				b[k >> 6] &= ~(1ull << (k & 63));
		}
		i += len;
		on = !on;
	}
}

static void check_fit(const uint64_t *b, unsigned npages, unsigned n, unsigned step)
{
	unsigned run = 0, ref_run = 0;
	long got = vbi_bits_best_fit(b, npages, n, step, &run);
	long want = ref_best_fit(b, npages, n, step, &ref_run);

	if (got != want || (want >= 0 && run != ref_run))
		fail_msg("npages %u n %u step %u: best fit %ld (run %u), reference %ld (run %u)",
			 npages, n, step, got, run, want, ref_run);
}

static void test_fixed(void **state)
{
	uint64_t b[MAXW] = { 0 };
	unsigned run;

	(void)state;
	/* all clear: the first aligned place, the run is the whole map */
	assert_int_equal(vbi_bits_best_fit(b, 100, 10, 1, &run), 0);
	assert_int_equal(run, 100);
	assert_int_equal(vbi_bits_best_fit(b, 100, 101, 1, &run), -1);
	assert_int_equal(vbi_bits_best_fit(b, 100, 100, 1, &run), 0);
	/* bits past npages clear must not extend the last run */
	assert_int_equal(vbi_bits_best_fit(b, 70, 71, 1, &run), -1);
	/* the shortest run that fits wins over an earlier longer one */
	vbi_bits_set(b, 0, 128, true);
	vbi_bits_set(b, 3, 20, false);   /* run [3, 23) */
	vbi_bits_set(b, 60, 6, false);   /* run [60, 66), across a word */
	vbi_bits_set(b, 100, 5, false);  /* run [100, 105): too short */
	assert_int_equal(vbi_bits_best_fit(b, 128, 6, 1, &run), 60);
	assert_int_equal(run, 6);
	/* aligned to 8: [60, 66) holds only [64, 66) */
	assert_int_equal(vbi_bits_best_fit(b, 128, 6, 8, &run), 8);
	assert_int_equal(run, 20);
	/* full */
	vbi_bits_set(b, 0, 128, true);
	assert_int_equal(vbi_bits_best_fit(b, 128, 1, 1, &run), -1);
	/* vbi_bits_set over word edges, both ways */
	memset(b, 0, sizeof(b));
	vbi_bits_set(b, 60, 70, true);
	assert_true(b[0] == 0xf000000000000000ull && b[1] == ~0ull && b[2] == 0x3ull);
	vbi_bits_set(b, 63, 66, false);
	assert_true(b[0] == 0x7000000000000000ull && b[1] == 0 && b[2] == 0x2ull);
	vbi_bits_set(b, 64, 64, true);
	assert_true(b[1] == ~0ull);
	vbi_bits_set(b, 5, 0, true);
	assert_true(b[0] == 0x7000000000000000ull);
	/* vbi_bits_next stops at npages */
	memset(b, 0, sizeof(b));
	assert_int_equal(vbi_bits_next(b, 0, 70, true), 70);
	assert_int_equal(vbi_bits_next(b, 5, 70, false), 5);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(vbi_bits_next(b, 0, 70, false), 70);
	assert_int_equal(vbi_bits_next(b, 69, 70, true), 69);
}

static void test_random_against_reference(void **state)
{
	static const unsigned steps[] = { 1, 2, 4, 8, 16, 64 };
	uint64_t b[MAXW];
	unsigned cases = 0;

	(void)state;
	for (int iter = 0; iter < 3000; iter++) {
		unsigned npages = 1 + (unsigned)(rnd() % (MAXW * 64));
		unsigned maxrun = 1 + (unsigned)(rnd() % 300);

		fill_runs(b, npages, maxrun, (unsigned)(rnd() % 3));
		for (int q = 0; q < 8; q++) {
			unsigned n = 1 + (unsigned)(rnd() % (q < 4 ? 16 : 400));

			check_fit(b, npages, n, steps[rnd() % (sizeof(steps) / sizeof(steps[0]))]);
			cases++;
		}
	}
	printf("%u searches matched the bit-by-bit reference\n", cases);
}

static void test_set_against_reference(void **state)
{
	uint64_t b[MAXW], r[MAXW];

	(void)state;
	for (int iter = 0; iter < 20000; iter++) {
		unsigned from = (unsigned)(rnd() % (MAXW * 64));
		unsigned n = (unsigned)(rnd() % (MAXW * 64 - from + 1));
		bool on = rnd() & 1;

		for (unsigned w = 0; w < MAXW; w++)
			b[w] = r[w] = rnd();
		vbi_bits_set(b, from, n, on);
		for (unsigned i = from; i < from + n; i++) {
			if (on)
				r[i >> 6] |= 1ull << (i & 63);
			else
				r[i >> 6] &= ~(1ull << (i & 63));
		}
		if (memcmp(b, r, sizeof(b)))
			fail_msg("vbi_bits_set(%u, %u, %d) differs from the reference", from, n, on);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed),
		cmocka_unit_test(test_random_against_reference),
		cmocka_unit_test(test_set_against_reference),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
