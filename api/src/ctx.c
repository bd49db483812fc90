/* SPDX-License-Identifier: MIT */
/*
 * Context: device, PD, registered pool, the shared CQ, the UD endpoint and
 * the progress engine. See vb_int.h for the object/lock map.
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/src/vb_int.h"
#include "core/err.h"
#include "core/log.h"

/* ---- attributes ------------------------------------------------------------ */

static void env_str(const char *name, const char **dst)
{
	const char *v = getenv(name);

	if (v && *v)
		*dst = v;
}

static void env_double(const char *name, double *dst)
{
	const char *v = getenv(name);
	char *end;
	double d;

	if (!v || !*v)
		return;
	d = strtod(v, &end);
	if (*end || !isfinite(d) || d <= 0) {
		vbi_warn("%s=%s ignored: not a positive number", name, v);
		return;
	}
	*dst = d;
}

static void env_size(const char *name, size_t *dst)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long n;

	if (!v || !*v)
		return;
	errno = 0;
	n = strtoull(v, &end, 0);
	switch (*end) {
	case 'k': case 'K': n <<= 10; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	case 'g': case 'G': n <<= 30; end++; break;
	default: break;
	}
	if (errno || *end || !n) {
		vbi_warn("%s=%s ignored: not a positive size", name, v);
		return;
	}
	*dst = (size_t)n;
}

static void env_unsigned(const char *name, unsigned *dst)
{
	size_t v = *dst;

	env_size(name, &v);
	if (v <= 0xffffffffu)
		*dst = (unsigned)v;
}

void vb_ctx_attr_init(vb_ctx_attr_t *a)
{
	const char *mode = NULL;
	size_t to;

	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->progress = VB_PROGRESS_THREAD;
	a->progress_spin = 64;
	a->idle = VB_IDLE_BACKOFF;
	a->idle_spin_us = 200;
	a->msg_rate = 100000;
	a->latency_ms = 1.0;
	a->max_msg = 1u << 20;
	a->slot_size = 16384;
	a->pool_cap = 256u << 20;
	a->max_peers = 16;
	a->window = 4096;
	a->cm_timeout_ms = 5000;
	a->batch = 1;
	a->standby = 1;
	a->keepalive_ms = 100;
	a->max_pending = 32;

	env_str("VERBUS_DEVICE", &a->device);
	env_str("VERBUS_IP", &a->ip);
	env_str("VERBUS_STANDBY_DEVICE", &a->standby_device);
	env_str("VERBUS_STANDBY_IP", &a->standby_ip);
	{
		const char *sb = getenv("VERBUS_STANDBY");

		if (sb && (!strcmp(sb, "0") || !strcmp(sb, "1")))
			a->standby = *sb == '1';
		else if (sb && *sb)
			vbi_warn("VERBUS_STANDBY=%s ignored: 0 or 1", sb);
	}
	env_str("VERBUS_PROGRESS", &mode);
	if (mode) {
		if (!strcasecmp(mode, "app"))
			a->progress = VB_PROGRESS_APP;
		else if (!strcasecmp(mode, "thread"))
			a->progress = VB_PROGRESS_THREAD;
		else
			vbi_warn("VERBUS_PROGRESS=%s ignored: use thread or app", mode);
	}
	env_unsigned("VERBUS_PROGRESS_SPIN", &a->progress_spin);
	env_unsigned("VERBUS_IDLE_SPIN_US", &a->idle_spin_us);
	mode = NULL;
	env_str("VERBUS_IDLE", &mode);
	if (mode) {
		static const char *const names[] = { "backoff", "spin", "yield", "block" };
		unsigned i = 0;

		while (i < 4 && strcasecmp(mode, names[i]))
			i++;
		if (i < 4)
			a->idle = (vb_idle_t)i;
		else
			vbi_warn("VERBUS_IDLE=%s ignored: backoff, spin, yield or block", mode);
	}
	env_double("VERBUS_MSG_RATE", &a->msg_rate);
	env_double("VERBUS_LATENCY_MS", &a->latency_ms);
	env_size("VERBUS_MAX_MSG", &a->max_msg);
	env_size("VERBUS_SLOT_SIZE", &a->slot_size);
	env_size("VERBUS_POOL_CAP", &a->pool_cap);
	env_unsigned("VERBUS_MAX_PEERS", &a->max_peers);
	env_unsigned("VERBUS_WINDOW", &a->window);
	env_unsigned("VERBUS_KEEPALIVE_MS", &a->keepalive_ms);
	env_unsigned("VERBUS_MAX_PENDING", &a->max_pending);
	{
		const char *b = getenv("VERBUS_BATCH");

		if (b && (!strcmp(b, "0") || !strcmp(b, "1")))
			a->batch = *b == '1';
		else if (b && *b)
			vbi_warn("VERBUS_BATCH=%s ignored: 0 or 1", b);
		if (getenv("VERBUS_BATCH_US"))
			vbi_warn("VERBUS_BATCH_US is no longer read: batching is corked (no timer); "
				 "VERBUS_BATCH=0 turns it off");
	}
	vbi_mcast_attr_init(a);
	to = (size_t)a->cm_timeout_ms;
	env_size("VERBUS_CM_TIMEOUT_MS", &to);
	if (to <= 600000)
		a->cm_timeout_ms = (int)to;
}

