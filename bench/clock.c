/* SPDX-License-Identifier: MIT */
/*
 * Calibration of the benchmark's TSC clock (see clock.h): the TSC and
 * CLOCK_MONOTONIC are read together around a 20 ms sleep, five times;
 * the median rate is kept. When the middle three rates disagree by more
 * than 1 % (a TSC that is not constant, a migration between CPUs whose TSCs
 * differ) the TSC is not used and the clock stays on CLOCK_MONOTONIC.
 */
#include "bench/clock.h"

double vbb_ns_per_tick;
static int calibrated;

#if VBB_HAVE_TSC
static double one_rate(void)
{
	struct timespec nap = { 0, 20000000 };
	uint64_t n0, n1, t0, t1;

	t0 = __rdtsc();
	n0 = vbb_mono_ns();
	nanosleep(&nap, NULL);
	t1 = __rdtsc();
	n1 = vbb_mono_ns();
	if (n1 <= n0 || t1 <= t0)
		return 0;
	return (double)(n1 - n0) / (double)(t1 - t0);
}
#endif

void vbb_clock_init(void)
{
#if VBB_HAVE_TSC
	double r[5], t;

	if (calibrated)
		return;
	calibrated = 1;
	for (int i = 0; i < 5; i++)
		r[i] = one_rate();
	for (int i = 1; i < 5; i++) /* insertion sort */
		for (int j = i; j > 0 && r[j - 1] > r[j]; j--)
			t = r[j], r[j] = r[j - 1], r[j - 1] = t;
	if (r[1] > 0 && (r[3] - r[1]) / r[2] < 0.01)
		vbb_ns_per_tick = r[2];
#else
	calibrated = 1;
#endif
}

const char *vbb_clock_source(void)
{
	return vbb_ns_per_tick > 0 ? "tsc" : "monotonic";
}
