/* SPDX-License-Identifier: MIT */
/*
 * core/mempool on the host, with a registration callback that records every
 * call: size classes, O(1) lkey lookup (interior and outside addresses), the
 * cap and back-pressure, access flags, shrink releasing only idle chunks with
 * no in-flight WR, no registration after warm-up over 1M mixed-size
 * alloc/free, and the magazines of freed small buffers.
 */
#include <errno.h>
#include <jemalloc/jemalloc.h>
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
#define MAX_REC 4096

struct reg_rec {
	void *addr;
	size_t len;
	unsigned access;
	uint32_t lkey;
	int live;
};

/* Recording registration: lkey = 0x100 + call number, handle = record. */
struct recorder {
	pthread_mutex_t lock;
	struct reg_rec rec[MAX_REC];
	int nreg, ndereg;
	int fail_reg; /* next reg calls fail with this errno (negative) */
};

static int rec_reg(void *ctx, void *addr, size_t len, unsigned access, uint32_t *lkey,
		   uint32_t *rkey, void **handle)
{
	struct recorder *r = ctx;
	struct reg_rec *e;

	pthread_mutex_lock(&r->lock);
	if (r->fail_reg || r->nreg == MAX_REC) {
		int rc = r->fail_reg ? r->fail_reg : -ENOSPC;

		pthread_mutex_unlock(&r->lock);
		return vbi_err(rc, "recorder: registration refused on purpose");
	}
	e = &r->rec[r->nreg];
	e->addr = addr;
	e->len = len;
	e->access = access;
	e->lkey = 0x100 + (uint32_t)r->nreg;
	e->live = 1;
	r->nreg++;
	pthread_mutex_unlock(&r->lock);
	*lkey = e->lkey;
	*rkey = e->lkey | 0x80000000u;
	*handle = e;
	return 0;
}

static int rec_dereg(void *ctx, void *handle)
{
	struct recorder *r = ctx;
	struct reg_rec *e = handle;

	pthread_mutex_lock(&r->lock);
	assert_int_equal(e->live, 1);
	e->live = 0;
	r->ndereg++;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

static const struct vbi_mempool_reg_ops rec_ops = { .reg = rec_reg, .dereg = rec_dereg };

static struct recorder *rec_new(void)
{
	struct recorder *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	pthread_mutex_init(&r->lock, NULL);
	return r;
}

/* The registration whose range holds @p (NULL if none is live). */
static struct reg_rec *rec_find(struct recorder *r, const void *p)
{
	for (int i = 0; i < r->nreg; i++) {
		struct reg_rec *e = &r->rec[i];

		if (e->live && (const char *)p >= (char *)e->addr &&
		    (const char *)p < (char *)e->addr + e->len)
			return e;
	}
	return NULL;
}

static struct vbi_mempool *pool_new(struct recorder *r, size_t cap, unsigned access)
{
	struct vbi_mempool_attr a;
	struct vbi_mempool *p = NULL;
	int rc;

	vbi_mempool_attr_init(&a);
	a.max_registered = cap;
	a.access = access;
	a.name = "unit";
	rc = vbi_mempool_create(&a, &rec_ops, r, &p);
	if (rc)
		fail_msg("vbi_mempool_create: %d %s", rc, vb_errmsg());
	return p;
}

static void test_size_classes(void **state)
{
	static const size_t sizes[] = { 1,     64,    65,      100,     256,   257,
					1000,  4096,  9000,    14337,   40000, 65536,
					65537, MiB,   MiB + 1, VBI_MEMPOOL_MAX_ALLOC };
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 64 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_mempool_stats st;
	struct vbi_buf b[sizeof(sizes) / sizeof(sizes[0])];

	/* Classes are jemalloc's, restricted to multiples of 64. */
	assert_int_equal(vbi_mempool_class_size(0), 64);
	assert_int_equal(vbi_mempool_class_size(VBI_MEMPOOL_NCLASSES - 1), VBI_MEMPOOL_MAX_ALLOC);
	assert_int_equal(vbi_mempool_class_of(VBI_MEMPOOL_MAX_ALLOC), VBI_MEMPOOL_NCLASSES - 1);
	for (size_t s = 1; s <= VBI_MEMPOOL_MAX_ALLOC; s += (s < 70000 ? 1 : 997)) {
		unsigned c = vbi_mempool_class_of(s);
		size_t cs = vbi_mempool_class_size(c);

		if (cs < s || (c && vbi_mempool_class_size(c - 1) >= s) || cs % 64 ||
		    cs != nallocx(s, MALLOCX_LG_ALIGN(6)))
			fail_msg("size %zu: class %u of %zu bytes, jemalloc says %zu", s, c, cs,
				 nallocx(s, MALLOCX_LG_ALIGN(6)));
	}

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		assert_int_equal(vbi_mempool_alloc(p, sizes[i], &b[i]), 0);
		assert_int_equal(b[i].len, vbi_mempool_class_size(vbi_mempool_class_of(sizes[i])));
		assert_true(b[i].len >= sizes[i]);
		assert_int_equal((uintptr_t)b[i].addr % 64, 0);
		memset(b[i].addr, 0xa5, b[i].len); /* the whole usable length is ours */
		assert_int_equal(b[i].rkey, 0);    /* local-only pool */
	}
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.allocs, sizeof(sizes) / sizeof(sizes[0]));
	assert_int_equal(st.class_allocs[0], 2);                     /* 1 and 64 */
	assert_int_equal(st.class_allocs[vbi_mempool_class_of(100)], 2); /* 65 and 100 */
	assert_int_equal(st.class_allocs[VBI_MEMPOOL_NCLASSES - 1], 1);
	assert_int_equal(st.class_size[4], 320);

	assert_int_equal(vbi_mempool_alloc(p, 0, &b[0]), -EINVAL);
	assert_int_equal(vbi_mempool_alloc(p, VBI_MEMPOOL_MAX_ALLOC + 1, &b[0]), -EMSGSIZE);
	assert_non_null(strstr(vb_errmsg(), "max_alloc"));
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.bytes_in_use, 0);
	assert_int_equal(st.frees, st.allocs);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, r->nreg);
	free(r);
}

