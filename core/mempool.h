/* SPDX-License-Identifier: MIT */
/*
 * Registered-memory slab pool. Message buffers are carved out of large
 * registered chunks (default 2 MiB, huge pages when the system has them) so
 * nothing is registered on the hot path. jemalloc does the carving: each pool
 * owns a private jemalloc arena whose extent hooks hand out pages of the
 * pool's registered chunks; size classes, per-thread caches and the reuse of
 * freed extents are jemalloc's. See docs/mempool.md for the design and why.
 *
 * Registration goes through a callback table (struct vbi_mempool_reg_ops), so
 * this module never includes <infiniband/verbs.h>; the library implements it
 * over the transport's mr_reg/mr_dereg (proto/ctx.c), the raw-verbs tests
 * with ibv_reg_mr/ibv_dereg_mr (tests/common/verbs_mr.h).
 *
 * Thread-safety (synchronization table):
 *   vbi_mempool_alloc, _free, _lkey, _inflight_get/_put, _stats, _shrink:
 *       may be called from any thread, concurrently with each other, on the
 *       same pool. A buffer may be freed by a thread other than the one that
 *       allocated it (e.g. the progress thread on completion); it goes back to
 *       the pool it came from.
 *   vbi_mempool_create: any thread.
 *   vbi_mempool_destroy: must not run concurrently with any other call on the
 *       same pool, and the pool must not be used afterwards.
 *   Each thread gets its own jemalloc thread cache per pool on first use; it
 *   is released when the thread exits or the pool is destroyed.
 *
 * Ownership: a buffer returned by vbi_mempool_alloc belongs to the caller
 * until passed to vbi_mempool_free. Registered chunks belong to the pool;
 * the registration callbacks' context (@ctx, e.g. a protection domain) must
 * outlive the pool.
 *
 * Return codes: 0 (or a count where stated) on success, a negative errno on
 * failure with vb_errmsg() saying why. -EAGAIN is back-pressure: the cap on
 * registered bytes is reached; retry after buffers are freed.
 */
#ifndef VERBUS_CORE_MEMPOOL_H
#define VERBUS_CORE_MEMPOOL_H

#include <stddef.h>
#include <stdint.h>

/* Access bits for registrations; numerically equal to VBT_ACCESS_* and so to
 * IBV_ACCESS_* (transport/transport.c and transport/verbs/verbs_transport.c
 * check that at compile time). */
#define VB_ACCESS_LOCAL_WRITE   (1u << 0)
#define VB_ACCESS_REMOTE_WRITE  (1u << 1)
#define VB_ACCESS_REMOTE_READ   (1u << 2)
#define VB_ACCESS_REMOTE_ATOMIC (1u << 3)
#define VB_ACCESS_REMOTE_MASK \
	(VB_ACCESS_REMOTE_WRITE | VB_ACCESS_REMOTE_READ | VB_ACCESS_REMOTE_ATOMIC)

/* Smallest buffer (and alignment of every buffer): one cache line. */
#define VBI_MEMPOOL_MIN_ALLOC 64u
/* Largest buffer a pool can hand out: the largest jemalloc size class whose
 * extent still fits below 2 MiB (see docs/mempool.md). */
#define VBI_MEMPOOL_MAX_ALLOC (1792u * 1024u)
/* Size classes 64 B .. VBI_MEMPOOL_MAX_ALLOC (jemalloc's classes, 64-aligned). */
#define VBI_MEMPOOL_NCLASSES 55
#define VBI_MEMPOOL_HUGEPAGE ((size_t)2 << 20)

enum vbi_mempool_flags {
	/* Plain 4 KiB pages only: no MAP_HUGETLB, no transparent huge pages. */
	VBI_MEMPOOL_NO_HUGEPAGE = 1u << 0,
};

struct vbi_mempool_attr {
	/* Chunk (= one registration) size; a multiple of 2 MiB.
	 * Default 2 MiB; env VERBUS_MEMPOOL_CHUNK (bytes, k/m/g suffix). */
	size_t chunk_size;
	/* Cap on registered bytes; at the cap alloc returns -EAGAIN. At least
	 * one chunk. Default 256 MiB; env VERBUS_MEMPOOL_CAP. */
	size_t max_registered;
	/* Largest buffer; requests above fail with -EMSGSIZE.
	 * Default and upper bound VBI_MEMPOOL_MAX_ALLOC. */
	size_t max_alloc;
	/* VB_ACCESS_* for every chunk. Default VB_ACCESS_LOCAL_WRITE (SEND/RECV
	 * buffers). Remote bits are accepted only for a pool created for an
	 * RDMA READ/WRITE path, and require VB_ACCESS_LOCAL_WRITE too. */
	unsigned access;
	unsigned flags; /* enum vbi_mempool_flags */
	const char *name; /* for messages; default "mempool" */
};

