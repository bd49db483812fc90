/* SPDX-License-Identifier: MIT */
/*
 * Context: device, PD, registered pool, the shared CQ, the UD endpoint and
 * the progress engine (opened and closed for vb_ctx_create/_destroy, whose
 * facade is api/src/ctx.c). See proto.h for the object/lock map.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "proto/proto.h"
#include "proto/statfile.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

/* ---- small shared helpers ---------------------------------------------------- */

bool vbi_ctx_take_peer(struct vb_ctx *ctx)
{
	unsigned n = atomic_load(&ctx->npeers);

	do {
		if (n >= ctx->attr.max_peers)
			return false;
	} while (!atomic_compare_exchange_weak(&ctx->npeers, &n, n + 1));
	return true;
}

void vbi_ctx_put_peer(struct vb_ctx *ctx)
{
	atomic_fetch_sub(&ctx->npeers, 1);
}

/* ---- registration through the transport -------------------------------------- */

/* @c: the device's vbi_devres. A registration inside a progress round is
 * counted (vb_stats_t.pool_registrations_progress): it stalls delivery. */
static int pool_reg(void *c, void *addr, size_t len, unsigned access, uint32_t *lkey,
		    uint32_t *rkey, void **handle)
{
	struct vbi_devres *dr = c;
	struct vbt_pd *pd = dr->pd;
	struct vbt_mr *mr;
	int rc = pd->ops->mr_reg(pd, addr, len, access, &mr);

	if (rc)
		return rc;
	*lkey = mr->lkey;
	*rkey = mr->rkey;
	*handle = mr;
	if (vbi_in_progress_round())
		atomic_fetch_add_explicit(&dr->ctx->st->pool_registrations_progress, 1, memory_order_relaxed);
	return 0;
}

static int pool_dereg(void *c, void *handle)
{
	struct vbt_mr *mr = handle;

	(void)c;
	return mr->ops->mr_dereg(mr);
}

static const struct vbi_mempool_reg_ops pool_reg_ops = { .reg = pool_reg, .dereg = pool_dereg };

/* ---- create / destroy ----------------------------------------------------------------------- */

/* Device @idx: open, PD, registered pool, CQ (@cqe entries). */
static int devres_open(struct vb_ctx *ctx, unsigned idx, const char *name, const char *ip)
{
	struct vbi_devres *dr = &ctx->dr[idx];
	struct vbt_dev_attr da = { .gid_index = -1, .event_cb = vbi_dev_event, .event_arg = dr,
				   .watch_removal = 1 };
	int rc;

	dr->ctx = ctx;
	dr->idx = idx;
	atomic_init(&dr->nlanes, 0);
	atomic_init(&dr->nlisteners, 0);
	da.name = name;
	da.ip = ip;
	rc = ctx->ops->dev_open(&da, &dr->dev);
	if (rc)
		return vbi_err_prefix(rc, "%s device", idx ? "standby" : "primary");
	dr->dev->qp_timing = ctx->qp_timing; /* before its first QP */
	snprintf(dr->name, sizeof(dr->name), "%s", dr->dev->caps.name);
	rc = ctx->ops->pd_alloc(dr->dev, &dr->pd);
	if (rc)
		return rc;
	ctx->ndev = idx + 1;
	return 0;
}

static int devres_finish(struct vb_ctx *ctx, unsigned idx, int cqe)
{
	struct vbi_devres *dr = &ctx->dr[idx];
	struct vbi_mempool_attr pa;
	struct vbt_cq_attr ca = { .channel = 1, .cqe = cqe };
	int rc;

	vbi_mempool_attr_init(&pa);
	pa.max_registered = ctx->attr.pool_cap;
	pa.name = idx ? "verbus-standby" : "verbus";
	rc = vbi_mempool_create(&pa, &pool_reg_ops, dr, &dr->pool);
	if (rc)
		return rc;
	rc = ctx->ops->cq_create(dr->dev, &ca, &dr->cq);
	return rc ? rc : vbi_lanepool_init(ctx, dr);
}

static void devres_close(struct vb_ctx *ctx, unsigned idx)
{
	struct vbi_devres *dr = &ctx->dr[idx];

	vbi_lanepool_fini(dr);
	if (dr->cq)
		ctx->ops->cq_destroy(dr->cq);
	if (dr->pool)
		vbi_mempool_destroy(dr->pool);
	if (dr->pd)
		ctx->ops->pd_free(dr->pd);
	if (dr->dev)
		ctx->ops->dev_close(dr->dev);
	memset(dr, 0, sizeof(*dr));
}

