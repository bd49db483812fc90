/* SPDX-License-Identifier: MIT */
/*
 * RCU readers across fork(): a process whose threads are registered RCU
 * readers (core/rcu: vbi_rcu_enter registers lazily) forks, and the child
 * starts threads of its own that register and wait for grace periods, as a
 * child that creates its own verbus context does (the rxe tests' children
 * are forks of a process with a live context).
 *
 * In the child only the forking thread lives on, but liburcu's registry
 * still lists the parent's other threads, in memory that glibc hands to the
 * child's new threads (their stacks, TLS included, are reused and zeroed).
 * Before core/rcu.c dropped them in a fork handler, the child's first
 * registrations and grace periods walked that zeroed memory
 * (peer_reap_test's publisher died of SIGSEGV in urcu_memb_synchronize_rcu).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/rcu.h"

#define NTHREADS 6
#define ROUNDS 20

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int registered;
static bool done;

/* The parent's readers: register, say so, idle until told to end. */
static void *reader(void *arg)
{
	(void)arg;
	vbi_rcu_enter();
	vbi_rcu_leave();
	pthread_mutex_lock(&mu);
	registered++;
	pthread_cond_broadcast(&cv);
	while (!done)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return NULL;
}

/* The child's readers (they touch nothing the parent's threads hold: in
 * the child those are copies with waiters that do not exist). */
static void *child_reader(void *arg)
{
	(void)arg;
	vbi_rcu_enter();
	vbi_rcu_leave();
	return NULL;
}

/* The child: rounds of NTHREADS new readers (they take over the parent
 * threads' stacks), a grace period each. Exit status 0 when all went. */
static int child(void)
{
	for (int r = 0; r < ROUNDS; r++) {
		pthread_t t[NTHREADS];

		for (int i = 0; i < NTHREADS; i++)
			if (pthread_create(&t[i], NULL, child_reader, NULL))
				return 2;
		for (int i = 0; i < NTHREADS; i++)
			pthread_join(t[i], NULL);
		vbi_rcu_enter();
		vbi_rcu_leave();
		vbi_rcu_synchronize();
	}
	return 0;
}

static void test_child_after_fork(void **state)
{
	pthread_t t[NTHREADS];
	pid_t pid;
	int st;

	(void)state;
	vbi_rcu_enter(); /* the forking thread is a reader too */
	vbi_rcu_leave();
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, reader, NULL), 0);
	pthread_mutex_lock(&mu);
	while (registered < NTHREADS)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child());
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("the child died of signal %d", WTERMSIG(st));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);

	/* the parent's readers are untouched: a grace period with them */
	vbi_rcu_synchronize();
	pthread_mutex_lock(&mu);
	done = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	vbi_rcu_synchronize();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_child_after_fork),
	};

#if defined(__SANITIZE_THREAD__)
	/* ThreadSanitizer does not support threads started after a
	 * multi-threaded fork (it makes the child die): nothing to check */
	printf("skipped under TSan: no threads after a multi-threaded fork\n");
	return 77;
#endif
	return cmocka_run_group_tests(tests, NULL, NULL);
}
