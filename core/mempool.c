/* SPDX-License-Identifier: MIT */
/*
 * Registered-memory slab pool: a private jemalloc arena whose extent hooks
 * serve pages of registered chunks. Design and reasons: docs/mempool.md.
 *
 * This file: size classes, the per-thread records (counters and a jemalloc
 * thread cache per thread and pool), the hot path (alloc, free, lkey,
 * in-flight counts), shrink and stats. Create/destroy: mempool_create.c;
 * chunks and the extent hooks: mempool_chunk.c; shared internals and the
 * lock order: mempool_priv.h.
 */
#include "core/mempool.h"

#include <errno.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "core/mempool_priv.h"

#define MP_TLS_SLOTS 8

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

/* ---- size classes -------------------------------------------------------- */

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

/* ---- per-thread records ---------------------------------------------------------- */

static void mp_fold(struct mp_thread *dst, const struct mp_thread *src)
{
	dst->allocs += __atomic_load_n(&src->allocs, RELAXED);
	dst->frees += __atomic_load_n(&src->frees, RELAXED);
	dst->eagain += __atomic_load_n(&src->eagain, RELAXED);
	dst->bytes += __atomic_load_n(&src->bytes, RELAXED);
	dst->mag_allocs += __atomic_load_n(&src->mag_allocs, RELAXED);
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

/* ---- magazines (mempool_priv.h) ------------------------------------------------------ */

/* A depot's count of full magazines: written under depot_lock, read also
 * without it (mp_mag_reload's look before it locks). */
static inline unsigned mp_depot_count(const struct mp_depot *d)
{
	return __atomic_load_n(&d->nfull, RELAXED);
}

static inline void mp_depot_set(struct mp_depot *d, unsigned n)
{
	__atomic_store_n(&d->nfull, n, RELAXED);
}

/* Free the magazines of @t themselves; their buffers are freed already, or
 * went with their pool's arena. */
static void mp_mags_drop(struct mp_thread *t)
{
	for (unsigned i = 0; i < MP_MAG_CLASSES; i++) {
		free(t->mag[i]);
		t->mag[i] = NULL;
	}
}

/* Hand the buffers in @m (class @idx) back to jemalloc with @dflags. */
static void mp_mag_empty(struct mp_mag *m, unsigned idx, int dflags)
{
	size_t csize = vbi_mempool_class_size(idx);

	for (unsigned k = 0; k < m->n; k++)
		sdallocx(m->round[k], csize, dflags);
	m->n = 0;
}

/* The buffers of @t's magazines back into its jemalloc cache (its own
 * thread: the magazines are its alone). */
static void mp_mags_empty(struct mp_thread *t)
{
	for (unsigned i = 0; i < MP_MAG_CLASSES; i++)
		if (t->mag[i])
			mp_mag_empty(t->mag[i], i, t->dflags);
}

/* Everything cached that jemalloc counts as allocated goes back to it: the
 * buffers of @t's magazines (@t: the calling thread's record, or NULL) into
 * its thread cache, and the depot's straight to the arena (mp_give_back).
 * Any thread. */
static void mp_cached_flush(struct vbi_mempool *p, struct mp_thread *t)
{
	struct mp_mag *full[MP_MAG_CLASSES * MP_DEPOT_FULL];
	unsigned nfull = 0, cls[MP_MAG_CLASSES * MP_DEPOT_FULL];

	if (t && !t->shared)
		mp_mags_empty(t);
	pthread_mutex_lock(&p->depot_lock);
	for (unsigned i = 0; i < MP_MAG_CLASSES; i++) {
		struct mp_depot *d = &p->depot[i];

		for (unsigned k = mp_depot_count(d); k; k--) {
			cls[nfull] = i;
			full[nfull++] = d->full[k - 1];
		}
		mp_depot_set(d, 0);
	}
	pthread_mutex_unlock(&p->depot_lock);
	for (unsigned k = 0; k < nfull; k++) {
		mp_mag_empty(full[k], cls[k], MALLOCX_TCACHE_NONE);
		free(full[k]);
	}
}

/* The slow half of a magazine allocation: @t's magazine of class @idx is
 * empty (or missing); swap it for a full one from the depot. Returns a
 * buffer, or NULL when the depot has none (the caller asks jemalloc). */
static void *mp_mag_reload(struct vbi_mempool *p, struct mp_thread *t, unsigned idx)
{
	struct mp_depot *d = &p->depot[idx];
	struct mp_mag *m = t->mag[idx], *full = NULL;

	/* nothing there (a publisher running ahead of the frees): no lock */
	if (!mp_depot_count(d))
		return NULL;
	pthread_mutex_lock(&p->depot_lock);
	if (mp_depot_count(d)) {
		full = d->full[mp_depot_count(d) - 1];
		mp_depot_set(d, mp_depot_count(d) - 1);
		if (m && !d->spare) {
			d->spare = m; /* empty: for the next thread that deposits */
			m = NULL;
		}
	}
	pthread_mutex_unlock(&p->depot_lock);
	if (!full)
		return NULL;
	free(m);
	t->mag[idx] = full;
	return full->round[--full->n];
}

/* The slow half of a magazine free: @t's magazine of class @idx is full (or
 * missing). A full one goes to the depot for an empty one; when the depot
 * is full, its buffers go back to jemalloc instead. Returns false if @addr
 * could not be kept (no memory for a magazine): the caller frees it. */
static bool mp_mag_deposit(struct vbi_mempool *p, struct mp_thread *t, unsigned idx, void *addr)
{
	struct mp_depot *d = &p->depot[idx];
	struct mp_mag *m = t->mag[idx], *empty = NULL;
	bool kept = false;

	if (m) {
		pthread_mutex_lock(&p->depot_lock);
		if (mp_depot_count(d) < MP_DEPOT_FULL) {
			d->full[mp_depot_count(d)] = m;
			mp_depot_set(d, mp_depot_count(d) + 1);
			empty = d->spare;
			d->spare = NULL;
			kept = true;
		}
		pthread_mutex_unlock(&p->depot_lock);
		if (!kept) {
			mp_mag_empty(m, idx, t->dflags);
			empty = m;
		}
	}
	if (!empty && !(empty = malloc(sizeof(*empty)))) {
		t->mag[idx] = NULL;
		return false;
	}
	empty->n = 0;
	empty->round[empty->n++] = addr;
	t->mag[idx] = empty;
	return true;
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
			mp_mags_empty(t);
			if (t->has_tc)
				mallctl("tcache.destroy", NULL, NULL, &t->tc, sizeof(t->tc));
			mp_fold(&t->pool->retired, t);
			mp_unlink(t);
		}
		mp_mags_drop(t);
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
			mp_mags_drop(e->rec);
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

/* The calling thread's record on @p, or NULL if it has none yet. */
static inline struct mp_thread *mp_thread_find(const struct vbi_mempool *p)
{
	for (unsigned i = 0; i < MP_TLS_SLOTS; i++)
		if (mp_tls[i].pool == p && mp_tls[i].id == p->id)
			return mp_tls[i].rec;
	return NULL;
}

static inline struct mp_thread *mp_thread_get(struct vbi_mempool *p)
{
	struct mp_thread *t = mp_thread_find(p);

	return likely(t != NULL) ? t : mp_thread_slow(p);
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

uint64_t vbi_mp_new_id(void)
{
	uint64_t id;

	pthread_mutex_lock(&g_lock);
	id = g_next_id++;
	pthread_mutex_unlock(&g_lock);
	return id;
}

void vbi_mp_threads_release(struct vbi_mempool *p)
{
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
	pthread_mutex_lock(&p->depot_lock);
	for (unsigned i = 0; i < MP_MAG_CLASSES; i++) {
		struct mp_depot *d = &p->depot[i];

		for (unsigned k = mp_depot_count(d); k; k--)
			free(d->full[k - 1]);
		mp_depot_set(d, 0);
		free(d->spare);
		d->spare = NULL;
	}
	pthread_mutex_unlock(&p->depot_lock);
}

/* ---- hot path --------------------------------------------------------------------- */

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

/* jemalloc hands the extents it caches for @p's arena back to the pool
 * (the dalloc hook): what a purge-and-retry, a shrink and a reserve count
 * on. Any thread. */
static void mp_arena_purge(struct vbi_mempool *p)
{
	char name[64];

	snprintf(name, sizeof(name), "arena.%u.purge", p->arena);
	mallctl(name, NULL, NULL, NULL, 0);
}

/* Everything freed that the pool's arena cannot see yet goes back to it,
 * then it is purged: the depot, the calling thread's magazines and its
 * jemalloc cache (@t: its record, or NULL). What shrink, reserve and a
 * refused allocation count on. Any thread. */
static void mp_give_back(struct vbi_mempool *p, struct mp_thread *t)
{
	mp_cached_flush(p, t);
	if (t && t->has_tc)
		mallctl("tcache.flush", NULL, NULL, &t->tc, sizeof(t->tc));
	mp_arena_purge(p);
}

static int mp_alloc_fail(struct vbi_mempool *p, struct mp_thread *t, size_t csize, void **out)
{
	int rc;

	/*
	 * The hook refused, for want of a new chunk (or at the cap). jemalloc
	 * may still cache freed extents of other sizes: a purge hands them back
	 * to the pool, and the retry is served from those pages when they fit.
	 * Only if they do not is a new chunk registered. Registrations are rare
	 * (a chunk at a time), so a purge each time costs little.
	 */
	if (vbi_mp_hook_rc == MP_NEED_GROW || vbi_mp_hook_rc == -EAGAIN) {
		/* This thread's cache holds freed buffers (up to 32 KiB) whose
		 * extents a purge cannot take back until they are flushed; so
		 * do the magazines. */
		mp_give_back(p, t);
		vbi_mp_hook_rc = 0;
		vbi_mp_grow_ok = true;
		*out = mallocx(csize, t->aflags);
		vbi_mp_grow_ok = false;
		if (*out)
			return 0;
	}
	rc = vbi_mp_hook_rc;
	vbi_mp_hook_rc = 0;
	if (rc == -EAGAIN) {
		ctr_add(t, &t->eagain, 1);
		return rc; /* message set by the hook */
	}
	if (rc)
		return rc;
	return vbi_err(-ENOMEM, "%s: jemalloc could not allocate %zu bytes", p->name, csize);
}

/* A buffer of class @idx from @t's magazine (or the depot), or NULL: the
 * caller asks jemalloc. */
static inline void *mp_mag_get(struct vbi_mempool *p, struct mp_thread *t, unsigned idx)
{
	struct mp_mag *mg;
	void *m;

	if (idx >= MP_MAG_CLASSES || t->shared)
		return NULL;
	mg = t->mag[idx];
	m = likely(mg && mg->n) ? mg->round[--mg->n] : mp_mag_reload(p, t, idx);
	if (m)
		thr_add(&t->mag_allocs, 1);
	return m;
}

/* Keep freed @addr (@usize bytes) in @t's magazine (or deposit it): false
 * when it is not kept and the caller frees it to jemalloc. */
static inline bool mp_mag_put(struct vbi_mempool *p, struct mp_thread *t, size_t usize, void *addr)
{
	unsigned idx = vbi_mempool_class_of(usize);
	struct mp_mag *mg;

	if (idx >= MP_MAG_CLASSES || t->shared)
		return false;
	if (likely((mg = t->mag[idx]) && mg->n < MP_MAG_ROUNDS)) {
		mg->round[mg->n++] = addr;
		return true;
	}
	return mp_mag_deposit(p, t, idx, addr);
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
	m = mp_mag_get(p, t, idx);
	if (!m)
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
	buf->lkey = __atomic_load_n(&c->lkey, RELAXED);
	buf->rkey = __atomic_load_n(&c->rkey, RELAXED);
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
	if (!mp_mag_put(p, t, usize, addr))
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
	*lkey = __atomic_load_n(&c->lkey, RELAXED);
	if (rkey)
		*rkey = __atomic_load_n(&c->rkey, RELAXED);
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

int vbi_mempool_shrink(struct vbi_mempool *p)
{
	mp_give_back(p, mp_thread_find(p));
	return vbi_mp_release_empty(p);
}

int vbi_mempool_reserve(struct vbi_mempool *p, size_t bytes)
{
	if (__atomic_load_n(&p->detached, __ATOMIC_ACQUIRE))
		return vbi_err(-ENODEV, "%s: detached from its device (removed)", p->name);
	/* what jemalloc caches of freed extents counts as free once purged,
	 * and so does what the depot and this thread's magazines hold */
	mp_give_back(p, mp_thread_find(p));
	return vbi_mp_reserve_pages(p, (bytes + MP_PAGE - 1) >> MP_PAGE_SHIFT);
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
	st->mag_allocs = sum.mag_allocs;
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