/* What nothing has to undo: clocks, ops, locks, the event queue, the error
 * policy and the connection parameters. */
static void ctx_init_early(struct vb_ctx *ctx)
{
	const vb_ctx_attr_t *attr = &ctx->attr;

	ctx->cork = attr->batch != 0;
	ctx->wake_fd = -1;
	ctx->st = &ctx->st_own; /* until the counters file (if any) is mapped */
	ctx->qp_timing = &ctx->qp_timing_own;
	(void)vbi_now_ns(); /* calibrate the hot-path clock now, not on a publish */
	ctx->ops = &vbt_verbs_ops;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->ud_lock, NULL);
	pthread_mutex_init(&ctx->ud_addr_lock, NULL);
	vbi_mutex_init(&ctx->progress_lock);
	vbi_cb_init(ctx);
	vbi_errpol_init(&ctx->errpol);
	ctx->quiet_ns = vbi_cfg_ms_ns(VBI_CFG_FAILOVER_QUIET_MS);
	vbi_cfg_u64(VBI_CFG_FLUSH_BURST, &ctx->flush_burst);
	vbt_conn_param_init(&ctx->cp);
	ctx->cp.cm_timeout_ms = attr->cm_timeout_ms;
	/* RC QPs accept RDMA WRITE at the QP level, but no memory region is
	 * registered with remote access (the pool's are local-write only), so
	 * nothing is exposed: a stray or forged write is a protection fault
	 * (REM_ACCESS_ERR, classified and recovered), not an invalid request. */
	ctx->cp.access = VBT_ACCESS_REMOTE_WRITE;
}

/* The primary device and the standby (when one is named): open and PD. */
static int ctx_open_devices(struct vb_ctx *ctx)
{
	const vb_ctx_attr_t *attr = &ctx->attr;
	int rc;

	rc = devres_open(ctx, 0, attr->device, attr->ip);
	if (rc)
		return rc;
	if (attr->standby_device || attr->standby_ip) {
		rc = devres_open(ctx, 1, attr->standby_device, attr->standby_ip);
		if (rc)
			return rc;
		if (ctx->dr[1].dev->caps.active_mtu != ctx->dr[0].dev->caps.active_mtu)
			vbi_info("standby device %s has another MTU than %s",
				 ctx->dr[1].dev->caps.name, ctx->dr[0].dev->caps.name);
	}
	ctx->dev = ctx->dr[0].dev;
	ctx->pd = ctx->dr[0].pd;
	return 0;
}

/* Queues from the declared load (core/sizing), clamped and reported:
 * ctx->sz (with the CQ depth) and ctx->ud_sq_depth. */
