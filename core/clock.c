/* SPDX-License-Identifier: MIT */
/*
 * Clocks: CLOCK_MONOTONIC, the data path's TSC-scaled nanoseconds and the
 * coarse millisecond clock. Pure: no state but the TSC rate measured once.
 */
#include "core/clock.h"

#include <pthread.h>
#include <time.h>

uint64_t vbi_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t vbi_real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Nanoseconds for the data path's clocks (publisher stall and RTO clocks,
 * credit and NAK timers, the slow-subscriber check run every progress
 * round; every one of them is read and compared in this clock only): the TSC
 * scaled by a rate measured once, because clock_gettime() can cost a
 * system call and an emulated HPET read per call in a VM (tens of us under
 * TCG, called twice per publish). Falls back to CLOCK_MONOTONIC where there
 * is no usable TSC. Not for timeouts that must be exact.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
/* ns = tsc * vbi_tsc_mult_ >> 32: integer arithmetic, since floating point is
 * emulated call by call under TCG (every progress round reads this clock);
 * 0 until calibrated, or when there is no usable TSC */
uint64_t vbi_tsc_mult_;
static pthread_once_t tsc_once = PTHREAD_ONCE_INIT;
int vbi_tsc_ready_; /* set (release) once vbi_tsc_mult_ is final */

static void tsc_calibrate(void)
{
	struct timespec nap = { 0, 2000000 };
	uint64_t n0 = vbi_mono_ns(), t0 = __rdtsc(), n1, t1;

	nanosleep(&nap, NULL);
	n1 = vbi_mono_ns();
	t1 = __rdtsc();
	if (n1 > n0 && t1 > t0)
		vbi_tsc_mult_ = (uint64_t)(((unsigned __int128)(n1 - n0) << 32) / (t1 - t0));
	__atomic_store_n(&vbi_tsc_ready_, 1, __ATOMIC_RELEASE);
}

uint64_t vbi_now_ns_slow(void)
{
	/* the first call calibrates; vbi_now_ns() scales inline afterwards */
	if (!__atomic_load_n(&vbi_tsc_ready_, __ATOMIC_ACQUIRE))
		pthread_once(&tsc_once, tsc_calibrate);
	if (vbi_tsc_mult_)
		return (uint64_t)(((unsigned __int128)__rdtsc() * vbi_tsc_mult_) >> 32);
	return vbi_mono_ns();
}
#else
uint64_t vbi_now_ns_slow(void)
{
	return vbi_mono_ns();
}
#endif