static int check_attr(const vb_ctx_attr_t *a)
{
	if (!a || a->size < sizeof(*a))
		return vbi_err(-EINVAL, "vb_ctx_attr_t not initialized with vb_ctx_attr_init()");
	if (a->progress != VB_PROGRESS_THREAD && a->progress != VB_PROGRESS_APP)
		return vbi_err(-EINVAL, "progress mode %d unknown", (int)a->progress);
	if (!(a->msg_rate > 0) || !(a->latency_ms > 0))
		return vbi_err(-EINVAL, "msg_rate %.1f / latency_ms %.3f must be positive",
			       a->msg_rate, a->latency_ms);
	if (a->slot_size < 1024 || a->slot_size > (1u << 20) || (a->slot_size & 63))
		return vbi_err(-EINVAL, "slot_size %zu: 1 KiB..1 MiB, a multiple of 64",
			       a->slot_size);
	if (!a->max_msg || a->max_msg > VBI_MEMPOOL_MAX_ALLOC - VBI_WIRE_HDR_LEN)
		return vbi_err(-EINVAL, "max_msg %zu: 1..%u bytes", a->max_msg,
			       VBI_MEMPOOL_MAX_ALLOC - VBI_WIRE_HDR_LEN);
	if (!a->max_peers || a->max_peers > VBI_MAX_PEERS)
		return vbi_err(-EINVAL, "max_peers %u: 1..%u", a->max_peers, VBI_MAX_PEERS);
	if (a->window < 16 || a->window > (1u << 20))
		return vbi_err(-EINVAL, "window %u: 16..1048576", a->window);
	if (a->cm_timeout_ms <= 0)
		return vbi_err(-EINVAL, "cm_timeout_ms %d must be positive", a->cm_timeout_ms);
	if (!a->max_pending || a->max_pending > 1024)
		return vbi_err(-EINVAL, "max_pending %u: 1..1024", a->max_pending);
	if ((unsigned)a->idle > VB_IDLE_BLOCK)
		return vbi_err(-EINVAL, "idle strategy %d unknown", (int)a->idle);
	if (a->idle_spin_us > 1000000)
		return vbi_err(-EINVAL, "idle_spin_us %u: 0..1000000", a->idle_spin_us);
	if (a->batch > 1)
		return vbi_err(-EINVAL, "batch %u: 0 (off) or 1 (cork batching)", a->batch);
	return 0;
}

/* ---- small shared helpers ---------------------------------------------------- */

uint64_t vbi_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Nanoseconds for the data path's clocks (publisher stall and RTO clocks,
 * credit and NAK timers, the slow-subscriber check run every progress
 * round; every one of them is read and compared in this clock only): the TSC
 * scaled by a rate measured once, because clock_gettime() can cost a
 * system call and an emulated HPET read per call in a VM (tens of us under
 * TCG, called twice per publish). Falls back to CLOCK_MONOTONIC where there
 * is no usable TSC. Not for timeouts that must be exact.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static double tsc_per_ns;
static pthread_once_t tsc_once = PTHREAD_ONCE_INIT;

static void tsc_calibrate(void)
{
	struct timespec nap = { 0, 2000000 };
	uint64_t n0 = vbi_mono_ns(), t0 = __rdtsc(), n1, t1;

	nanosleep(&nap, NULL);
	n1 = vbi_mono_ns();
	t1 = __rdtsc();
	if (n1 > n0 && t1 > t0)
		tsc_per_ns = (double)(t1 - t0) / (double)(n1 - n0);
}

uint64_t vbi_now_ns(void)
{
	pthread_once(&tsc_once, tsc_calibrate);
	if (tsc_per_ns > 0)
		return (uint64_t)((double)__rdtsc() / tsc_per_ns);
	return vbi_mono_ns();
}
#else
uint64_t vbi_now_ns(void)
{
	return vbi_mono_ns();
}
#endif

/* Millisecond timers (heartbeats, idle ACKs) use the coarse clock: it is
 * read from the vDSO without touching the clock hardware, which matters
 * where that is slow (HPET in a VM: a system call and an emulated MMIO
 * read per call). Resolution is a scheduler tick. */
uint64_t vbi_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int vbi_msg_new(struct vbi_devres *dr, size_t need, struct vbi_msg **out)
{
	struct vbi_buf blk;
	struct vbi_msg *m;
	int rc = vbi_mempool_alloc(dr->pool, VBI_MSG_DESC + need, &blk);

	if (rc)
		return rc;
	m = blk.addr;
	memset(m, 0, sizeof(*m));
	atomic_init(&m->refs, 1);
	m->dr = dr;
	m->buf = (struct vbi_buf){ .addr = (uint8_t *)blk.addr + VBI_MSG_DESC,
				   .len = (uint32_t)need, .lkey = blk.lkey, .rkey = blk.rkey };
	*out = m;
	return 0;
}

void vbi_msg_put(struct vb_ctx *ctx, struct vbi_msg *m)
{
	(void)ctx;
	if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
		vbi_mempool_free(m->dr->pool, m); /* the descriptor heads the block */
}

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

/* Reap completions: the progress thread does it, or this thread in APP mode. */
void vbi_progress_or_nap(struct vb_ctx *ctx)
{
	if (!ctx->thread_running && pthread_mutex_trylock(&ctx->progress_lock) == 0) {
		vbi_progress_once(ctx);
		pthread_mutex_unlock(&ctx->progress_lock);
	} else {
		struct timespec ts = { 0, 200000 };

		nanosleep(&ts, NULL);
	}
}

/* ---- send rings ------------------------------------------------------------------ */

int vbi_sring_add_bufs(struct vb_ctx *ctx, struct vbi_sring *sr)
{
	for (uint32_t i = 0; i < sr->n; i++) {
		struct vbi_sctx *s = &sr->ctx[i];
		int rc;

		if (s->buf.addr)
			continue;
		rc = vbi_mempool_alloc(sr->pool, ctx->attr.slot_size, &s->buf);
		if (rc)
			return vbi_err_prefix(rc, "send ring buffers");
	}
	return 0;
}

