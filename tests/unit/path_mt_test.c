/* SPDX-License-Identifier: MIT */
/*
 * core/path under concurrency: reader threads read the active lane under
 * RCU (vbi_path_read and vbi_path_lane) and check its contents while one
 * thread fails it over 10,000 times (fail -> standby -> switch -> resume),
 * waits a grace period, poisons and frees each old lane. Any reader touching
 * a retired lane sees the poison (and ASan reports the use after free); any
 * torn (lane, epoch) view fails the epoch check. A third kind of thread
 * reports failures of stale epochs, which must all be ignored.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/path.h"

#define SWITCHES 10000
#define READERS 3
#define LANE_MAGIC 0x4c414e45u /* "LANE" */
#define POISON 0x5a

struct lane {
	unsigned magic;
	uint32_t epoch;   /* the epoch it is published with */
	uint64_t id;
	uint64_t check;   /* id * 31 + 7 */
};

struct shared {
	struct vbi_path path;
	int stop;
	int ready;
	uint64_t bad;     /* reader-detected inconsistencies */
};

struct reader_res {
	uint64_t reads, views, empty, admit_post, admit_refused, epochs_seen;
};

struct reader_arg {
	struct shared *sh;
	struct reader_res res;
};

static int lane_ok(const struct lane *l)
{
	return l->magic == LANE_MAGIC && l->check == l->id * 31 + 7;
}

static void *reader(void *arg)
{
	struct reader_arg *ra = arg;
	struct shared *sh = ra->sh;
	uint32_t last_epoch = 0;
	int announced = 0;

	vbi_rcu_register_thread();
	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		struct vbi_path_view v;
		struct lane *l;
		int rc;

		vbi_rcu_read_lock();
		vbi_path_read(&sh->path, &v);
		l = v.lane;
		if (l) {
			if (!lane_ok(l) || l->epoch != v.epoch)
				__atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
			ra->res.views++;
		} else {
			ra->res.empty++;
		}
		if (v.epoch < last_epoch) /* epochs never go back */
			__atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
		if (v.epoch != last_epoch)
			ra->res.epochs_seen++;
		last_epoch = v.epoch;
		/* the plain hot-path read */
		l = vbi_path_lane(&sh->path);
		if (l && !lane_ok(l))
			__atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
		vbi_rcu_read_unlock();

		rc = vbi_path_admit(&sh->path);
		if (rc == 0)
			ra->res.admit_post++;
		else if (rc == -EAGAIN)
			ra->res.admit_refused++;
		else
			__atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
		ra->res.reads++;
		if (!announced) {
			announced = 1;
			__atomic_fetch_add(&sh->ready, 1, __ATOMIC_RELEASE);
		}
	}
	vbi_rcu_unregister_thread();
	return NULL;
}

struct reporter_res {
	uint64_t reports, stale, other;
};

struct reporter_arg {
	struct shared *sh;
	struct reporter_res res;
};

/* Reports failures of lanes already replaced: every one must be STALE. */
static void *reporter(void *arg)
{
	struct reporter_arg *ra = arg;
	struct shared *sh = ra->sh;

	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
		uint32_t e = vbi_path_epoch(&sh->path);
		struct vbi_path_decision d;

		if (e < 2)
			continue;
		d = vbi_path_fail(&sh->path, e - 1, 0, 0);
		ra->res.reports++;
		if (d.action == VBI_PATH_STALE)
			ra->res.stale++;
		else
			ra->res.other++;
		sched_yield();
	}
	return NULL;
}

static struct lane *lane_new(uint64_t id, uint32_t epoch)
{
	struct lane *l = malloc(sizeof(*l));

	assert_non_null(l);
	l->id = id;
	l->check = id * 31 + 7;
	l->epoch = epoch;
	l->magic = LANE_MAGIC;
	return l;
}

static void lane_retire(struct lane *l)
{
	/* after the grace period nobody may hold it: poison, then free */
	memset(l, POISON, sizeof(*l));
	free(l);
}

