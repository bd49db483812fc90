/* SPDX-License-Identifier: MIT */
/*
 * Registered-memory slab pool: a private jemalloc arena whose extent hooks
 * serve pages of registered chunks. Design and reasons: docs/mempool.md.
 *
 * Locks: g_lock (global) guards the per-thread records of every pool and
 * their retirement; pool->lock guards the chunk table and page bitmaps. Order:
 * g_lock before pool->lock; neither is held while a registration callback
 * runs. jemalloc may hold its own arena locks while it calls the hooks, which
 * take pool->lock only.
 */
#include "core/mempool.h"

#include <errno.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/err.h"
#include "core/log.h"

#define MP_PAGE_SHIFT 12
#define MP_PAGE ((size_t)1 << MP_PAGE_SHIFT)
#define MP_FRAME_SHIFT 21 /* radix granule: 2 MiB, the chunk alignment */
#define MP_L2_BITS 14
#define MP_L1_BITS (47 - MP_FRAME_SHIFT - MP_L2_BITS)
#define MP_L1_LEN ((size_t)1 << MP_L1_BITS)
#define MP_L2_LEN ((size_t)1 << MP_L2_BITS)
#define MP_TLS_SLOTS 8
#define MP_SMALL_RUN 128 /* pages (512 KiB): larger extents get chunks of their own */

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

#define unlikely(x) __builtin_expect(!!(x), 0)
#define likely(x) __builtin_expect(!!(x), 1)
#define RELAXED __ATOMIC_RELAXED

enum { MP_FREE = 0, MP_RESERVED, MP_ACTIVE, MP_RELEASING };
enum { MP_KIND_EMPTY = 0, MP_KIND_SMALL, MP_KIND_LARGE };

struct mp_chunk {
	uintptr_t base;
	size_t len;
	uint32_t lkey, rkey;
	void *handle;
	int inflight;       /* atomic */
	int state;          /* pool->lock */
	int mode;           /* enum vbi_mempool_page_mode */
	unsigned npages;
	unsigned used;      /* pages handed to jemalloc; pool->lock */
	unsigned hwm;       /* pages [0, hwm) may have been written */
	int kind;           /* MP_KIND_*: what the chunk serves while not empty */
	uint64_t *bits;     /* one bit per page handed to jemalloc */
};

/* Counters of one thread on one pool. Single writer (its thread) except the
 * pool's shared record; readers use relaxed atomic loads. */
struct mp_thread {
	struct mp_thread *next, *prev; /* pool->threads, g_lock */
	struct vbi_mempool *pool;      /* NULL once the pool is destroyed; g_lock */
	unsigned tc;
	bool has_tc, shared;
	int aflags, dflags;            /* mallocx / dallocx flags */
	const struct mp_chunk *last;   /* chunk of the last lookup (not for shared) */
	uint64_t allocs, frees, eagain, bytes;
	uint64_t class_allocs[VBI_MEMPOOL_NCLASSES];
};

struct vbi_mempool {
	extent_hooks_t hooks; /* first: the hooks get this pointer back */
	uint64_t id;
	unsigned arena;
	bool arena_ok;
	struct vbi_mempool_attr attr;
	char name[32];
	const struct vbi_mempool_reg_ops *ops;
	void *ctx;
	bool thp;
	bool detached;        /* vbi_mempool_detach: no registration any more */

	pthread_mutex_t lock;
	struct mp_chunk *chunks;
	unsigned max_chunks, nchunks;
	uint64_t *bitmaps;
	size_t words_per_chunk;
	size_t registered, reserved;
	uint64_t regs, deregs;
	struct mp_chunk ***l1; /* radix: frame -> chunk (atomic accesses) */

	/* g_lock */
	struct mp_thread *threads;
	struct mp_thread retired; /* counters of exited threads */
	struct mp_thread shared;  /* threads without a record: atomic counters */
	uint64_t tc_fallbacks;
};