static void test_lkey_lookup(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 64 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_buf b[200];
	uint32_t lkey, rkey;
	int on_stack;
	void *heap = malloc(64);

	for (int i = 0; i < 200; i++) {
		struct reg_rec *e;

		assert_int_equal(vbi_mempool_alloc(p, 64u << (i % 11), &b[i]), 0);
		e = rec_find(r, b[i].addr);
		assert_non_null(e);
		/* The whole buffer lies inside the one registration. */
		assert_true((char *)b[i].addr + b[i].len <= (char *)e->addr + e->len);
		assert_int_equal(b[i].lkey, e->lkey);
		/* Interior pointers resolve to the same key. */
		assert_int_equal(vbi_mempool_lkey(p, (char *)b[i].addr + b[i].len - 1, 1, &lkey,
						  NULL), 0);
		assert_int_equal(lkey, e->lkey);
		assert_int_equal(vbi_mempool_lkey(p, (char *)b[i].addr + b[i].len / 2,
						  b[i].len / 2, &lkey, &rkey), 0);
		assert_int_equal(lkey, e->lkey);
		assert_int_equal(rkey, 0);
	}
	assert_true(r->nreg >= 2);

	/* Outside the pool: an error with a message, never a crash. */
	{
		struct reg_rec *e = &r->rec[0];
		const void *outside[] = { NULL, &on_stack, heap, (void *)(uintptr_t)-64,
					  (char *)e->addr - 1, (char *)e->addr + e->len + 4096 * 1024,
					  (void *)(uintptr_t)0x1000 };

		for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
			if (rec_find(r, outside[i]))
				continue; /* happens to be another chunk */
			vbi_err_clear();
			assert_int_equal(vbi_mempool_lkey(p, outside[i], 1, &lkey, NULL), -ENOENT);
			assert_non_null(strstr(vb_errmsg(), "not in the pool's registered memory"));
			assert_int_equal(vbi_mempool_inflight_get(p, outside[i]), -ENOENT);
			assert_int_equal(vbi_mempool_free(p, (void *)outside[i]), -EINVAL);
			assert_non_null(strstr(vb_errmsg(), "not a buffer of this pool"));
		}
		/* A range that runs past the chunk's end. */
		assert_int_equal(vbi_mempool_lkey(p, (char *)e->addr + e->len - 8, 16, &lkey, NULL),
				 -EINVAL);
		assert_non_null(strstr(vb_errmsg(), "past the end"));
		/* Interior pointers are not buffers. */
		assert_int_equal(vbi_mempool_free(p, (char *)b[0].addr + 8), -EINVAL);
	}
	for (int i = 0; i < 200; i++)
		assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, r->nreg);
	free(heap);
	free(r);
}

