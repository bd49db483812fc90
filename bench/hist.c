/* SPDX-License-Identifier: MIT */
#include "bench/hist.h"

#include <string.h>

/*
 * Values below VBI_HIST_SUB get one bucket each (exponent 0 holds 0..31).
 * Above, a value with its highest set bit at position m (m >= SUB_BITS)
 * lands in group e = m - SUB_BITS + 1, sub-bucket = the SUB_BITS bits below
 * the top bit.
 */
unsigned vbi_hist_index(uint64_t v)
{
	unsigned m, e, sub;

	if (v < VBI_HIST_SUB)
		return (unsigned)v;
	m = 63u - (unsigned)__builtin_clzll(v);
	e = m - VBI_HIST_SUB_BITS + 1;
	sub = (unsigned)(v >> (m - VBI_HIST_SUB_BITS)) & (VBI_HIST_SUB - 1);
	return e * VBI_HIST_SUB + sub;
}

uint64_t vbi_hist_bucket_lo(unsigned idx)
{
	unsigned e = idx / VBI_HIST_SUB, sub = idx % VBI_HIST_SUB;

	if (e == 0)
		return sub;
	return ((uint64_t)(VBI_HIST_SUB + sub)) << (e - 1);
}

uint64_t vbi_hist_bucket_hi(unsigned idx)
{
	unsigned e = idx / VBI_HIST_SUB;

	if (e == 0)
		return idx;
	return vbi_hist_bucket_lo(idx) + ((uint64_t)1 << (e - 1)) - 1;
}

void vbi_hist_init(struct vbi_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

void vbi_hist_record(struct vbi_hist *h, uint64_t v)
{
	h->b[vbi_hist_index(v)]++;
	h->count++;
	h->sum += (double)v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

void vbi_hist_record_corrected(struct vbi_hist *h, uint64_t v, uint64_t interval)
{
	vbi_hist_record(h, v);
	if (!interval)
		return;
	for (uint64_t missed = v; missed > interval;) {
		missed -= interval;
		vbi_hist_record(h, missed);
	}
}

void vbi_hist_merge(struct vbi_hist *dst, const struct vbi_hist *src)
{
	if (!src->count)
		return;
	for (unsigned i = 0; i < VBI_HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t vbi_hist_pct(const struct vbi_hist *h, double p)
{
	uint64_t rank, seen = 0;

	if (!h->count)
		return 0;
	if (p <= 0)
		return h->min;
	if (p >= 100)
		return h->max;
	/* rank of the sample at p: ceil(p/100 * count), at least 1 */
	rank = (uint64_t)(p / 100.0 * (double)h->count);
	if ((double)rank < p / 100.0 * (double)h->count)
		rank++;
	if (!rank)
		rank = 1;
	for (unsigned i = 0; i < VBI_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t v = vbi_hist_bucket_hi(i);

			if (v > h->max)
				v = h->max;
			if (v < h->min)
				v = h->min;
			return v;
		}
	}
	return h->max;
}

double vbi_hist_mean(const struct vbi_hist *h)
{
	return h->count ? h->sum / (double)h->count : 0.0;
}
