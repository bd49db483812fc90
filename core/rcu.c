/* SPDX-License-Identifier: MIT */
#include "core/rcu.h"

#include <pthread.h>

#include "core/log.h"

#if defined(__SANITIZE_THREAD__)
char vbi_rcu_tsan_token;
#endif

void vbi_rcu_synchronize(void)
{
	urcu_memb_synchronize_rcu();
	VBI_TSAN_ACQUIRE();
}

/* ---- lazily registered readers ------------------------------------------------------- */

__thread bool vbi_rcu_registered;
static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;

static void rcu_thread_exit(void *arg)
{
	(void)arg;
	vbi_rcu_unregister_thread();
}

static void rcu_key_init(void)
{
	if (pthread_key_create(&rcu_key, rcu_thread_exit))
		vbi_error("no thread key for RCU registration");
}

void vbi_rcu_register_lazily(void)
{
	pthread_once(&rcu_once, rcu_key_init);
	vbi_rcu_register_thread();
	pthread_setspecific(rcu_key, (void *)1);
	vbi_rcu_registered = true;
}