struct vbi_mempool_reg_ops {
	/*
	 * Register [@addr, @addr + @len) with @access (VB_ACCESS_*). On success
	 * return 0 and set *@lkey, *@rkey and *@handle (passed to dereg). On
	 * failure return a negative errno and set vbi_err(). Called from the
	 * allocating thread (inside jemalloc's extent hook), from shrink and
	 * from destroy; never with a pool lock held. Must be thread-safe; may
	 * allocate memory with malloc.
	 */
	int (*reg)(void *ctx, void *addr, size_t len, unsigned access, uint32_t *lkey,
		   uint32_t *rkey, void **handle);
	/* Undo a registration. 0 or a negative errno (vbi_err() set). */
	int (*dereg)(void *ctx, void *handle);
};

/* A buffer: usable length (the size class, >= the size asked for) and the
 * keys of the chunk it lies in (rkey is 0 unless the pool grants remote
 * access). */
struct vbi_buf {
	void *addr;
	uint32_t len;
	uint32_t lkey;
	uint32_t rkey;
};

enum vbi_mempool_page_mode {
	VBI_MEMPOOL_PAGES_4K = 0,      /* plain pages */
	VBI_MEMPOOL_PAGES_THP = 1,     /* 2 MiB aligned, madvise(MADV_HUGEPAGE) */
	VBI_MEMPOOL_PAGES_HUGETLB = 2, /* MAP_HUGETLB 2 MiB pages */
};

struct vbi_mempool_stats {
	unsigned chunks;
	unsigned chunks_by_mode[3];     /* index: enum vbi_mempool_page_mode */
	size_t chunk_size;
	size_t registered_bytes;
	size_t cap_bytes;
	size_t bytes_in_use;            /* usable bytes of live buffers */
	size_t bytes_in_jemalloc;       /* pages handed to the arena (in use + cached) */
	double utilization_pct;         /* bytes_in_use / registered_bytes * 100 */
	uint64_t registrations;         /* reg callbacks that succeeded, so far */
	uint64_t deregistrations;
	uint64_t allocs, frees;
	uint64_t mag_allocs;            /* allocs served by a magazine (no jemalloc call) */
	uint64_t backpressure;          /* allocs that returned -EAGAIN */
	uint64_t tcache_fallbacks;      /* threads served without a thread cache */
	unsigned inflight;              /* sum of chunk in-flight counts */
	size_t class_size[VBI_MEMPOOL_NCLASSES];
	uint64_t class_allocs[VBI_MEMPOOL_NCLASSES];
};

struct vbi_mempool;

/* Defaults, then environment overrides (VERBUS_MEMPOOL_CHUNK, _CAP), both
 * from the table (core/config.h): a malformed value keeps its default. */
void vbi_mempool_attr_init(struct vbi_mempool_attr *attr);

/*
 * Create a pool. Registers nothing yet: chunks are registered on demand.
 * @ops and @ctx are kept (must outlive the pool). Returns 0, -EINVAL (bad
 * attribute; the message names it), -ENOTSUP (jemalloc lacks
 * experimental.arenas_create_ext), -ENOMEM.
 */
int vbi_mempool_create(const struct vbi_mempool_attr *attr, const struct vbi_mempool_reg_ops *ops,
		       void *ctx, struct vbi_mempool **out);

/*
 * Destroy: releases the thread caches, the arena, every registration and
 * every chunk. Returns -EBUSY, and changes nothing, while any chunk has an
 * in-flight count (a posted WR references it). Buffers not freed are
 * discarded. Returns 0, or the first dereg error (everything is released
 * anyway). NULL is a no-op.
 */
int vbi_mempool_destroy(struct vbi_mempool *pool);

/*
 * Allocate a buffer of at least @size bytes (64-byte aligned, within one
 * registered chunk). Returns 0 and fills *@buf; -EINVAL for size 0;
 * -EMSGSIZE above max_alloc; -EAGAIN at the cap (back-pressure: retry after
 * frees); -ENOMEM (registration or mapping failed; message from the callback).
 */
int vbi_mempool_alloc(struct vbi_mempool *pool, size_t size, struct vbi_buf *buf);