int vbi_sring_init(struct vb_ctx *ctx, struct vbi_mempool *pool, struct vbi_sring *sr,
		   uint32_t n, uint8_t kind, struct vbi_lane *lane, uint32_t nbufs)
{
	int rc;

	memset(sr, 0, sizeof(*sr));
	sr->ctx = calloc(n, sizeof(*sr->ctx));
	if (!sr->ctx)
		return vbi_err(-ENOMEM, "send ring of %u entries", n);
	sr->n = n;
	sr->pool = pool;
	rc = vbi_mempool_alloc(pool, (size_t)n * 64, &sr->hdr_area);
	if (rc)
		goto err;
	for (uint32_t i = 0; i < n; i++) {
		struct vbi_sctx *s = &sr->ctx[i];

		s->kind = kind;
		s->lane = lane;
		s->hdr = (uint8_t *)sr->hdr_area.addr + (size_t)i * 64;
		s->hdr_lkey = sr->hdr_area.lkey;
		if (i < nbufs) {
			rc = vbi_mempool_alloc(pool, ctx->attr.slot_size, &s->buf);
			if (rc)
				goto err;
		}
	}
	return 0;
err:
	vbi_sring_fini(ctx, sr);
	return vbi_err_prefix(rc, "send ring");
}

void vbi_slots_free(struct vbi_mempool *pool, struct vbi_slot *slots, uint32_t n)
{
	if (!slots)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (slots[i].buf.addr)
			vbi_mempool_free(pool, slots[i].buf.addr);
	free(slots);
}

void vbi_sring_fini(struct vb_ctx *ctx, struct vbi_sring *sr)
{
	if (!sr->ctx)
		return;
	vbi_sring_release_upto(ctx, sr, NULL);
	for (uint32_t i = 0; i < sr->n; i++)
		if (sr->ctx[i].buf.addr)
			vbi_mempool_free(sr->pool, sr->ctx[i].buf.addr);
	if (sr->hdr_area.addr)
		vbi_mempool_free(sr->pool, sr->hdr_area.addr);
	free(sr->ctx);
	memset(sr, 0, sizeof(*sr));
}

/* Caller holds the ring's lock and has checked outstanding < n. */
struct vbi_sctx *vbi_sring_take(struct vbi_sring *sr)
{
	struct vbi_sctx *s = &sr->ctx[sr->head];

	sr->head = (sr->head + 1) % sr->n;
	sr->outstanding++;
	s->signaled = false;
	return s;
}

/* @s was just posted signaled: its completion will release it (and every
 * unsignaled entry before it). Caller holds the ring's lock. */
void vbi_sring_signaled(struct vbi_sring *sr, struct vbi_sctx *s)
{
	s->signaled = true;
	atomic_fetch_add_explicit(&sr->sig_inflight, 1, memory_order_seq_cst);
}

static void sctx_release(struct vb_ctx *ctx, struct vbi_sctx *s)
{
	if (s->msg) {
		vbi_msg_put(ctx, s->msg);
		s->msg = NULL;
	}
	if (s->ud_ref) {
		vbi_msg_put(ctx, s->ud_ref);
		s->ud_ref = NULL;
	}
}

/* Release outstanding entries oldest first, up to and including @upto
 * (every outstanding one when NULL). Caller holds the ring's lock. */
void vbi_sring_release_upto(struct vb_ctx *ctx, struct vbi_sring *sr, struct vbi_sctx *upto)
{
	while (sr->outstanding) {
		struct vbi_sctx *s = &sr->ctx[sr->tail];

		sctx_release(ctx, s);
		if (s->signaled) {
			s->signaled = false;
			atomic_fetch_sub_explicit(&sr->sig_inflight, 1, memory_order_seq_cst);
		}
		sr->tail = (sr->tail + 1) % sr->n;
		sr->outstanding--;
		if (s == upto)
			break;
	}
}

/* ---- registration through the transport -------------------------------------- */

static int pool_reg(void *c, void *addr, size_t len, unsigned access, uint32_t *lkey,
		    uint32_t *rkey, void **handle)
{
	struct vbt_pd *pd = c;
	struct vbt_mr *mr;
	int rc = pd->ops->mr_reg(pd, addr, len, access, &mr);

	if (rc)
		return rc;
	*lkey = mr->lkey;
	*rkey = mr->rkey;
	*handle = mr;
	return 0;
}

static int pool_dereg(void *c, void *handle)
{
	struct vbt_mr *mr = handle;

	(void)c;
	return mr->ops->mr_dereg(mr);
}

static const struct vbi_mempool_reg_ops pool_reg_ops = { .reg = pool_reg, .dereg = pool_dereg };

/* ---- UD endpoint -------------------------------------------------------------------- */

static int ud_post_slot(struct vb_ctx *ctx, struct vbi_slot *s)
{
	struct vbt_sge sge = { (uintptr_t)s->buf.addr, VBI_UD_GRH + ctx->ud_mtu, s->buf.lkey };
	struct vbt_recv_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1 };
	const struct vbt_recv_wr *bad;
	int rc = vbt_post_recv(ctx->ud_qp, &wr, &bad);

	if (!rc)
		ctx->ud_posted++;
	return rc;
}

void vbi_ud_repost(struct vb_ctx *ctx, struct vbi_slot *s)
{
	if (s->kind == VBI_WR_MC_RECV) {
		vbi_mcast_repost(ctx, s);
		return;
	}
	if (atomic_load(&ctx->stop))
		return;
	if (ud_post_slot(ctx, s))
		vbi_warn("UD receive repost failed: %s", vbi_errmsg());
}

void vbi_ud_addr(struct vb_ctx *ctx, struct vbt_peer *out)
{
	pthread_mutex_lock(&ctx->ud_addr_lock);
	*out = ctx->ud_local;
	pthread_mutex_unlock(&ctx->ud_addr_lock);
}

