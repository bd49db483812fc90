/* SPDX-License-Identifier: MIT */
/*
 * vbi_mutex_t (core/lock.h): the inline futex mutex the data path takes
 * per message (a peer's txlock, APP mode's progress_lock).
 *
 * test_mutual_exclusion: THREADS threads each add ROUNDS times to a plain
 * counter under the lock, checking that nobody else is inside: the sum is
 * exact and nobody ever met another inside (under TSan, a missing
 * acquire/release order is a reported race on the counter).
 * test_trylock: taken when free, refused at once while another thread
 * holds it, taken again once that thread let it go.
 * test_waiter_woken: a thread blocked in the contended path (the futex
 * wait) is woken by the unlock and gets the lock; after everyone is done
 * the mutex reads free (0).
 * test_cond_timeout: vbi_cond_timedwait with nobody broadcasting returns
 * ETIMEDOUT once its deadline passed (not before), the mutex held again.
 * test_cond_broadcast: WAITERS threads wait for a flag in a loop (10 s
 * deadlines); the flag set and broadcast under the mutex wakes them all,
 * none by its deadline. Every wait here is bounded.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <time.h>
#include <cmocka.h>

#include "core/lock.h"

#define THREADS 4
#define ROUNDS 100000

static vbi_mutex_t mu;
static uint64_t counter;  /* under mu */
static atomic_int inside; /* threads between lock and unlock */
static atomic_int overlaps;

static void *adder(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		vbi_mutex_lock(&mu);
		/* relaxed: no order of their own, which would hide a lock
		 * that orders nothing from TSan */
		if (atomic_fetch_add_explicit(&inside, 1, memory_order_relaxed) != 0)
			atomic_fetch_add_explicit(&overlaps, 1, memory_order_relaxed);
		counter++;
		atomic_fetch_sub_explicit(&inside, 1, memory_order_relaxed);
		vbi_mutex_unlock(&mu);
	}
	return NULL;
}

static void test_mutual_exclusion(void **state)
{
	pthread_t t[THREADS];

	(void)state;
	vbi_mutex_init(&mu);
	counter = 0;
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, adder, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&overlaps), 0);
	assert_true(counter == (uint64_t)THREADS * ROUNDS);
	assert_int_equal(atomic_load(&mu.v), 0);
}

static atomic_int phase; /* holder: 1 holding, 2 asked to let go, 3 let go */

static void *holder(void *arg)
{
	(void)arg;
	vbi_mutex_lock(&mu);
	atomic_store(&phase, 1);
	while (atomic_load(&phase) != 2)
		sched_yield();
	vbi_mutex_unlock(&mu);
	atomic_store(&phase, 3);
	return NULL;
}

/* until *@v == @want, at most 10 s; returns whether it got there */
static int wait_for(atomic_int *v, int want)
{
	struct timespec nap = { 0, 1000000 };

	for (int i = 0; i < 10000 && atomic_load(v) != want; i++)
		nanosleep(&nap, NULL);
	return atomic_load(v) == want;
}

static void test_trylock(void **state)
{
	pthread_t t;

	(void)state;
	vbi_mutex_init(&mu);
	assert_true(vbi_mutex_trylock(&mu));
	vbi_mutex_unlock(&mu);
	atomic_store(&phase, 0);
	assert_int_equal(pthread_create(&t, NULL, holder, NULL), 0);
	assert_true(wait_for(&phase, 1));
	assert_false(vbi_mutex_trylock(&mu));
	atomic_store(&phase, 2);
	assert_true(wait_for(&phase, 3));
	pthread_join(t, NULL);
	assert_true(vbi_mutex_trylock(&mu));
	vbi_mutex_unlock(&mu);
	assert_int_equal(atomic_load(&mu.v), 0);
}

static atomic_int got; /* the waiter has the lock */

static void *waiter(void *arg)
{
	(void)arg;
	vbi_mutex_lock(&mu); /* blocks: the main thread holds it */
	atomic_store(&got, 1);
	vbi_mutex_unlock(&mu);
	return NULL;
}

static void test_waiter_woken(void **state)
{
	pthread_t t;

	(void)state;
	vbi_mutex_init(&mu);
	atomic_store(&got, 0);
	vbi_mutex_lock(&mu);
	assert_int_equal(pthread_create(&t, NULL, waiter, NULL), 0);
	/* the waiter marks the mutex contended (2) before it sleeps */
	assert_true(wait_for(&mu.v, 2));
	assert_int_equal(atomic_load(&got), 0);
	vbi_mutex_unlock(&mu); /* finds 2: wakes it */
	assert_true(wait_for(&got, 1));
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&mu.v), 0);
}

static void deadline_in(struct timespec *dl, long ms)
{
	clock_gettime(CLOCK_REALTIME, dl);
	dl->tv_sec += ms / 1000;
	dl->tv_nsec += (ms % 1000) * 1000000L;
	if (dl->tv_nsec >= 1000000000L) {
		dl->tv_sec++;
		dl->tv_nsec -= 1000000000L;
	}
}

static void test_cond_timeout(void **state)
{
	vbi_cond_t c;
	struct timespec dl, now;
	int rc = 0;

	(void)state;
	vbi_mutex_init(&mu);
	vbi_cond_init(&c);
	deadline_in(&dl, 50);
	vbi_mutex_lock(&mu);
	while (rc != ETIMEDOUT) /* a spurious return may come first */
		rc = vbi_cond_timedwait(&c, &mu, &dl);
	clock_gettime(CLOCK_REALTIME, &now);
	assert_true(now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec));
	assert_int_equal(atomic_load(&mu.v), 1); /* held again, by us */
	vbi_mutex_unlock(&mu);
	assert_int_equal(atomic_load(&c.waiters), 0);
}

#define WAITERS 3
static vbi_cond_t cv;
static bool flag;          /* under mu */
static atomic_int woke, timed_out;

static void *flag_waiter(void *arg)
{
	struct timespec dl;

	(void)arg;
	deadline_in(&dl, 10000);
	vbi_mutex_lock(&mu);
	/* the broadcast comes within milliseconds: reaching the deadline
	 * means it did not wake this thread, flag set or not */
	while (!flag)
		if (vbi_cond_timedwait(&cv, &mu, &dl) == ETIMEDOUT) {
			atomic_fetch_add(&timed_out, 1);
			break;
		}
	vbi_mutex_unlock(&mu);
	atomic_fetch_add(&woke, 1);
	return NULL;
}

static void test_cond_broadcast(void **state)
{
	pthread_t t[WAITERS];

	(void)state;
	vbi_mutex_init(&mu);
	vbi_cond_init(&cv);
	flag = false;
	for (int i = 0; i < WAITERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, flag_waiter, NULL), 0);
	/* all of them in the wait (each counted itself under mu), 10 s at most */
	for (int i = 0; i < 10000 && atomic_load(&cv.waiters) != WAITERS; i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	assert_int_equal(atomic_load(&cv.waiters), WAITERS);
	vbi_mutex_lock(&mu);
	flag = true;
	vbi_cond_broadcast(&cv);
	vbi_mutex_unlock(&mu);
	assert_true(wait_for(&woke, WAITERS));
	for (int i = 0; i < WAITERS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&timed_out), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mutual_exclusion),
		cmocka_unit_test(test_trylock),
		cmocka_unit_test(test_waiter_woken),
		cmocka_unit_test(test_cond_timeout),
		cmocka_unit_test(test_cond_broadcast),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
