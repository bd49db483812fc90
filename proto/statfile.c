/* SPDX-License-Identifier: MIT */
/*
 * The context's counters file (layout: core/statfile.h; docs/operability.md,
 * "Live counters"): created by vb_ctx_create() under VERBUS_STAT_DIR before
 * anything of the context counts, removed by vb_ctx_destroy(). A process
 * that crashes leaves it behind with its pid: vb_stat reports it stale.
 *
 * Owners: the context's counters (ctx->st, engine/counters.h) and QP
 * timing (ctx->qp_timing) live in the mapping, written in place by the
 * threads that count. The stat thread writes the rest after the header's
 * immutable fields (written before it starts), every VERBUS_STAT_MS: the
 * levels it gathers from the pool, the QP pools and the peers, and the
 * peer, lane, publisher and subscriber sections (each peer's lanes under
 * the peer's txlock). vbi_statfile_stop() ends it; vbi_statfile_unmap(),
 * once no thread of the context runs, points the counters back into the
 * context and unmaps.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proto/proto.h"
#include "proto/statfile.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/errpolicy.h"
#include "core/log.h"
#include "core/rcu.h"
#include "core/statfile.h"

/* the file's publisher and subscriber sections: beyond these, truncated */
#define VBI_STAT_MAX_PUBS 256u
#define VBI_STAT_MAX_SUBS 256u
_Static_assert(VBI_STAT_MAX_PUBS == VBI_STAT_MAX_SUBS, "one slot table type serves both");

/* The values the stat thread samples, after the live ones (vb_stats_t
 * fields that are not counters of ctx->st: levels kept by the pool, the
 * QP pools, the sizing and the peers; appending a field to vb_stats_t
 * that is none of ctx->st's: add it here) */
struct stat_field {
	const char *name;
	uint16_t off, size;
	uint8_t kind;
};

#define C(f) { #f, offsetof(vb_stats_t, f), sizeof(((vb_stats_t *)0)->f), VBI_STAT_COUNTER }
#define G(f) { #f, offsetof(vb_stats_t, f), sizeof(((vb_stats_t *)0)->f), VBI_STAT_GAUGE }
static const struct stat_field fields[] = {
	G(peers), G(sq_depth), G(rq_depth), G(cq_depth), G(max_inline), G(sizing_clamped),
	G(pool_chunks), G(pool_registered), G(pool_in_use), C(pool_registrations),
	C(qp_pool_hits), C(qp_pool_misses), C(qps_recycled), C(qps_destroyed), C(qps_created),
	G(qp_pool_parked), G(peers_degraded),
};
#undef C
#undef G
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
#define NLIVE ((size_t)VBI_CTX_NCOUNTERS)
#define NVALS (NLIVE + NFIELDS + VBI_ACT__COUNT) /* + err_by_action[] */

/* the live values' names and kinds, in struct vbi_ctx_counters order */
#define VBI_CTR_C(f) { #f, VBI_STAT_COUNTER },
#define VBI_CTR_G(f) { #f, VBI_STAT_GAUGE },
static const struct {
	const char *name;
	uint8_t kind;
} live_names[] = { VBI_CTX_COUNTERS(VBI_CTR_C, VBI_CTR_G) };
#undef VBI_CTR_C
#undef VBI_CTR_G

struct vbi_statfile {
	struct vb_ctx *ctx;
	struct vbi_stat_hdr *hdr;    /* the mapping (file_size bytes) */
	size_t size;
	char path[256];
	pthread_t thread;
	bool started;                /* thread runs (vbi_statfile_start) */
	pthread_mutex_t mu;          /* stop + cond; the subscriber slots */
	pthread_cond_t cond;
	bool stop;
	/* (mu) the publisher and subscriber sections' slots */
	struct slot_tab {
		uint8_t used[VBI_STAT_MAX_SUBS]; /* 1: taken */
		unsigned max, unslotted; /* capacity; objects without a slot now */
		uint32_t *inuse;         /* the header's npubs or nsubs */
		char *base;              /* the section */
		size_t size;             /* a record's */
	} pubs, subs;
	/* (stat thread) an update is gathered here, under the context's
	 * locks, then copied into the file under the seqlock: the peer and
	 * lane sections (at their offsets less peers_off), and the sampled
	 * values */
	char *scratch;
	uint64_t vals[NFIELDS + VBI_ACT__COUNT];
};

