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
/* The data path's nanoseconds (TSC-scaled where there is a usable TSC). */
uint64_t vbi_now_ns(void);
/* The coarse monotonic clock in milliseconds; its resolution is a scheduler
 * tick (4 ms at HZ=250), so only for waits much longer than that. */
uint64_t vbi_now_ms(void);

#endif