/* The UD endpoint on ctx->ud_dr. At create, or under ud_lock (dev_reap). */
static int ud_open(struct vb_ctx *ctx)
{
	struct vbi_devres *dr = ctx->ud_dr;
	struct vbt_qp_init_attr qa = {
		.type = VB_QPT_UD, .send_cq = dr->cq, .recv_cq = dr->cq,
		.cap = { .max_send_wr = ctx->ud_sq_depth, .max_recv_wr = ctx->sz.rq_depth,
			 .max_send_sge = 2, .max_recv_sge = 1,
			 .max_inline_data = ctx->sz.max_inline },
	};
	struct vbt_peer local;
	int rc;

	rc = ctx->ops->qp_create(dr->pd, &qa, &ctx->ud_qp);
	if (rc)
		return vbi_err_prefix(rc, "UD QP");
	rc = vbt_qp_local_peer(ctx->ud_qp, ctx->cp.qkey, &local);
	if (!rc)
		rc = vbt_qp_bring_up(ctx->ud_qp, &ctx->cp, &local, NULL);
	if (rc)
		return vbi_err_prefix(rc, "UD QP %u bring-up", ctx->ud_qp->qpn);
	pthread_mutex_lock(&ctx->ud_addr_lock);
	ctx->ud_local = local;
	pthread_mutex_unlock(&ctx->ud_addr_lock);
	rc = vbi_sring_init(ctx, dr->pool, &ctx->ud_sr, ctx->ud_qp->cap.max_send_wr,
			    VBI_WR_UD_SEND, NULL, 0);
	if (rc)
		return rc;
	ctx->ud_nslots = ctx->ud_qp->cap.max_recv_wr;
	ctx->ud_slots = calloc(ctx->ud_nslots, sizeof(*ctx->ud_slots));
	if (!ctx->ud_slots)
		return vbi_err(-ENOMEM, "UD slots");
	for (uint32_t i = 0; i < ctx->ud_nslots; i++) {
		struct vbi_slot *s = &ctx->ud_slots[i];

		s->kind = VBI_WR_UD_RECV;
		rc = vbi_mempool_alloc(dr->pool, VBI_UD_GRH + ctx->ud_mtu, &s->buf);
		if (!rc)
			rc = ud_post_slot(ctx, s);
		if (rc)
			return vbi_err_prefix(rc, "UD receive slot %u", i);
	}
	return 0;
}

/* ---- progress --------------------------------------------------------------------------- */

#define AFTER_POLL_NS 200000ull /* per-peer round of an idle progress context */

void vbi_ctx_kick(struct vb_ctx *ctx)
{
	atomic_store(&ctx->kick, true);
}

static void for_each_peer_after_poll(struct vb_ctx *ctx, bool idle)
{
	pthread_mutex_lock(&ctx->lock);
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vbi_peer *p = n->peers; p; p = p->next)
			vbi_peer_after_poll(p, idle);
		pthread_rwlock_unlock(&n->lock);
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* A failed completion on lane @l: classify, count, and report a disruptive
 * verdict (flushes of a lane we are retiring are only reclaimed). */
static void lane_wc_error(struct vb_ctx *ctx, struct vbi_lane *l, const struct vbt_wc *wc,
			  struct vbi_sctx *s)
{
	bool draining = atomic_load(&l->draining) || atomic_load(&l->dead);
	struct vbi_err_verdict v = vbi_errpol_wc(&ctx->errpol, wc->status,
						 draining ? VBI_ERRPOL_DRAINING : 0);

	if (v.action == VBI_ACT_REREGISTER_AND_RESET && s) {
		/* Re-validate the failing WR's buffers against the pool: a
		 * stale lkey would fail again on the next lane. */
		uint32_t lkey;

		if (s->buf.addr && vbi_mempool_lkey(l->dr->pool, s->buf.addr, 1, &lkey, NULL) == 0 &&
		    lkey != s->buf.lkey) {
			vbi_warn("lane %u: send buffer lkey %#x is stale (pool: %#x): fixed", l->id,
				 s->buf.lkey, lkey);
			s->buf.lkey = lkey;
		}
	}
	if (vbi_err_action_disrupts(v.action))
		vbi_lane_report(l, v, vbt_wc_status_str(wc->status));
}

static int poll_cq(struct vb_ctx *ctx, struct vbt_cq *cq)
{
	struct vbt_wc wc[32];
	int n = vbt_cq_poll(cq, wc, 32);

	if (n < 0) {
		vbi_error("completion queue poll failed: %s", vbi_errmsg());
		return n;
	}
	if (n)
		(void)atomic_load_explicit(&ctx->init_gen, memory_order_acquire);
	for (int i = 0; i < n; i++) {
		uint8_t kind = *(uint8_t *)(uintptr_t)wc[i].wr_id;
		bool ok = wc[i].status == VBT_WC_SUCCESS;

		switch (kind) {
		/* A lane being drained is freed as soon as its last WR is
		 * accounted for: the decrement / release is the last touch. */
		case VBI_WR_RC_RECV: {
			struct vbi_slot *s = (void *)(uintptr_t)wc[i].wr_id;
			struct vbi_lane *l = s->lane;

			if (ok)
				vbi_lane_rc_recv(l, s, wc[i].byte_len);
			else
				lane_wc_error(ctx, l, &wc[i], NULL);
			atomic_fetch_sub(&l->posted_recvs, 1);
			break;
		}
		case VBI_WR_RC_SEND: {
			struct vbi_sctx *s = (void *)(uintptr_t)wc[i].wr_id;
			struct vbi_lane *l = s->lane;

			if (!ok)
				lane_wc_error(ctx, l, &wc[i], s);
			pthread_mutex_lock(l->lk);
			vbi_sring_release_upto(ctx, &l->sr, s);
			pthread_mutex_unlock(l->lk);
			break;
		}
		case VBI_WR_UD_RECV: {
			struct vbi_slot *s = (void *)(uintptr_t)wc[i].wr_id;

			ctx->ud_posted--;
			if (ok)
				vbi_ud_recv(ctx, s, wc[i].byte_len);
			else if (!atomic_load(&ctx->stop))
				vbi_warn("UD receive completion: %s", vbt_wc_status_str(wc[i].status));
			break;
		}
		case VBI_WR_MC_RECV:
			vbi_mcast_recv(ctx, (void *)(uintptr_t)wc[i].wr_id, &wc[i]);
			break;
		case VBI_WR_UD_SEND: {
			struct vbi_sctx *s = (void *)(uintptr_t)wc[i].wr_id;

			pthread_mutex_lock(&ctx->ud_lock);
			vbi_sring_release_upto(ctx, &ctx->ud_sr, s);
			pthread_mutex_unlock(&ctx->ud_lock);
			if (!ok && !atomic_load(&ctx->stop))
				vbi_warn("UD send completion: %s", vbt_wc_status_str(wc[i].status));
			break;
		}
		default:
			vbi_error("completion with unknown wr_id kind %u", kind);
			break;
		}
	}
	return n;
}