_Static_assert(VBI_STAT_QPT_HIST == VBI_QPT_HIST, "core/statfile.h and core/qp_fsm.h differ");
_Static_assert(sizeof(struct vbi_stat_qpt) == sizeof(struct vbi_qp_timing_cell) &&
		       offsetof(struct vbi_stat_qpt, hist) ==
			       offsetof(struct vbi_qp_timing_cell, hist) &&
		       offsetof(struct vbi_stat_qpt, last_ns) ==
			       offsetof(struct vbi_qp_timing_cell, last_ns),
	       "the file's QP timing entry is struct vbi_qp_timing_cell");
_Static_assert(sizeof(struct vbi_qp_timing) ==
		       VB_QPS__COUNT * VB_QPS__COUNT * sizeof(struct vbi_stat_qpt),
	       "struct vbi_qp_timing is the file's QP timing section");

static atomic_uint ctx_count; /* the n of verbus-<pid>-<n>.stat */

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

/* seq odd: an update is under way (core/statfile.h). The increment is an
 * acquire RMW: no store of the update moves before it (a fence would do
 * the same; TSan does not support fences). */
static void seq_begin(struct vbi_stat_hdr *h)
{
	__atomic_fetch_add(&h->seq, 1, __ATOMIC_ACQ_REL);
}

/* ... and even again: a release store, after every store of the update */
static void seq_end(struct vbi_stat_hdr *h)
{
	__atomic_fetch_add(&h->seq, 1, __ATOMIC_RELEASE);
}

/* The sampled values (the live ones are in place already). */
static void fill_vals(struct vbi_statfile *sf, uint64_t *v)
{
	vb_stats_t st;

	vbi_ctx_stats(sf->ctx, &st);
	for (size_t i = 0; i < NFIELDS; i++) {
		const unsigned char *p = (const unsigned char *)&st + fields[i].off;
		uint64_t x = 0;

		if (fields[i].size == 8) {
			memcpy(&x, p, 8);
		} else {
			uint32_t y;

			memcpy(&y, p, 4);
			x = y;
		}
		v[i] = x;
	}
	for (unsigned a = 0; a < VBI_ACT__COUNT; a++)
		v[NFIELDS + a] = st.err_by_action[a];
}

static void fill_lane(struct vbi_stat_lane *o, const struct vbi_peer *p, struct vbi_lane *l,
		      const struct vbi_lane *act)
{
	memset(o, 0, sizeof(*o));
	copy_str(o->peer, sizeof(o->peer), atomic_load(&p->up) ? p->name : "");
	copy_str(o->device, sizeof(o->device), l->dr->name);
	o->id = __atomic_load_n(&l->id, __ATOMIC_RELAXED); /* renumbered at a promotion */
	o->qpn = l->qp->qpn;
	o->mode = l->mode;
	o->qp_state = (uint8_t)vbt_qp_state(l->qp);
	o->active = l == act;
	/* one state since the lane's life is one (engine.h: a lane that
	 * takes no more posts is being retired); both fields stay */
	o->dead = vbi_lane_dead(l);
	o->retiring = o->dead;
	o->hello = atomic_load(&l->hello_rcvd);
	if (o->hello) /* remote_slots comes with it */
		o->credits = vbi_lane_credits(l);
	o->sq_outstanding = atomic_load(&l->sr.outstanding);
	o->sq_depth = l->sr.n;
	o->recvs = atomic_load(&l->posted_recvs);
	o->sends = atomic_load_explicit(&l->sends_total, memory_order_relaxed);
}

