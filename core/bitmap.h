/* SPDX-License-Identifier: MIT */
/*
 * Page bitmaps of the memory pool's chunks (core/mempool_chunk.c): one bit
 * per page, set when the page is handed out. Pure functions over an array
 * of 64-bit words, a word at a time: a 2 MiB chunk is 512 pages, 8 words,
 * and a search that walked its free runs bit by bit cost about 2,300
 * instructions per chunk, for every chunk, for each extent (most of a
 * connection's set-up in the publisher's profile).
 * Bits at and past @npages in the last word are never looked at as pages.
 * No locking: the caller's (the pool's lock).
 */
#ifndef VERBUS_CORE_BITMAP_H
#define VERBUS_CORE_BITMAP_H

#include <stdbool.h>
#include <stdint.h>

/* The first bit at or after @i that is set (@set) or clear (!@set); @npages
 * when there is none before @npages. */
static inline unsigned vbi_bits_next(const uint64_t *b, unsigned i, unsigned npages, bool set)
{
	while (i < npages) {
		uint64_t w = set ? b[i >> 6] : ~b[i >> 6];

		w >>= i & 63;
		if (w) {
			i += (unsigned)__builtin_ctzll(w);
			return i < npages ? i : npages;
		}
		i = (i | 63) + 1;
	}
	return npages;
}

/* Bits [@from, @from + @n) set (@on) or cleared. */
static inline void vbi_bits_set(uint64_t *b, unsigned from, unsigned n, bool on)
{
	unsigned i = from, end = from + n;

	while (i < end) {
		unsigned k = end - i < 64 - (i & 63) ? end - i : 64 - (i & 63);
		uint64_t m = (k == 64 ? ~0ull : ((1ull << k) - 1)) << (i & 63);

		if (on)
			b[i >> 6] |= m;
		else
			b[i >> 6] &= ~m;
		i += k;
	}
}

/*
 * Best fit: the shortest run of clear bits in [0, @npages) that holds @n
 * bits starting at a multiple of @step (> 0), the first such run on a tie.
 * Returns its first usable bit and sets *@run to the run's length, or
 * returns -1 (and *@run ~0u) when none fits.
 */
static inline long vbi_bits_best_fit(const uint64_t *b, unsigned npages, unsigned n,
				     unsigned step, unsigned *run)
{
	long best = -1;
	unsigned best_len = ~0u, i = 0;

	while ((i = vbi_bits_next(b, i, npages, false)) < npages) {
		unsigned s = i, start = (i + step - 1) / step * step;

		i = vbi_bits_next(b, i, npages, true);
		if (start + n <= i && i - s < best_len) {
			best_len = i - s;
			best = start;
		}
	}
	*run = best_len;
	return best;
}

#endif