struct mp_tls_ent {
	struct vbi_mempool *pool;
	uint64_t id;
	struct mp_thread *rec;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static bool g_key_ok;
static uint64_t g_next_id = 1;
static __thread struct mp_tls_ent mp_tls[MP_TLS_SLOTS];
static __thread int mp_hook_rc; /* why the last hook call on this thread refused */
static __thread bool mp_grow_ok; /* the hook may register a new chunk */
#define MP_NEED_GROW 1           /* mp_hook_rc: refused to grow before a purge */

/* ---- size classes -------------------------------------------------------- */

unsigned vbi_mempool_class_of(size_t size)
{
	unsigned k, i;

	if (size <= 256)
		return size <= 64 ? 0 : (unsigned)((size - 1) >> 6);
	k = 63 - (unsigned)__builtin_clzll((unsigned long long)(size - 1)); /* 2^k < size */
	i = (unsigned)((size - ((size_t)1 << k) + ((size_t)1 << (k - 2)) - 1) >> (k - 2));
	return 4 + (k - 8) * 4 + i - 1;
}

size_t vbi_mempool_class_size(unsigned idx)
{
	unsigned k;

	if (idx < 4)
		return (size_t)(idx + 1) * 64;
	k = 8 + (idx - 4) / 4;
	return ((size_t)1 << k) + (size_t)((idx - 4) % 4 + 1) * ((size_t)1 << (k - 2));
}

const char *vbi_mempool_page_mode_name(int mode)
{
	switch (mode) {
	case VBI_MEMPOOL_PAGES_4K: return "4k";
	case VBI_MEMPOOL_PAGES_THP: return "thp";
	case VBI_MEMPOOL_PAGES_HUGETLB: return "hugetlb";
	default: return "?";
	}
}

/* ---- radix: address -> chunk, lock-free reads ----------------------------- */

static inline struct mp_chunk *mp_find(const struct vbi_mempool *p, uintptr_t a)
{
	uintptr_t f = a >> MP_FRAME_SHIFT;
	struct mp_chunk **l2;
	struct mp_chunk *c;

	if (unlikely(f >> (MP_L1_BITS + MP_L2_BITS)))
		return NULL;
	l2 = __atomic_load_n(&p->l1[f >> MP_L2_BITS], __ATOMIC_ACQUIRE);
	if (!l2)
		return NULL;
	c = __atomic_load_n(&l2[f & (MP_L2_LEN - 1)], __ATOMIC_ACQUIRE);
	if (!c || a - __atomic_load_n(&c->base, RELAXED) >= p->attr.chunk_size)
		return NULL;
	return c;
}

/*
 * mp_find through the thread's last-chunk cache: consecutive buffers of a
 * thread mostly share a chunk, and a hit saves the radix walk. A chunk slot
 * is never freed while the pool lives; a live buffer's chunk is stable, and a
 * slot being reused for another chunk covers no live buffer, so the range
 * check against the slot's current base is exact for valid addresses.
 */
static inline const struct mp_chunk *mp_find_cached(const struct vbi_mempool *p,
						    const struct mp_chunk **last, uintptr_t a)
{
	const struct mp_chunk *c = *last;

	if (likely(c && a - __atomic_load_n(&c->base, RELAXED) < p->attr.chunk_size))
		return c;
	c = mp_find(p, a);
	*last = c;
	return c;
}

static int mp_radix_prepare(struct vbi_mempool *p, uintptr_t base, size_t len)
{
	for (uintptr_t f = base >> MP_FRAME_SHIFT; f <= (base + len - 1) >> MP_FRAME_SHIFT; f++) {
		struct mp_chunk **l2, **expected = NULL;

		if (f >> (MP_L1_BITS + MP_L2_BITS))
			return vbi_err(-ENOMEM, "chunk at %#lx is above the 47-bit address space",
				       (unsigned long)base);
		if (__atomic_load_n(&p->l1[f >> MP_L2_BITS], __ATOMIC_ACQUIRE))
			continue;
		/* mmap, not malloc: may run inside a jemalloc hook. */
		l2 = mmap(NULL, MP_L2_LEN * sizeof(*l2), PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (l2 == MAP_FAILED)
			return vbi_err(-ENOMEM, "radix node: mmap: %s", strerror(errno));
		if (!__atomic_compare_exchange_n(&p->l1[f >> MP_L2_BITS], &expected, l2, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			munmap(l2, MP_L2_LEN * sizeof(*l2));
	}
	return 0;
}

static void mp_radix_set(struct vbi_mempool *p, struct mp_chunk *c, struct mp_chunk *val)
{
	for (uintptr_t f = c->base >> MP_FRAME_SHIFT; f <= (c->base + c->len - 1) >> MP_FRAME_SHIFT;
	     f++) {
		struct mp_chunk **l2 = __atomic_load_n(&p->l1[f >> MP_L2_BITS], __ATOMIC_ACQUIRE);

		__atomic_store_n(&l2[f & (MP_L2_LEN - 1)], val, __ATOMIC_RELEASE);
	}
}

/* ---- page bitmaps (pool->lock) --------------------------------------------- */

static inline bool bit_get(const uint64_t *b, unsigned i)
{
	return (b[i >> 6] >> (i & 63)) & 1;
}

static void bits_set(uint64_t *b, unsigned from, unsigned n, bool on)
{
	for (unsigned i = from; i < from + n; i++) {
		if (on)
			b[i >> 6] |= 1ull << (i & 63);
		else
			b[i >> 6] &= ~(1ull << (i & 63));
	}
}

/*
 * Best fit: the smallest run of clear pages that holds @n pages starting at a
 * multiple of @step. Sets *@run to its length; returns its first usable page,
 * or -1 when none fits.
 */
static long bits_best_fit(const struct mp_chunk *c, unsigned n, unsigned step, unsigned *run)
{
	long best = -1;
	unsigned best_len = ~0u, i = 0;

	if (c->npages - c->used < n)
		return -1;
	while (i < c->npages) {
		unsigned s, start;

		if (!(~c->bits[i >> 6] >> (i & 63))) { /* rest of the word is used */
			i = (i | 63) + 1;
			continue;
		}
		if (bit_get(c->bits, i)) {
			i++;
			continue;
		}
		s = i;
		while (i < c->npages && !bit_get(c->bits, i))
			i++;
		start = (s + step - 1) / step * step;
		if (start + n <= i && i - s < best_len) {
			best_len = i - s;
			best = start;
		}
	}
	*run = best_len;
	return best;
}

/* ---- chunks ------------------------------------------------------------------ */

static void *mp_map(size_t len, unsigned flags, bool thp, int *mode)
{
	uint8_t *raw, *al;
	size_t head, tail;

	if (!(flags & VBI_MEMPOOL_NO_HUGEPAGE)) {
		void *h = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << MAP_HUGE_SHIFT), -1, 0);

		if (h != MAP_FAILED) {
			*mode = VBI_MEMPOOL_PAGES_HUGETLB;
			return h;
		}
	}
	/* 2 MiB aligned, so THP can back it and the radix granule holds. */
	raw = mmap(NULL, len + VBI_MEMPOOL_HUGEPAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	al = (uint8_t *)(((uintptr_t)raw + VBI_MEMPOOL_HUGEPAGE - 1) &
			 ~(uintptr_t)(VBI_MEMPOOL_HUGEPAGE - 1));
	head = (size_t)(al - raw);
	tail = VBI_MEMPOOL_HUGEPAGE - head;
	if (head)
		munmap(raw, head);
	if (tail)
		munmap(al + len, tail);
	*mode = VBI_MEMPOOL_PAGES_4K;
	if (!(flags & VBI_MEMPOOL_NO_HUGEPAGE) && thp && !madvise(al, len, MADV_HUGEPAGE))
		*mode = VBI_MEMPOOL_PAGES_THP;
	return al;
}

/* Map and register a chunk into slot @c (state RESERVED). No lock held. */
static int mp_chunk_new(struct vbi_mempool *p, struct mp_chunk *c)
{
	size_t len = p->attr.chunk_size;
	void *m, *handle = NULL;
	uint32_t lkey = 0, rkey = 0;
	int mode, rc;

	m = mp_map(len, p->attr.flags, p->thp, &mode);
	if (!m)
		return vbi_err(-ENOMEM, "%s: mapping a %zu-byte chunk: %s", p->name, len,
			       strerror(errno));
	rc = mp_radix_prepare(p, (uintptr_t)m, len);
	if (rc)
		goto err_unmap;
	rc = p->ops->reg(p->ctx, m, len, p->attr.access, &lkey, &rkey, &handle);
	if (rc) {
		rc = vbi_err_prefix(rc < 0 ? rc : -EIO, "%s: registering a %zu-byte chunk: ",
				    p->name, len);
		goto err_unmap;
	}
	__atomic_store_n(&c->base, (uintptr_t)m, RELAXED); /* read by stale caches */
	c->len = len;
	c->lkey = lkey;
	c->rkey = (p->attr.access & VB_ACCESS_REMOTE_MASK) ? rkey : 0;
	c->handle = handle;
	c->mode = mode;
	c->used = 0;
	c->hwm = 0;
	__atomic_store_n(&c->inflight, 0, RELAXED);
	memset(c->bits, 0, p->words_per_chunk * sizeof(uint64_t));
	return 0;
err_unmap:
	munmap(m, len);
	return rc;
}

/* Deregister and unmap; the chunk is unpublished already. */
static int mp_chunk_release(struct vbi_mempool *p, struct mp_chunk *c)
{
	int rc = c->handle ? p->ops->dereg(p->ctx, c->handle) : 0; /* NULL: detached */

	if (rc)
		return vbi_err_prefix(rc < 0 ? rc : -EIO, "%s: deregistering chunk %#lx: ", p->name,
				      (unsigned long)c->base);
	munmap((void *)c->base, c->len);
	return 0;
}

/* ---- jemalloc extent hooks ------------------------------------------------------ */

static void *mp_extent_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align,
			     bool *zero, bool *commit, unsigned arena_ind)
{
	struct vbi_mempool *p = (struct vbi_mempool *)h;
	struct mp_chunk *c = NULL;
	unsigned n, step;
	long at = -1;
	int kind;
	bool fresh, clear = false;
	int rc;

	/*
	 * Refuse in-place growth, and every request of 2 MiB or more: jemalloc's
	 * retain-mode "grow" asks for >= 2 MiB and keeps what it does not use;
	 * refused, it falls back to asking for exactly the extent it needs, so
	 * no page of ours lingers in its retained set (see docs/mempool.md).
	 */
	if (new_addr || size >= VBI_MEMPOOL_HUGEPAGE || size > p->attr.chunk_size ||
	    align > VBI_MEMPOOL_HUGEPAGE || (size & (MP_PAGE - 1)) || !size)
		return NULL;
	n = (unsigned)(size >> MP_PAGE_SHIFT);
	step = align > MP_PAGE ? (unsigned)(align >> MP_PAGE_SHIFT) : 1;

	pthread_mutex_lock(&p->lock);
	/*
	 * Best fit over the chunks of the request's kind: the smallest hole
	 * that holds it (ties: the fuller chunk), so emptier chunks stay empty
	 * (releasable) and big holes stay big. Extents of large buffers
	 * (> 512 KiB) and of everything else never share a chunk: slabs would
	 * otherwise creep into the hole a large buffer needs.
	 */
	kind = n > MP_SMALL_RUN ? MP_KIND_LARGE : MP_KIND_SMALL;
	for (unsigned i = 0, best = ~0u; i < p->max_chunks; i++) {
		struct mp_chunk *k = &p->chunks[i];
		unsigned run;
		long a;

		if (k->state != MP_ACTIVE || (k->used && k->kind != kind))
			continue;
		a = bits_best_fit(k, n, step, &run);
		if (a >= 0 && (run < best || (run == best && c && k->used > c->used))) {
			c = k;
			at = a;
			best = run;
		}
	}
	if (at < 0 && __atomic_load_n(&p->detached, __ATOMIC_RELAXED)) {
		pthread_mutex_unlock(&p->lock);
		mp_hook_rc = vbi_err(-ENODEV, "%s: detached from its device", p->name);
		return NULL;
	}
	if (at < 0) {
		c = NULL;
		if (p->registered + p->reserved + p->attr.chunk_size <= p->attr.max_registered) {
			for (unsigned i = 0; i < p->max_chunks && !c; i++)
				if (p->chunks[i].state == MP_FREE)
					c = &p->chunks[i];
		}
		if (c && !mp_grow_ok) {
			/* First ask jemalloc to give back what it caches (see
			 * mp_alloc_fail); grow only if that does not help. */
			pthread_mutex_unlock(&p->lock);
			mp_hook_rc = MP_NEED_GROW;
			return NULL;
		}
		if (!c) {
			size_t reg = p->registered + p->reserved;

			pthread_mutex_unlock(&p->lock);
			mp_hook_rc = vbi_err(-EAGAIN,
					     "%s: registered-memory cap reached (%zu of %zu bytes "
					     "registered, chunk %zu): back-pressure",
					     p->name, reg, p->attr.max_registered, p->attr.chunk_size);
			return NULL;
		}
		c->state = MP_RESERVED;
		p->reserved += p->attr.chunk_size;
		pthread_mutex_unlock(&p->lock);

		rc = mp_chunk_new(p, c);

		pthread_mutex_lock(&p->lock);
		p->reserved -= p->attr.chunk_size;
		if (rc) {
			c->state = MP_FREE;
			pthread_mutex_unlock(&p->lock);
			mp_hook_rc = rc;
			return NULL;
		}
		mp_radix_set(p, c, c);
		c->state = MP_ACTIVE;
		p->registered += c->len;
		p->regs++;
		p->nchunks++;
		vbi_debug("%s: chunk %u at %#lx (%s pages) registered, lkey %#x", p->name,
			  (unsigned)(c - p->chunks), (unsigned long)c->base,
			  vbi_mempool_page_mode_name(c->mode), c->lkey);
		at = bits_best_fit(c, n, step, &(unsigned){ 0 });
	}
	bits_set(c->bits, (unsigned)at, n, true);
	c->used += n;
	c->kind = kind;
	fresh = (unsigned)at >= c->hwm;
	if ((unsigned)at + n > c->hwm)
		c->hwm = (unsigned)at + n;
	if (*zero && !fresh)
		clear = true;
	pthread_mutex_unlock(&p->lock);

	if (clear)
		memset((void *)(c->base + ((size_t)at << MP_PAGE_SHIFT)), 0, size);
	*zero = *zero || fresh;
	*commit = true; /* registered memory is always committed */
	return (void *)(c->base + ((size_t)at << MP_PAGE_SHIFT));
}

/* Take back [addr, addr + size): clears its pages in the chunk's bitmap. */
static bool mp_extent_give_back(struct vbi_mempool *p, void *addr, size_t size)
{
	struct mp_chunk *c = mp_find(p, (uintptr_t)addr);
	unsigned at, n;

	if (!c || (uintptr_t)addr + size > c->base + c->len) {
		vbi_warn("%s: jemalloc returned %p+%zu, not a range of this pool", p->name, addr,
			 size);
		return true;
	}
	at = (unsigned)(((uintptr_t)addr - c->base) >> MP_PAGE_SHIFT);
	n = (unsigned)(size >> MP_PAGE_SHIFT);
	pthread_mutex_lock(&p->lock);
	bits_set(c->bits, at, n, false);
	c->used -= n;
	pthread_mutex_unlock(&p->lock);
	return false;
}

static bool mp_extent_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed,
			     unsigned arena_ind)
{
	return mp_extent_give_back((struct vbi_mempool *)h, addr, size);
}

static void mp_extent_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed,
			      unsigned arena_ind)
{
	mp_extent_give_back((struct vbi_mempool *)h, addr, size);
}