static void test_cap_and_backpressure(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 4 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_mempool_stats st;
	struct vbi_buf b[128], big;
	int n = 0, rc;

	while ((rc = vbi_mempool_alloc(p, 65536, &b[n])) == 0) {
		n++;
		assert_true(n < 128);
	}
	assert_int_equal(rc, -EAGAIN);
	assert_non_null(strstr(vb_errmsg(), "cap reached"));
	assert_true(n >= 50); /* two 2 MiB chunks of 68 KiB extents */
	assert_int_equal(r->nreg, 2);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.registered_bytes, 4 * MiB);
	assert_int_equal(st.chunks, 2);
	assert_int_equal(st.backpressure, 1);
	assert_int_equal(st.bytes_in_use, (size_t)n * 65536);
	assert_true(st.utilization_pct > 80.0 && st.utilization_pct <= 100.0);
	/* Still at the cap: stays refused, never an extra registration. */
	assert_int_equal(vbi_mempool_alloc(p, 65536, &big), -EAGAIN);
	assert_int_equal(vbi_mempool_alloc(p, MiB, &big), -EAGAIN);
	assert_int_equal(r->nreg, 2);

	/* One free makes room for one more of that size. */
	assert_int_equal(vbi_mempool_free(p, b[--n].addr), 0);
	assert_int_equal(vbi_mempool_alloc(p, 65536, &b[n++]), 0);
	/* Everything freed: a 1 MiB buffer fits at the cap (jemalloc's cached
	 * 64 KiB extents are purged back to the pool and reused). */
	while (n)
		assert_int_equal(vbi_mempool_free(p, b[--n].addr), 0);
	assert_int_equal(vbi_mempool_alloc(p, MiB, &big), 0);
	assert_int_equal(vbi_mempool_alloc(p, MiB + 4096, &b[0]), 0);
	assert_int_equal(r->nreg, 2);
	assert_int_equal(vbi_mempool_free(p, big.addr), 0);
	assert_int_equal(vbi_mempool_free(p, b[0].addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, 2);
	free(r);
}

