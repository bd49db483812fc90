/* SPDX-License-Identifier: MIT */
/*
 * RCU read side and grace periods for every layer: liburcu, memb flavour
 * (<urcu/urcu-memb.h>): readers only bump a per-thread counter. Users:
 * core/path (lanes read under the read lock), the library's lanes and
 * publishers (proto: a retired lane's QP is destroyed or recycled only
 * after a grace period), a node's peers and subscribers (the progress
 * thread's per-peer round walks them with no lock: vbi_rcu_assign and
 * vbi_rcu_deref below).
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
/* struct urcu_reader, urcu_memb_gp, urcu_memb_smp_mb_slave(): the read side below */
#include <urcu/static/urcu-memb.h>

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

/* Register / unregister the calling thread (core/rcu.c): besides liburcu's
 * registration they set / clear vbi_rcu_reader, which the read side uses. */
void vbi_rcu_register_thread(void);
void vbi_rcu_unregister_thread(void);

/*
 * The read side, inline. It is liburcu-memb's own (urcu/static/urcu-memb.h,
 * _urcu_memb_read_lock / _urcu_memb_read_unlock, the inline functions
 * liburcu offers callers that accept the ABI tie: the counter protocol and
 * the barriers unchanged), on this thread's reader through a pointer taken
 * when it registered instead of liburcu's thread-local: that thread-local
 * is reached through __tls_get_addr() (global-dynamic, see
 * cmake/VerbusCodegen.cmake), and the out-of-line urcu_memb_read_lock()
 * is a call into liburcu-memb.so that reaches it so each time. A section
 * costs a few loads and stores and no call (docs/benchmarks.md, "vb_progress()
 * keeps its CPU while busy; the RCU read side inline"). A thread must be
 * registered: the pointer is NULL otherwise.
 */
extern __thread struct urcu_reader *vbi_rcu_reader;

#if defined(__SANITIZE_THREAD__)
/* Under ThreadSanitizer, liburcu's own out-of-line read side: its inline
 * code uses plain volatile accesses as atomics (uatomic_read/_set on the
 * grace period's futex), which the tool would report as races once
 * compiled into the library; liburcu itself is not instrumented. */
static inline void vbi_rcu_read_lock(void)
{
	urcu_memb_read_lock();
}

static inline void vbi_rcu_read_unlock(void)
{
	VBI_TSAN_RELEASE();
	urcu_memb_read_unlock();
}
#else
static inline void vbi_rcu_read_lock(void)
{
	struct urcu_reader *r = vbi_rcu_reader;
	unsigned long tmp;

	cmm_barrier();
	tmp = r->ctr;
	if (caa_likely(!(tmp & URCU_GP_CTR_NEST_MASK))) { /* outermost */
		_CMM_STORE_SHARED(r->ctr, _CMM_LOAD_SHARED(urcu_memb_gp.ctr));
		urcu_memb_smp_mb_slave();
	} else {
		_CMM_STORE_SHARED(r->ctr, tmp + URCU_GP_COUNT);
	}
}

static inline void vbi_rcu_read_unlock(void)
{
	struct urcu_reader *r = vbi_rcu_reader;
	unsigned long tmp = r->ctr;

	VBI_TSAN_RELEASE();
	if (caa_likely((tmp & URCU_GP_CTR_NEST_MASK) == URCU_GP_COUNT)) { /* outermost */
		urcu_memb_smp_mb_slave();
		_CMM_STORE_SHARED(r->ctr, tmp - URCU_GP_COUNT);
		urcu_memb_smp_mb_slave();
		urcu_common_wake_up_gp(&urcu_memb_gp);
	} else {
		_CMM_STORE_SHARED(r->ctr, tmp - URCU_GP_COUNT);
	}
	cmm_barrier();
}
#endif

/*
 * Lists whose readers walk them inside a read-side section, with no lock
 * (liburcu's rcu_assign_pointer / rcu_dereference, as the compiler's
 * atomics so that ThreadSanitizer sees them): a writer, holding whatever
 * lock serializes the list's writers, links an element in with
 * vbi_rcu_assign(head, new) once the element is complete, and unlinks one
 * with vbi_rcu_assign(*prev_link, elem->next), leaving elem->next as it
 * is (a reader standing on elem goes on from there); the element is freed
 * only after vbi_rcu_synchronize(). Readers load every link with
 * vbi_rcu_deref(). Reads under the writers' lock may stay plain.
 */
#define vbi_rcu_assign(ptr, val) __atomic_store_n(&(ptr), (val), __ATOMIC_RELEASE)
#define vbi_rcu_deref(ptr) __atomic_load_n(&(ptr), __ATOMIC_ACQUIRE)

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