static bool mp_extent_commit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
			     unsigned arena_ind)
{
	return false; /* always committed */
}

static bool mp_extent_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a,
			    size_t size_b, bool committed, unsigned arena_ind)
{
	return false; /* an extent never spans chunks, so neither do its parts */
}

static bool mp_extent_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b,
			    size_t size_b, bool committed, unsigned arena_ind)
{
	struct vbi_mempool *p = (struct vbi_mempool *)h;
	struct mp_chunk *a = mp_find(p, (uintptr_t)addr_a);

	/* true refuses: never merge across a chunk (= registration) boundary. */
	return !a || a != mp_find(p, (uintptr_t)addr_b);
}

/* ---- per-thread records ---------------------------------------------------------- */

static void mp_fold(struct mp_thread *dst, const struct mp_thread *src)
{
	dst->allocs += __atomic_load_n(&src->allocs, RELAXED);
	dst->frees += __atomic_load_n(&src->frees, RELAXED);
	dst->eagain += __atomic_load_n(&src->eagain, RELAXED);
	dst->bytes += __atomic_load_n(&src->bytes, RELAXED);
	for (unsigned i = 0; i < VBI_MEMPOOL_NCLASSES; i++)
		dst->class_allocs[i] += __atomic_load_n(&src->class_allocs[i], RELAXED);
}

