/* SPDX-License-Identifier: MIT */
/*
 * vb_bench mempool — what the registered slab pool costs and saves:
 *  1. ns per alloc+free, per size: pool vs malloc vs jemalloc mallocx
 *     (batches of 16 allocations, then 16 frees; every buffer touched).
 *  2. the naive design: ibv_reg_mr + ibv_dereg_mr per message, per size
 *     (needs an RDMA device; skipped with the reason when there is none).
 *  3. registrations made while allocating 1M messages of mixed sizes, after
 *     a warm-up of 100k (target: zero), with real ibv_reg_mr when a device
 *     is present.
 * Human-readable table on stdout.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <jemalloc/jemalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <verbus/verbus.h>

#include "bench/bench.h"
#include "core/mempool.h"
#include "transport/verbs/verbs_device.h"
#include "tests/common/verbs_mr.h"

#define BATCH 16
#define REPEAT 20
#define WINDOW 512
#define MiB ((size_t)1 << 20)

static const size_t sizes[] = { 64, 256, 1024, 4096, 16384, 65536, MiB };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Counting wrapper around the real registration ops (or none on a host
 * without a device: keys are made up, nothing is registered). */
struct counting {
	const struct vbi_mempool_reg_ops *inner;
	void *inner_ctx;
	long regs, deregs; /* atomic */
	uint32_t next;
};

static int cnt_reg(void *ctx, void *addr, size_t len, unsigned access, uint32_t *lkey,
		   uint32_t *rkey, void **handle)
{
	struct counting *c = ctx;

	__atomic_add_fetch(&c->regs, 1, __ATOMIC_RELAXED);
	if (c->inner)
		return c->inner->reg(c->inner_ctx, addr, len, access, lkey, rkey, handle);
	*lkey = __atomic_add_fetch(&c->next, 1, __ATOMIC_RELAXED);
	*rkey = 0;
	*handle = addr;
	return 0;
}

static int cnt_dereg(void *ctx, void *handle)
{
	struct counting *c = ctx;

	__atomic_add_fetch(&c->deregs, 1, __ATOMIC_RELAXED);
	return c->inner ? c->inner->dereg(c->inner_ctx, handle) : 0;
}

static const struct vbi_mempool_reg_ops cnt_ops = { .reg = cnt_reg, .dereg = cnt_dereg };

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

enum kind { K_MALLOC, K_MALLOCX, K_POOL, K_POOL_SIZED };

/* ns per alloc+free of @size, @pairs times, in batches of BATCH. */
static double time_allocs(enum kind k, struct vbi_mempool *pool, size_t size, long pairs)
{
	void *p[BATCH];
	struct vbi_buf b;
	uint32_t len[BATCH];
	double t0 = 0;
	long rounds = pairs / BATCH;

	for (long r = -1; r < rounds; r++) { /* round -1: warm-up */
		if (r == 0)
			t0 = now_ns();
		for (int i = 0; i < BATCH; i++) {
			switch (k) {
			case K_MALLOC: p[i] = malloc(size); break;
			case K_MALLOCX: p[i] = mallocx(size, 0); break;
			case K_POOL:
			case K_POOL_SIZED:
				p[i] = vbi_mempool_alloc(pool, size, &b) ? NULL : b.addr;
				len[i] = b.len;
				break;
			}
			if (!p[i])
				return -1;
			*(volatile char *)p[i] = (char)i;
		}
		for (int i = BATCH - 1; i >= 0; i--) {
			switch (k) {
			case K_MALLOC: free(p[i]); break;
			case K_MALLOCX: dallocx(p[i], 0); break;
			case K_POOL: vbi_mempool_free(pool, p[i]); break;
			case K_POOL_SIZED: vbi_mempool_free_sized(pool, p[i], len[i]); break;
			}
		}
	}
	return (now_ns() - t0) / (double)(rounds * BATCH);
}

