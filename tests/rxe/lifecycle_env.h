/* SPDX-License-Identifier: MIT */
/*
 * Shared by the lifecycle_*_test.c files: device + PD + CQ through the
 * transport ops table, a registered mempool (core/mempool.h, registration
 * through the ops' mr_reg) whose buffers the engine QPs post, and the
 * completion callback that hands every buffer back to the pool and counts
 * completions by status. Header-only (static inline): not a test itself.
 */
#ifndef VERBUS_TESTS_RXE_LIFECYCLE_ENV_H
#define VERBUS_TESTS_RXE_LIFECYCLE_ENV_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/mempool.h"
#include "engine/qp_engine.h"
#include "engine/qp_handle.h"
#include "tests/common/rxe_env.h"
#include "transport/transport.h"

#define LC_MSG 256

struct lc_env {
	struct vbt_dev *dev;
	struct vbt_pd *pd;
	struct vbt_cq *cq;
	struct vbi_mempool *pool;
	/* completions seen by lc_on_complete (atomics) */
	uint64_t cqes, ok, flush, err, recv_ok, synthetic, bad_payload;
	/* per-cookie check: a completion delivered twice is counted here */
	uint8_t *seen;
	uint64_t nseen, dup;
};

static inline int lc_reg(void *ctx, void *addr, size_t len, unsigned access, uint32_t *lkey,
			 uint32_t *rkey, void **handle)
{
	struct vbt_pd *pd = ctx;
	struct vbt_mr *mr;
	int rc = pd->ops->mr_reg(pd, addr, len, access, &mr);

	if (rc)
		return rc;
	*lkey = mr->lkey;
	*rkey = mr->rkey;
	*handle = mr;
	return 0;
}

static inline int lc_dereg(void *ctx, void *handle)
{
	struct vbt_mr *mr = handle;

	(void)ctx;
	return mr->ops->mr_dereg(mr);
}

static const struct vbi_mempool_reg_ops lc_reg_ops = { .reg = lc_reg, .dereg = lc_dereg };

#define LC_ADD(f) __atomic_fetch_add(&(f), 1, __ATOMIC_RELAXED)
#define LC_GET(f) __atomic_load_n(&(f), __ATOMIC_ACQUIRE)

static inline int lc_chk(int rc, const char *what)
{
	if (rc < 0)
		fprintf(stderr, "%s: %d (%s)\n", what, rc, vbi_errmsg());
	return rc;
}

/* Cookies: sends carry (1 << 63) | sequence, receives (1 << 62) | sequence. */
#define LC_SEND_COOKIE(i) ((1ull << 63) | (uint64_t)(i))
#define LC_RECV_COOKIE(i) ((1ull << 62) | (uint64_t)(i))

static inline void lc_on_complete(const struct vbi_qpe_cqe *c, void *arg)
{
	struct lc_env *e = arg;
	uint64_t seq = c->cookie & ((1ull << 62) - 1);

	LC_ADD(e->cqes);
	if (c->status == VBT_WC_SUCCESS) {
		LC_ADD(e->ok);
		if (c->flags & VBI_QPE_CQE_RECV) {
			LC_ADD(e->recv_ok);
			/* Payload written by lc_send: its first 8 bytes are a
			 * pattern the receiver can check (UD: after the GRH;
			 * RoCE flags a GRH on RC receives too, but only UD
			 * places it in the buffer). */
			if (c->byte_len >= 8 && c->opcode == VBT_WC_OP_RECV) {
				const unsigned char *b = c->buf;
				unsigned off = vbi_qpe_type(c->qp) == VB_QPT_UD ? 40 : 0;

				if (b[off] != 0xa5 || b[off + 7] != 0x5a)
					LC_ADD(e->bad_payload);
			}
		}
	} else if (c->status == VBT_WC_WR_FLUSH_ERR) {
		LC_ADD(e->flush);
	} else {
		LC_ADD(e->err);
	}
	if (c->flags & VBI_QPE_CQE_SYNTHETIC)
		LC_ADD(e->synthetic);
	if (e->seen && (c->cookie >> 63) && seq < e->nseen) {
		if (__atomic_exchange_n(&e->seen[seq], 1, __ATOMIC_RELAXED))
			LC_ADD(e->dup);
	}
	if (c->buf) {
		vbi_mempool_inflight_put(e->pool, c->buf);
		vbi_mempool_free(e->pool, c->buf);
	}
}

static inline void lc_reset_counts(struct lc_env *e)
{
	e->cqes = e->ok = e->flush = e->err = e->recv_ok = e->synthetic = e->bad_payload = 0;
	e->dup = 0;
	if (e->seen)
		memset(e->seen, 0, e->nseen);
}

static inline int lc_env_open(struct lc_env *e, int cqe)
{
	struct vbt_dev_attr da = { .name = vbt_require_device(), .gid_index = -1 };
	struct vbt_cq_attr ca = { .cqe = cqe };
	struct vbi_mempool_attr ma;
	int rc;

	memset(e, 0, sizeof(*e));
	if ((rc = lc_chk(vbt_verbs_ops.dev_open(&da, &e->dev), "dev_open")))
		return rc;
	if ((rc = lc_chk(e->dev->ops->pd_alloc(e->dev, &e->pd), "pd_alloc")))
		return rc;
	if ((rc = lc_chk(e->dev->ops->cq_create(e->dev, &ca, &e->cq), "cq_create")))
		return rc;
	vbi_mempool_attr_init(&ma);
	ma.flags = VBI_MEMPOOL_NO_HUGEPAGE;
	ma.max_registered = 64u << 20;
	ma.name = "lifecycle-test";
	return lc_chk(vbi_mempool_create(&ma, &lc_reg_ops, e->pd, &e->pool), "mempool_create");
}