static void mp_unlink(struct mp_thread *t)
{
	if (t->prev)
		t->prev->next = t->next;
	else
		t->pool->threads = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->next = t->prev = NULL;
}

/* Retire this thread's records (pthread key destructor). */
static void mp_thread_exit(void *unused)
{
	pthread_mutex_lock(&g_lock);
	for (unsigned i = 0; i < MP_TLS_SLOTS; i++) {
		struct mp_thread *t = mp_tls[i].rec;

		if (!t)
			continue;
		if (t->pool) {
			if (t->has_tc)
				mallctl("tcache.destroy", NULL, NULL, &t->tc, sizeof(t->tc));
			mp_fold(&t->pool->retired, t);
			mp_unlink(t);
		}
		free(t);
		memset(&mp_tls[i], 0, sizeof(mp_tls[i]));
	}
	pthread_mutex_unlock(&g_lock);
}

static void mp_once(void)
{
	g_key_ok = !pthread_key_create(&g_key, mp_thread_exit);
}

static struct mp_thread *mp_thread_slow(struct vbi_mempool *p)
{
	struct mp_tls_ent *slot = NULL;
	struct mp_thread *t;
	size_t sz = sizeof(unsigned);

	pthread_once(&g_once, mp_once);
	pthread_mutex_lock(&g_lock);
	for (unsigned i = 0; i < MP_TLS_SLOTS; i++) {
		struct mp_tls_ent *e = &mp_tls[i];

		if (e->rec && !e->rec->pool) { /* its pool was destroyed */
			free(e->rec);
			memset(e, 0, sizeof(*e));
		}
		if (!e->rec && !slot)
			slot = e;
	}
	t = slot && g_key_ok ? calloc(1, sizeof(*t)) : NULL;
	if (!t) {
		p->tc_fallbacks++;
		pthread_mutex_unlock(&g_lock);
		return &p->shared;
	}
	t->pool = p;
	t->has_tc = !mallctl("tcache.create", &t->tc, &sz, NULL, 0);
	t->aflags = MALLOCX_ARENA(p->arena) |
		    (t->has_tc ? MALLOCX_TCACHE(t->tc) : MALLOCX_TCACHE_NONE);
	t->dflags = t->has_tc ? MALLOCX_TCACHE(t->tc) : MALLOCX_TCACHE_NONE;
	if (!t->has_tc)
		p->tc_fallbacks++;
	t->next = p->threads;
	if (p->threads)
		p->threads->prev = t;
	p->threads = t;
	slot->pool = p;
	slot->id = p->id;
	slot->rec = t;
	pthread_setspecific(g_key, (void *)1);
	pthread_mutex_unlock(&g_lock);
	return t;
}

