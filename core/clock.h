/* SPDX-License-Identifier: MIT */
/*
 * Clocks (core/clock.c). Thread-safety: any thread; vbi_now_ns() measures
 * the TSC rate once (pthread_once) on its first call.
 */
#ifndef VERBUS_CORE_CLOCK_H
#define VERBUS_CORE_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t vbi_mono_ns(void);
/* CLOCK_REALTIME (wall clock) in nanoseconds since the epoch. */
uint64_t vbi_real_ns(void);
/* The data path's nanoseconds (TSC-scaled where there is a usable TSC).
 * Read several times per message and every progress round: the scaling is
 * inline once the rate is measured (a call costs more than the read under
 * TCG), vbi_now_ns_slow() before that or without a usable TSC. */
uint64_t vbi_now_ns_slow(void);
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
extern uint64_t vbi_tsc_mult_; /* clock.c: final once vbi_tsc_ready_ */
extern int vbi_tsc_ready_;
static inline uint64_t vbi_now_ns(void)
{
	if (__atomic_load_n(&vbi_tsc_ready_, __ATOMIC_ACQUIRE) && vbi_tsc_mult_)
		return (uint64_t)(((unsigned __int128)__rdtsc() * vbi_tsc_mult_) >> 32);
	return vbi_now_ns_slow();
}
#else
static inline uint64_t vbi_now_ns(void)
{
	return vbi_now_ns_slow();
}
#endif
/* Milliseconds of vbi_now_ns()'s clock (inline: the data path reads it
 * per delivery and per keepalive check). For timers in milliseconds
 * (heartbeats, keepalives, stream idleness); compare it only with itself. */
static inline uint64_t vbi_now_ms(void)
{
	return vbi_now_ns() / 1000000u;
}

#endif
