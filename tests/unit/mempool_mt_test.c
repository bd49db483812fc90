/* SPDX-License-Identifier: MIT */
/*
 * core/mempool under concurrency (also run under TSan): buffers allocated on
 * producer threads and freed on a "progress" thread go back to their pool;
 * concurrent alloc/free/lookup/in-flight/stats/shrink keep every buffer
 * private to its owner; thread exit hands cached buffers back, so after all
 * threads are gone a shrink releases every chunk.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/err.h"
#include "core/mempool.h"

#define MiB ((size_t)1 << 20)
#define PRODUCERS 3
#define PER_PRODUCER 20000
#define QCAP 256

struct recorder {
	pthread_mutex_t lock;
	int nreg, ndereg;
	uint32_t next_key;
};

static int rec_reg(void *ctx, void *addr, size_t len, unsigned access, uint32_t *lkey,
		   uint32_t *rkey, void **handle)
{
	struct recorder *r = ctx;

	pthread_mutex_lock(&r->lock);
	r->nreg++;
	*lkey = ++r->next_key;
	pthread_mutex_unlock(&r->lock);
	*rkey = 0;
	*handle = addr;
	return 0;
}

static int rec_dereg(void *ctx, void *handle)
{
	struct recorder *r = ctx;

	pthread_mutex_lock(&r->lock);
	r->ndereg++;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

static const struct vbi_mempool_reg_ops rec_ops = { .reg = rec_reg, .dereg = rec_dereg };

/* Bounded MPSC queue of buffers: producers -> the progress thread. */
struct queue {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct vbi_buf item[QCAP];
	unsigned head, tail;
	int producers_left;
};

struct ctx {
	struct vbi_mempool *pool;
	struct queue q;
	long failures; /* atomic */
};

static void fill(struct vbi_buf *b, unsigned tag)
{
	uint32_t *w = b->addr;

	w[0] = tag;
	w[1] = b->lkey;
	((volatile uint8_t *)b->addr)[b->len - 1] = (uint8_t)tag;
}

static int check(const struct vbi_buf *b, unsigned tag)
{
	const uint32_t *w = b->addr;

	return w[0] == tag && w[1] == b->lkey && ((uint8_t *)b->addr)[b->len - 1] == (uint8_t)tag;
}

static void *producer(void *arg)
{
	struct ctx *c = arg;
	uint64_t s = 0x1234567ull * ((uint64_t)pthread_self() | 1);
	for (int i = 0; i < PER_PRODUCER; i++) {
		struct vbi_buf b;
		size_t size;

		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		size = (s % 16 == 0) ? 4096 + s % 60000 : 16 + s % 2000;
		if (vbi_mempool_alloc(c->pool, size, &b)) {
			__atomic_add_fetch(&c->failures, 1, __ATOMIC_RELAXED);
			continue;
		}
		fill(&b, (unsigned)i);
		pthread_mutex_lock(&c->q.lock);
		while ((c->q.tail - c->q.head) == QCAP)
			pthread_cond_wait(&c->q.cond, &c->q.lock);
		c->q.item[c->q.tail++ % QCAP] = b;
		pthread_cond_broadcast(&c->q.cond);
		pthread_mutex_unlock(&c->q.lock);
	}
	pthread_mutex_lock(&c->q.lock);
	c->q.producers_left--;
	pthread_cond_broadcast(&c->q.cond);
	pthread_mutex_unlock(&c->q.lock);
	return NULL;
}

/* The progress thread: "completes" each buffer and frees it. */
static void *progress(void *arg)
{
	struct ctx *c = arg;
	long got = 0;

	for (;;) {
		struct vbi_buf b;
		uint32_t lkey;

		pthread_mutex_lock(&c->q.lock);
		while (c->q.tail == c->q.head && c->q.producers_left)
			pthread_cond_wait(&c->q.cond, &c->q.lock);
		if (c->q.tail == c->q.head) {
			pthread_mutex_unlock(&c->q.lock);
			break;
		}
		b = c->q.item[c->q.head++ % QCAP];
		pthread_cond_broadcast(&c->q.cond);
		pthread_mutex_unlock(&c->q.lock);

		if (vbi_mempool_lkey(c->pool, (char *)b.addr + b.len - 1, 1, &lkey, NULL) ||
		    lkey != b.lkey || ((uint32_t *)b.addr)[1] != b.lkey)
			__atomic_add_fetch(&c->failures, 1, __ATOMIC_RELAXED);
		if (vbi_mempool_free(c->pool, b.addr))
			__atomic_add_fetch(&c->failures, 1, __ATOMIC_RELAXED);
		got++;
	}
	return (void *)(intptr_t)got;
}

