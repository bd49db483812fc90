/* SPDX-License-Identifier: MIT */
/* The contended halves of vbi_mutex_t (core/lock.h): futex wait and wake. */
#include <errno.h>
#include <linux/futex.h>
#include <limits.h>
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

void vbi_cond_wake_all_(vbi_cond_t *c)
{
	(void)syscall(SYS_futex, &c->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

int vbi_cond_timedwait(vbi_cond_t *c, vbi_mutex_t *m, const struct timespec *abs)
{
	unsigned seq = atomic_load_explicit(&c->seq, memory_order_relaxed);
	long r;
	int e;

	atomic_fetch_add_explicit(&c->waiters, 1, memory_order_relaxed);
	vbi_mutex_unlock(m);
	/* absolute, on CLOCK_REALTIME; returns at once if seq moved */
	r = syscall(SYS_futex, &c->seq, FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME, seq, abs,
		    NULL, FUTEX_BITSET_MATCH_ANY);
	e = r ? errno : 0;
	atomic_fetch_sub_explicit(&c->waiters, 1, memory_order_relaxed);
	vbi_mutex_lock(m);
	return e == ETIMEDOUT ? ETIMEDOUT : 0;
}
