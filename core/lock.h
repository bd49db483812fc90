/* SPDX-License-Identifier: MIT */
/*
 * A mutex whose uncontended lock and unlock are inline (core/lock.c holds
 * the waits): one compare-and-swap and one exchange, no call. For the
 * locks the data path takes per message (a peer's txlock, a lane's own
 * lock before it is bound, APP mode's progress_lock): under TCG a call and
 * its return cost more than the lock itself, and glibc's unlock makes two.
 * No condition variable waits on one (a pthread mutex where one does).
 *
 * The futex mutex of Drepper's "Futexes Are Tricky" (mutex 3): 0 free,
 * 1 held, 2 held with a thread (maybe) waiting. Not recursive, not
 * robust, no owner check: unlocking what this thread does not hold is a
 * bug as with a default pthread mutex. Any thread. Acquire on lock,
 * release on unlock: ThreadSanitizer sees the order through the atomics.
 */
#ifndef VERBUS_CORE_LOCK_H
#define VERBUS_CORE_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct {
	atomic_int v;
} vbi_mutex_t;

static inline void vbi_mutex_init(vbi_mutex_t *m)
{
	atomic_init(&m->v, 0);
}

/* Nothing to release; the mutex must be free. */
static inline void vbi_mutex_destroy(vbi_mutex_t *m)
{
	(void)m;
}

/* core/lock.c: the contended halves */
void vbi_mutex_wait_(vbi_mutex_t *m, int c);
void vbi_mutex_wake_(vbi_mutex_t *m);

static inline void vbi_mutex_lock(vbi_mutex_t *m)
{
	int c = 0;

	if (!atomic_compare_exchange_strong_explicit(&m->v, &c, 1, memory_order_acquire,
						     memory_order_relaxed))
		vbi_mutex_wait_(m, c);
}

/* True when this thread now holds @m; false (at once) when another does. */
static inline bool vbi_mutex_trylock(vbi_mutex_t *m)
{
	int c = 0;

	return atomic_compare_exchange_strong_explicit(&m->v, &c, 1, memory_order_acquire,
						       memory_order_relaxed);
}

static inline void vbi_mutex_unlock(vbi_mutex_t *m)
{
	if (atomic_exchange_explicit(&m->v, 0, memory_order_release) == 2)
		vbi_mutex_wake_(m);
}

#endif