static void test_switch_under_readers(void **state)
{
	struct shared *sh = calloc(1, sizeof(*sh));
	struct vbi_path_cfg cfg;
	pthread_t rt[READERS], pt;
	struct reader_arg ra[READERS];
	struct reporter_arg pa = { .res = { 0 } };
	struct vbi_path_stats st;
	uint64_t now = 1000, id = 0, total_reads = 0, total_views = 0;
	uint32_t ep;

	assert_non_null(sh);
	vbi_path_cfg_init(&cfg);
	cfg.degrade_failures = 3;
	cfg.degrade_window_ns = 10; /* failures 1000 ns apart: never degrade */
	assert_int_equal(vbi_path_init(&sh->path, &cfg, now, NULL, NULL), 0);
	vbi_rcu_register_thread();
	assert_null(vbi_path_switch(&sh->path, lane_new(id++, 1), now, &ep));
	assert_int_equal(ep, 1);

	for (int i = 0; i < READERS; i++) {
		ra[i].sh = sh;
		memset(&ra[i].res, 0, sizeof(ra[i].res));
		assert_int_equal(pthread_create(&rt[i], NULL, reader, &ra[i]), 0);
	}
	pa.sh = sh;
	assert_int_equal(pthread_create(&pt, NULL, reporter, &pa), 0);
	while (__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) < READERS)
		sched_yield();

	for (int i = 0; i < SWITCHES; i++) {
		struct vbi_path_decision d;
		uint32_t next = vbi_path_epoch(&sh->path) + 1;
		struct lane *old;

		now += 1000;
		assert_null(vbi_path_set_standby(&sh->path, lane_new(id++, next)));
		d = vbi_path_fail(&sh->path, next - 1, now, 0);
		assert_int_equal(d.action, VBI_PATH_SWITCH_TO_STANDBY);
		old = vbi_path_switch(&sh->path, d.lane, now + 10, &ep);
		assert_int_equal(ep, next);
		assert_non_null(old);
		assert_int_equal(vbi_path_resume(&sh->path, now + 20) >= 0, 1);
		vbi_rcu_synchronize();
		lane_retire(old);
	}

	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < READERS; i++) {
		assert_int_equal(pthread_join(rt[i], NULL), 0);
		total_reads += ra[i].res.reads;
		total_views += ra[i].res.views;
		assert_true(ra[i].res.reads > 0);
		/* no lane is ever unpublished during the run */
		assert_int_equal(ra[i].res.empty, 0);
	}
	assert_int_equal(pthread_join(pt, NULL), 0);
	assert_int_equal(__atomic_load_n(&sh->bad, __ATOMIC_RELAXED), 0);
	assert_int_equal(pa.res.other, 0);
	assert_int_equal(pa.res.stale, pa.res.reports);

	vbi_path_stats(&sh->path, now + 100, &st);
	assert_int_equal(st.switches, SWITCHES + 1);
	assert_int_equal(st.failovers, SWITCHES);
	assert_int_equal(st.recoveries, SWITCHES);
	assert_int_equal(st.failures, SWITCHES);
	assert_int_equal(st.ignored, pa.res.reports);
	assert_int_equal(st.degradations, 0);
	assert_int_equal(st.epoch, SWITCHES + 1);
	assert_int_equal(st.mode, VB_QPT_RC);

	lane_retire(vbi_path_switch(&sh->path, NULL, now + 200, NULL));
	vbi_path_fini(&sh->path);
	vbi_rcu_unregister_thread();
	printf("path_mt: %d switches, %d readers: %llu reads (%llu views), %llu stale reports "
	       "ignored, %llu publishes refused while recovering\n",
	       SWITCHES, READERS, (unsigned long long)total_reads,
	       (unsigned long long)total_views, (unsigned long long)pa.res.reports,
	       (unsigned long long)st.backpressured);
	free(sh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_switch_under_readers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