static struct vbi_mempool *pool_new(struct recorder *r, size_t cap)
{
	struct vbi_mempool_attr a;
	struct vbi_mempool *p = NULL;

	vbi_mempool_attr_init(&a);
	a.max_registered = cap;
	a.name = "mt";
	if (vbi_mempool_create(&a, &rec_ops, r, &p))
		fail_msg("create: %s", vb_errmsg());
	return p;
}

static void test_cross_thread_free(void **state)
{
	struct recorder r = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct ctx c = { .q = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
				.producers_left = PRODUCERS } };
	pthread_t prod[PRODUCERS], prog;
	struct vbi_mempool_stats st;
	void *got;

	c.pool = pool_new(&r, 128 * MiB);
	assert_int_equal(pthread_create(&prog, NULL, progress, &c), 0);
	for (int i = 0; i < PRODUCERS; i++)
		assert_int_equal(pthread_create(&prod[i], NULL, producer, &c), 0);
	for (int i = 0; i < PRODUCERS; i++)
		assert_int_equal(pthread_join(prod[i], NULL), 0);
	assert_int_equal(pthread_join(prog, &got), 0);
	assert_int_equal(c.failures, 0);
	assert_int_equal((intptr_t)got, PRODUCERS * PER_PRODUCER);

	assert_int_equal(vbi_mempool_stats(c.pool, &st), 0);
	assert_int_equal(st.allocs, PRODUCERS * PER_PRODUCER);
	assert_int_equal(st.frees, PRODUCERS * PER_PRODUCER);
	assert_int_equal(st.bytes_in_use, 0);
	/* Every thread has exited: its cache went back to the arena, so all
	 * chunks are idle and a shrink releases them all. */
	assert_int_equal(vbi_mempool_shrink(c.pool), r.nreg);
	assert_int_equal(r.ndereg, r.nreg);
	assert_int_equal(vbi_mempool_destroy(c.pool), 0);
}

struct churn {
	struct vbi_mempool *pool;
	int id;
	int stop; /* atomic */
	long failures, backpressure;
};

/* Each worker owns a window of buffers tagged with its id; any overlap with
 * another thread's buffer would break a tag. In-flight get/put brackets a
 * "posted WR" on every buffer. */
static void *churn(void *arg)
{
	struct churn *w = arg;
	struct vbi_buf win[64] = { { 0 } };
	uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)w->id;

	for (int i = 0; i < 30000; i++) {
		struct vbi_buf *b = &win[i % 64];
		int rc;

		if (i % 3000 == 2999) { /* a lull: drop everything, flush, shrink */
			for (int j = 0; j < 64; j++) {
				if (win[j].addr && (vbi_mempool_inflight_put(w->pool, win[j].addr) ||
						    vbi_mempool_free(w->pool, win[j].addr)))
					w->failures++;
				win[j].addr = NULL;
			}
			if (vbi_mempool_shrink(w->pool) < 0)
				w->failures++;
		}
		if (b->addr) {
			if (!check(b, (unsigned)(w->id << 16 | (i % 64))) ||
			    vbi_mempool_inflight_put(w->pool, b->addr) ||
			    vbi_mempool_free(w->pool, b->addr))
				w->failures++;
			b->addr = NULL;
		}
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		rc = vbi_mempool_alloc(w->pool, 8 + s % (s % 8 ? 3000 : 70000), b);
		if (rc == -EAGAIN) {
			w->backpressure++;
			continue;
		}
		if (rc || vbi_mempool_inflight_get(w->pool, b->addr)) {
			w->failures++;
			b->addr = NULL;
			continue;
		}
		fill(b, (unsigned)(w->id << 16 | (i % 64)));
	}
	for (int i = 0; i < 64; i++)
		if (win[i].addr && (vbi_mempool_inflight_put(w->pool, win[i].addr) ||
				    vbi_mempool_free(w->pool, win[i].addr)))
			w->failures++;
	return NULL;
}

/* Stats, lookups of foreign addresses and shrink, while the workers run. */
static void *observer(void *arg)
{
	struct churn *w = arg;
	int local;

	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		struct vbi_mempool_stats st;
		uint32_t lkey;
		int rc;

		if (vbi_mempool_stats(w->pool, &st) || st.registered_bytes > st.cap_bytes)
			w->failures++;
		if (vbi_mempool_lkey(w->pool, &local, 1, &lkey, NULL) != -ENOENT)
			w->failures++;
		rc = vbi_mempool_shrink(w->pool);
		if (rc < 0)
			w->failures++;
	}
	return NULL;
}

