/* SPDX-License-Identifier: MIT */
/*
 * HDR-style log-linear histogram of non-negative 64-bit values (nanoseconds
 * in verbus). Each power-of-two range [2^e, 2^(e+1)) is split into
 * VBI_HIST_SUB equal sub-buckets, so every recorded value is known to within
 * 1/VBI_HIST_SUB of itself (3.1 % with 32): no sample arrays, fixed memory
 * (about 15 KiB), O(1) record, percentiles by one cumulative scan.
 *
 * Thread-safety: none; one histogram per thread, merge afterwards with
 * vbi_hist_merge().
 */
#ifndef VERBUS_BENCH_HIST_H
#define VERBUS_BENCH_HIST_H

#include <stdint.h>

#define VBI_HIST_SUB_BITS 5
#define VBI_HIST_SUB (1u << VBI_HIST_SUB_BITS)
#define VBI_HIST_EXP 59 /* values up to 2^64-1 */
#define VBI_HIST_BUCKETS ((VBI_HIST_EXP + 1) * VBI_HIST_SUB)

struct vbi_hist {
	uint64_t count;
	uint64_t min, max;
	double sum;
	uint64_t b[VBI_HIST_BUCKETS];
};

void vbi_hist_init(struct vbi_hist *h);
void vbi_hist_record(struct vbi_hist *h, uint64_t v);
/* Record @v and, for fixed-rate runs, the samples coordinated omission would
 * hide: while v exceeds @interval, also v - interval, v - 2*interval, ... */
void vbi_hist_record_corrected(struct vbi_hist *h, uint64_t v, uint64_t interval);
void vbi_hist_merge(struct vbi_hist *dst, const struct vbi_hist *src);
/* Value at percentile @p (0..100): the upper edge of the bucket holding it,
 * clamped to [min, max]; 0 for an empty histogram. */
uint64_t vbi_hist_pct(const struct vbi_hist *h, double p);
double vbi_hist_mean(const struct vbi_hist *h);

/* Bucket index of @v and the lowest/highest value that bucket holds. */
unsigned vbi_hist_index(uint64_t v);
uint64_t vbi_hist_bucket_lo(unsigned idx);
uint64_t vbi_hist_bucket_hi(unsigned idx);

#endif