static void fill_peer(struct vbi_stat_peer *o, struct vb_node *n, struct vbi_peer *p,
		      const struct vbi_lane *act, uint64_t now)
{
	struct vbi_path_stats ps;

	memset(o, 0, sizeof(*o));
	vbi_path_stats(&p->path, now, &ps);
	copy_str(o->node, sizeof(o->node), n->name);
	o->up = atomic_load(&p->up);
	/* the first HELLO writes the name, then sets up */
	copy_str(o->name, sizeof(o->name), o->up ? p->name : "");
	o->dead = atomic_load(&p->dead);
	o->recovering = (uint8_t)vbi_path_recovering(&p->path);
	o->connector = p->connector;
	o->mode = __atomic_load_n(&p->mode, __ATOMIC_RELAXED); /* lane_failover.c */
	o->policy_mode = (uint8_t)ps.mode;
	o->has_standby = (uint8_t)vbi_path_has_standby(&p->path);
	o->epoch = ps.epoch;
	o->active_lane = act ? act->id : 0;
	o->failures = ps.failures;
	o->failovers = ps.failovers;
	o->degradations = ps.degradations;
	o->promotions = ps.promotions;
	o->downs = ps.downs;
	o->recoveries = ps.recoveries;
	o->last_outage_ns = ps.last_outage_ns;
	o->max_outage_ns = ps.max_outage_ns;
	o->backpressured = ps.backpressured;
	o->retransmits = atomic_load_explicit(&p->retransmits, memory_order_relaxed);
	if (p->last_fail_ns) { /* (txlock) */
		o->last_failure_ns = vbi_real_ns() - (now - p->last_fail_ns);
		o->last_failure_lane = p->last_fail_lane;
		copy_str(o->last_failure, sizeof(o->last_failure), p->last_fail_why);
		copy_str(o->last_action, sizeof(o->last_action),
			 vbi_err_action_name((enum vbi_err_action)p->last_fail_act));
	}
}

#define PUB_SAMPLED                                                                        \
	(offsetof(struct vbi_stat_pub, backpressure) - offsetof(struct vbi_stat_pub, subscribers))
_Static_assert(offsetof(struct vbi_stat_pub, backpressure) + sizeof(uint64_t) ==
		       sizeof(struct vbi_stat_pub),
	       "backpressure, written in place, ends the publisher record");

/* The publisher's window into its slot (node->lock held: it is not
 * freed, its slot not given back). Read under its lock, written under seq
 * (odd for the record only); backpressure is not ours: in place. */
static void fill_pub(struct vbi_statfile *sf, struct vb_pub *pub)
{
	struct vbi_stat_hdr *h = sf->hdr;
	struct vbi_stat_pub t = { 0 }, *o;

	if (pub->stat_slot < 0)
		return; /* no slot: truncated */
	o = (struct vbi_stat_pub *)(void *)((char *)h + h->pubs_off) + pub->stat_slot;
	vbi_mutex_lock(&pub->lock); /* FANOUT: fanout_seq is written under it too */
	t.subscribers = pub->npeers;
	if (pub->cls == VB_ORDERED) {
		t.published = pub->win.next_seq - 1;
		t.acked = pub->win.acked;
		t.quorum_acked = pub->quorum_seq;
		t.window = pub->win.cap;
		t.inflight = vbi_txwin_inflight(&pub->win);
		t.retained_bytes = pub->retained;
	} else {
		t.published = pub->fanout_seq;
	}
	vbi_mutex_unlock(&pub->lock);
	t.ack_quorum = pub->attr.ack_quorum;
	seq_begin(h); /* subscribers .. retained_bytes: all but backpressure */
	memcpy(&o->subscribers, &t.subscribers, PUB_SAMPLED);
	seq_end(h);
}

/* What an update writes of the peer and lane sections. */
struct stat_counts {
	uint32_t np, nl, trunc;
};

/* The peers and their lanes into the scratch copy of their sections, under
 * the locks vbi_node_dump() takes; the publishers' windows into their
 * slots. */
