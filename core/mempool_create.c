/* SPDX-License-Identifier: MIT */
/*
 * Creating and destroying a slab pool: attributes and their environment
 * overrides, validation, the pool's private jemalloc arena (its extent hooks
 * are in mempool_chunk.c), and the teardown order jemalloc requires. Design:
 * docs/mempool.md; locks: core/mempool_priv.h.
 */
#include <errno.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/err.h"
#include "core/mempool_priv.h"

void vbi_mempool_attr_init(struct vbi_mempool_attr *a)
{
	memset(a, 0, sizeof(*a));
	vbi_cfg_size(VBI_CFG_MEMPOOL_CHUNK, &a->chunk_size);
	vbi_cfg_size(VBI_CFG_MEMPOOL_CAP, &a->max_registered);
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
	vbi_mp_radix_free(p);
	free(p->bitmaps);
	free(p->chunks);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->depot_lock);
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
	pthread_mutex_init(&p->depot_lock, NULL);
	p->attr = *attr;
	snprintf(p->name, sizeof(p->name), "%s", attr->name ? attr->name : "mempool");
	p->attr.name = p->name;
	p->ops = ops;
	p->ctx = ctx;
	p->thp = thp_available();
	p->hooks = vbi_mp_extent_hooks;
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
	p->id = vbi_mp_new_id();
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
	vbi_mp_threads_release(p);

	snprintf(name, sizeof(name), "arena.%u.destroy", p->arena);
	r = mallctl(name, NULL, NULL, NULL, 0);
	if (r)
		rc = vbi_err(-r, "%s: jemalloc %s: %s", p->name, name, strerror(r));

	r = vbi_mp_release_all(p);
	if (r && !rc)
		rc = r;
	mp_free_meta(p);
	return rc;
}