static int ctx_size_queues(struct vb_ctx *ctx)
{
	const vb_ctx_attr_t *attr = &ctx->attr;
	struct vbi_sizing_in si = { 0 };
	uint32_t per_qp;
	struct vbi_cq_sizing cqs;
	char desc[512];
	unsigned nqp;
	int rc;

	si.msg_rate_per_sec = attr->msg_rate;
	si.latency_ms = attr->latency_ms;
	si.inline_wanted = 256;
	si.max_qp_wr = ctx->dev->caps.max_qp_wr;
	si.max_cqe = ctx->dev->caps.max_cqe;
	si.max_inline_data = ctx->dev->caps.max_inline_data;
	for (unsigned i = 1; i < ctx->ndev; i++) { /* the tighter device rules */
		if (ctx->dr[i].dev->caps.max_qp_wr < si.max_qp_wr)
			si.max_qp_wr = ctx->dr[i].dev->caps.max_qp_wr;
		if (ctx->dr[i].dev->caps.max_cqe < si.max_cqe)
			si.max_cqe = ctx->dr[i].dev->caps.max_cqe;
		if (ctx->dr[i].dev->caps.max_inline_data < si.max_inline_data)
			si.max_inline_data = ctx->dr[i].dev->caps.max_inline_data;
	}
	rc = vbi_sizing_compute(&si, &ctx->sz);
	if (rc)
		return rc;
	/* One CQ per device serves its QPs: per peer the active connection and
	 * its standby (with one device both are on it), the UD QP, the
	 * multicast QP (FANOUT receives), and one connection being replaced. */
	per_qp = ctx->sz.sq_depth + ctx->sz.rq_depth;
	nqp = 2 * attr->max_peers + 3;
	/* The UD QP posts one datagram per unicast subscriber for each
	 * message: its send queue holds at least one round to every peer, or
	 * a FANOUT publisher with more subscribers than that could never
	 * publish (clamped to the device: vbi_sizing's rule). */
	ctx->ud_sq_depth = ctx->sz.sq_depth;
	if (ctx->ud_sq_depth < attr->max_peers + 2)
		ctx->ud_sq_depth = attr->max_peers + 2;
	if (ctx->ud_sq_depth > si.max_qp_wr)
		ctx->ud_sq_depth = si.max_qp_wr;
	{
		uint32_t *d = calloc(nqp, sizeof(*d));

		if (!d)
			return vbi_err(-ENOMEM, "sizing");
		for (unsigned i = 0; i < nqp; i++)
			d[i] = per_qp;
		d[0] = ctx->ud_sq_depth + ctx->sz.rq_depth; /* the UD QP */
		rc = vbi_sizing_cq(d, nqp, si.max_cqe, &cqs);
		free(d);
	}
	if (rc)
		return rc;
	if (cqs.clamped)
		return vbi_err(-EINVAL, "a CQ for %u peers (with standbys) needs %llu entries, device "
			       "max_cqe is %u: lower max_peers, msg_rate or latency_ms",
			       attr->max_peers, (unsigned long long)cqs.wanted, si.max_cqe);
	ctx->sz.cq_depth = cqs.depth;
	vbi_sizing_describe(&ctx->sz, desc, sizeof(desc));
	vbi_info("%s; CQ of %u entries per device for %u peers%s%s", desc, cqs.depth,
		 attr->max_peers, ctx->ndev > 1 ? "; standby device " : "",
		 ctx->ndev > 1 ? ctx->dr[1].dev->caps.name : "");
	return 0;
}

