/* SPDX-License-Identifier: MIT */
/*
 * core/clock: the data path's clock (vbi_now_ns, the TSC scaled in
 * integers) runs at the rate of CLOCK_MONOTONIC, and every clock moves
 * forward. What would break: a wrong scale (a shift or a calibration
 * off by a factor makes every timer of the data path fire at the wrong
 * rate: RTO, slow-subscriber cut, the per-peer round).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <cmocka.h>

#include "core/clock.h"

/* One interval of @ms measured by both clocks, as a ratio now/mono. The
 * reads of the two clocks are adjacent; a preemption between them skews
 * one try, so the caller tries several times. */
static double rate_once(unsigned ms)
{
	struct timespec nap = { ms / 1000, (long)(ms % 1000) * 1000000L };
	uint64_t n0 = vbi_now_ns(), m0 = vbi_mono_ns(), n1, m1;

	nanosleep(&nap, NULL);
	m1 = vbi_mono_ns();
	n1 = vbi_now_ns();
	if (m1 <= m0)
		return 0;
	return (double)(n1 - n0) / (double)(m1 - m0);
}

static void test_now_runs_at_the_monotonic_rate(void **state)
{
	double r = 0;

	(void)state;
	/* within 10 %, in one of 8 tries of 50 ms: a wrong scale is off by
	 * far more in every try; a loaded host skews some tries, not all */
	for (int i = 0; i < 8 && !(r > 0.9 && r < 1.1); i++)
		r = rate_once(50);
	printf("vbi_now_ns / CLOCK_MONOTONIC over 50 ms: %.4f\n", r);
	assert_true(r > 0.9 && r < 1.1);
}

static void test_clocks_move_forward(void **state)
{
	uint64_t n = vbi_now_ns(), m = vbi_now_ms(), r = vbi_real_ns();
	struct timespec nap = { 0, 20000000L };

	(void)state;
	assert_true(n > 0 && r > 0);
	for (int i = 0; i < 100000; i++) {
		uint64_t x = vbi_now_ns();

		assert_true(x >= n);
		n = x;
	}
	nanosleep(&nap, NULL);
	/* milliseconds: at least 20 of them passed (19 whole ones read) */
	assert_true(vbi_now_ms() >= m + 19);
	assert_true(vbi_real_ns() > r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_now_runs_at_the_monotonic_rate),
		cmocka_unit_test(test_clocks_move_forward),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
