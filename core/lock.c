/* SPDX-License-Identifier: MIT */
/* The contended halves of vbi_mutex_t (core/lock.h): futex wait and wake. */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/lock.h"

/* @c: what the failed compare-and-swap found (1 or 2). Marks the mutex
 * contended (2) and sleeps until an unlock finds that mark and wakes one
 * waiter; the woken thread marks it contended again when it takes it
 * (it cannot know whether others still wait), so no wake-up is lost. */
void vbi_mutex_wait_(vbi_mutex_t *m, int c)
{
	if (c != 2)
		c = atomic_exchange_explicit(&m->v, 2, memory_order_acquire);
	while (c != 0) {
		/* returns at once if it is no longer 2 (EAGAIN), or on a
		 * signal (EINTR): either way, look again */
		(void)syscall(SYS_futex, &m->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
		c = atomic_exchange_explicit(&m->v, 2, memory_order_acquire);
	}
}

void vbi_mutex_wake_(vbi_mutex_t *m)
{
	(void)syscall(SYS_futex, &m->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