static inline struct mp_thread *mp_thread_get(struct vbi_mempool *p)
{
	for (unsigned i = 0; i < MP_TLS_SLOTS; i++)
		if (mp_tls[i].pool == p && mp_tls[i].id == p->id)
			return mp_tls[i].rec;
	return mp_thread_slow(p);
}

/* Single-writer counter: relaxed load + store (no locked instruction). */
static inline void thr_add(uint64_t *c, uint64_t v)
{
	__atomic_store_n(c, __atomic_load_n(c, RELAXED) + v, RELAXED);
}

static inline void ctr_add(const struct mp_thread *t, uint64_t *c, uint64_t v)
{
	if (unlikely(t->shared))
		__atomic_fetch_add(c, v, RELAXED);
	else
		__atomic_store_n(c, __atomic_load_n(c, RELAXED) + v, RELAXED);
}

/* ---- attributes, create, destroy --------------------------------------------------- */

static size_t env_size(const char *name, size_t dflt)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		goto bad;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		goto bad;
	return (size_t)v;
bad:
	vbi_warn("ignoring %s=%s (expected bytes with an optional k/m/g suffix)", name, s);
	return dflt;
}

void vbi_mempool_attr_init(struct vbi_mempool_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->chunk_size = env_size("VERBUS_MEMPOOL_CHUNK", VBI_MEMPOOL_HUGEPAGE);
	a->max_registered = env_size("VERBUS_MEMPOOL_CAP", (size_t)256 << 20);
	a->max_alloc = VBI_MEMPOOL_MAX_ALLOC;
	a->access = VB_ACCESS_LOCAL_WRITE;
	a->name = "mempool";
}