int vbi_ctx_open(const vb_ctx_attr_t *attr, struct vb_ctx **out)
{
	struct vb_ctx *ctx;
	int rc;

	*out = NULL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return vbi_err(-ENOMEM, "context");
	ctx->up = &vbi_proto_upcalls; /* before anything of the engine runs on it */
	ctx->attr = *attr;
	if ((rc = vbi_auth_ctx_init(ctx))) { /* before anything that needs undoing */
		vbi_auth_ctx_fini(ctx);
		free(ctx);
		return rc;
	}
	ctx_init_early(ctx);
	if ((ctx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		rc = vbi_err(-errno, "eventfd for the progress thread's wake-ups: %s",
			     strerror(errno));
		goto err;
	}
	/* An operator's view, not the product: a counters file that cannot
	 * be made is logged, the context works without it. Before anything
	 * counts: the counters live in it. */
	if (vbi_statfile_open(ctx, &ctx->statf))
		vbi_warn("vb_ctx_create: no counters file (vb_stat will not see this "
			 "context): %s", vbi_errmsg());
	rc = ctx_open_devices(ctx);
	if (rc)
		goto err;
	rc = ctx_size_queues(ctx);
	if (rc)
		goto err;
	for (unsigned i = 0; i < ctx->ndev; i++)
		if ((rc = devres_finish(ctx, i, (int)ctx->sz.cq_depth)))
			goto err;
	ctx->pool = ctx->dr[0].pool;
	atomic_init(&ctx->ud_dr, &ctx->dr[0]);
	ctx->cq = ctx->dr[0].cq;
	ctx->ud_mtu = 128u << ctx->dev->caps.active_mtu;
	rc = vbi_ud_open(ctx);
	if (rc)
		goto err;
	rc = vbi_mcast_ctx_init(ctx);
	if (rc)
		goto err;
	if (attr->progress == VB_PROGRESS_THREAD) {
		rc = vbi_progress_start(ctx);
		if (rc)
			goto err;
	}
	if (ctx->statf && vbi_statfile_start(ctx->statf))
		vbi_warn("vb_ctx_create: the counters file's levels will not be updated: %s",
			 vbi_errmsg());
	*out = ctx;
	return 0;
err:
	vbi_err_prefix(rc, "vb_ctx_create");
	{
		char msg[VBI_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
		vbi_ctx_close(ctx);
		vbi_err(rc, "%s", msg);
	}
	return rc;
}

int vbi_ctx_close(struct vb_ctx *ctx)
{
	if (vbi_in_callback(ctx))
		return vbi_err(-EDEADLK, "vb_ctx_destroy() from one of its callbacks");
	pthread_mutex_lock(&ctx->lock);
	if (ctx->nodes) {
		pthread_mutex_unlock(&ctx->lock);
		return vbi_err(-EBUSY, "context still has nodes: destroy them first");
	}
	pthread_mutex_unlock(&ctx->lock);
	vbi_statfile_stop(ctx->statf); /* first: its thread reads the context */
	atomic_store(&ctx->stop, true);
	if (ctx->thread_running)
		pthread_join(ctx->thread, NULL);
	if (ctx->ud_qp) {
		/* Flush the UD QP and reap every outstanding WR once. */
		struct timespec t0, t;

		if (!atomic_load(&ctx->ud_dr->fatal))
			vbt_qp_set_state(ctx->ud_qp, VB_QPS_ERR);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while ((atomic_load(&ctx->ud_posted) || ctx->ud_sr.outstanding) &&
		       !atomic_load(&ctx->ud_dr->fatal)) {
			if (vbi_progress_once(ctx) < 0)
				break;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 5) {
				vbi_warn("UD drain: %u receives, %u sends still outstanding",
					 atomic_load(&ctx->ud_posted), ctx->ud_sr.outstanding);
				break;
			}
		}
	}
	vbi_ud_teardown(ctx);
	vbi_mcast_ctx_fini(ctx); /* after the UD QP: no send names a group AH */
	for (unsigned i = 2; i-- > 0;)
		devres_close(ctx, i);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&ctx->ud_lock);
	pthread_mutex_destroy(&ctx->ud_addr_lock);
	vbi_mutex_destroy(&ctx->progress_lock);
	vbi_cb_fini(ctx);
	vbi_auth_ctx_fini(ctx);
	if (ctx->wake_fd >= 0)
		close(ctx->wake_fd);
	vbi_statfile_unmap(ctx->statf); /* last: every thread has counted */
	free(ctx);
	vbi_log_flush(); /* what its progress rounds logged is out */
	return 0;
}

void vbi_ctx_stats(struct vb_ctx *ctx, vb_stats_t *st)
{
	struct vbi_mempool_stats ps;

	memset(st, 0, sizeof(*st));
#define VBI_CTR_COPY(name) \
	st->name = atomic_load_explicit(&ctx->st->name, memory_order_relaxed);
	VBI_CTX_COUNTERS(VBI_CTR_COPY, VBI_CTR_COPY)
#undef VBI_CTR_COPY
	{
		struct vbi_errpol_stats es;

		_Static_assert(VBI_ACT__COUNT <= sizeof(st->err_by_action) / sizeof(uint64_t),
			       "vb_stats_t.err_by_action too small");
		vbi_errpol_snapshot(&ctx->errpol, &es);
		for (unsigned i = 0; i < VBI_ACT__COUNT; i++)
			st->err_by_action[i] = es.by_action[i];
	}
	st->peers = atomic_load(&ctx->npeers);
	st->sq_depth = ctx->sz.sq_depth;
	st->rq_depth = ctx->sz.rq_depth;
	st->cq_depth = ctx->sz.cq_depth;
	st->max_inline = ctx->sz.max_inline;
	st->sizing_clamped = !!(ctx->sz.flags & VBI_SIZING_ANY_CLAMPED);
	if (vbi_mempool_stats(ctx->pool, &ps) == 0) {
		st->pool_chunks = ps.chunks;
		st->pool_registered = ps.registered_bytes;
		st->pool_in_use = ps.bytes_in_use;
		st->pool_registrations = ps.registrations;
	}
	vbi_lanepool_stats(ctx, st);
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vbi_peer *p = n->peers; p; p = p->next)
			if (atomic_load(&p->up) && !atomic_load(&p->dead) &&
			    __atomic_load_n(&p->mode, __ATOMIC_RELAXED) != VB_QPT_RC)
				st->peers_degraded++;
		pthread_rwlock_unlock(&n->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
}
