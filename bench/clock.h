/* SPDX-License-Identifier: MIT */
/*
 * The benchmark's clock: the TSC, scaled by a rate calibrated once against
 * CLOCK_MONOTONIC (vbb_clock_init(), before any fork so that every process
 * of a run shares the calibration). In a VM clock_gettime() can cost an
 * emulated HPET read (about 2 us under qemu TCG); rdtsc costs neither a
 * system call nor a device access, so per-message stamps do not become part
 * of what is measured. Where there is no TSC, or the calibration fails, the
 * clock falls back to CLOCK_MONOTONIC and vbb_clock_source() says so.
 */
#ifndef VERBUS_BENCH_CLOCK_H
#define VERBUS_BENCH_CLOCK_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define VBB_HAVE_TSC 1
#else
#define VBB_HAVE_TSC 0
#endif

extern double vbb_ns_per_tick; /* 0: no usable TSC, CLOCK_MONOTONIC */

/* Calibrate (once; later calls return at once). About 50 ms. */
void vbb_clock_init(void);
/* "tsc" or "monotonic" */
const char *vbb_clock_source(void);

static inline uint64_t vbb_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Nanoseconds on an arbitrary origin, monotonic within a run. */
static inline uint64_t vbb_now_ns(void)
{
#if VBB_HAVE_TSC
	if (vbb_ns_per_tick > 0)
		return (uint64_t)((double)__rdtsc() * vbb_ns_per_tick);
#endif
	return vbb_mono_ns();
}

#endif
