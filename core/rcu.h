/* SPDX-License-Identifier: MIT */
/*
 * RCU read side and grace periods for every layer: liburcu, memb flavour
 * (<urcu/urcu-memb.h>): readers only bump a per-thread counter. Users:
 * core/path (lanes read under the read lock), the library's lanes and
 * publishers (proto: a retired lane's QP is destroyed or recycled only
 * after a grace period).
 *
 * Every thread that reads under the lock or waits for a grace period must be
 * registered: vbi_rcu_register_thread() once, and vbi_rcu_unregister_thread()
 * before it exits.
 *
 * Under ThreadSanitizer the grace period is also announced to the tool
 * (readers release, synchronizers acquire one token, vbi_rcu_tsan_token in
 * core/rcu.c) since liburcu's own barriers are invisible to it.
 *
 * Synchronization table:
 *   call                           may run concurrently with
 *   vbi_rcu_read_lock/unlock       everything, in registered threads; nests.
 *   vbi_rcu_enter/leave            everything, in any thread (registers it).
 *   vbi_rcu_synchronize            anything, but never inside a read-side
 *                                  critical section (deadlock).
 *   vbi_rcu_register_thread,       anything; once per thread each.
 *   vbi_rcu_unregister_thread
 */
#ifndef VERBUS_CORE_RCU_H
#define VERBUS_CORE_RCU_H

#include <stdbool.h>
#include <urcu/urcu-memb.h>

#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char vbi_rcu_tsan_token;
#define VBI_TSAN_RELEASE() __tsan_release(&vbi_rcu_tsan_token)
#define VBI_TSAN_ACQUIRE() __tsan_acquire(&vbi_rcu_tsan_token)
#else
#define VBI_TSAN_RELEASE() do { } while (0)
#define VBI_TSAN_ACQUIRE() do { } while (0)
#endif

static inline void vbi_rcu_register_thread(void)
{
	urcu_memb_register_thread();
}

static inline void vbi_rcu_unregister_thread(void)
{
	urcu_memb_unregister_thread();
}

static inline void vbi_rcu_read_lock(void)
{
	urcu_memb_read_lock();
}

static inline void vbi_rcu_read_unlock(void)
{
	VBI_TSAN_RELEASE();
	urcu_memb_read_unlock();
}

/* The read side for threads that register lazily (any thread that posts
 * or publishes, the application's included): the first call registers
 * the calling thread, which is unregistered when it exits (a thread key's
 * destructor); then it read-locks. */
extern __thread bool vbi_rcu_registered;
void vbi_rcu_register_lazily(void);

static inline void vbi_rcu_enter(void)
{
	if (__builtin_expect(!vbi_rcu_registered, 0))
		vbi_rcu_register_lazily();
	vbi_rcu_read_lock();
}

static inline void vbi_rcu_leave(void)
{
	vbi_rcu_read_unlock();
}

/* Wait for every read-side critical section that began before the call.
 * Out of line (core/rcu.c): it blocks for a grace period anyway. */
void vbi_rcu_synchronize(void);

#endif