static inline void lc_env_close(struct lc_env *e)
{
	if (e->pool)
		lc_chk(vbi_mempool_destroy(e->pool), "mempool_destroy");
	if (e->cq)
		lc_chk(e->dev->ops->cq_destroy(e->cq), "cq_destroy");
	if (e->pd)
		lc_chk(e->dev->ops->pd_free(e->pd), "pd_free");
	if (e->dev)
		e->dev->ops->dev_close(e->dev);
	free(e->seen);
	memset(e, 0, sizeof(*e));
}

/* Buffers handed out and not yet back (allocs - frees). */
static inline int64_t lc_bufs_out(struct lc_env *e)
{
	struct vbi_mempool_stats st;

	vbi_mempool_stats(e->pool, &st);
	return (int64_t)st.allocs - (int64_t)st.frees;
}

static inline unsigned lc_inflight(struct lc_env *e)
{
	struct vbi_mempool_stats st;

	vbi_mempool_stats(e->pool, &st);
	return st.inflight;
}

static inline int lc_buf(struct lc_env *e, uint32_t len, struct vbi_buf *b)
{
	int rc = vbi_mempool_alloc(e->pool, len, b);

	if (rc)
		return rc;
	vbi_mempool_inflight_get(e->pool, b->addr);
	return 0;
}

static inline void lc_unbuf(struct lc_env *e, struct vbi_buf *b)
{
	vbi_mempool_inflight_put(e->pool, b->addr);
	vbi_mempool_free(e->pool, b->addr);
}

/* Send @len bytes (pattern in the first 8) on @q; UD: to @ud_dst through
 * @ah. The buffer comes back through lc_on_complete. */
static inline int lc_send(struct lc_env *e, struct vbi_qpe *q, uint32_t len, uint64_t cookie,
			  struct vbt_ah *ah, const struct vbt_peer *ud_dst)
{
	struct vbi_buf b;
	struct vbt_sge sge;
	struct vbt_send_wr wr;
	int rc = lc_buf(e, len < 8 ? 8 : len, &b);

	if (rc)
		return rc;
	memset(b.addr, 0, 8);
	((unsigned char *)b.addr)[0] = 0xa5;
	((unsigned char *)b.addr)[7] = 0x5a;
	sge = (struct vbt_sge){ (uintptr_t)b.addr, len, b.lkey };
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = VBT_WR_SEND;
	if (ah) {
		wr.ah = ah;
		wr.remote_qpn = ud_dst->qpn;
		wr.remote_qkey = ud_dst->qkey;
	}
	rc = vbi_qpe_post_send(q, &wr, b.addr, cookie);
	if (rc)
		lc_unbuf(e, &b);
	return rc;
}

static inline int lc_recv(struct lc_env *e, struct vbi_qpe *q, uint32_t len, uint64_t cookie)
{
	struct vbi_buf b;
	struct vbt_sge sge;
	struct vbt_recv_wr wr;
	int rc = lc_buf(e, len, &b);

	if (rc)
		return rc;
	sge = (struct vbt_sge){ (uintptr_t)b.addr, len, b.lkey };
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	rc = vbi_qpe_post_recv(q, &wr, b.addr, cookie);
	if (rc)
		lc_unbuf(e, &b);
	return rc;
}

static inline uint64_t lc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Poll @cq until *@counter >= @want or @timeout_ms passed; returns *counter. */
static inline uint64_t lc_poll_until(struct lc_env *e, uint64_t *counter, uint64_t want,
				     int timeout_ms)
{
	uint64_t end = lc_now_ms() + (uint64_t)timeout_ms;

	while (LC_GET(*counter) < want && lc_now_ms() < end)
		if (!vbi_qpe_poll(e->cq, 64))
			usleep(100);
	return LC_GET(*counter);
}

/* Connect two parked RC/UC engine QPs to each other. */
static inline int lc_pair(struct vbi_qpe *a, struct vbi_qpe *b, const struct vbt_conn_param *p)
{
	struct vbt_peer la = *vbi_qpe_local(a), lb = *vbi_qpe_local(b);
	int rc = vbi_qpe_connect(a, p, &lb);

	return rc ? rc : vbi_qpe_connect(b, p, &la);
}

static inline int lc_leaks(void)
{
	static const char *const kinds[] = { "qp", "cq", "mr", "pd" };
	int total = 0;

	for (unsigned i = 0; i < 4; i++) {
		int n = vbt_res_count(kinds[i], getpid());

		if (n != 0)
			fprintf(stderr, "rdma res show %s: %d of pid %d\n", kinds[i], n,
				(int)getpid());
		total += n < 0 ? 100 : n;
	}
	return total;
}

/* VERBUS_TEST_SCALE multiplies iteration counts (default 1). */
static inline double lc_scale(void)
{
	const char *s = getenv("VERBUS_TEST_SCALE");
	double v = s ? atof(s) : 1.0;

	return v > 0 ? v : 1.0;
}

#endif