static void test_access_flags(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool_attr a;
	struct vbi_mempool *p;
	struct vbi_buf b;
	unsigned remote = VB_ACCESS_LOCAL_WRITE | VB_ACCESS_REMOTE_READ | VB_ACCESS_REMOTE_WRITE;

	p = pool_new(r, 8 * MiB, VB_ACCESS_LOCAL_WRITE);
	assert_int_equal(vbi_mempool_alloc(p, 512, &b), 0);
	assert_int_equal(r->rec[0].access, VB_ACCESS_LOCAL_WRITE); /* SEND/RECV: local only */
	assert_int_equal(b.rkey, 0);
	assert_int_equal(vbi_mempool_free(p, b.addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);

	p = pool_new(r, 8 * MiB, remote); /* a pool for an RDMA READ/WRITE path */
	assert_int_equal(vbi_mempool_alloc(p, 512, &b), 0);
	assert_int_equal(r->rec[1].access, remote);
	assert_int_equal(b.rkey, r->rec[1].lkey | 0x80000000u);
	assert_int_equal(vbi_mempool_free(p, b.addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);

	vbi_mempool_attr_init(&a);
	a.access = VB_ACCESS_REMOTE_WRITE;
	assert_int_equal(vbi_mempool_create(&a, &rec_ops, r, &p), -EINVAL);
	assert_non_null(strstr(vb_errmsg(), "LOCAL_WRITE"));
	a.access = 0x100;
	assert_int_equal(vbi_mempool_create(&a, &rec_ops, r, &p), -EINVAL);
	vbi_mempool_attr_init(&a);
	a.chunk_size = 3 * MiB;
	assert_int_equal(vbi_mempool_create(&a, &rec_ops, r, &p), -EINVAL);
	assert_non_null(strstr(vb_errmsg(), "chunk_size"));
	vbi_mempool_attr_init(&a);
	a.max_registered = MiB;
	assert_int_equal(vbi_mempool_create(&a, &rec_ops, r, &p), -EINVAL);
	assert_int_equal(vbi_mempool_create(NULL, NULL, r, &p), -EINVAL);
	assert_int_equal(r->nreg, 2);
	free(r);
}

static void test_registration_failure(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 8 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_mempool_stats st;
	struct vbi_buf b;

	r->fail_reg = -ENOMEM;
	assert_int_equal(vbi_mempool_alloc(p, 4096, &b), -ENOMEM);
	assert_non_null(strstr(vb_errmsg(), "refused on purpose"));
	assert_non_null(strstr(vb_errmsg(), "registering"));
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.registered_bytes, 0);
	r->fail_reg = 0;
	assert_int_equal(vbi_mempool_alloc(p, 4096, &b), 0);
	assert_int_equal(r->nreg, 1);
	assert_int_equal(vbi_mempool_free(p, b.addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	free(r);
}

/* The device goes away (hot removal): every chunk is deregistered at once,
 * buffers still out stay usable and are freed as usual, nothing new is
 * allocated or registered, and destroy does not deregister twice. */
static void test_detach_on_device_removal(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 64 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_mempool_stats st;
	struct vbi_buf b[40], x;
	int nreg;

	(void)state;
	for (int i = 0; i < 40; i++) {
		assert_int_equal(vbi_mempool_alloc(p, 65536, &b[i]), 0);
		memset(b[i].addr, i, 65536);
	}
	nreg = r->nreg;
	assert_true(nreg >= 2);
	assert_int_equal(vbi_mempool_detach(p), nreg);
	assert_int_equal(r->ndereg, nreg);
	for (int i = 0; i < r->nreg; i++)
		assert_int_equal(r->rec[i].live, 0);
	/* what was in the buffers is still there (a retransmit window's copy) */
	for (int i = 0; i < 40; i++)
		assert_int_equal(((unsigned char *)b[i].addr)[65535], (unsigned char)i);
	assert_int_equal(vbi_mempool_alloc(p, 64, &x), -ENODEV);
	assert_non_null(strstr(vb_errmsg(), "detached"));
	assert_int_equal(vbi_mempool_alloc(p, 1 << 20, &x), -ENODEV);
	assert_int_equal(r->nreg, nreg); /* no registration after detach */
	assert_int_equal(vbi_mempool_detach(p), 0); /* again: nothing left to do */
	for (int i = 0; i < 40; i++)
		assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.bytes_in_use, 0);
	assert_int_equal(st.deregistrations, (uint64_t)nreg);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, nreg); /* rec_dereg asserts no double dereg */
	free(r);
}

static void test_shrink_releases_only_idle_chunks(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 64 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_mempool_stats st;
	struct vbi_buf b[120];
	struct reg_rec *keep_chunk, *busy_chunk;
	int keep = -1, busy = -1;

	for (int i = 0; i < 120; i++)
		assert_int_equal(vbi_mempool_alloc(p, 65536, &b[i]), 0);
	assert_true(r->nreg >= 4);
	keep_chunk = rec_find(r, b[0].addr);
	for (int i = 1; i < 120 && busy < 0; i++)
		if (rec_find(r, b[i].addr) != keep_chunk)
			busy = i;
	keep = 0;
	assert_true(busy > 0);
	busy_chunk = rec_find(r, b[busy].addr);
	/* A WR is posted from b[busy]; the buffer is freed before it completes. */
	assert_int_equal(vbi_mempool_inflight_get(p, (char *)b[busy].addr + 100), 0);
	for (int i = 0; i < 120; i++)
		if (i != keep)
			assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);

	int before = r->nreg;
	int released = vbi_mempool_shrink(p);

	assert_int_equal(released, before - 2);
	assert_int_equal(r->ndereg, before - 2);
	assert_int_equal(keep_chunk->live, 1); /* holds a live buffer */
	assert_int_equal(busy_chunk->live, 1); /* holds an in-flight WR */
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.chunks, 2);
	assert_int_equal(st.inflight, 1);
	assert_int_equal(st.deregistrations, (uint64_t)before - 2);
	assert_int_equal(vbi_mempool_destroy(p), -EBUSY); /* and nothing released */
	assert_non_null(strstr(vb_errmsg(), "in-flight"));
	assert_int_equal(busy_chunk->live, 1);

	/* The WR completes: its chunk becomes idle. */
	assert_int_equal(vbi_mempool_inflight_put(p, b[busy].addr), 0);
	assert_int_equal(vbi_mempool_inflight_put(p, b[busy].addr), -EINVAL); /* underflow */
	assert_int_equal(vbi_mempool_shrink(p), 1);
	assert_int_equal(busy_chunk->live, 0);
	assert_int_equal(keep_chunk->live, 1);
	assert_int_equal(vbi_mempool_lkey(p, b[keep].addr, 1, &(uint32_t){ 0 }, NULL), 0);
	/* A released chunk's addresses are no longer the pool's. */
	assert_int_equal(vbi_mempool_lkey(p, b[busy].addr, 1, &(uint32_t){ 0 }, NULL), -ENOENT);

	assert_int_equal(vbi_mempool_free(p, b[keep].addr), 0);
	assert_int_equal(vbi_mempool_shrink(p), 1);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.registered_bytes, 0);
	assert_int_equal(r->ndereg, r->nreg);
	/* The pool grows again after a shrink. */
	assert_int_equal(vbi_mempool_alloc(p, 300, &b[0]), 0);
	assert_int_equal(r->nreg, before + 1);
	assert_int_equal(vbi_mempool_free(p, b[0].addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, r->nreg);
	free(r);
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
 * A steady message mix: slot @slot of the window always holds messages of
 * one size class (70% of the slots 64 B-1 KiB, 27% 4-64 KiB, 3% 1-1.25 MiB
 * RC messages); each message's size is drawn at random within that class.
 * The mix fixes the working set, which warm-up reaches; afterwards every
 * buffer must come from memory registered already. (A mix whose sizes wander
 * freely keeps setting new peaks: `vb_bench mempool` reports that case.)
 */
static size_t mixed_size(uint64_t *s, long slot)
{
	uint64_t h = (uint64_t)slot * 0x9e3779b97f4a7c15ull >> 20;
	unsigned pct = (unsigned)(slot * 37 % 100);
	size_t nominal, lo, hi;
	unsigned c;

	if (pct < 70)
		nominal = 64 + h % 960;
	else if (pct < 97)
		nominal = 4096 + h % (60 * 1024);
	else
		nominal = MiB + 1 + h % (256 * 1024 - 1);
	c = vbi_mempool_class_of(nominal);
	lo = c ? vbi_mempool_class_size(c - 1) + 1 : 1;
	hi = vbi_mempool_class_size(c);
	return lo + xorshift(s) % (hi - lo + 1);
}

#define WINDOW 512

static void run_mixed(struct vbi_mempool *p, struct vbi_buf *win, uint64_t *seed, long iters)
{
	for (long i = 0; i < iters; i++) {
		struct vbi_buf *b = &win[i % WINDOW];
		int rc;

		if (b->addr)
			assert_int_equal(vbi_mempool_free(p, b->addr), 0);
		rc = vbi_mempool_alloc(p, mixed_size(seed, i % WINDOW), b);
		if (rc)
			fail_msg("iteration %ld: %d %s", i, rc, vb_errmsg());
		((volatile char *)b->addr)[b->len - 1] = 1;
	}
}

static void test_no_registration_after_warmup(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 256 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_buf *win = calloc(WINDOW, sizeof(*win));
	struct vbi_mempool_stats st;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	int warm;

	assert_non_null(win);
	run_mixed(p, win, &seed, 100000); /* warm-up: the working set's chunks */
	warm = r->nreg;
	assert_true(warm > 0);
	run_mixed(p, win, &seed, 1000000);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	print_message("      1M mixed alloc/free after warm-up: %d registrations during warm-up, "
		      "%d after; %u chunks, %.1f%% utilization\n",
		      warm, r->nreg - warm, st.chunks, st.utilization_pct);
	assert_int_equal(r->nreg, warm);
	assert_int_equal(r->ndereg, 0);
	assert_int_equal(st.allocs, 1100000);
	assert_int_equal(st.frees, 1100000 - WINDOW);
	for (int i = 0; i < WINDOW; i++)
		assert_int_equal(vbi_mempool_free(p, win[i].addr), 0);
	assert_int_equal(vbi_mempool_shrink(p), warm);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, r->nreg);
	free(win);
	free(r);
}

