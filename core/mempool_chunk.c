/* SPDX-License-Identifier: MIT */
/*
 * Registered chunks of the slab pool: the radix that maps an address to its
 * chunk, the page bitmaps, mapping + registering + releasing a chunk, and the
 * jemalloc extent hooks that hand pages of chunks to the pool's arena.
 * Detach (device removal) and the release of empty chunks (shrink) are here
 * too: they are the other end of registration. Design: docs/mempool.md;
 * locks: core/mempool_priv.h.
 */
#include <errno.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/bitmap.h"
#include "core/err.h"
#include "core/log.h"
#include "core/mempool_priv.h"

#define MP_SMALL_RUN 128 /* pages (512 KiB): larger extents get chunks of their own */

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

__thread int vbi_mp_hook_rc;
__thread bool vbi_mp_grow_ok;

/* ---- radix: address -> chunk ------------------------------------------------ */

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

void vbi_mp_radix_free(struct vbi_mempool *p)
{
	if (!p->l1)
		return;
	for (size_t i = 0; i < MP_L1_LEN; i++)
		if (p->l1[i])
			munmap(p->l1[i], MP_L2_LEN * sizeof(struct mp_chunk *));
	free(p->l1);
}

/* ---- page bitmaps (pool->lock) --------------------------------------------- */

/* Best fit in chunk @c (core/bitmap.h): -1 at once when it has too few
 * clear pages. */
static long bits_best_fit(const struct mp_chunk *c, unsigned n, unsigned step, unsigned *run)
{
	if (c->npages - c->used < n) {
		*run = ~0u;
		return -1;
	}
	return vbi_bits_best_fit(c->bits, c->npages, n, step, run);
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
	__atomic_store_n(&c->lkey, lkey, RELAXED);
	__atomic_store_n(&c->rkey, (p->attr.access & VB_ACCESS_REMOTE_MASK) ? rkey : 0, RELAXED);
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

/*
 * Best fit over the ACTIVE chunks of @kind (and the empty ones): the
 * smallest hole that holds @n pages at a multiple of @step (ties: the fuller
 * chunk), so emptier chunks stay empty (releasable) and big holes stay big.
 * Sets *@out to the chunk; returns the first page, or -1 when none holds it.
 * pool->lock held.
 */
static long mp_best_chunk(struct vbi_mempool *p, int kind, unsigned n, unsigned step,
			  struct mp_chunk **out)
{
	struct mp_chunk *c = NULL;
	long at = -1;

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
	*out = c;
	return at;
}

/*
 * No chunk holds the request: register a new one, unless the pool is
 * detached, at its cap, or this thread may not grow it yet (then jemalloc is
 * asked to give back what it caches first: mp_alloc_fail). Called with
 * pool->lock held; returns the new chunk, ACTIVE and in the radix, with the
 * lock still held, or NULL with the lock released and vbi_mp_hook_rc saying
 * why. The registration itself runs unlocked, its slot RESERVED.
 */
static struct mp_chunk *mp_grow(struct vbi_mempool *p)
{
	struct mp_chunk *c = NULL;
	int rc;

	if (__atomic_load_n(&p->detached, __ATOMIC_RELAXED)) {
		pthread_mutex_unlock(&p->lock);
		vbi_mp_hook_rc = vbi_err(-ENODEV, "%s: detached from its device", p->name);
		return NULL;
	}
	if (p->registered + p->reserved + p->attr.chunk_size <= p->attr.max_registered) {
		for (unsigned i = 0; i < p->max_chunks && !c; i++)
			if (p->chunks[i].state == MP_FREE)
				c = &p->chunks[i];
	}
	if (c && !vbi_mp_grow_ok) {
		/* First ask jemalloc to give back what it caches (see
		 * mp_alloc_fail); grow only if that does not help. */
		pthread_mutex_unlock(&p->lock);
		vbi_mp_hook_rc = MP_NEED_GROW;
		return NULL;
	}
	if (!c) {
		size_t reg = p->registered + p->reserved;

		pthread_mutex_unlock(&p->lock);
		vbi_mp_hook_rc = vbi_err(-EAGAIN,
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
		vbi_mp_hook_rc = rc;
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
	return c;
}

int vbi_mp_reserve_pages(struct vbi_mempool *p, size_t pages)
{
	int grown = 0;

	for (;;) {
		struct mp_chunk *c;
		size_t avail = 0;
		int rc;

		pthread_mutex_lock(&p->lock);
		/* pages a small extent may take: free pages of chunks that are
		 * empty or already serve small extents */
		for (unsigned i = 0; i < p->max_chunks; i++) {
			const struct mp_chunk *k = &p->chunks[i];

			if (k->state == MP_ACTIVE && (!k->used || k->kind == MP_KIND_SMALL))
				avail += k->npages - k->used;
		}
		if (avail >= pages) {
			pthread_mutex_unlock(&p->lock);
			return grown;
		}
		vbi_mp_grow_ok = true;
		c = mp_grow(p); /* unlocks on failure */
		vbi_mp_grow_ok = false;
		if (!c) {
			rc = vbi_mp_hook_rc;
			vbi_mp_hook_rc = 0;
			return rc < 0 ? rc : vbi_err(-ENOMEM, "%s: no chunk to reserve", p->name);
		}
		pthread_mutex_unlock(&p->lock);
		grown++;
	}
}

static void *mp_extent_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align,
			     bool *zero, bool *commit, unsigned arena_ind)
{
	struct vbi_mempool *p = (struct vbi_mempool *)h;
	struct mp_chunk *c;
	unsigned n, step;
	long at;
	int kind;
	bool fresh, clear = false;

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
	/* Extents of large buffers (> 512 KiB) and of everything else never
	 * share a chunk: slabs would otherwise creep into the hole a large
	 * buffer needs. */
	kind = n > MP_SMALL_RUN ? MP_KIND_LARGE : MP_KIND_SMALL;
	at = mp_best_chunk(p, kind, n, step, &c);
	if (at < 0) {
		c = mp_grow(p);
		if (!c)
			return NULL; /* unlocked; vbi_mp_hook_rc says why */
		at = bits_best_fit(c, n, step, &(unsigned){ 0 });
	}
	vbi_bits_set(c->bits, (unsigned)at, n, true);
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
	vbi_bits_set(c->bits, at, n, false);
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

const extent_hooks_t vbi_mp_extent_hooks = {
	.alloc = mp_extent_alloc,
	.dalloc = mp_extent_dalloc,
	.destroy = mp_extent_destroy,
	.commit = mp_extent_commit,
	/* decommit, purge_lazy, purge_forced: opted out. Registered pages
	 * are pinned; MADV_DONTNEED would detach them from the MR. */
	.split = mp_extent_split,
	.merge = mp_extent_merge,
};

/* ---- releasing: detach, empty chunks, all ------------------------------------- */

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
		__atomic_store_n(&c->lkey, 0, RELAXED);
		__atomic_store_n(&c->rkey, 0, RELAXED);
		p->deregs++;
		n++;
	}
	pthread_mutex_unlock(&p->lock);
	return rc ? rc : n;
}

int vbi_mp_release_empty(struct vbi_mempool *p)
{
	int released = 0, rc = 0;

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

int vbi_mp_release_all(struct vbi_mempool *p)
{
	int rc = 0, r;

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
	return rc;
}
