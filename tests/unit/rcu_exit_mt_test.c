/* SPDX-License-Identifier: MIT */
/*
 * An RCU read-side section in a thread that is exiting, after core/rcu.c's
 * own thread-key destructor has unregistered it: another key's destructor
 * that runs later (an application's, which publishes or destroys a
 * publisher on its way out) enters a section too.
 *
 * The read side runs on the thread's reader through a pointer that
 * unregistering clears (core/rcu.h): such a section must register the
 * thread again (and the destructor then unregisters it once more, in the
 * next round of destructors) rather than use a reader that is gone. A grace
 * period afterwards must not wait for the dead thread.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "core/rcu.h"

static pthread_key_t late_key; /* created after core/rcu.c's: its destructor runs later */
static int late_sections;

static void late_exit(void *arg)
{
	(void)arg;
	vbi_rcu_enter();
	late_sections++;
	vbi_rcu_leave();
}

static void *worker(void *arg)
{
	(void)arg;
	vbi_rcu_enter(); /* registers this thread (and core/rcu.c's key destructor) */
	vbi_rcu_leave();
	pthread_setspecific(late_key, (void *)1);
	return NULL;
}

static void test_section_after_unregister(void **state)
{
	(void)state;
	/* core/rcu.c's key first (the main thread registers), then ours:
	 * glibc runs destructors in key order, so ours runs after the thread
	 * was unregistered */
	vbi_rcu_enter();
	vbi_rcu_leave();
	assert_int_equal(pthread_key_create(&late_key, late_exit), 0);
	for (int i = 0; i < 20; i++) {
		pthread_t t;

		assert_int_equal(pthread_create(&t, NULL, worker, NULL), 0);
		assert_int_equal(pthread_join(t, NULL), 0);
		vbi_rcu_synchronize(); /* waits for no dead reader */
	}
	assert_int_equal(late_sections, 20);
	pthread_key_delete(late_key);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_section_after_unregister),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