/*
 * Return @addr (a buf.addr from vbi_mempool_alloc on this pool) to the pool,
 * from any thread. -EINVAL when @addr is not in this pool (nothing freed).
 * Freeing a pointer twice, or an interior pointer, is undefined.
 */
int vbi_mempool_free(struct vbi_mempool *pool, void *addr);

/*
 * vbi_mempool_free when the caller still knows the size: @size is the size
 * asked for at allocation or the buf.len returned (anything of the same size
 * class). Saves jemalloc's size lookup (sized deallocation). A size of
 * another class is undefined behaviour; -EINVAL as for vbi_mempool_free, and
 * for a size of 0 or above max_alloc.
 */
int vbi_mempool_free_sized(struct vbi_mempool *pool, void *addr, size_t size);

/*
 * lkey (and rkey, may be NULL) for [@addr, @addr + @len): O(1), any pointer
 * inside a buffer works. -ENOENT when @addr is not in the pool's registered
 * memory, -EINVAL when the range runs past the end of its chunk.
 */
int vbi_mempool_lkey(struct vbi_mempool *pool, const void *addr, size_t len, uint32_t *lkey,
		     uint32_t *rkey);

/*
 * In-flight accounting: call _get before posting a WR that references
 * @addr and _put when its completion (or flush) is reaped. A chunk with a
 * non-zero count is never deregistered. -ENOENT when @addr is not in the
 * pool; _put returns -EINVAL on an underflow (a put without a get).
 */
int vbi_mempool_inflight_get(struct vbi_mempool *pool, const void *addr);
int vbi_mempool_inflight_put(struct vbi_mempool *pool, const void *addr);

/*
 * Release idle chunks: flushes the calling thread's cache for this pool,
 * has jemalloc purge the arena (freed extents come back to the pool), then
 * deregisters and unmaps every chunk with no extent in jemalloc and no
 * in-flight count. Buffers cached by other threads keep their chunk. Returns
 * the number of chunks released, or a negative errno (dereg failure; that
 * chunk stays registered and usable).
 */
int vbi_mempool_shrink(struct vbi_mempool *pool);

/*
 * Registered room ahead of need: has jemalloc purge the arena (freed
 * extents it cached come back to the pool), then registers chunks until
 * the pool's unused pages that buffers up to 512 KiB may take add up to
 * @bytes. For a thread that will allocate about @bytes on a path that must
 * not register (the library: before an accepted connection's HELLO, whose
 * buffers the progress thread then allocates). Best effort: other threads
 * may take the room meanwhile. Returns the number of chunks registered (0:
 * there was room), -EAGAIN at the cap (nothing more registered), -ENODEV
 * when detached, or the registration's error. Any thread.
 */
int vbi_mempool_reserve(struct vbi_mempool *pool, size_t bytes);
/* The pool's device goes away (hot removal): deregister every chunk now,
 * keep the memory. Buffers still out (messages waiting in a retransmit
 * window) stay readable and are freed as usual; allocations fail with
 * -ENODEV from now on, and destroy no longer deregisters. Call once no work
 * request that uses the pool's keys can still be posted (the keys are
 * invalid afterwards), before the protection domain goes. Any thread;
 * returns the number of chunks deregistered or a negative errno. */
int vbi_mempool_detach(struct vbi_mempool *pool);

/* Snapshot of the counters (a consistent view of chunks; per-thread counters
 * are summed without stopping the threads). Returns 0. */
int vbi_mempool_stats(struct vbi_mempool *pool, struct vbi_mempool_stats *st);

/* Size-class index (0 .. VBI_MEMPOOL_NCLASSES-1) of a request of @size bytes
 * (1 .. VBI_MEMPOOL_MAX_ALLOC), and the usable size of class @idx. */
static inline unsigned vbi_mempool_class_of(size_t size) /* inline: per message, twice */
{
	unsigned k, i;

	if (size <= 256)
		return size <= 64 ? 0 : (unsigned)((size - 1) >> 6);
	k = 63 - (unsigned)__builtin_clzll((unsigned long long)(size - 1)); /* 2^k < size */
	i = (unsigned)((size - ((size_t)1 << k) + ((size_t)1 << (k - 2)) - 1) >> (k - 2));
	return 4 + (k - 8) * 4 + i - 1;
}
size_t vbi_mempool_class_size(unsigned idx);

/* "4k", "thp", "hugetlb". */
const char *vbi_mempool_page_mode_name(int mode);

#endif