/*
 * Hot removal, second half (the first: vbi_dev_event marks the device
 * fatal + removed, and its lanes fail over off it). Progress context, the
 * owner of the CQs. Closes the UD endpoint (FANOUT) and the peers' FANOUT
 * address handles when the device is the primary, then, once no lane and no
 * listener is left on it, everything else: the pool's registrations (its
 * memory stays: messages in retransmit windows live there), CQ, PD and the
 * device itself. Nothing is waited for here: it is tried again each round.
 */
/* The UD endpoint's objects. ud_lock held (or the context is being
 * destroyed: no other thread left). */
static void ud_teardown(struct vb_ctx *ctx)
{
	if (ctx->ud_qp) {
		ctx->ops->qp_destroy(ctx->ud_qp);
		ctx->ud_qp = NULL;
	}
	ctx->ud_posted = 0;
	vbi_sring_fini(ctx, &ctx->ud_sr);
	/* a context whose create failed early never got its UD device */
	if (ctx->ud_slots && atomic_load(&ctx->ud_dr))
		vbi_slots_free(atomic_load(&ctx->ud_dr)->pool, ctx->ud_slots, ctx->ud_nslots);
	ctx->ud_slots = NULL;
}

/* Every peer's FANOUT address handle: dropped (@rebuild false) or built
 * again on ctx->ud_dr, and the peer told our new address (@rebuild). */
static void ud_peers(struct vb_ctx *ctx, bool rebuild)
{
	for (struct vb_node *n = ctx->nodes; n; n = n->next) {
		pthread_rwlock_rdlock(&n->lock);
		for (struct vbi_peer *p = n->peers; p; p = p->next) {
			if (!rebuild) {
				pthread_mutex_lock(&ctx->ud_lock);
				if (p->ah)
					ctx->ops->ah_destroy(p->ah);
				p->ah = NULL;
				pthread_mutex_unlock(&ctx->ud_lock);
			} else if (p->ud.qpn) {
				vbi_peer_set_ud(p, p->ud.qpn, p->ud.qkey, p->ud.gid);
				atomic_store(&p->ud_announce, true);
				vbi_ctx_kick(ctx);
			}
		}
		pthread_rwlock_unlock(&n->lock);
	}
}

/* The device carrying the UD endpoint (FANOUT) is being removed: move the
 * endpoint to the other device when there is a usable one (same MTU, no
 * multicast membership on the old one), else close it (FANOUT publishers
 * get -ENODEV). Datagrams in flight on the old QP are lost: subscribers
 * see the gap and report it. Progress context. */
static void ud_move(struct vb_ctx *ctx)
{
	struct vbi_devres *from = ctx->ud_dr, *to = NULL;
	int rc = -ENODEV;

	for (unsigned d = 0; d < ctx->ndev; d++) {
		struct vbi_devres *dr = &ctx->dr[d];

		if (dr != from && !atomic_load(&dr->fatal) && !atomic_load(&dr->removed) &&
		    128u << dr->dev->caps.active_mtu == ctx->ud_mtu)
			to = dr;
	}
	if (vbi_mcast_uses_dev(ctx))
		to = NULL;
	pthread_mutex_lock(&ctx->lock);
	ud_peers(ctx, false);
	pthread_mutex_lock(&ctx->ud_lock);
	ud_teardown(ctx);
	if (to) {
		atomic_store(&ctx->ud_dr, to);
		rc = ud_open(ctx);
		if (rc) {
			vbi_warn("FANOUT: no UD endpoint on %s: %s", to->name, vbi_errmsg());
			ud_teardown(ctx);
		}
	}
	pthread_mutex_unlock(&ctx->ud_lock);
	if (!rc)
		ud_peers(ctx, true);
	pthread_mutex_unlock(&ctx->lock);
	if (!rc)
		vbi_warn("%s removed: FANOUT moved to %s (UD QP %u); peers are told", from->name,
			 to->name, ctx->ud_local.qpn);
	else
		vbi_warn("%s removed: FANOUT (its UD endpoint) is closed; FANOUT publishers get "
			 "-ENODEV", from->name);
}

static void dev_reap(struct vb_ctx *ctx)
{
	bool pending = false;
	uint64_t now = vbi_mono_ns();

	if (now - ctx->reap_ns < 1000000)
		return; /* a millisecond between tries */
	ctx->reap_ns = now;

	for (unsigned d = 0; d < ctx->ndev; d++) {
		struct vbi_devres *dr = &ctx->dr[d];
		int n;

		if (!atomic_load(&dr->removed) || dr->closed)
			continue;
		if (dr == ctx->ud_dr && !dr->ud_closed) {
			ud_move(ctx);
			dr->ud_closed = true;
		}
		if (d == 0 && vbi_mcast_uses_dev(ctx)) {
			if (!dr->mc_warned)
				vbi_warn("%s removed: multicast memberships (vb_ctx_attr_t.mcast) keep "
					 "it open until they end or vb_ctx_destroy()", dr->name);
			dr->mc_warned = true;
			pending = true;
			continue;
		}
		if (atomic_load(&dr->nlanes) || atomic_load(&dr->nlisteners)) {
			if (now - dr->wait_log_ns > 1000000000ull) {
				dr->wait_log_ns = now;
				vbi_info("%s removed: waiting for %d connection(s) and %d listener(s) "
					 "on it to close", dr->name, atomic_load(&dr->nlanes),
					 atomic_load(&dr->nlisteners));
			}
			pending = true;
			continue;
		}
		vbi_lanepool_close(dr); /* its parked QPs */
		n = vbi_mempool_detach(dr->pool);
		if (n < 0)
			vbi_warn("%s: %s", dr->name, vbi_errmsg());
		ctx->ops->cq_destroy(dr->cq);
		dr->cq = NULL;
		if (ctx->ops->pd_free(dr->pd))
			vbi_warn("%s: %s", dr->name, vbi_errmsg());
		dr->pd = NULL;
		ctx->ops->dev_close(dr->dev);
		dr->dev = NULL;
		dr->closed = true;
		atomic_fetch_add(&ctx->st.devices_released, 1);
		vbi_warn("%s released: %d registration(s) dropped, CQ, PD and device closed, "
			 "%.1f ms after the removal began", dr->name, n < 0 ? 0 : n,
			 (vbi_mono_ns() - dr->removed_ns) / 1e6);
	}
	if (!pending)
		atomic_store(&ctx->dev_removing, false);
}