/* vbi_mempool_reserve: room registered ahead lets the allocations that
 * follow register nothing; room there already registers nothing; the cap
 * stops it with -EAGAIN; what jemalloc caches of freed buffers counts once
 * purged. */
static void test_reserve_ahead(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 8 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_buf b[200];
	int n = 0, before;

	(void)state;
	/* 3 MiB of 16 KiB buffers (each a padded 20 KiB extent): two chunks */
	assert_int_equal(vbi_mempool_reserve(p, 3 * MiB + 3 * MiB / 4), 2);
	assert_int_equal(r->nreg, 2);
	for (n = 0; n < 192; n++)
		assert_int_equal(vbi_mempool_alloc(p, 16384, &b[n]), 0);
	assert_int_equal(r->nreg, 2); /* nothing registered by the allocations */
	/* the room left is enough for 64 KiB: nothing to register */
	assert_int_equal(vbi_mempool_reserve(p, 65536), 0);
	assert_int_equal(r->nreg, 2);
	/* everything freed: the purge gives the pages back, no new chunk */
	while (n)
		assert_int_equal(vbi_mempool_free(p, b[--n].addr), 0);
	before = r->nreg;
	assert_int_equal(vbi_mempool_reserve(p, 3 * MiB), 0);
	assert_int_equal(r->nreg, before);
	/* beyond the cap (8 MiB): what fits is registered, then -EAGAIN */
	assert_int_equal(vbi_mempool_reserve(p, 16 * MiB), -EAGAIN);
	assert_int_equal(r->nreg, 4);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, r->nreg);
	free(r);
}