/* ns per ibv_reg_mr + ibv_dereg_mr of a @size buffer (the naive design). */
static double time_reg(struct ibv_pd *pd, size_t size, long n)
{
	char *buf = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
	double t0;

	if (!buf)
		return -1;
	memset(buf, 1, size);
	t0 = now_ns();
	for (long i = 0; i < n; i++) {
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE);

		if (!mr || ibv_dereg_mr(mr)) {
			free(buf);
			return -1;
		}
	}
	t0 = (now_ns() - t0) / (double)n;
	free(buf);
	return t0;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* 70% 64 B-1 KiB, 27% 4-64 KiB, 3% 1-1.25 MiB. steady: each window slot
 * keeps one size class (a fixed working set); otherwise sizes wander. */
static size_t mixed_size(uint64_t *s, long slot, int steady)
{
	uint64_t h = steady ? (uint64_t)slot * 0x9e3779b97f4a7c15ull >> 20 : xorshift(s) >> 8;
	unsigned pct = steady ? (unsigned)(slot * 37 % 100) : (unsigned)(xorshift(s) % 100);
	size_t nominal, lo, hi;
	unsigned c;

	if (pct < 70)
		nominal = 64 + h % 960;
	else if (pct < 97)
		nominal = 4096 + h % (60 * 1024);
	else
		nominal = MiB + 1 + h % (256 * 1024 - 1);
	if (!steady)
		return nominal;
	c = vbi_mempool_class_of(nominal);
	lo = c ? vbi_mempool_class_size(c - 1) + 1 : 1;
	hi = vbi_mempool_class_size(c);
	return lo + xorshift(s) % (hi - lo + 1);
}

struct mix_result {
	long warm_regs, after_regs;
	double ns_per_msg;
	struct vbi_mempool_stats st;
	size_t bytes;
	int rc;
};

static void run_mix(struct counting *cnt, void *pd, long messages, int steady, struct mix_result *m)
{
	struct vbi_mempool_attr a;
	struct vbi_mempool *pool;
	struct vbi_buf *win = calloc(WINDOW, sizeof(*win));
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	long warm = messages / 10;
	double t0 = 0;

	memset(m, 0, sizeof(*m));
	cnt->regs = cnt->deregs = 0;
	vbi_mempool_attr_init(&a);
	a.max_registered = (size_t)512 << 20;
	a.name = "bench";
	m->rc = win ? vbi_mempool_create(&a, &cnt_ops, cnt, &pool) : -ENOMEM;
	if (m->rc) {
		free(win);
		return;
	}
	(void)pd;
	for (long i = 0; i < warm + messages; i++) {
		struct vbi_buf *b = &win[i % WINDOW];
		size_t sz = mixed_size(&seed, i % WINDOW, steady);

		if (i == warm) {
			m->warm_regs = cnt->regs;
			t0 = now_ns();
		}
		if (b->addr)
			vbi_mempool_free(pool, b->addr);
		m->rc = vbi_mempool_alloc(pool, sz, b);
		if (m->rc) {
			fprintf(stderr, "mempool: message %ld (%zu bytes): %s\n", i, sz, vb_errmsg());
			break;
		}
		((volatile char *)b->addr)[0] = 1;
		((volatile char *)b->addr)[sz - 1] = 1;
		if (i >= warm)
			m->bytes += sz;
	}
	m->ns_per_msg = (now_ns() - t0) / (double)messages;
	m->after_regs = cnt->regs - m->warm_regs;
	vbi_mempool_stats(pool, &m->st);
	for (int i = 0; i < WINDOW; i++)
		if (win[i].addr)
			vbi_mempool_free(pool, win[i].addr);
	vbi_mempool_destroy(pool);
	free(win);
}

/* Linking libjemalloc makes it the process malloc, unless a sanitizer's
 * interceptors win: see whether malloc moves jemalloc's per-thread counter. */
static int malloc_is_jemalloc(void)
{
	uint64_t before = 0, after = 0;
	size_t sz = sizeof(before);
	void *p;

	if (mallctl("thread.allocated", &before, &sz, NULL, 0))
		return 0;
	p = malloc(65536);
	if (p)
		*(volatile char *)p = 1; /* keep the pair from being optimised away */
	mallctl("thread.allocated", &after, &sz, NULL, 0);
	free(p);
	return after - before >= 65536;
}

static int usage(void)
{
	fprintf(stderr, "usage: vb_bench mempool [--iters N] [--messages N] [--reg-iters N] "
			"[--device NAME] [--no-device] [--json FILE]\n");
	return 2;
}