int vbi_progress_once(struct vb_ctx *ctx)
{
	int n = 0;

	if (atomic_load_explicit(&ctx->dev_removing, memory_order_relaxed))
		dev_reap(ctx);

	for (unsigned d = 0; d < ctx->ndev; d++) {
		int r;

		if (atomic_load_explicit(&ctx->dr[d].fatal, memory_order_relaxed))
			continue; /* a removed device's CQ completes nothing */
		r = poll_cq(ctx, ctx->dr[d].cq);
		if (r < 0)
			return r;
		n += r;
	}
	vbi_peer_handle_failures(ctx);
	vbi_cb_flush(ctx); /* events from every thread, no lock held */
	/* The per-peer round (flush, ACKs, credits, keepalives, control
	 * frames) after a poll that completed something, when another thread
	 * asked for it (vbi_ctx_kick), or every AFTER_POLL_NS: an empty poll
	 * changes no credit, ring or receive state, so all it can find due
	 * is a timer (ms scale). This keeps an empty poll to the CQ reads. */
	{
		uint64_t now = vbi_now_ns();

		if (n > 0 || atomic_exchange(&ctx->kick, false) ||
		    now - ctx->after_poll_ns >= AFTER_POLL_NS) {
			ctx->after_poll_ns = now;
			for_each_peer_after_poll(ctx, n == 0);
		}
	}
	vbi_pub_fanout_flush(ctx, n == 0);
	vbi_pub_slow_check(ctx);
	if (n == 0) {
		uint64_t now = vbi_now_ms();

		if (now - ctx->last_hb_ms >= 20) {
			ctx->last_hb_ms = now;
			vbi_pub_heartbeats(ctx, now);
		}
	}
	return n;
}

int vb_progress(vb_ctx_t *ctx)
{
	int n;

	if (!ctx)
		return vbi_err(-EINVAL, "NULL context");
	if (ctx->attr.progress != VB_PROGRESS_APP)
		return vbi_err(-EINVAL, "vb_progress() in VB_PROGRESS_THREAD mode");
	if (pthread_mutex_trylock(&ctx->progress_lock))
		return 0;
	n = vbi_progress_once(ctx);
	pthread_mutex_unlock(&ctx->progress_lock);
	/* A spinning caller gives the CPU away now and then: where cores are
	 * shared (a VM, Soft-RoCE's kernel work in softirq context) a spin that
	 * never enters the kernel can starve the very work it waits for until
	 * the next scheduler tick. With a core of its own, sched_yield()
	 * returns at once. */
	if (n == 0 && !((atomic_fetch_add_explicit(&ctx->idle_polls, 1, memory_order_relaxed) + 1) & 63))
		sched_yield();
	return n;
}

/* The idle strategy after an empty poll (vb_ctx_attr_t.idle): true when
 * the thread should block on the completion channel now. @idle counts the
 * empty polls in a row, @since_ns is when the first of them was. */
static bool idle_wait(struct vb_ctx *ctx, unsigned idle, uint64_t since_ns)
{
	switch (ctx->attr.idle) {
	case VB_IDLE_SPIN:
		return false;
	case VB_IDLE_YIELD:
		sched_yield();
		return false;
	case VB_IDLE_BLOCK:
		return true;
	case VB_IDLE_BACKOFF:
	default:
		if (idle < ctx->attr.progress_spin ||
		    vbi_now_ns() - since_ns < (uint64_t)ctx->attr.idle_spin_us * 1000) {
			if (!(idle & 63))
				sched_yield(); /* see vb_progress() */
			return false;
		}
		return true;
	}
}

static void *progress_main(void *arg)
{
	struct vb_ctx *ctx = arg;
	unsigned idle = 0;
	uint64_t since = 0;

	while (!atomic_load_explicit(&ctx->stop, memory_order_relaxed)) {
		int n;

		pthread_mutex_lock(&ctx->progress_lock);
		n = vbi_progress_once(ctx);
		pthread_mutex_unlock(&ctx->progress_lock);
		if (n > 0) {
			idle = 0;
			continue;
		}
		if (!idle++)
			since = vbi_now_ns();
		if (!idle_wait(ctx, idle, since))
			continue;
		/* Block: arm every live device's CQ, poll once more (a
		 * completion may have slipped in before the arm), then sleep
		 * until one of them completes something (bounded, so stop and
		 * timed work are noticed). */
		struct vbt_cq *cqs[2];
		unsigned ncq = 0;

		for (unsigned d = 0; d < ctx->ndev; d++) {
			struct vbt_cq *cq = ctx->dr[d].cq;

			if (!atomic_load(&ctx->dr[d].fatal) && cq->ops->cq_arm(cq, 0) == 0)
				cqs[ncq++] = cq;
		}
		if (ncq) {
			pthread_mutex_lock(&ctx->progress_lock);
			n = vbi_progress_once(ctx);
			pthread_mutex_unlock(&ctx->progress_lock);
			if (n == 0)
				cqs[0]->ops->cq_wait_any(cqs, ncq, 20);
		} else {
			struct timespec ts = { 0, 200000 };

			nanosleep(&ts, NULL);
		}
		idle = 0;
	}
	return NULL;
}

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
	rc = vbi_mempool_create(&pa, &pool_reg_ops, dr->pd, &dr->pool);
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