/* Magazines (mempool_priv.h): a small buffer freed is handed out again by
 * the same thread with no jemalloc call; what the magazines and the depot
 * hold goes back to jemalloc before a shrink (every chunk released once
 * everything is freed) and before a refused allocation's retry (another
 * class gets the room). */
static void test_magazines(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool *p = pool_new(r, 4 * MiB, VB_ACCESS_LOCAL_WRITE);
	struct vbi_mempool_stats st;
	enum { MAX = 5 * MiB / 256 };
	struct vbi_buf a, *b = calloc(MAX, sizeof(*b));
	size_t n1 = 0, n2 = 0;

	(void)state;
	assert_non_null(b);
	assert_int_equal(vbi_mempool_alloc(p, 200, &a), 0);
	assert_int_equal(vbi_mempool_free(p, a.addr), 0);
	assert_int_equal(vbi_mempool_alloc(p, 200, &b[0]), 0);
	assert_ptr_equal(b[0].addr, a.addr);
	assert_int_equal(b[0].lkey, a.lkey);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.mag_allocs, 1);
	assert_int_equal(vbi_mempool_free(p, b[0].addr), 0);

	/* 256-byte buffers to the cap (4 MiB); all freed; a shrink
	 * releases every chunk */
	while (n1 < MAX && vbi_mempool_alloc(p, 256, &b[n1]) == 0)
		n1++;
	assert_true(n1 > MAX / 2); /* most of the 4 MiB */
	assert_true(n1 < MAX); /* the cap stopped it */
	for (size_t i = 0; i < n1; i++)
		assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);
	assert_int_equal(vbi_mempool_shrink(p), r->nreg);
	assert_int_equal(r->ndereg, r->nreg);

	/* to the cap again, freed: 1 KiB buffers take the same room (the
	 * refused allocation empties the magazines before it retries) */
	n1 = 0;
	while (n1 < MAX && vbi_mempool_alloc(p, 256, &b[n1]) == 0)
		n1++;
	for (size_t i = 0; i < n1; i++)
		assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);
	while (n2 < MAX && vbi_mempool_alloc(p, 1024, &b[n2]) == 0)
		n2++;
	print_message("      to the cap: %zu buffers of 256 B, then %zu of 1 KiB\n", n1, n2);
	assert_true(n2 * 1024 >= n1 * 256);
	for (size_t i = 0; i < n2; i++)
		assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.allocs, st.frees);
	assert_int_equal(st.bytes_in_use, 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(r->ndereg, r->nreg);
	free(b);
	free(r);
}

