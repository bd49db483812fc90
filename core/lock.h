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
#include <time.h>

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

/*
 * A condition variable for vbi_mutex_t, for broadcasts only: an event
 * count (seq) waited on with a futex. A waiter reads seq under the mutex
 * and sleeps only while it has not changed, so a broadcast made after
 * it let the mutex go is never missed. Wake-ups may be spurious: wait in
 * a loop on the condition. A broadcast with nobody waiting is no system
 * call. Any thread.
 */
typedef struct {
	atomic_uint seq;
	atomic_uint waiters;
} vbi_cond_t;

static inline void vbi_cond_init(vbi_cond_t *c)
{
	atomic_init(&c->seq, 0);
	atomic_init(&c->waiters, 0);
}

void vbi_cond_wake_all_(vbi_cond_t *c);

/* Wake every thread waiting on @c. With the mutex held (its waiters count
 * themselves under it). */
static inline void vbi_cond_broadcast(vbi_cond_t *c)
{
	atomic_fetch_add_explicit(&c->seq, 1, memory_order_relaxed);
	if (atomic_load_explicit(&c->waiters, memory_order_relaxed))
		vbi_cond_wake_all_(c);
}

/* Release @m (held), wait for a broadcast on @c or until @abs
 * (CLOCK_REALTIME, as pthread_cond_timedwait's), take @m again. Returns
 * ETIMEDOUT once @abs has passed, else 0 (a broadcast, or spurious). */
int vbi_cond_timedwait(vbi_cond_t *c, vbi_mutex_t *m, const struct timespec *abs);

#endif