int vb_ctx_create(const vb_ctx_attr_t *attr, vb_ctx_t **out)
{
	vb_ctx_attr_t full;
	struct vb_ctx *ctx;
	struct vbi_sizing_in si = { 0 };
	uint32_t per_qp;
	struct vbi_cq_sizing cqs;
	char desc[512];
	unsigned nqp;
	int rc;

	if (!out)
		return vbi_err(-EINVAL, "NULL output pointer");
	*out = NULL;
	/* An attribute struct from an older header is shorter: what it does
	 * not have keeps its default. */
	if (attr && attr->size >= offsetof(vb_ctx_attr_t, keepalive_ms) &&
	    attr->size < sizeof(full)) {
		vb_ctx_attr_init(&full);
		memcpy(&full, attr, attr->size);
		full.size = sizeof(full);
		attr = &full;
	}
	if ((rc = check_attr(attr)))
		return rc;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return vbi_err(-ENOMEM, "context");
	ctx->attr = *attr;
	if ((rc = vbi_auth_ctx_init(ctx))) { /* before anything that needs undoing */
		vbi_auth_ctx_fini(ctx);
		free(ctx);
		return rc;
	}
	ctx->cork = attr->batch != 0;
	(void)vbi_now_ns(); /* calibrate the hot-path clock now, not on a publish */
	ctx->ops = &vbt_verbs_ops;
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->ud_lock, NULL);
	pthread_mutex_init(&ctx->ud_addr_lock, NULL);
	pthread_mutex_init(&ctx->progress_lock, NULL);
	vbi_cb_init(ctx);
	vbi_errpol_init(&ctx->errpol);
	vbt_conn_param_init(&ctx->cp);
	ctx->cp.cm_timeout_ms = attr->cm_timeout_ms;
	/* RC QPs accept RDMA WRITE at the QP level, but no memory region is
	 * registered with remote access (the pool's are local-write only), so
	 * nothing is exposed: a stray or forged write is a protection fault
	 * (REM_ACCESS_ERR, classified and recovered), not an invalid request. */
	ctx->cp.access = VBT_ACCESS_REMOTE_WRITE;

	rc = devres_open(ctx, 0, attr->device, attr->ip);
	if (rc)
		goto err;
	if (attr->standby_device || attr->standby_ip) {
		rc = devres_open(ctx, 1, attr->standby_device, attr->standby_ip);
		if (rc)
			goto err;
		if (ctx->dr[1].dev->caps.active_mtu != ctx->dr[0].dev->caps.active_mtu)
			vbi_info("standby device %s has another MTU than %s",
				 ctx->dr[1].dev->caps.name, ctx->dr[0].dev->caps.name);
	}
	ctx->dev = ctx->dr[0].dev;
	ctx->pd = ctx->dr[0].pd;

	/* Queues from the declared load (core/sizing), clamped and reported. */
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
		goto err;
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

		if (!d) {
			rc = vbi_err(-ENOMEM, "sizing");
			goto err;
		}
		for (unsigned i = 0; i < nqp; i++)
			d[i] = per_qp;
		d[0] = ctx->ud_sq_depth + ctx->sz.rq_depth; /* the UD QP */
		rc = vbi_sizing_cq(d, nqp, si.max_cqe, &cqs);
		free(d);
	}
	if (rc)
		goto err;
	if (cqs.clamped) {
		rc = vbi_err(-EINVAL, "a CQ for %u peers (with standbys) needs %llu entries, device "
			     "max_cqe is %u: lower max_peers, msg_rate or latency_ms",
			     attr->max_peers, (unsigned long long)cqs.wanted, si.max_cqe);
		goto err;
	}
	ctx->sz.cq_depth = cqs.depth;
	vbi_sizing_describe(&ctx->sz, desc, sizeof(desc));
	vbi_info("%s; CQ of %u entries per device for %u peers%s%s", desc, cqs.depth,
		 attr->max_peers, ctx->ndev > 1 ? "; standby device " : "",
		 ctx->ndev > 1 ? ctx->dr[1].dev->caps.name : "");
	for (unsigned i = 0; i < ctx->ndev; i++)
		if ((rc = devres_finish(ctx, i, (int)cqs.depth)))
			goto err;
	ctx->pool = ctx->dr[0].pool;
	atomic_init(&ctx->ud_dr, &ctx->dr[0]);
	ctx->cq = ctx->dr[0].cq;
	ctx->ud_mtu = 128u << ctx->dev->caps.active_mtu;
	rc = ud_open(ctx);
	if (rc)
		goto err;
	rc = vbi_mcast_ctx_init(ctx);
	if (rc)
		goto err;
	if (attr->progress == VB_PROGRESS_THREAD) {
		rc = -pthread_create(&ctx->thread, NULL, progress_main, ctx);
		if (!rc)
			vbi_thread_name(ctx->thread, "vb-progress");
		if (rc) {
			vbi_err(rc, "progress thread: %s", strerror(-rc));
			goto err;
		}
		ctx->thread_running = true;
	}
	*out = ctx;
	return 0;
err:
	vbi_err_prefix(rc, "vb_ctx_create");
	{
		char msg[VBI_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
		vb_ctx_destroy(ctx);
		vbi_err(rc, "%s", msg);
	}
	return rc;
}