int vb_bench_mempool(int argc, char **argv)
{
	const char *devname = getenv("VERBUS_DEVICE");
	long iters = 1000000, messages = 1000000, reg_iters = 2000;
	int use_dev = 1, rc;
	struct ibv_context *dev = NULL;
	struct ibv_pd *pd = NULL;
	char why[600] = "";
	struct counting cnt = { 0 };
	struct vbi_mempool_attr a;
	struct vbi_mempool *pool = NULL;
	double reg_ns[NSIZES];
	const char *je_malloc;
	const char *json = NULL;
	FILE *jf = NULL;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atol(argv[++i]);
		else if (!strcmp(argv[i], "--messages") && i + 1 < argc)
			messages = atol(argv[++i]);
		else if (!strcmp(argv[i], "--reg-iters") && i + 1 < argc)
			reg_iters = atol(argv[++i]);
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			devname = argv[++i];
		else if (!strcmp(argv[i], "--no-device"))
			use_dev = 0;
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else
			return usage();
	}
	if (json && !(jf = fopen(json, "a"))) {
		fprintf(stderr, "vb_bench mempool: cannot write %s: %s\n", json, strerror(errno));
		return 1;
	}
	if (iters < BATCH || messages < 1 || reg_iters < 1)
		return usage();

	if (!use_dev) {
		snprintf(why, sizeof(why), "--no-device");
	} else if ((rc = vbi_verbs_open_device(devname, &dev))) {
		snprintf(why, sizeof(why), "no RDMA device: %s", vb_errmsg());
	} else if (!(pd = ibv_alloc_pd(dev))) {
		snprintf(why, sizeof(why), "ibv_alloc_pd on %s failed: %s",
			 ibv_get_device_name(dev->device), strerror(errno));
		ibv_close_device(dev);
		dev = NULL;
	}
	if (pd) {
		cnt.inner = &vbi_verbs_mr_ops;
		cnt.inner_ctx = pd;
	}
	je_malloc = malloc_is_jemalloc() ? "jemalloc" : "not jemalloc (sanitizer?)";
	printf("vb_bench mempool (verbus %s, jemalloc %s; malloc is %s)\n", vb_version(),
	       JEMALLOC_VERSION, je_malloc);
	printf("registration: %s\n", pd ? ibv_get_device_name(dev->device)
					: "none (counting callback; no device)");

	vbi_mempool_attr_init(&a);
	a.name = "bench";
	rc = vbi_mempool_create(&a, &cnt_ops, &cnt, &pool);
	if (rc) {
		fprintf(stderr, "vb_bench mempool: %s\n", vb_errmsg());
		goto out;
	}

	printf("\n1. alloc+free, ns per pair; pool: vbi_mempool_alloc + _free(addr), pool-sz: "
	       "+ _free_sized(addr, len); je = mallocx/dallocx \n   (batches of %d, %ld pairs per size, best of %d runs)\n",
	       BATCH, iters, REPEAT);
	printf("%10s %9s %9s %9s %9s %9s %9s\n", "size", "malloc", "mallocx", "pool", "pool/je",
	       "pool-sz", "sz/je");
	for (size_t i = 0; i < NSIZES; i++) {
		long n = (sizes[i] >= MiB ? iters / 10 : iters) / REPEAT;
		double m = 1e18, x = 1e18, p = 1e18, q = 1e18;

		/* Best of REPEAT interleaved runs: the machine may be shared. */
		for (int r = 0; r < REPEAT && p >= 0; r++) {
			double t;

			t = time_allocs(K_MALLOC, NULL, sizes[i], n);
			m = t < m ? t : m;
			t = time_allocs(K_MALLOCX, NULL, sizes[i], n);
			x = t < x ? t : x;
			t = time_allocs(K_POOL, pool, sizes[i], n);
			p = t < p ? t : p;
			t = time_allocs(K_POOL_SIZED, pool, sizes[i], n);
			q = t < q ? t : q;
		}
		if (p < 0) {
			fprintf(stderr, "vb_bench mempool: pool alloc of %zu: %s\n", sizes[i],
				vb_errmsg());
			rc = -ENOMEM;
			goto out;
		}
		printf("%10zu %9.1f %9.1f %9.1f %8.2fx %9.1f %8.2fx\n", sizes[i], m, x, p, p / x, q,
		       q / x);
		if (jf)
			fprintf(jf, "{\"bench\":\"mempool\",\"figure\":\"alloc_free_ns\",\"size\":%zu,"
				    "\"pairs\":%ld,\"malloc\":%.1f,\"mallocx\":%.1f,\"pool\":%.1f,"
				    "\"pool_sized\":%.1f,\"pool_vs_mallocx\":%.3f}\n", sizes[i], n * REPEAT,
				m, x, p, q, p / x);
	}
	{
		struct vbi_mempool_stats st;

		vbi_mempool_stats(pool, &st);
		printf("pool: %u chunk(s) of %zu KiB (%s pages), %lu registration(s)\n", st.chunks,
		       st.chunk_size >> 10,
		       st.chunks_by_mode[2] ? "hugetlb" : st.chunks_by_mode[1] ? "thp" : "4k",
		       (unsigned long)st.registrations);
	}

	printf("\n2. naive design: ibv_reg_mr + ibv_dereg_mr per message\n");
	if (!pd) {
		printf("   skipped: %s\n", why);
	} else {
		printf("%10s %14s %14s\n", "size", "reg+dereg ns", "vs pool alloc");
		for (size_t i = 0; i < NSIZES; i++) {
			double p = time_allocs(K_POOL, pool, sizes[i], 10000);

			reg_ns[i] = time_reg(pd, sizes[i], sizes[i] >= MiB ? reg_iters / 4 + 1
									   : reg_iters);
			if (reg_ns[i] < 0)
				printf("%10zu %14s (%s)\n", sizes[i], "failed", strerror(errno));
			else
				printf("%10zu %14.0f %13.0fx\n", sizes[i], reg_ns[i], reg_ns[i] / p);
			if (jf && reg_ns[i] >= 0)
				fprintf(jf, "{\"bench\":\"mempool\",\"figure\":\"reg_dereg_ns\","
					    "\"device\":\"%s\",\"size\":%zu,\"reg_dereg\":%.0f,"
					    "\"pool_alloc_free\":%.1f}\n", ibv_get_device_name(dev->device),
					sizes[i], reg_ns[i], p);
		}
	}

	printf("\n3. registrations while allocating %ld messages of mixed sizes "
	       "(after %ld warm-up)\n", messages, messages / 10);
	printf("%-9s %8s %8s %7s %6s %10s %12s\n", "mix", "warm-up", "after", "chunks", "util%",
	       "ns/msg", "naive regs");
	for (int steady = 1; steady >= 0; steady--) {
		struct mix_result m;

		run_mix(&cnt, pd, messages, steady, &m);
		if (m.rc) {
			rc = m.rc;
			goto out;
		}
		printf("%-9s %8ld %8ld %7u %6.1f %10.1f %12ld\n", steady ? "steady" : "wandering",
		       m.warm_regs, m.after_regs, m.st.chunks, m.st.utilization_pct, m.ns_per_msg,
		       messages);
		if (jf)
			fprintf(jf, "{\"bench\":\"mempool\",\"figure\":\"registrations\",\"mix\":\"%s\","
				    "\"messages\":%ld,\"warmup_regs\":%ld,\"after_warmup_regs\":%ld,"
				    "\"chunks\":%u,\"utilization_pct\":%.1f,\"ns_per_msg\":%.1f}\n",
				steady ? "steady" : "wandering", messages, m.warm_regs, m.after_regs,
				m.st.chunks, m.st.utilization_pct, m.ns_per_msg);
	}
	printf("(steady: each of the %d in-flight slots keeps one size class; wandering: every "
	       "size random, so the peak keeps moving)\n", WINDOW);
	rc = 0;
out:
	if (pool)
		vbi_mempool_destroy(pool);
	if (pd)
		ibv_dealloc_pd(pd);
	if (dev)
		ibv_close_device(dev);
	if (jf)
		fclose(jf);
	return rc ? 1 : 0;
}
