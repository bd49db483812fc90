/* SPDX-License-Identifier: MIT */
/* Log-linear histogram: bucket geometry, precision bound, percentiles,
 * merge, coordinated-omission correction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "bench/hist.h"

static void test_buckets_cover_and_are_tight(void **state)
{
	/* every bucket's [lo, hi] maps back to itself and touches the next */
	for (unsigned i = 0; i + 1 < VBI_HIST_BUCKETS; i++) {
		uint64_t lo = vbi_hist_bucket_lo(i), hi = vbi_hist_bucket_hi(i);

		assert_true(lo <= hi);
		assert_int_equal(vbi_hist_index(lo), i);
		assert_int_equal(vbi_hist_index(hi), i);
		assert_int_equal(vbi_hist_bucket_lo(i + 1), hi + 1);
		/* relative width within 1/SUB */
		if (lo >= VBI_HIST_SUB)
			assert_true((double)(hi - lo + 1) / (double)lo <= 1.0 / VBI_HIST_SUB + 1e-12);
	}
	assert_int_equal(vbi_hist_index(UINT64_MAX), VBI_HIST_BUCKETS - 1);
	assert_int_equal(vbi_hist_bucket_hi(VBI_HIST_BUCKETS - 1), UINT64_MAX);
}

static void test_percentiles(void **state)
{
	static struct vbi_hist h;

	vbi_hist_init(&h);
	assert_int_equal(vbi_hist_pct(&h, 50), 0);
	for (uint64_t v = 1; v <= 10000; v++)
		vbi_hist_record(&h, v * 1000); /* 1 us .. 10 ms in ns */
	assert_int_equal(h.count, 10000);
	assert_int_equal(h.min, 1000);
	assert_int_equal(h.max, 10000000);
	uint64_t p50 = vbi_hist_pct(&h, 50), p99 = vbi_hist_pct(&h, 99);
	/* exact p50 = 5,000,000, p99 = 9,900,000; within one bucket (3.2 %) above */
	assert_true(p50 >= 5000000 && p50 <= 5000000 * 1.033);
	assert_true(p99 >= 9900000 && p99 <= 9900000 * 1.033);
	assert_int_equal(vbi_hist_pct(&h, 100), 10000000);
	assert_int_equal(vbi_hist_pct(&h, 0), 1000);
	assert_true(vbi_hist_mean(&h) > 5000000 && vbi_hist_mean(&h) < 5001000);
}

static void test_merge_and_small_values(void **state)
{
	static struct vbi_hist a, b;

	vbi_hist_init(&a);
	vbi_hist_init(&b);
	for (int i = 0; i < 10; i++)
		vbi_hist_record(&a, 7);
	for (int i = 0; i < 30; i++)
		vbi_hist_record(&b, 20);
	vbi_hist_merge(&a, &b);
	assert_int_equal(a.count, 40);
	assert_int_equal(vbi_hist_pct(&a, 25), 7); /* values < 32 are exact */
	assert_int_equal(vbi_hist_pct(&a, 26), 20);
	assert_int_equal(a.min, 7);
	assert_int_equal(a.max, 20);
}

static void test_coordinated_omission_correction(void **state)
{
	static struct vbi_hist h;

	vbi_hist_init(&h);
	/* one 1000-unit stall at a 100-unit send interval hides 9 sends that
	 * would have waited 900, 800, ..., 100 */
	vbi_hist_record_corrected(&h, 1000, 100);
	assert_int_equal(h.count, 10);
	assert_int_equal(h.min, 100);
	assert_int_equal(h.max, 1000);
	vbi_hist_record_corrected(&h, 50, 100); /* below the interval: one sample */
	assert_int_equal(h.count, 11);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets_cover_and_are_tight),
		cmocka_unit_test(test_percentiles),
		cmocka_unit_test(test_merge_and_small_values),
		cmocka_unit_test(test_coordinated_omission_correction),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