int vb_ctx_destroy(vb_ctx_t *ctx)
{
	if (!ctx)
		return 0;
	if (vbi_in_callback(ctx))
		return vbi_err(-EDEADLK, "vb_ctx_destroy() from one of its callbacks");
	pthread_mutex_lock(&ctx->lock);
	if (ctx->nodes) {
		pthread_mutex_unlock(&ctx->lock);
		return vbi_err(-EBUSY, "context still has nodes: destroy them first");
	}
	pthread_mutex_unlock(&ctx->lock);
	atomic_store(&ctx->stop, true);
	if (ctx->thread_running)
		pthread_join(ctx->thread, NULL);
	if (ctx->ud_qp) {
		/* Flush the UD QP and reap every outstanding WR once. */
		struct timespec t0, t;

		if (!atomic_load(&ctx->ud_dr->fatal))
			vbt_qp_set_state(ctx->ud_qp, VB_QPS_ERR);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while ((ctx->ud_posted || ctx->ud_sr.outstanding) &&
		       !atomic_load(&ctx->ud_dr->fatal)) {
			if (vbi_progress_once(ctx) < 0)
				break;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 5) {
				vbi_warn("UD drain: %u receives, %u sends still outstanding",
					 ctx->ud_posted, ctx->ud_sr.outstanding);
				break;
			}
		}
	}
	ud_teardown(ctx);
	vbi_mcast_ctx_fini(ctx); /* after the UD QP: no send names a group AH */
	for (unsigned i = 2; i-- > 0;)
		devres_close(ctx, i);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&ctx->ud_lock);
	pthread_mutex_destroy(&ctx->ud_addr_lock);
	pthread_mutex_destroy(&ctx->progress_lock);
	vbi_cb_fini(ctx);
	vbi_auth_ctx_fini(ctx);
	free(ctx);
	return 0;
}

const char *vb_recovery_action_name(unsigned i)
{
	return i < VBI_ACT__COUNT ? vbi_err_action_name((enum vbi_err_action)i) : "?";
}

/* The whole current vb_stats_t; vb_ctx_stats_size() copies out what the
 * caller's header knows of. */
static void ctx_stats(struct vb_ctx *ctx, vb_stats_t *st)
{
	struct vbi_mempool_stats ps;

	memset(st, 0, sizeof(*st));
	st->published = atomic_load(&ctx->st.published);
	st->delivered = atomic_load(&ctx->st.delivered);
	st->duplicates_dropped = atomic_load(&ctx->st.duplicates);
	st->gaps = atomic_load(&ctx->st.gaps);
	st->lost = atomic_load(&ctx->st.lost);
	st->malformed = atomic_load(&ctx->st.malformed);
	st->sends_posted = atomic_load(&ctx->st.sends_posted);
	st->frames_sent = atomic_load(&ctx->st.frames_sent);
	st->batched_frames = atomic_load(&ctx->st.batched_frames);
	st->inline_sends = atomic_load(&ctx->st.inline_sends);
	st->backpressure = atomic_load(&ctx->st.backpressure);
	st->unacked_on_close = atomic_load(&ctx->st.unacked_on_close);
	st->peer_switches = atomic_load(&ctx->st.peer_switches);
	st->keepalives = atomic_load(&ctx->st.keepalives);
	st->devices_removed = atomic_load(&ctx->st.devices_removed);
	st->devices_released = atomic_load(&ctx->st.devices_released);
	st->events_dropped = atomic_load(&ctx->st.events_dropped);
	st->peers_reaped = atomic_load(&ctx->st.peers_reaped);
	st->pending_dropped = atomic_load(&ctx->st.pending_dropped);
	st->refused = atomic_load(&ctx->st.refused);
	st->slow_cuts = atomic_load(&ctx->st.slow_cuts);
	st->slow_cut_msgs = atomic_load(&ctx->st.slow_cut_msgs);
	st->streams_ended = atomic_load(&ctx->st.streams_ended);
	st->retain_full = atomic_load(&ctx->st.retain_full);
	st->auth_refused = atomic_load(&ctx->st.auth_refused);
	st->acks_sent = atomic_load(&ctx->st.acks_sent);
	st->acks_received = atomic_load(&ctx->st.acks_received);
	st->failovers = atomic_load(&ctx->st.failovers);
	st->rebuilds = atomic_load(&ctx->st.rebuilds);
	st->path_downs = atomic_load(&ctx->st.path_downs);
	st->retransmits = atomic_load(&ctx->st.retransmits);
	st->stale_frames = atomic_load(&ctx->st.stale_frames);
	st->lanes_created = atomic_load(&ctx->st.lanes_created);
	st->lanes_retired = atomic_load(&ctx->st.lanes_retired);
	st->standbys_warmed = atomic_load(&ctx->st.standbys_warmed);
	st->recover_last_ns = atomic_load(&ctx->st.recover_last_ns);
	st->recover_max_ns = atomic_load(&ctx->st.recover_max_ns);
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
	vbi_mcast_stats(ctx, st);
	vbi_lanepool_stats(ctx, st);
	st->degrades = atomic_load(&ctx->st.degrades);
	st->promotions = atomic_load(&ctx->st.promotions);
	st->naks_sent = atomic_load(&ctx->st.naks_sent);
	st->naks_received = atomic_load(&ctx->st.naks_received);
	st->rto_retransmits = atomic_load(&ctx->st.rto_retransmits);
	st->credit_resyncs = atomic_load(&ctx->st.credit_resyncs);
	st->probes = atomic_load(&ctx->st.probes);
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

int vb_ctx_stats_size(vb_ctx_t *ctx, vb_stats_t *st, size_t size)
{
	vb_stats_t all;

	if (!ctx || !st)
		return vbi_err(-EINVAL, "NULL argument");
	if (size < sizeof(uint64_t))
		return vbi_err(-EINVAL, "vb_stats_t of %zu bytes: call vb_ctx_stats(), which "
			       "passes sizeof(vb_stats_t) of the caller's header", size);
	ctx_stats(ctx, &all);
	memcpy(st, &all, size < sizeof(all) ? size : sizeof(all));
	return 0;
}