static void fill_peers(struct vbi_statfile *sf, struct stat_counts *k)
{
	const struct vbi_stat_hdr *h = sf->hdr;
	struct vbi_stat_peer *po = (struct vbi_stat_peer *)(void *)sf->scratch;
	struct vbi_stat_lane *lo =
		(struct vbi_stat_lane *)(void *)(sf->scratch + (h->lanes_off - h->peers_off));
	struct vb_ctx *ctx = sf->ctx;
	uint32_t np = 0, nl = 0, trunc = 0;
	uint64_t now = vbi_mono_ns();

	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vbi_peer *p = n->peers; p; p = p->next) {
			struct vbi_lane *act;

			if (np == h->max_peers) {
				trunc = 1;
				break;
			}
			vbi_mutex_lock(&p->txlock);
			act = vbi_path_lane(&p->path);
			fill_peer(&po[np++], n, p, act, now);
			for (struct vbi_lane *l = p->lanes; l; l = l->next) {
				if (nl == h->max_lanes) {
					trunc = 1;
					break;
				}
				fill_lane(&lo[nl++], p, l, act);
			}
			vbi_mutex_unlock(&p->txlock);
		}
		for (struct vb_pub *pub = n->pubs; pub; pub = pub->next)
			fill_pub(sf, pub);
		pthread_rwlock_unlock(&n->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
	pthread_mutex_lock(&sf->mu);
	trunc |= sf->subs.unslotted || sf->pubs.unslotted;
	pthread_mutex_unlock(&sf->mu);
	*k = (struct stat_counts){ np, nl, trunc };
}

/* Gathered with the context's locks, written with none: the seqlock is odd
 * only for the copy. */
static void update(struct vbi_statfile *sf)
{
	struct vbi_stat_hdr *h = sf->hdr;
	struct stat_counts k;
	char *base = (char *)h;

	fill_vals(sf, sf->vals);
	fill_peers(sf, &k);
	seq_begin(h);
	memcpy(base + h->vals_off + NLIVE * sizeof(uint64_t), sf->vals, sizeof(sf->vals));
	memcpy(base + h->peers_off, sf->scratch, (size_t)k.np * sizeof(struct vbi_stat_peer));
	memcpy(base + h->lanes_off, sf->scratch + (h->lanes_off - h->peers_off),
	       (size_t)k.nl * sizeof(struct vbi_stat_lane));
	h->npeers = k.np;
	h->nlanes = k.nl;
	h->truncated = k.trunc;
	h->updated_ns = vbi_real_ns();
	h->updates++;
	seq_end(h);
}

