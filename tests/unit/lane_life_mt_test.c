/* SPDX-License-Identifier: MIT */
/*
 * A lane's life (engine/engine.h, enum vbi_lane_life): LIVE -> RETIRING ->
 * DRAINING, raised one way. One thread: each step, the way back refused,
 * and vbi_lane_destroy_now's jump from LIVE to DRAINING. Many threads: on
 * each of 20,000 lanes, 8 threads raise at once (to RETIRING or DRAINING,
 * at random); exactly one of them must find the lane LIVE (the hand-over
 * to the conductor that vbi_lane_retire makes once), and every lane must
 * end at the highest state asked for. (With the raise made a load and a
 * store instead of one compare-and-swap, the race fails in 6 runs of 6.)
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine.h"

#define LANES 20000
#define THREADS 8

static void test_one_way(void **state)
{
	struct vbi_lane *l = calloc(1, sizeof(*l));

	(void)state;
	assert_non_null(l);
	assert_false(vbi_lane_dead(l)); /* a new (zeroed) lane is LIVE */
	assert_int_equal(vbi_lane_life_raise(l, VBI_LANE_RETIRING), VBI_LANE_LIVE);
	assert_true(vbi_lane_dead(l));
	assert_false(vbi_lane_draining(l));
	/* a second retirement finds it handed over already */
	assert_int_equal(vbi_lane_life_raise(l, VBI_LANE_RETIRING), VBI_LANE_RETIRING);
	assert_int_equal(vbi_lane_life_raise(l, VBI_LANE_DRAINING), VBI_LANE_RETIRING);
	assert_true(vbi_lane_draining(l));
	/* never back */
	assert_int_equal(vbi_lane_life_raise(l, VBI_LANE_RETIRING), VBI_LANE_DRAINING);
	assert_int_equal(vbi_lane_life_raise(l, VBI_LANE_LIVE), VBI_LANE_DRAINING);
	assert_true(vbi_lane_draining(l));
	assert_true(vbi_lane_dead(l));
	free(l);
}

static void test_destroy_from_live(void **state)
{
	struct vbi_lane *l = calloc(1, sizeof(*l));

	(void)state;
	assert_non_null(l);
	assert_int_equal(vbi_lane_life_raise(l, VBI_LANE_DRAINING), VBI_LANE_LIVE);
	assert_true(vbi_lane_draining(l));
	assert_true(vbi_lane_dead(l));
	/* a retirement asked for afterwards does not hand it over again */
	assert_int_equal(vbi_lane_life_raise(l, VBI_LANE_RETIRING), VBI_LANE_DRAINING);
	free(l);
}

struct race {
	struct vbi_lane *lanes;
	uint8_t asked[THREADS][LANES];      /* what each thread raised to */
	uint8_t found[THREADS][LANES];      /* the state it found */
	pthread_barrier_t go;
	unsigned seed[THREADS];
};

struct racer {
	struct race *r;
	unsigned idx;
};

static void *racer_main(void *arg)
{
	struct racer *a = arg;
	struct race *r = a->r;
	unsigned seed = r->seed[a->idx];

	pthread_barrier_wait(&r->go);
	for (unsigned i = 0; i < LANES; i++) {
		enum vbi_lane_life to = rand_r(&seed) & 1 ? VBI_LANE_DRAINING : VBI_LANE_RETIRING;

		r->asked[a->idx][i] = (uint8_t)to;
		r->found[a->idx][i] = (uint8_t)vbi_lane_life_raise(&r->lanes[i], to);
	}
	return NULL;
}

static void test_race_hand_over_once(void **state)
{
	struct race *r = calloc(1, sizeof(*r));
	struct racer a[THREADS];
	pthread_t th[THREADS];

	(void)state;
	assert_non_null(r);
	r->lanes = calloc(LANES, sizeof(*r->lanes));
	assert_non_null(r->lanes);
	assert_int_equal(pthread_barrier_init(&r->go, NULL, THREADS), 0);
	for (unsigned t = 0; t < THREADS; t++) {
		r->seed[t] = 7919u * (t + 1);
		a[t] = (struct racer){ r, t };
		assert_int_equal(pthread_create(&th[t], NULL, racer_main, &a[t]), 0);
	}
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	for (unsigned i = 0; i < LANES; i++) {
		unsigned live = 0;
		uint8_t top = VBI_LANE_LIVE;

		for (unsigned t = 0; t < THREADS; t++) {
			live += r->found[t][i] == VBI_LANE_LIVE;
			if (r->asked[t][i] > top)
				top = r->asked[t][i];
			/* what a thread found is never above the end state */
			assert_true(r->found[t][i] <= atomic_load(&r->lanes[i].life));
		}
		assert_int_equal(live, 1);
		assert_int_equal(atomic_load(&r->lanes[i].life), top);
	}
	pthread_barrier_destroy(&r->go);
	free(r->lanes);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_way),
		cmocka_unit_test(test_destroy_from_live),
		cmocka_unit_test(test_race_hand_over_once),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
