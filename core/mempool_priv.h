/* SPDX-License-Identifier: MIT */
/*
 * Internals of the registered-memory slab pool, shared by its files:
 *   mempool.c         size classes, per-thread records and their jemalloc
 *                     thread caches, the hot path (alloc, free, lkey,
 *                     in-flight counts), shrink, stats;
 *   mempool_create.c  attributes, create, destroy (the pool's arena);
 *   mempool_chunk.c   registered chunks: the address radix, page bitmaps,
 *                     map + register + release, jemalloc's extent hooks,
 *                     detach.
 * Only those files include this. Design and reasons: docs/mempool.md.
 *
 * Locks: g_lock (global, mempool.c) guards the per-thread records of every
 * pool and their retirement; pool->lock guards the chunk table and page
 * bitmaps; pool->depot_lock the magazine depot (a leaf: no other lock and
 * no jemalloc call is made under it). Order: g_lock before pool->lock;
 * neither is held while a registration callback runs. jemalloc may hold its own arena locks while it
 * calls the hooks, which take pool->lock only.
 */
#ifndef VERBUS_CORE_MEMPOOL_PRIV_H
#define VERBUS_CORE_MEMPOOL_PRIV_H

#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mempool.h"

#define MP_PAGE_SHIFT 12
#define MP_PAGE ((size_t)1 << MP_PAGE_SHIFT)
#define MP_FRAME_SHIFT 21 /* radix granule: 2 MiB, the chunk alignment */
#define MP_L2_BITS 14
#define MP_L1_BITS (47 - MP_FRAME_SHIFT - MP_L2_BITS)
#define MP_L1_LEN ((size_t)1 << MP_L1_BITS)
#define MP_L2_LEN ((size_t)1 << MP_L2_BITS)

#define unlikely(x) __builtin_expect(!!(x), 0)
#define likely(x) __builtin_expect(!!(x), 1)
#define RELAXED __ATOMIC_RELAXED

enum { MP_FREE = 0, MP_RESERVED, MP_ACTIVE, MP_RELEASING };
enum { MP_KIND_EMPTY = 0, MP_KIND_SMALL, MP_KIND_LARGE };

struct mp_chunk {
	uintptr_t base;
	size_t len;
	uint32_t lkey, rkey; /* atomic (relaxed): read with no lock by the hot path
			      * (vbi_mempool_alloc, vbi_mempool_lkey) of a buffer
			      * it holds, while a released slot is reused */
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

/*
 * Magazines (Bonwick and Adams, "Magazines and Vmem", 2001): freed buffers
 * of the small classes are kept, per thread, in a magazine of up to
 * MP_MAG_ROUNDS and handed out again by the same thread with no jemalloc
 * call. A thread whose magazine is full deposits it in the pool's depot
 * (one lock for MP_MAG_ROUNDS frees) and one whose magazine is empty takes a
 * full one from there: buffers freed on one thread (the progress thread,
 * when an ACK releases them) come back to the thread that allocates (the
 * publisher's) in batches. jemalloc's explicit thread caches, which the
 * pool's own arena needs, cost about 270 instructions an allocation and 480
 * a free on that path; a magazine round costs a few. What the magazines
 * and the depot hold is allocated as far as jemalloc knows: shrink,
 * reserve and a refused allocation empty the depot and the calling
 * thread's magazines first, and a thread's are emptied when it exits.
 */
#define MP_MAG_CLASSES 16 /* classes 0-15: buffers up to 2 KiB */
#define MP_MAG_ROUNDS 32
#define MP_DEPOT_FULL 4   /* full magazines the depot keeps per class */

struct mp_mag {
	unsigned n;
	void *round[MP_MAG_ROUNDS];
};

/* The depot of one class: full magazines, and one empty one kept for a
 * thread that deposits. pool->depot_lock. */
struct mp_depot {
	struct mp_mag *full[MP_DEPOT_FULL];
	unsigned nfull; /* atomic (relaxed): also read without the lock */
	struct mp_mag *spare;
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
	uint64_t mag_allocs;           /* allocations served by a magazine */
	uint64_t class_allocs[VBI_MEMPOOL_NCLASSES];
	struct mp_mag *mag[MP_MAG_CLASSES]; /* its thread alone; none for shared */
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

	pthread_mutex_t depot_lock; /* leaf: the depot only */
	struct mp_depot depot[MP_MAG_CLASSES];

	/* g_lock */
	struct mp_thread *threads;
	struct mp_thread retired; /* counters of exited threads */
	struct mp_thread shared;  /* threads without a record: atomic counters */
	uint64_t tc_fallbacks;
};

/* ---- radix: address -> chunk, lock-free reads (mempool_chunk.c builds it) -- */

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

/* ---- mempool_chunk.c ---------------------------------------------------------- */

/* jemalloc's extent hooks of every pool: pool->hooks is a copy (first member,
 * so a hook gets its pool back). */
extern const extent_hooks_t vbi_mp_extent_hooks;

/* Why the last hook call on this thread refused: 0, a negative errno with the
 * message set, or MP_NEED_GROW. vbi_mp_grow_ok: the hook may register a new
 * chunk (set by mp_alloc_fail around its retry). Both per thread. */
extern __thread int vbi_mp_hook_rc;
extern __thread bool vbi_mp_grow_ok;
#define MP_NEED_GROW 1 /* vbi_mp_hook_rc: refused to grow before a purge */

/* Register chunks until the pool's free pages that small extents may take
 * (in chunks that are empty or serve small extents) are at least @pages:
 * the number of chunks registered, or a negative errno (-EAGAIN at the
 * cap, the registration's error). vbi_mempool_reserve. */
int vbi_mp_reserve_pages(struct vbi_mempool *p, size_t pages);
/* Release every chunk that is ACTIVE, no page handed to jemalloc and nothing
 * in flight (vbi_mempool_shrink); returns how many, or the first error. */
int vbi_mp_release_empty(struct vbi_mempool *p);
/* Unpublish and release every ACTIVE chunk (vbi_mempool_destroy, after the
 * arena is gone); returns 0 or the first error. */
int vbi_mp_release_all(struct vbi_mempool *p);
/* Unmap the radix nodes and free its root (p->l1 may be NULL). */
void vbi_mp_radix_free(struct vbi_mempool *p);

/* ---- mempool.c ---------------------------------------------------------------- */

/* A new pool id (under g_lock): thread records name their pool by (pointer,
 * id), so a pool reallocated at the same address is not mistaken. */
uint64_t vbi_mp_new_id(void);
/* Destroy the thread caches of @p and detach its thread records (each thread
 * frees its own record); before arena.destroy. Frees the depot's magazines
 * (their buffers go with the arena). */
void vbi_mp_threads_release(struct vbi_mempool *p);

#endif