static bool thp_available(void)
{
	char buf[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");

	if (!f)
		return false;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	return buf[0] && !strstr(buf, "[never]");
}

static int mp_validate(const struct vbi_mempool_attr *a, const struct vbi_mempool_reg_ops *ops)
{
	if (!ops || !ops->reg || !ops->dereg)
		return vbi_err(-EINVAL, "mempool: registration ops (reg and dereg) are required");
	if (a->chunk_size < VBI_MEMPOOL_HUGEPAGE || a->chunk_size % VBI_MEMPOOL_HUGEPAGE)
		return vbi_err(-EINVAL, "mempool: chunk_size %zu is not a multiple of 2 MiB",
			       a->chunk_size);
	if (a->max_registered < a->chunk_size)
		return vbi_err(-EINVAL, "mempool: max_registered %zu is below one chunk (%zu)",
			       a->max_registered, a->chunk_size);
	if (a->max_registered / a->chunk_size > (1u << 20))
		return vbi_err(-EINVAL, "mempool: max_registered %zu allows more than 2^20 chunks",
			       a->max_registered);
	if (!a->max_alloc || a->max_alloc > VBI_MEMPOOL_MAX_ALLOC)
		return vbi_err(-EINVAL, "mempool: max_alloc %zu not in 1..%u", a->max_alloc,
			       VBI_MEMPOOL_MAX_ALLOC);
	if (a->access & ~(VB_ACCESS_LOCAL_WRITE | VB_ACCESS_REMOTE_MASK))
		return vbi_err(-EINVAL, "mempool: unknown access bits %#x", a->access);
	if ((a->access & (VB_ACCESS_REMOTE_WRITE | VB_ACCESS_REMOTE_ATOMIC)) &&
	    !(a->access & VB_ACCESS_LOCAL_WRITE))
		return vbi_err(-EINVAL, "mempool: remote write/atomic access needs LOCAL_WRITE");
	return 0;
}

/* jemalloc's experimental.arenas_create_ext argument (5.3): metadata of the
 * arena stays off our hooks, so none of it lands in registered memory. */
struct mp_arena_config {
	extent_hooks_t *extent_hooks;
	bool metadata_use_hooks;
};

static int mp_arena_create(struct vbi_mempool *p)
{
	struct mp_arena_config cfg = { &p->hooks, false };
	size_t sz = sizeof(p->arena);
	ssize_t never = -1;
	char name[64];
	int rc;

	rc = mallctl("experimental.arenas_create_ext", &p->arena, &sz, &cfg, sizeof(cfg));
	if (rc)
		return vbi_err(rc == ENOENT ? -ENOTSUP : -rc,
			       "%s: jemalloc experimental.arenas_create_ext: %s (jemalloc %s; "
			       "5.3 or later needed)", p->name, strerror(rc), JEMALLOC_VERSION);
	p->arena_ok = true;
	/* No time-based decay: freed extents stay cached in the arena (no hook
	 * calls in steady state); vbi_mempool_shrink purges explicitly. */
	snprintf(name, sizeof(name), "arena.%u.dirty_decay_ms", p->arena);
	rc = mallctl(name, NULL, NULL, &never, sizeof(never));
	snprintf(name, sizeof(name), "arena.%u.muzzy_decay_ms", p->arena);
	rc = rc ? rc : mallctl(name, NULL, NULL, &never, sizeof(never));
	if (rc)
		return vbi_err(-rc, "%s: setting the arena's decay: %s", p->name, strerror(rc));
	return 0;
}

static void mp_free_meta(struct vbi_mempool *p)
{
	if (p->l1) {
		for (size_t i = 0; i < MP_L1_LEN; i++)
			if (p->l1[i])
				munmap(p->l1[i], MP_L2_LEN * sizeof(struct mp_chunk *));
		free(p->l1);
	}
	free(p->bitmaps);
	free(p->chunks);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int vbi_mempool_create(const struct vbi_mempool_attr *attr, const struct vbi_mempool_reg_ops *ops,
		       void *ctx, struct vbi_mempool **out)
{
	struct vbi_mempool_attr dflt;
	struct vbi_mempool *p;
	int rc;

	if (!out)
		return vbi_err(-EINVAL, "mempool: out is NULL");
	*out = NULL;
	if (!attr) {
		vbi_mempool_attr_init(&dflt);
		attr = &dflt;
	}
	rc = mp_validate(attr, ops);
	if (rc)
		return rc;
	p = calloc(1, sizeof(*p));
	if (!p)
		return vbi_err(-ENOMEM, "mempool: out of memory");
	pthread_mutex_init(&p->lock, NULL);
	p->attr = *attr;
	snprintf(p->name, sizeof(p->name), "%s", attr->name ? attr->name : "mempool");
	p->attr.name = p->name;
	p->ops = ops;
	p->ctx = ctx;
	p->thp = thp_available();
	p->hooks = (extent_hooks_t){
		.alloc = mp_extent_alloc,
		.dalloc = mp_extent_dalloc,
		.destroy = mp_extent_destroy,
		.commit = mp_extent_commit,
		/* decommit, purge_lazy, purge_forced: opted out. Registered pages
		 * are pinned; MADV_DONTNEED would detach them from the MR. */
		.split = mp_extent_split,
		.merge = mp_extent_merge,
	};
	p->max_chunks = (unsigned)(attr->max_registered / attr->chunk_size);
	p->words_per_chunk = (attr->chunk_size >> MP_PAGE_SHIFT) / 64;
	p->chunks = calloc(p->max_chunks, sizeof(*p->chunks));
	p->bitmaps = calloc(p->max_chunks * p->words_per_chunk, sizeof(uint64_t));
	p->l1 = calloc(MP_L1_LEN, sizeof(*p->l1));
	if (!p->chunks || !p->bitmaps || !p->l1) {
		rc = vbi_err(-ENOMEM, "%s: out of memory for %u chunk slots", p->name,
			     p->max_chunks);
		goto err;
	}
	for (unsigned i = 0; i < p->max_chunks; i++) {
		p->chunks[i].bits = p->bitmaps + i * p->words_per_chunk;
		p->chunks[i].npages = (unsigned)(attr->chunk_size >> MP_PAGE_SHIFT);
	}
	p->shared.shared = true;
	pthread_mutex_lock(&g_lock);
	p->id = g_next_id++;
	pthread_mutex_unlock(&g_lock);
	rc = mp_arena_create(p);
	if (rc)
		goto err;
	p->shared.aflags = MALLOCX_ARENA(p->arena) | MALLOCX_TCACHE_NONE;
	p->shared.dflags = MALLOCX_TCACHE_NONE;
	*out = p;
	return 0;
err:
	if (p->arena_ok) {
		char name[64];

		snprintf(name, sizeof(name), "arena.%u.destroy", p->arena);
		mallctl(name, NULL, NULL, NULL, 0);
	}
	mp_free_meta(p);
	return rc;
}

int vbi_mempool_destroy(struct vbi_mempool *p)
{
	char name[64];
	int rc = 0, r;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < p->max_chunks; i++) {
		struct mp_chunk *c = &p->chunks[i];
		int n = __atomic_load_n(&c->inflight, __ATOMIC_ACQUIRE);

		if (c->state == MP_ACTIVE && n) {
			pthread_mutex_unlock(&p->lock);
			return vbi_err(-EBUSY,
				       "%s: chunk %u (%#lx) has %d in-flight work requests; "
				       "not destroying", p->name, i, (unsigned long)c->base, n);
		}
	}
	pthread_mutex_unlock(&p->lock);

	/* Thread caches first (jemalloc requires it before arena.destroy). */
	pthread_mutex_lock(&g_lock);
	for (struct mp_thread *t = p->threads, *next; t; t = next) {
		next = t->next;
		if (t->has_tc)
			mallctl("tcache.destroy", NULL, NULL, &t->tc, sizeof(t->tc));
		t->pool = NULL; /* its thread frees the record */
		t->next = t->prev = NULL;
	}
	p->threads = NULL;
	pthread_mutex_unlock(&g_lock);

	snprintf(name, sizeof(name), "arena.%u.destroy", p->arena);
	r = mallctl(name, NULL, NULL, NULL, 0);
	if (r)
		rc = vbi_err(-r, "%s: jemalloc %s: %s", p->name, name, strerror(r));

	for (unsigned i = 0; i < p->max_chunks; i++) {
		struct mp_chunk *c = &p->chunks[i];

		if (c->state != MP_ACTIVE)
			continue;
		mp_radix_set(p, c, NULL);
		r = mp_chunk_release(p, c);
		if (r && !rc)
			rc = r;
		c->state = MP_FREE;
	}
	mp_free_meta(p);
	return rc;
}

/* ---- hot path --------------------------------------------------------------------- */

static int mp_alloc_fail(struct vbi_mempool *p, struct mp_thread *t, size_t csize, void **out)
{
	char name[64];
	int rc;

	/*
	 * The hook refused, for want of a new chunk (or at the cap). jemalloc
	 * may still cache freed extents of other sizes: a purge hands them back
	 * to the pool, and the retry is served from those pages when they fit.
	 * Only if they do not is a new chunk registered. Registrations are rare
	 * (a chunk at a time), so a purge each time costs little.
	 */
	if (mp_hook_rc == MP_NEED_GROW || mp_hook_rc == -EAGAIN) {
		/* This thread's cache holds freed buffers (up to 32 KiB) whose
		 * extents a purge cannot take back until they are flushed. */
		if (t->has_tc)
			mallctl("tcache.flush", NULL, NULL, &t->tc, sizeof(t->tc));
		snprintf(name, sizeof(name), "arena.%u.purge", p->arena);
		mallctl(name, NULL, NULL, NULL, 0);
		mp_hook_rc = 0;
		mp_grow_ok = true;
		*out = mallocx(csize, t->aflags);
		mp_grow_ok = false;
		if (*out)
			return 0;
	}
	rc = mp_hook_rc;
	mp_hook_rc = 0;
	if (rc == -EAGAIN) {
		ctr_add(t, &t->eagain, 1);
		return rc; /* message set by the hook */
	}
	if (rc)
		return rc;
	return vbi_err(-ENOMEM, "%s: jemalloc could not allocate %zu bytes", p->name, csize);
}

int vbi_mempool_alloc(struct vbi_mempool *p, size_t size, struct vbi_buf *buf)
{
	struct mp_thread *t;
	const struct mp_chunk *c;
	unsigned idx;
	size_t csize;
	void *m;
	int rc;

	if (unlikely(size - 1 >= p->attr.max_alloc))
		return size ? vbi_err(-EMSGSIZE, "%s: %zu bytes is above max_alloc %zu", p->name,
				      size, p->attr.max_alloc)
			    : vbi_err(-EINVAL, "%s: allocation of 0 bytes", p->name);
	if (unlikely(__atomic_load_n(&p->detached, __ATOMIC_ACQUIRE)))
		return vbi_err(-ENODEV, "%s: detached from its device (removed)", p->name);
	idx = vbi_mempool_class_of(size);
	csize = vbi_mempool_class_size(idx); /* a multiple of 64: buffers are 64-aligned */
	t = mp_thread_get(p);
	m = mallocx(csize, t->aflags);
	if (unlikely(!m)) {
		rc = mp_alloc_fail(p, t, csize, &m);
		if (rc)
			return rc;
	}
	c = t->shared ? mp_find(p, (uintptr_t)m) : mp_find_cached(p, &t->last, (uintptr_t)m);
	if (unlikely(!c)) {
		dallocx(m, t->dflags);
		return vbi_err(-EFAULT, "%s: jemalloc returned %p outside the registered chunks",
			       p->name, m);
	}
	if (likely(!t->shared)) {
		thr_add(&t->allocs, 1);
		thr_add(&t->bytes, csize);
		thr_add(&t->class_allocs[idx], 1);
	} else {
		ctr_add(t, &t->allocs, 1);
		ctr_add(t, &t->bytes, csize);
		ctr_add(t, &t->class_allocs[idx], 1);
	}
	buf->addr = m;
	buf->len = (uint32_t)csize;
	buf->lkey = c->lkey;
	buf->rkey = c->rkey;
	return 0;
}

static inline int mp_free(struct vbi_mempool *p, void *addr, size_t usize)
{
	struct mp_thread *t = mp_thread_get(p);
	const struct mp_chunk *c;

	c = t->shared ? mp_find(p, (uintptr_t)addr) : mp_find_cached(p, &t->last, (uintptr_t)addr);
	if (unlikely(!c || ((uintptr_t)addr & 63)))
		return vbi_err(-EINVAL, "%s: %p is not a buffer of this pool; not freed", p->name,
			       addr);
	if (!usize)
		usize = sallocx(addr, 0);
	sdallocx(addr, usize, t->dflags);
	if (likely(!t->shared)) {
		thr_add(&t->frees, 1);
		thr_add(&t->bytes, (uint64_t)0 - usize);
	} else {
		ctr_add(t, &t->frees, 1);
		ctr_add(t, &t->bytes, (uint64_t)0 - usize);
	}
	return 0;
}

int vbi_mempool_free(struct vbi_mempool *p, void *addr)
{
	return mp_free(p, addr, 0);
}

int vbi_mempool_free_sized(struct vbi_mempool *p, void *addr, size_t size)
{
	if (unlikely(size - 1 >= p->attr.max_alloc))
		return vbi_err(-EINVAL, "%s: freeing %p with size %zu (max_alloc %zu)", p->name,
			       addr, size, p->attr.max_alloc);
	return mp_free(p, addr, vbi_mempool_class_size(vbi_mempool_class_of(size)));
}

int vbi_mempool_lkey(struct vbi_mempool *p, const void *addr, size_t len, uint32_t *lkey,
		     uint32_t *rkey)
{
	struct mp_chunk *c = mp_find(p, (uintptr_t)addr);

	if (unlikely(!c))
		return vbi_err(-ENOENT, "%s: address %p is not in the pool's registered memory",
			       p->name, addr);
	if (unlikely(len > c->base + c->len - (uintptr_t)addr))
		return vbi_err(-EINVAL, "%s: range %p+%zu runs past the end of its chunk (%#lx+%zu)",
			       p->name, addr, len, (unsigned long)c->base, c->len);
	*lkey = c->lkey;
	if (rkey)
		*rkey = c->rkey;
	return 0;
}

int vbi_mempool_inflight_get(struct vbi_mempool *p, const void *addr)
{
	struct mp_chunk *c = mp_find(p, (uintptr_t)addr);

	if (unlikely(!c))
		return vbi_err(-ENOENT, "%s: address %p is not in the pool's registered memory",
			       p->name, addr);
	__atomic_fetch_add(&c->inflight, 1, __ATOMIC_ACQ_REL);
	return 0;
}

int vbi_mempool_inflight_put(struct vbi_mempool *p, const void *addr)
{
	struct mp_chunk *c = mp_find(p, (uintptr_t)addr);

	if (unlikely(!c))
		return vbi_err(-ENOENT, "%s: address %p is not in the pool's registered memory",
			       p->name, addr);
	if (unlikely(__atomic_sub_fetch(&c->inflight, 1, __ATOMIC_ACQ_REL) < 0)) {
		__atomic_fetch_add(&c->inflight, 1, __ATOMIC_ACQ_REL);
		return vbi_err(-EINVAL, "%s: in-flight put without a get on chunk %#lx", p->name,
			       (unsigned long)c->base);
	}
	return 0;
}

/* ---- shrink, stats ------------------------------------------------------------------ */

int vbi_mempool_detach(struct vbi_mempool *p)
{
	int rc = 0, n = 0;

	pthread_mutex_lock(&p->lock);
	__atomic_store_n(&p->detached, true, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < p->max_chunks; i++) {
		struct mp_chunk *c = &p->chunks[i];
		int r;

		if (c->state != MP_ACTIVE || !c->handle)
			continue;
		r = p->ops->dereg(p->ctx, c->handle);
		if (r) {
			if (!rc)
				rc = vbi_err_prefix(r < 0 ? r : -EIO, "%s: deregistering chunk %u: ",
						    p->name, i);
			continue;
		}
		c->handle = NULL;
		c->lkey = c->rkey = 0;
		p->deregs++;
		n++;
	}
	pthread_mutex_unlock(&p->lock);
	return rc ? rc : n;
}

int vbi_mempool_shrink(struct vbi_mempool *p)
{
	struct mp_thread *t = NULL;
	char name[64];
	int released = 0, rc = 0;

	for (unsigned i = 0; i < MP_TLS_SLOTS; i++)
		if (mp_tls[i].pool == p && mp_tls[i].id == p->id)
			t = mp_tls[i].rec;
	if (t && t->has_tc)
		mallctl("tcache.flush", NULL, NULL, &t->tc, sizeof(t->tc));
	snprintf(name, sizeof(name), "arena.%u.purge", p->arena);
	mallctl(name, NULL, NULL, NULL, 0);

	for (unsigned i = 0; i < p->max_chunks; i++) {
		struct mp_chunk *c = &p->chunks[i];
		int r;

		pthread_mutex_lock(&p->lock);
		if (c->state != MP_ACTIVE || c->used ||
		    __atomic_load_n(&c->inflight, __ATOMIC_ACQUIRE)) {
			pthread_mutex_unlock(&p->lock);
			continue;
		}
		c->state = MP_RELEASING; /* the hook no longer picks it */
		mp_radix_set(p, c, NULL);
		pthread_mutex_unlock(&p->lock);

		r = mp_chunk_release(p, c);

		pthread_mutex_lock(&p->lock);
		if (r) {
			mp_radix_set(p, c, c);
			c->state = MP_ACTIVE;
			if (!rc)
				rc = r;
		} else {
			c->state = MP_FREE;
			p->registered -= c->len;
			p->deregs++;
			p->nchunks--;
			released++;
		}
		pthread_mutex_unlock(&p->lock);
	}
	return rc ? rc : released;
}

int vbi_mempool_stats(struct vbi_mempool *p, struct vbi_mempool_stats *st)
{
	struct mp_thread sum;

	memset(st, 0, sizeof(*st));
	memset(&sum, 0, sizeof(sum));
	pthread_mutex_lock(&g_lock);
	mp_fold(&sum, &p->retired);
	mp_fold(&sum, &p->shared);
	for (struct mp_thread *t = p->threads; t; t = t->next)
		mp_fold(&sum, t);
	st->tcache_fallbacks = p->tc_fallbacks;
	pthread_mutex_unlock(&g_lock);

	pthread_mutex_lock(&p->lock);
	st->chunks = p->nchunks;
	st->chunk_size = p->attr.chunk_size;
	st->registered_bytes = p->registered;
	st->cap_bytes = p->max_chunks * p->attr.chunk_size;
	st->registrations = p->regs;
	st->deregistrations = p->deregs;
	for (unsigned i = 0; i < p->max_chunks; i++) {
		const struct mp_chunk *c = &p->chunks[i];

		if (c->state != MP_ACTIVE && c->state != MP_RELEASING)
			continue;
		st->chunks_by_mode[c->mode]++;
		st->bytes_in_jemalloc += (size_t)c->used << MP_PAGE_SHIFT;
		st->inflight += (unsigned)__atomic_load_n(&c->inflight, RELAXED);
	}
	pthread_mutex_unlock(&p->lock);

	st->allocs = sum.allocs;
	st->frees = sum.frees;
	st->backpressure = sum.eagain;
	st->bytes_in_use = (size_t)sum.bytes;
	st->utilization_pct =
		st->registered_bytes ? 100.0 * (double)st->bytes_in_use / (double)st->registered_bytes
				     : 0.0;
	for (unsigned i = 0; i < VBI_MEMPOOL_NCLASSES; i++) {
		st->class_size[i] = vbi_mempool_class_size(i);
		st->class_allocs[i] = sum.class_allocs[i];
	}
	return 0;
}