static void *stat_main(void *arg)
{
	struct vbi_statfile *sf = arg;
	struct timespec dl;

	pthread_mutex_lock(&sf->mu);
	while (!sf->stop) {
		pthread_mutex_unlock(&sf->mu);
		update(sf);
		pthread_mutex_lock(&sf->mu);
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += sf->hdr->interval_ms / 1000;
		dl.tv_nsec += (long)(sf->hdr->interval_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		while (!sf->stop && pthread_cond_timedwait(&sf->cond, &sf->mu, &dl) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&sf->mu);
	return NULL;
}

/* Everything of the header but the devices (open before them), and the
 * names of the values. */
static void fill_header(struct vbi_statfile *sf, unsigned no, uint32_t interval_ms,
			uint32_t max_peers, uint32_t max_lanes)
{
	const uint64_t pubs = (uint64_t)VBI_STAT_MAX_PUBS, subs = (uint64_t)VBI_STAT_MAX_SUBS;
	struct vbi_stat_hdr *h = sf->hdr;
	struct vbi_stat_name *v;
	FILE *f;

	memcpy(h->magic, VBI_STAT_MAGIC, sizeof(h->magic));
	h->version = VBI_STAT_VERSION;
	h->hdr_size = sizeof(*h);
	h->file_size = sf->size;
	h->pid = (int32_t)getpid();
	h->ctx_no = no;
	if (vbi_proc_start(0, &h->start_ticks, NULL))
		h->start_ticks = 0; /* no /proc: staleness by pid only */
	h->created_ns = vbi_real_ns();
	h->interval_ms = interval_ms;
	h->name_size = sizeof(struct vbi_stat_name);
	h->peer_size = sizeof(struct vbi_stat_peer);
	h->lane_size = sizeof(struct vbi_stat_lane);
	h->nvals = NVALS;
	h->nlive = NLIVE;
	h->max_peers = max_peers;
	h->max_lanes = max_lanes;
	h->pub_size = sizeof(struct vbi_stat_pub);
	h->sub_size = sizeof(struct vbi_stat_sub);
	h->qpt_size = sizeof(struct vbi_stat_qpt);
	h->max_pubs = (uint32_t)pubs;
	h->max_subs = (uint32_t)subs;
	h->nqps = VB_QPS__COUNT;
	/* the in-place parts first, each 64-byte aligned (the header is a
	 * multiple of 8: the values are aligned for their atomics) */
	h->vals_off = sizeof(*h);
	h->qpt_off = h->vals_off + (uint64_t)NVALS * sizeof(uint64_t);
	h->names_off = h->qpt_off + sizeof(struct vbi_qp_timing);
	h->peers_off = h->names_off + (uint64_t)NVALS * sizeof(struct vbi_stat_name);
	h->lanes_off = h->peers_off + (uint64_t)max_peers * sizeof(struct vbi_stat_peer);
	h->pubs_off = h->lanes_off + (uint64_t)max_lanes * sizeof(struct vbi_stat_lane);
	h->subs_off = h->pubs_off + pubs * sizeof(struct vbi_stat_pub);
	copy_str(h->lib_version, sizeof(h->lib_version), VB_VERSION_STRING);
	if ((f = fopen("/proc/self/comm", "r"))) {
		if (fgets(h->progname, sizeof(h->progname), f))
			h->progname[strcspn(h->progname, "\n")] = '\0';
		fclose(f);
	}
	v = (struct vbi_stat_name *)((char *)h + h->names_off);
	for (size_t i = 0; i < NLIVE; i++, v++) {
		copy_str(v->name, sizeof(v->name), live_names[i].name);
		v->kind = live_names[i].kind;
		v->writer = VBI_STAT_LIVE;
	}
	for (size_t i = 0; i < NFIELDS; i++, v++) {
		copy_str(v->name, sizeof(v->name), fields[i].name);
		v->kind = fields[i].kind;
		v->writer = VBI_STAT_SAMPLED;
	}
	for (unsigned a = 0; a < VBI_ACT__COUNT; a++, v++) {
		snprintf(v->name, sizeof(v->name), "err_action_%s",
			 vbi_err_action_name((enum vbi_err_action)a));
		v->kind = VBI_STAT_COUNTER;
		v->writer = VBI_STAT_SAMPLED;
	}
}

_Static_assert(sizeof(struct vbi_stat_hdr) % 8 == 0, "the values follow the header");
_Static_assert(offsetof(struct vbi_stat_sub, delivered) % 8 == 0 &&
		       sizeof(struct vbi_stat_sub) % 8 == 0 &&
		       sizeof(struct vbi_stat_sub) - offsetof(struct vbi_stat_sub, delivered) ==
			       sizeof(struct vbi_sub_ctr) &&
		       offsetof(struct vbi_stat_sub, acked) - offsetof(struct vbi_stat_sub, delivered) ==
			       offsetof(struct vbi_sub_ctr, acked),
	       "a subscriber slot's counters are struct vbi_sub_ctr");

int vbi_statfile_open(struct vb_ctx *ctx, struct vbi_statfile **out)
{
	struct vbi_statfile *sf;
	const char *dir = NULL;
	unsigned interval = 0, no;
	uint32_t max_peers = ctx->attr.max_peers, max_lanes = 4 * ctx->attr.max_peers;
	int fd, rc;

	*out = NULL;
	/* the values in force: 1 (unset) and -EINVAL (malformed, logged) both
	 * leave the default */
	(void)vbi_cfg_unsigned(VBI_CFG_STAT_MS, &interval);
	(void)vbi_cfg_str(VBI_CFG_STAT_DIR, &dir);
	if (!interval || !dir || !*dir)
		return 0; /* off */
	if (!(sf = calloc(1, sizeof(*sf))))
		return vbi_err(-ENOMEM, "counters file");
	sf->ctx = ctx;
	no = atomic_fetch_add(&ctx_count, 1);
	snprintf(sf->path, sizeof(sf->path), "%s/verbus-%d-%u.stat", dir, (int)getpid(), no);
	sf->size = sizeof(struct vbi_stat_hdr) + NVALS * sizeof(uint64_t) +
		   sizeof(struct vbi_qp_timing) + NVALS * sizeof(struct vbi_stat_name) +
		   (size_t)max_peers * sizeof(struct vbi_stat_peer) +
		   (size_t)max_lanes * sizeof(struct vbi_stat_lane) +
		   VBI_STAT_MAX_PUBS * sizeof(struct vbi_stat_pub) +
		   VBI_STAT_MAX_SUBS * sizeof(struct vbi_stat_sub);
	/* a file of that name outlived a process with our pid: replace it */
	(void)unlink(sf->path);
	fd = open(sf->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = vbi_err(-errno, "counters file %s (VERBUS_STAT_DIR): %s", sf->path,
			     strerror(errno));
		free(sf);
		return rc;
	}
	if (ftruncate(fd, (off_t)sf->size) ||
	    (sf->hdr = mmap(NULL, sf->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
		    MAP_FAILED) {
		rc = vbi_err(-errno, "counters file %s: %s", sf->path, strerror(errno));
		close(fd);
		unlink(sf->path);
		free(sf);
		return rc;
	}
	close(fd);
	fill_header(sf, no, interval, max_peers, max_lanes);
	sf->pubs = (struct slot_tab){ .max = VBI_STAT_MAX_PUBS, .inuse = &sf->hdr->npubs,
				      .base = (char *)sf->hdr + sf->hdr->pubs_off,
				      .size = sizeof(struct vbi_stat_pub) };
	sf->subs = (struct slot_tab){ .max = VBI_STAT_MAX_SUBS, .inuse = &sf->hdr->nsubs,
				      .base = (char *)sf->hdr + sf->hdr->subs_off,
				      .size = sizeof(struct vbi_stat_sub) };
	if (!(sf->scratch = malloc(sf->hdr->pubs_off - sf->hdr->peers_off))) {
		munmap(sf->hdr, sf->size);
		unlink(sf->path);
		free(sf);
		return vbi_err(-ENOMEM, "counters file: the stat thread's copy");
	}
	/* the file is zeros: nothing has counted yet (before the devices) */
	ctx->st = (struct vbi_ctx_counters *)((char *)sf->hdr + sf->hdr->vals_off);
	ctx->qp_timing = (struct vbi_qp_timing *)((char *)sf->hdr + sf->hdr->qpt_off);
	pthread_mutex_init(&sf->mu, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&sf->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	*out = sf;
	return 0;
}

int vbi_statfile_start(struct vbi_statfile *sf)
{
	struct vbi_stat_hdr *h = sf->hdr;
	struct vb_ctx *ctx = sf->ctx;
	int rc;

	seq_begin(h);
	copy_str(h->device, sizeof(h->device), ctx->dr[0].name);
	if (ctx->ndev > 1)
		copy_str(h->standby_device, sizeof(h->standby_device), ctx->dr[1].name);
	seq_end(h);
	if ((rc = -pthread_create(&sf->thread, NULL, stat_main, sf)))
		return vbi_err(rc, "stat thread: %s", strerror(-rc));
	vbi_thread_name(sf->thread, "vb-stat");
	sf->started = true;
	return 0;
}

/* Publisher and subscriber records begin alike: node, topic, cls, in_use. */
_Static_assert(offsetof(struct vbi_stat_pub, topic) == offsetof(struct vbi_stat_sub, topic) &&
		       offsetof(struct vbi_stat_pub, cls) == offsetof(struct vbi_stat_sub, cls) &&
		       offsetof(struct vbi_stat_pub, in_use) == offsetof(struct vbi_stat_sub, in_use),
	       "publisher and subscriber records share their first fields");

/* A free slot of @t for an object of @node's @topic: its record, zeroed and
 * named (in_use still 0: the caller points the object's counters there,
 * then slot_publish). NULL: none free (the file says truncated). */
static char *slot_take(struct vbi_statfile *sf, struct slot_tab *t, const char *node,
		       const char *topic, vb_class_t cls, int *slot)
{
	struct vbi_stat_sub *o;
	unsigned i;

	pthread_mutex_lock(&sf->mu);
	for (i = 0; i < t->max && t->used[i]; i++)
		;
	if (i == t->max) {
		t->unslotted++; /* its counters stay in the object */
		pthread_mutex_unlock(&sf->mu);
		*slot = -1;
		return NULL;
	}
	t->used[i] = 1;
	__atomic_add_fetch(t->inuse, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&sf->mu);
	o = (struct vbi_stat_sub *)(void *)(t->base + (size_t)i * t->size);
	memset(o, 0, t->size);
	copy_str(o->node, sizeof(o->node), node);
	copy_str(o->topic, sizeof(o->topic), topic);
	o->cls = (uint8_t)cls;
	*slot = (int)i;
	return (char *)o;
}

static void slot_publish(char *rec)
{
	/* after the names and the object's pointer: a reader sees it whole */
	__atomic_store_n(&((struct vbi_stat_sub *)(void *)rec)->in_use, 1, __ATOMIC_RELEASE);
}

/* Gives @*slot back (-1: it had none); the object counts no more. */
static void slot_give(struct vbi_statfile *sf, struct slot_tab *t, int *slot)
{
	pthread_mutex_lock(&sf->mu);
	if (*slot < 0) {
		t->unslotted--;
	} else {
		struct vbi_stat_sub *o = (struct vbi_stat_sub *)(void *)(t->base +
									   (size_t)*slot * t->size);

		__atomic_store_n(&o->in_use, 0, __ATOMIC_RELEASE);
		t->used[*slot] = 0;
		__atomic_sub_fetch(t->inuse, 1, __ATOMIC_RELAXED);
		*slot = -1;
	}
	pthread_mutex_unlock(&sf->mu);
}

void vbi_statfile_sub_attach(struct vbi_statfile *sf, struct vb_sub *sub)
{
	char *rec;

	if (!sf || !(rec = slot_take(sf, &sf->subs, sub->node->name, sub->topic, sub->cls,
				      &sub->stat_slot)))
		return;
	sub->c = (struct vbi_sub_ctr *)(void *)(rec + offsetof(struct vbi_stat_sub, delivered));
	slot_publish(rec);
}

void vbi_statfile_sub_detach(struct vbi_statfile *sf, struct vb_sub *sub)
{
	if (!sf)
		return;
	slot_give(sf, &sf->subs, &sub->stat_slot);
	sub->c = &sub->c_own; /* (nothing counts on it any more) */
}

void vbi_statfile_pub_attach(struct vbi_statfile *sf, struct vb_pub *pub)
{
	char *rec;

	if (!sf || !(rec = slot_take(sf, &sf->pubs, pub->node->name, pub->topic, pub->cls,
				      &pub->stat_slot)))
		return;
	((struct vbi_stat_pub *)(void *)rec)->ack_quorum = pub->attr.ack_quorum;
	pub->backpressure =
		(atomic_uint_fast64_t *)(void *)(rec + offsetof(struct vbi_stat_pub, backpressure));
	slot_publish(rec);
}

void vbi_statfile_pub_detach(struct vbi_statfile *sf, struct vb_pub *pub)
{
	if (!sf)
		return;
	slot_give(sf, &sf->pubs, &pub->stat_slot);
	pub->backpressure = &pub->bp_own;
}

void vbi_statfile_stop(struct vbi_statfile *sf)
{
	if (!sf)
		return;
	if (sf->started) {
		pthread_mutex_lock(&sf->mu);
		sf->stop = true;
		pthread_cond_signal(&sf->cond);
		pthread_mutex_unlock(&sf->mu);
		pthread_join(sf->thread, NULL);
		sf->started = false;
	}
	__atomic_store_n(&sf->hdr->closing, 1, __ATOMIC_RELEASE);
	unlink(sf->path);
}

void vbi_statfile_unmap(struct vbi_statfile *sf)
{
	struct vb_ctx *ctx;

	if (!sf)
		return;
	ctx = sf->ctx;
	vbi_statfile_stop(sf);
	/* no thread of the context runs: the counters move back whole */
	memcpy(&ctx->st_own, ctx->st, sizeof(ctx->st_own));
	memcpy(&ctx->qp_timing_own, ctx->qp_timing, sizeof(ctx->qp_timing_own));
	ctx->st = &ctx->st_own;
	ctx->qp_timing = &ctx->qp_timing_own;
	munmap(sf->hdr, sf->size);
	free(sf->scratch);
	pthread_cond_destroy(&sf->cond);
	pthread_mutex_destroy(&sf->mu);
	free(sf);
}