static void test_concurrent_churn_with_shrink(void **state)
{
	struct recorder r = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct churn w[3], obs = { 0 };
	pthread_t t[3], o;
	struct vbi_mempool_stats st;
	struct vbi_mempool *p = pool_new(&r, 8 * MiB);

	obs.pool = p;
	assert_int_equal(pthread_create(&o, NULL, observer, &obs), 0);
	for (int i = 0; i < 3; i++) {
		w[i] = (struct churn){ .pool = p, .id = i + 1 };
		assert_int_equal(pthread_create(&t[i], NULL, churn, &w[i]), 0);
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].failures, 0);
	}
	__atomic_store_n(&obs.stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(o, NULL), 0);
	assert_int_equal(obs.failures, 0);

	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	print_message("      churn: %u registrations, %u deregistrations by concurrent shrink, "
		      "%ld+%ld+%ld back-pressure\n", r.nreg, r.ndereg, w[0].backpressure,
		      w[1].backpressure, w[2].backpressure);
	assert_int_equal(st.bytes_in_use, 0);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.allocs, st.frees);
	assert_true(st.registered_bytes <= 8 * MiB);
	assert_true(r.nreg <= 4 + r.ndereg); /* never above the cap of 4 chunks */
	assert_int_equal(vbi_mempool_shrink(p), (int)st.chunks);
	assert_int_equal(r.ndereg, r.nreg);
	assert_int_equal(vbi_mempool_destroy(p), 0);
}

/* Buffers freed on one thread come back to the thread that allocates
 * through the depot: B frees 64 buffers A allocated and exits (its loaded
 * magazine of 32 goes back to jemalloc; the full one it deposited stays);
 * A's next 64 allocations take 32 from the depot, then ask jemalloc. */
struct handoff {
	struct vbi_mempool *pool;
	struct vbi_buf b[64];
	long bad;
};

static void *free_all(void *arg)
{
	struct handoff *h = arg;

	for (int i = 0; i < 64; i++)
		if (vbi_mempool_free(h->pool, h->b[i].addr))
			h->bad++;
	return NULL;
}

static void test_depot_handoff(void **state)
{
	struct recorder r = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct handoff h = { .pool = pool_new(&r, 8 * MiB) };
	struct vbi_mempool_stats st;
	pthread_t t;

	(void)state;
	for (int i = 0; i < 64; i++)
		assert_int_equal(vbi_mempool_alloc(h.pool, 200, &h.b[i]), 0);
	assert_int_equal(pthread_create(&t, NULL, free_all, &h), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(h.bad, 0);
	assert_int_equal(vbi_mempool_stats(h.pool, &st), 0);
	assert_int_equal(st.mag_allocs, 0);
	for (int i = 0; i < 64; i++)
		assert_int_equal(vbi_mempool_alloc(h.pool, 200, &h.b[i]), 0);
	assert_int_equal(vbi_mempool_stats(h.pool, &st), 0);
	assert_int_equal(st.mag_allocs, 32);
	assert_int_equal(st.allocs, 128);
	for (int i = 0; i < 64; i++)
		assert_int_equal(vbi_mempool_free(h.pool, h.b[i].addr), 0);
	assert_int_equal(vbi_mempool_shrink(h.pool), r.nreg);
	assert_int_equal(r.ndereg, r.nreg);
	assert_int_equal(vbi_mempool_destroy(h.pool), 0);
}

/* A thread that used a pool may outlive it, and a new pool may reuse the
 * old one's address: the thread gets a fresh cache for the new pool. */
static void *two_pools(void *arg)
{
	struct recorder *r = arg;
	struct vbi_buf b;
	long bad = 0;

	for (int round = 0; round < 20; round++) {
		struct vbi_mempool *p = pool_new(r, 8 * MiB);

		for (int i = 0; i < 100; i++) {
			if (vbi_mempool_alloc(p, 100 + (size_t)i * 10, &b) ||
			    vbi_mempool_free(p, b.addr))
				bad++;
		}
		if (vbi_mempool_destroy(p))
			bad++;
	}
	return (void *)bad;
}

static void test_pools_come_and_go(void **state)
{
	struct recorder r = { .lock = PTHREAD_MUTEX_INITIALIZER };
	pthread_t t[2];
	void *bad;

	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, two_pools, &r), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(t[i], &bad), 0);
		assert_null(bad);
	}
	assert_int_equal(r.nreg, 40);
	assert_int_equal(r.ndereg, 40);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cross_thread_free),
		cmocka_unit_test(test_concurrent_churn_with_shrink),
		cmocka_unit_test(test_pools_come_and_go),
		cmocka_unit_test(test_depot_handoff),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