static void test_stats_and_pages(void **state)
{
	struct recorder *r = rec_new();
	struct vbi_mempool_attr a;
	struct vbi_mempool *p;
	struct vbi_mempool_stats st;
	struct vbi_buf b;

	vbi_mempool_attr_init(&a);
	a.flags = VBI_MEMPOOL_NO_HUGEPAGE;
	a.max_registered = 16 * MiB;
	assert_int_equal(vbi_mempool_create(&a, &rec_ops, r, &p), 0);
	assert_int_equal(vbi_mempool_alloc(p, 1000, &b), 0);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.chunks, 1);
	assert_int_equal(st.chunks_by_mode[VBI_MEMPOOL_PAGES_4K], 1);
	assert_int_equal(st.chunk_size, 2 * MiB);
	assert_int_equal(st.cap_bytes, 16 * MiB);
	assert_int_equal(st.bytes_in_use, 1024);
	assert_true(st.bytes_in_jemalloc >= 4096);
	assert_true(st.utilization_pct > 0.04 && st.utilization_pct < 0.06);
	assert_int_equal(st.registrations, 1);
	assert_int_equal((uintptr_t)r->rec[0].addr % (2 * MiB), 0); /* 2 MiB aligned */
	assert_int_equal(vbi_mempool_free(p, b.addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);

	/* Default: huge pages when the system has them; the mode is reported. */
	p = pool_new(r, 16 * MiB, VB_ACCESS_LOCAL_WRITE);
	assert_int_equal(vbi_mempool_alloc(p, 1000, &b), 0);
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.chunks_by_mode[0] + st.chunks_by_mode[1] + st.chunks_by_mode[2], 1);
	for (int m = 0; m < 3; m++)
		if (st.chunks_by_mode[m])
			print_message("      default chunk pages: %s\n",
				      vbi_mempool_page_mode_name(m));
	assert_int_equal(vbi_mempool_free(p, b.addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(vbi_mempool_destroy(NULL), 0);
	free(r);
}

static void test_env_overrides(void **state)
{
	struct vbi_mempool_attr a;

	setenv("VERBUS_MEMPOOL_CAP", "8m", 1);
	setenv("VERBUS_MEMPOOL_CHUNK", "4194304", 1);
	vbi_mempool_attr_init(&a);
	assert_int_equal(a.max_registered, 8 * MiB);
	assert_int_equal(a.chunk_size, 4 * MiB);
	setenv("VERBUS_MEMPOOL_CAP", "lots", 1);
	vbi_mempool_attr_init(&a);
	assert_int_equal(a.max_registered, 256 * MiB);
	unsetenv("VERBUS_MEMPOOL_CAP");
	unsetenv("VERBUS_MEMPOOL_CHUNK");
	assert_int_equal(a.access, VB_ACCESS_LOCAL_WRITE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_classes),
		cmocka_unit_test(test_lkey_lookup),
		cmocka_unit_test(test_cap_and_backpressure),
		cmocka_unit_test(test_access_flags),
		cmocka_unit_test(test_registration_failure),
		cmocka_unit_test(test_shrink_releases_only_idle_chunks),
		cmocka_unit_test(test_detach_on_device_removal),
		cmocka_unit_test(test_no_registration_after_warmup),
		cmocka_unit_test(test_reserve_ahead),
		cmocka_unit_test(test_magazines),
		cmocka_unit_test(test_stats_and_pages),
		cmocka_unit_test(test_env_overrides),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
