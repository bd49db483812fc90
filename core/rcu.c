/* SPDX-License-Identifier: MIT */
#include "core/rcu.h"

#include <pthread.h>
#include <stdlib.h>
/* struct urcu_reader and urcu_memb_reader (<urcu/static/urcu-memb.h>, from
 * core/rcu.h): a thread's registry entry (the fork handler below unlinks
 * those of the threads a child does not have). */
/* liburcu's own thread-local, read here once per thread: reached the
 * general way, so that the library's initial-exec model
 * (cmake/VerbusCodegen.cmake) does not force liburcu-memb's TLS into the
 * static block as well */
extern __thread struct urcu_reader urcu_memb_reader __attribute__((tls_model("global-dynamic")));

#include "core/log.h"

#if defined(__SANITIZE_THREAD__)
char vbi_rcu_tsan_token;
#endif

/*
 * fork(): in the child only the forking thread lives on, but liburcu-memb's
 * registry still lists the parent's other registered threads. Their
 * entries are in their TLS, whose memory glibc hands to the child's new
 * threads (the dead threads' stacks are reused, TLS zeroed): the child's
 * first registration or grace period then walks zeroed list nodes
 * (tests/unit/rcu_fork_mt_test). The threads registered here are tracked
 * on the heap, and the child's fork handler unlinks every one but its own
 * while that memory is still intact. Grace periods are held off across
 * fork() too (sync_lock), so the child never inherits liburcu's locks held
 * by a synchronize_rcu that was running in another thread.
 */
struct rcu_reg {
	struct rcu_reg *next;
	pthread_t tid;
	struct urcu_reader *reader;
};
static struct rcu_reg *regs;        /* reg_lock */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t sync_lock = PTHREAD_RWLOCK_INITIALIZER;

void vbi_rcu_synchronize(void)
{
	pthread_rwlock_rdlock(&sync_lock);
	urcu_memb_synchronize_rcu();
	pthread_rwlock_unlock(&sync_lock);
	VBI_TSAN_ACQUIRE();
}

static void fork_prepare(void)
{
	pthread_rwlock_wrlock(&sync_lock);
	pthread_mutex_lock(&reg_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&reg_lock);
	pthread_rwlock_unlock(&sync_lock);
}

static void fork_child(void)
{
	pthread_t self = pthread_self();

	for (struct rcu_reg **q = &regs; *q;) {
		struct rcu_reg *g = *q;

		if (pthread_equal(g->tid, self)) {
			q = &g->next;
			continue;
		}
		cds_list_del(&g->reader->node);
		*q = g->next;
		free(g);
	}
	/* made anew: the child's thread has another TID than the parent's
	 * that locked them (a write-locked rwlock is its owner's to unlock) */
	pthread_mutex_init(&reg_lock, NULL);
	pthread_rwlock_init(&sync_lock, NULL);
}

/* ---- registration ------------------------------------------------------------------ */

__thread struct urcu_reader *vbi_rcu_reader;

void vbi_rcu_register_thread(void)
{
	urcu_memb_register_thread();
	vbi_rcu_reader = &URCU_TLS(urcu_memb_reader);
}

void vbi_rcu_unregister_thread(void)
{
	urcu_memb_unregister_thread();
	vbi_rcu_reader = NULL;
}

/* ---- lazily registered readers ------------------------------------------------------- */

__thread bool vbi_rcu_registered;
static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;

static void rcu_thread_exit(void *arg)
{
	pthread_t self = pthread_self();

	(void)arg;
	pthread_mutex_lock(&reg_lock);
	for (struct rcu_reg **q = &regs; *q; q = &(*q)->next)
		if (pthread_equal((*q)->tid, self)) {
			struct rcu_reg *g = *q;

			*q = g->next;
			free(g);
			break;
		}
	vbi_rcu_unregister_thread();
	/* a read section after this (another key's destructor running later)
	 * registers the thread again instead of using the reader that is gone
	 * (tests/unit/rcu_exit_mt_test) */
	vbi_rcu_registered = false;
	pthread_mutex_unlock(&reg_lock);
}

static void rcu_key_init(void)
{
	if (pthread_key_create(&rcu_key, rcu_thread_exit))
		vbi_error("no thread key for RCU registration");
	if (pthread_atfork(fork_prepare, fork_parent, fork_child))
		vbi_error("no fork handlers for RCU registration: a forked child may crash");
}

void vbi_rcu_register_lazily(void)
{
	struct rcu_reg *g = malloc(sizeof(*g));

	pthread_once(&rcu_once, rcu_key_init);
	pthread_mutex_lock(&reg_lock);
	vbi_rcu_register_thread();
	if (g) {
		g->tid = pthread_self();
		g->reader = vbi_rcu_reader; /* set by vbi_rcu_register_thread */
		g->next = regs;
		regs = g;
	} else {
		vbi_warn("RCU registration not tracked (out of memory): a forked child may crash");
	}
	pthread_mutex_unlock(&reg_lock);
	pthread_setspecific(rcu_key, (void *)1);
	vbi_rcu_registered = true;
}
