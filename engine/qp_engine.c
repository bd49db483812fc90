/* SPDX-License-Identifier: MIT */
#include "engine/qp_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/log.h"
#include "core/qp_fsm.h"
#include "core/rcu.h"

/* wr_id: | registry index 20 | incarnation 24 | slot 20 | */
#define WRID_SLOT_BITS 20
#define WRID_INC_BITS 24
#define WRID_IDX_BITS 20
#define WRID_SLOT_MASK ((1u << WRID_SLOT_BITS) - 1)
#define WRID_INC_MASK ((1u << WRID_INC_BITS) - 1)
#define WRID_IDX_MASK ((1u << WRID_IDX_BITS) - 1)
#define SLOT_SQ_MARK WRID_SLOT_MASK
#define SLOT_RQ_MARK (WRID_SLOT_MASK - 1)
#define SLOT_MAX (WRID_SLOT_MASK - 2) /* slots 0 .. SLOT_MAX - 1 */
#define SLOT_NONE UINT32_MAX

#define QPE_MAGIC 0x71706531u /* "qpe1" */

enum { GATE_OPEN = 0, GATE_PAUSED = 1, GATE_CLOSED = 2 };

struct qpe_slot {
	void *buf;
	uint64_t cookie;
	uint32_t next_free;
	uint8_t in_use;
	uint8_t recv;
};

struct vbi_qpe {
	uint32_t magic;
	struct vbt_qp *qp;
	struct vbt_pd *pd;
	struct vbt_cq *cq;
	enum vb_qp_type type;
	vbi_qpe_complete_fn cb;
	void *cb_arg;
	void *user;
	uint32_t reg_idx;
	bool registered;

	pthread_mutex_t lock; /* gate, slots, incarnation, posting */
	int gate;
	bool drained;         /* fail() completed; posting paused since */
	uint32_t inc;         /* written under lock; read atomically by pollers */
	struct qpe_slot *slots;
	uint32_t nslots, free_head;
	uint32_t max_send, max_recv;

	uint32_t out_send, out_recv; /* atomics */
	int sq_marker_seen;          /* atomic */
	int async_err;               /* atomic, -1 = none */
	struct vbt_ah *marker_ah;    /* UD: loopback AH for the send marker */
	struct vbt_peer local;

	/* atomics */
	uint64_t posted_send, posted_recv, ok, flush, err, synthetic;
	uint64_t drains, drain_timeouts, resets, recoveries, sq_marks, rq_marks, async_errors;
	uint64_t last_drain_ns;
	uint32_t last_drain_wrs;
};

/* ---- registry: index -> QP, read under RCU ----------------------------- */

#define REG_CHUNK_SHIFT 8
#define REG_CHUNK (1u << REG_CHUNK_SHIFT)
#define REG_L1 ((1u << WRID_IDX_BITS) / REG_CHUNK)

static struct vbi_qpe **reg_l1[REG_L1];
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t reg_next;
static uint32_t *reg_free;
static uint32_t reg_nfree, reg_cap;
static uint32_t inc_counter;
static uint64_t poll_orphans, poll_stale;

static int reg_alloc(uint32_t *idx)
{
	int rc = 0;

	pthread_mutex_lock(&reg_lock);
	if (reg_nfree) {
		*idx = reg_free[--reg_nfree];
	} else if (reg_next < (1u << WRID_IDX_BITS)) {
		uint32_t c = reg_next >> REG_CHUNK_SHIFT;

		if (!reg_l1[c]) {
			struct vbi_qpe **chunk = calloc(REG_CHUNK, sizeof(*chunk));

			if (!chunk) {
				rc = vbi_err(-ENOMEM, "QP registry chunk");
				goto out;
			}
			__atomic_store_n(&reg_l1[c], chunk, __ATOMIC_RELEASE);
		}
		*idx = reg_next++;
	} else {
		rc = vbi_err(-ENOSPC, "QP registry full (%u live engine QPs)", reg_next);
	}
out:
	pthread_mutex_unlock(&reg_lock);
	return rc;
}

/* Only after a grace period following reg_set(idx, NULL). */
static void reg_release(uint32_t idx)
{
	pthread_mutex_lock(&reg_lock);
	if (reg_nfree == reg_cap) {
		uint32_t ncap = reg_cap ? reg_cap * 2 : 64;
		uint32_t *nf = realloc(reg_free, ncap * sizeof(*nf));

		if (!nf) {
			/* The index is simply never reused. */
			pthread_mutex_unlock(&reg_lock);
			return;
		}
		reg_free = nf;
		reg_cap = ncap;
	}
	reg_free[reg_nfree++] = idx;
	pthread_mutex_unlock(&reg_lock);
}

static void reg_set(uint32_t idx, struct vbi_qpe *q)
{
	struct vbi_qpe **chunk = __atomic_load_n(&reg_l1[idx >> REG_CHUNK_SHIFT], __ATOMIC_ACQUIRE);

	__atomic_store_n(&chunk[idx & (REG_CHUNK - 1)], q, __ATOMIC_RELEASE);
}

/* Under vbi_rcu_read_lock(). */
static struct vbi_qpe *reg_get(uint32_t idx)
{
	struct vbi_qpe **chunk = __atomic_load_n(&reg_l1[idx >> REG_CHUNK_SHIFT], __ATOMIC_ACQUIRE);

	return chunk ? __atomic_load_n(&chunk[idx & (REG_CHUNK - 1)], __ATOMIC_ACQUIRE) : NULL;
}

static uint32_t next_inc(void)
{
	return __atomic_add_fetch(&inc_counter, 1, __ATOMIC_RELAXED) & WRID_INC_MASK;
}

static inline uint64_t make_wrid(uint32_t idx, uint32_t inc, uint32_t slot)
{
	return ((uint64_t)idx << (WRID_INC_BITS + WRID_SLOT_BITS)) | ((uint64_t)inc << WRID_SLOT_BITS) |
	       slot;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define ADD(field, v) __atomic_fetch_add(&(field), (v), __ATOMIC_RELAXED)
#define LOAD(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)

/* ---- create ---------------------------------------------------------- */

int vbi_qpe_create(struct vbt_pd *pd, const struct vbi_qpe_attr *attr, struct vbi_qpe **out)
{
	struct vbt_qp_init_attr qia;
	struct vbi_qpe *q;
	int rc;

	*out = NULL;
	if (!pd || !attr || !attr->cq || !attr->on_complete || attr->type >= VB_QPT__COUNT)
		return vbi_err(-EINVAL, "vbi_qpe_create: pd, cq, on_complete and a QP type are required");
	if (!attr->cap.max_send_wr || !attr->cap.max_recv_wr ||
	    (uint64_t)attr->cap.max_send_wr + attr->cap.max_recv_wr > SLOT_MAX)
		return vbi_err(-EINVAL, "vbi_qpe_create: send %u + recv %u WRs: each must be >= 1 and the sum <= %u",
			       attr->cap.max_send_wr, attr->cap.max_recv_wr, SLOT_MAX);
	q = calloc(1, sizeof(*q));
	if (!q)
		return vbi_err(-ENOMEM, "vbi_qpe_create: out of memory");
	q->magic = QPE_MAGIC;
	q->pd = pd;
	q->cq = attr->cq;
	q->type = attr->type;
	q->cb = attr->on_complete;
	q->cb_arg = attr->cb_arg;
	q->user = attr->user;
	q->async_err = -1;
	q->gate = GATE_OPEN;
	q->inc = next_inc();
	q->max_send = attr->cap.max_send_wr;
	q->max_recv = attr->cap.max_recv_wr;
	q->nslots = q->max_send + q->max_recv;
	q->slots = calloc(q->nslots, sizeof(*q->slots));
	if (!q->slots) {
		rc = vbi_err(-ENOMEM, "vbi_qpe_create: %u slots", q->nslots);
		goto err_free;
	}
	for (uint32_t i = 0; i < q->nslots; i++)
		q->slots[i].next_free = i + 1 < q->nslots ? i + 1 : SLOT_NONE;
	q->free_head = 0;
	if ((rc = pthread_mutex_init(&q->lock, NULL))) {
		rc = vbi_err(-rc, "vbi_qpe_create: mutex");
		goto err_slots;
	}

	memset(&qia, 0, sizeof(qia));
	qia.type = attr->type;
	qia.send_cq = attr->cq;
	qia.recv_cq = attr->cq;
	qia.cap = attr->cap;
	qia.cap.max_send_wr += 1; /* send marker */
	qia.cap.max_recv_wr += 1; /* receive marker */
	if (!qia.cap.max_send_sge)
		qia.cap.max_send_sge = 1;
	if (!qia.cap.max_recv_sge)
		qia.cap.max_recv_sge = 1;
	qia.sq_sig_all = 1;
	/* Tagged so vbi_qpe_handle_event can tell engine QPs apart. */
	qia.user_ctx = (void *)((uintptr_t)q | 1u);
	rc = pd->ops->qp_create(pd, &qia, &q->qp);
	if (rc)
		goto err_mutex;
	rc = reg_alloc(&q->reg_idx);
	if (rc)
		goto err_qp;
	reg_set(q->reg_idx, q);
	q->registered = true;
	*out = q;
	return 0;

err_qp:
	q->qp->ops->qp_destroy(q->qp);
err_mutex:
	pthread_mutex_destroy(&q->lock);
err_slots:
	free(q->slots);
err_free:
	free(q);
	return rc;
}

/* ---- posting ---------------------------------------------------------- */

static int gate_refusal(struct vbi_qpe *q, int gate)
{
	if (gate == GATE_PAUSED)
		return -EAGAIN;
	return vbi_err(-ESHUTDOWN, "QP %u is closed", q->qp->qpn);
}

/* Under q->lock. */
static uint32_t slot_take(struct vbi_qpe *q, void *buf, uint64_t cookie, bool recv)
{
	uint32_t s = q->free_head;
	struct qpe_slot *e = &q->slots[s];

	q->free_head = e->next_free;
	e->buf = buf;
	e->cookie = cookie;
	e->recv = recv;
	e->in_use = 1;
	return s;
}

/* Under q->lock. */
static void slot_put(struct vbi_qpe *q, uint32_t s)
{
	q->slots[s].in_use = 0;
	q->slots[s].buf = NULL;
	q->slots[s].next_free = q->free_head;
	q->free_head = s;
}

int vbi_qpe_post_send(struct vbi_qpe *q, struct vbt_send_wr *wr, void *buf, uint64_t cookie)
{
	const struct vbt_send_wr *bad = NULL;
	uint32_t s;
	int rc;

	if (wr->next)
		return vbi_err(-EINVAL, "vbi_qpe_post_send: one WR at a time (wr->next set)");
	pthread_mutex_lock(&q->lock);
	if (q->gate != GATE_OPEN) {
		rc = gate_refusal(q, q->gate);
		goto out;
	}
	if (LOAD(q->out_send) >= q->max_send) {
		rc = -EAGAIN;
		goto out;
	}
	s = slot_take(q, buf, cookie, false);
	wr->wr_id = make_wrid(q->reg_idx, q->inc, s);
	wr->flags |= VBT_SEND_SIGNALED;
	/* Counted before the post: a completion may be polled by another thread
	 * before post_send returns. */
	ADD(q->out_send, 1);
	rc = vbt_post_send(q->qp, wr, &bad);
	if (rc) {
		__atomic_fetch_sub(&q->out_send, 1, __ATOMIC_RELEASE);
		slot_put(q, s);
		goto out;
	}
	ADD(q->posted_send, 1);
out:
	pthread_mutex_unlock(&q->lock);
	return rc;
}

int vbi_qpe_post_recv(struct vbi_qpe *q, struct vbt_recv_wr *wr, void *buf, uint64_t cookie)
{
	const struct vbt_recv_wr *bad = NULL;
	uint32_t s;
	int rc;

	if (wr->next)
		return vbi_err(-EINVAL, "vbi_qpe_post_recv: one WR at a time (wr->next set)");
	pthread_mutex_lock(&q->lock);
	if (q->gate != GATE_OPEN) {
		rc = gate_refusal(q, q->gate);
		goto out;
	}
	if (LOAD(q->out_recv) >= q->max_recv) {
		rc = -EAGAIN;
		goto out;
	}
	s = slot_take(q, buf, cookie, true);
	wr->wr_id = make_wrid(q->reg_idx, q->inc, s);
	ADD(q->out_recv, 1);
	rc = vbt_post_recv(q->qp, wr, &bad);
	if (rc) {
		__atomic_fetch_sub(&q->out_recv, 1, __ATOMIC_RELEASE);
		slot_put(q, s);
		goto out;
	}
	ADD(q->posted_recv, 1);
out:
	pthread_mutex_unlock(&q->lock);
	return rc;
}

/* ---- completion dispatch -------------------------------------------- */

static void deliver(struct vbi_qpe *q, struct vbi_qpe_cqe *c, bool recv)
{
	if (c->status == VBT_WC_SUCCESS)
		ADD(q->ok, 1);
	else if (c->status == VBT_WC_WR_FLUSH_ERR)
		ADD(q->flush, 1);
	else
		ADD(q->err, 1);
	q->cb(c, q->cb_arg);
	/* Last touch of the QP for this WR: the drain's exit condition. */
	__atomic_fetch_sub(recv ? &q->out_recv : &q->out_send, 1, __ATOMIC_RELEASE);
}

/* Under vbi_rcu_read_lock(). */
static void dispatch(const struct vbt_wc *wc)
{
	uint32_t idx = (uint32_t)(wc->wr_id >> (WRID_INC_BITS + WRID_SLOT_BITS)) & WRID_IDX_MASK;
	uint32_t inc = (uint32_t)(wc->wr_id >> WRID_SLOT_BITS) & WRID_INC_MASK;
	uint32_t s = (uint32_t)wc->wr_id & WRID_SLOT_MASK;
	struct vbi_qpe *q = reg_get(idx);
	struct vbi_qpe_cqe c;
	struct qpe_slot e;

	if (!q || q->qp->qpn != wc->qp_num) {
		ADD(poll_orphans, 1);
		return;
	}
	if (inc != __atomic_load_n(&q->inc, __ATOMIC_ACQUIRE)) {
		ADD(poll_stale, 1);
		return;
	}
	if (s == SLOT_SQ_MARK) {
		ADD(q->sq_marks, 1);
		__atomic_store_n(&q->sq_marker_seen, 1, __ATOMIC_RELEASE);
		return;
	}
	if (s == SLOT_RQ_MARK) {
		ADD(q->rq_marks, 1);
		return;
	}
	pthread_mutex_lock(&q->lock);
	if (s >= q->nslots || !q->slots[s].in_use) {
		pthread_mutex_unlock(&q->lock);
		ADD(poll_orphans, 1);
		return;
	}
	e = q->slots[s];
	slot_put(q, s);
	pthread_mutex_unlock(&q->lock);

	memset(&c, 0, sizeof(c));
	c.qp = q;
	c.buf = e.buf;
	c.cookie = e.cookie;
	c.status = wc->status;
	c.opcode = wc->opcode;
	c.byte_len = wc->byte_len;
	c.imm_data = wc->imm_data;
	c.src_qp = wc->src_qp;
	c.wc_flags = wc->flags;
	c.flags = e.recv ? VBI_QPE_CQE_RECV : 0;
	deliver(q, &c, e.recv);
}

int vbi_qpe_poll(struct vbt_cq *cq, int max)
{
	struct vbt_wc wc[32];
	int n, total = 0;

	while (max > 0) {
		vbi_rcu_read_lock();
		n = vbt_cq_poll(cq, wc, max < 32 ? max : 32);
		for (int i = 0; i < n; i++)
			dispatch(&wc[i]);
		vbi_rcu_read_unlock();
		if (n < 0)
			return n;
		total += n;
		if (n < 32)
			break;
		max -= n;
	}
	return total;
}

void vbi_qpe_poll_stats(struct vbi_qpe_poll_stats *st)
{
	st->orphans = LOAD(poll_orphans);
	st->stale = LOAD(poll_stale);
}

/* ---- drain ------------------------------------------------------------ */

static uint32_t outstanding(const struct vbi_qpe *q)
{
	return __atomic_load_n(&q->out_send, __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&q->out_recv, __ATOMIC_ACQUIRE);
}

static int marker_ah(struct vbi_qpe *q)
{
	struct vbt_ah_attr ah;
	int rc;

	if (q->marker_ah)
		return 0;
	vbt_ah_attr_from_peer(q->pd->dev, &q->local, &ah);
	rc = q->pd->ops->ah_create(q->pd, &ah, &q->marker_ah);
	if (rc)
		q->marker_ah = NULL;
	return rc;
}

/* Returns whether the send marker went in. */
static bool post_markers(struct vbi_qpe *q)
{
	struct vbt_send_wr swr;
	struct vbt_recv_wr rwr;
	const struct vbt_send_wr *sbad;
	const struct vbt_recv_wr *rbad;
	bool sq = false;
	int rc;

	if (q->type == VB_QPT_UD && marker_ah(q)) {
		vbi_debug("QP %u: no loopback AH for the UD send marker (%s); counting only",
			  q->qp->qpn, vbi_errmsg());
		goto rq;
	}
	memset(&swr, 0, sizeof(swr));
	swr.opcode = VBT_WR_SEND;
	swr.flags = VBT_SEND_SIGNALED;
	if (q->type == VB_QPT_UD) {
		swr.ah = q->marker_ah;
		swr.remote_qpn = q->qp->qpn;
		swr.remote_qkey = q->local.qkey;
	}
	pthread_mutex_lock(&q->lock);
	__atomic_store_n(&q->sq_marker_seen, 0, __ATOMIC_RELAXED);
	swr.wr_id = make_wrid(q->reg_idx, q->inc, SLOT_SQ_MARK);
	rc = vbt_post_send(q->qp, &swr, &sbad);
	pthread_mutex_unlock(&q->lock);
	if (rc)
		vbi_debug("QP %u: send marker not posted (%d: %s); counting only", q->qp->qpn, rc,
			  vbi_errmsg());
	else
		sq = true;
rq:
	memset(&rwr, 0, sizeof(rwr));
	pthread_mutex_lock(&q->lock);
	rwr.wr_id = make_wrid(q->reg_idx, q->inc, SLOT_RQ_MARK);
	rc = vbt_post_recv(q->qp, &rwr, &rbad);
	pthread_mutex_unlock(&q->lock);
	if (rc)
		vbi_debug("QP %u: receive marker not posted (%d)", q->qp->qpn, rc);
	return sq;
}

static void pause_ns(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

int vbi_qpe_fail(struct vbi_qpe *q, int timeout_ms)
{
	uint64_t t0 = now_ns(), deadline, base;
	enum vb_qp_state st;
	bool sq_marker;
	int rc;

	pthread_mutex_lock(&q->lock);
	if (q->gate == GATE_OPEN)
		q->gate = GATE_PAUSED;
	pthread_mutex_unlock(&q->lock);

	st = vbt_qp_state(q->qp);
	if (st == VB_QPS_RESET) {
		/* Nothing can be posted in RESET; a RESET QP holds no WR. */
		if (outstanding(q))
			return vbi_err(-EBUSY, "QP %u in RESET with %u WRs tracked", q->qp->qpn,
				       outstanding(q));
		return 0;
	}
	base = LOAD(q->ok) + LOAD(q->flush) + LOAD(q->err);
	if (st != VB_QPS_ERR) {
		rc = vbt_qp_set_state(q->qp, VB_QPS_ERR);
		if (rc)
			return vbi_err_prefix(rc, "drain of QP %u: ", q->qp->qpn);
	}
	sq_marker = post_markers(q);
	deadline = t0 + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
	for (;;) {
		int n = vbi_qpe_poll(q->cq, 64);

		if (n < 0)
			return vbi_err_prefix(n, "drain of QP %u: ", q->qp->qpn);
		if (!outstanding(q) && (!sq_marker || LOAD(q->sq_marker_seen)))
			break;
		if (now_ns() > deadline) {
			ADD(q->drain_timeouts, 1);
			return vbi_err(-ETIMEDOUT,
				       "drain of QP %u: %u sends and %u receives still outstanding, send marker %s after %d ms",
				       q->qp->qpn, LOAD(q->out_send), LOAD(q->out_recv),
				       !sq_marker ? "not posted"
				       : LOAD(q->sq_marker_seen) ? "back" : "not back",
				       timeout_ms);
		}
		if (!n)
			pause_ns(20000);
	}
	pthread_mutex_lock(&q->lock);
	q->drained = q->gate != GATE_OPEN;
	pthread_mutex_unlock(&q->lock);
	ADD(q->drains, 1);
	__atomic_store_n(&q->last_drain_ns, now_ns() - t0, __ATOMIC_RELAXED);
	rc = (int)(LOAD(q->ok) + LOAD(q->flush) + LOAD(q->err) - base);
	__atomic_store_n(&q->last_drain_wrs, (uint32_t)rc, __ATOMIC_RELAXED);
	return rc;
}

/* ---- reset / park / connect ------------------------------------------ */

static int park_from_reset(struct vbi_qpe *q, const struct vbt_conn_param *p)
{
	int rc;

	rc = vbt_qp_local_peer(q->qp, q->type == VB_QPT_UD ? p->qkey : 0, &q->local);
	if (rc)
		return rc;
	rc = vbt_qp_to_init(q->qp, p, &q->local);
	if (!rc && q->type == VB_QPT_UD) {
		rc = vbt_qp_to_rtr(q->qp, p, &q->local, NULL);
		if (!rc)
			rc = vbt_qp_to_rts(q->qp, p, &q->local);
	}
	if (rc)
		return vbi_err_prefix(rc, "parking QP %u: ", q->qp->qpn);
	pthread_mutex_lock(&q->lock);
	if (q->gate == GATE_PAUSED)
		q->gate = GATE_OPEN;
	q->drained = false;
	rc = q->gate == GATE_CLOSED ? vbi_err(-ESHUTDOWN, "QP %u closed while parking", q->qp->qpn)
				    : 0;
	pthread_mutex_unlock(&q->lock);
	return rc;
}

int vbi_qpe_park(struct vbi_qpe *q, const struct vbt_conn_param *p, int timeout_ms)
{
	if (vbt_qp_state(q->qp) != VB_QPS_RESET)
		return vbi_qpe_reset(q, p, timeout_ms);
	return park_from_reset(q, p);
}

int vbi_qpe_reset(struct vbi_qpe *q, const struct vbt_conn_param *p, int timeout_ms)
{
	int rc;

	bool drained;

	pthread_mutex_lock(&q->lock);
	rc = q->gate == GATE_CLOSED ? -ESHUTDOWN : 0;
	/* Already drained in this state (e.g. retire, then pool release):
	 * posting stayed paused since, so there is nothing new to flush. */
	drained = q->drained && q->gate == GATE_PAUSED;
	pthread_mutex_unlock(&q->lock);
	if (rc)
		return vbi_err(rc, "QP %u is closed", q->qp->qpn);
	if (!drained || vbt_qp_state(q->qp) != VB_QPS_ERR) {
		rc = vbi_qpe_fail(q, timeout_ms);
		if (rc < 0)
			return rc;
	}
	if (outstanding(q))
		return vbi_err(-EBUSY, "QP %u: %u WRs outstanding after the drain", q->qp->qpn,
			       outstanding(q));
	if (vbt_qp_state(q->qp) != VB_QPS_RESET) {
		rc = vbt_qp_set_state(q->qp, VB_QPS_RESET);
		if (rc)
			return vbi_err_prefix(rc, "reset of QP %u: ", q->qp->qpn);
	}
	/* A new life: late completions of the old one (a receive marker the
	 * device never flushed) no longer match. */
	pthread_mutex_lock(&q->lock);
	__atomic_store_n(&q->inc, next_inc(), __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q->lock);
	__atomic_store_n(&q->async_err, -1, __ATOMIC_RELAXED);
	ADD(q->resets, 1);
	return park_from_reset(q, p);
}

int vbi_qpe_connect(struct vbi_qpe *q, const struct vbt_conn_param *p,
		    const struct vbt_peer *remote)
{
	int rc;

	if (q->type == VB_QPT_UD) {
		if (vbt_qp_state(q->qp) != VB_QPS_RTS)
			return vbi_err(-EINVAL, "UD QP %u is in %s, not RTS: park it first", q->qp->qpn,
				       vbi_qp_state_name(vbt_qp_state(q->qp)));
		return 0;
	}
	if (!remote)
		return vbi_err(-EINVAL, "%s QP %u: connect needs the peer's parameters",
			       vbi_qp_type_name(q->type), q->qp->qpn);
	rc = vbt_qp_to_rtr(q->qp, p, &q->local, remote);
	if (!rc)
		rc = vbt_qp_to_rts(q->qp, p, &q->local);
	if (rc)
		return vbi_err_prefix(rc, "connecting QP %u to %u: ", q->qp->qpn, remote->qpn);
	return 0;
}

int vbi_qpe_recover(struct vbi_qpe *q, const struct vbt_conn_param *p,
		    const struct vbt_peer *remote, int timeout_ms)
{
	int rc = vbi_qpe_reset(q, p, timeout_ms);

	if (!rc)
		rc = vbi_qpe_connect(q, p, remote);
	if (!rc)
		ADD(q->recoveries, 1);
	return rc;
}

/* ---- destruction ------------------------------------------------------ */

int vbi_qpe_close(struct vbi_qpe *q, int timeout_ms)
{
	enum vb_qp_state st;
	int rc = 0;

	pthread_mutex_lock(&q->lock);
	q->gate = GATE_CLOSED;
	pthread_mutex_unlock(&q->lock);
	/* No WR can be added from here on. A QP that never left INIT/RESET
	 * and holds nothing needs no drain. */
	st = vbt_qp_state(q->qp);
	if (outstanding(q) || (st != VB_QPS_RESET && st != VB_QPS_INIT))
		rc = vbi_qpe_fail(q, timeout_ms);
	if (q->registered) {
		reg_set(q->reg_idx, NULL);
		q->registered = false;
	}
	return rc < 0 ? rc : 0;
}

int vbi_qpe_free(struct vbi_qpe *q)
{
	uint32_t qpn;
	int rc;

	if (!q)
		return 0;
	if (q->registered)
		return vbi_err(-EBUSY, "vbi_qpe_free: QP %u was not closed", q->qp->qpn);
	qpn = q->qp->qpn;
	rc = q->qp->ops->qp_destroy(q->qp);
	if (rc)
		return vbi_err_prefix(rc, "destroying QP %u: ", qpn);
	if (q->marker_ah && q->pd->ops->ah_destroy(q->marker_ah))
		vbi_warn("QP %u: loopback AH not destroyed: %s", qpn, vbi_errmsg());
	/* The QP is gone and unregistered: nothing else can complete these. */
	for (uint32_t s = 0; s < q->nslots; s++) {
		struct vbi_qpe_cqe c;

		if (!q->slots[s].in_use)
			continue;
		memset(&c, 0, sizeof(c));
		c.qp = q;
		c.buf = q->slots[s].buf;
		c.cookie = q->slots[s].cookie;
		c.status = VBT_WC_WR_FLUSH_ERR;
		c.opcode = q->slots[s].recv ? VBT_WC_OP_RECV : VBT_WC_OP_SEND;
		c.flags = VBI_QPE_CQE_SYNTHETIC | (q->slots[s].recv ? VBI_QPE_CQE_RECV : 0);
		q->slots[s].in_use = 0;
		ADD(q->synthetic, 1);
		deliver(q, &c, c.flags & VBI_QPE_CQE_RECV);
	}
	reg_release(q->reg_idx);
	pthread_mutex_destroy(&q->lock);
	free(q->slots);
	q->magic = 0;
	free(q);
	return 0;
}

int vbi_qpe_destroy(struct vbi_qpe *q, int timeout_ms)
{
	int rc, rc2;

	if (!q)
		return 0;
	rc = vbi_qpe_close(q, timeout_ms);
	vbi_rcu_synchronize();
	rc2 = vbi_qpe_free(q);
	return rc2 ? rc2 : rc;
}

/* ---- events and accessors --------------------------------------------- */

int vbi_qpe_handle_event(const struct vbt_event *ev)
{
	uintptr_t tag = (uintptr_t)ev->qp_ctx;
	struct vbi_qpe *q;

	if (!ev->qp || !(tag & 1u))
		return 0;
	/* The transport keeps the QP (hence its engine wrapper, freed only
	 * after qp_destroy) alive until the callback returns. */
	q = (struct vbi_qpe *)(tag & ~(uintptr_t)1u);
	if (q->magic != QPE_MAGIC || q->qp != ev->qp)
		return 0;
	switch (ev->type) {
	case VBT_EV_QP_FATAL:
	case VBT_EV_QP_REQ_ERR:
	case VBT_EV_QP_ACCESS_ERR:
		ADD(q->async_errors, 1);
		__atomic_store_n(&q->async_err, (int)ev->type, __ATOMIC_RELEASE);
		vbi_info("QP %u: async %s", q->qp->qpn, vbt_event_name(ev->type));
		break;
	default:
		break;
	}
	return 1;
}

struct vbt_qp *vbi_qpe_qp(const struct vbi_qpe *q)
{
	return q->qp;
}

uint32_t vbi_qpe_qpn(const struct vbi_qpe *q)
{
	return q->qp->qpn;
}

enum vb_qp_type vbi_qpe_type(const struct vbi_qpe *q)
{
	return q->type;
}

enum vb_qp_state vbi_qpe_state(const struct vbi_qpe *q)
{
	return vbt_qp_state(q->qp);
}

const struct vbt_peer *vbi_qpe_local(const struct vbi_qpe *q)
{
	return &q->local;
}

void *vbi_qpe_user(const struct vbi_qpe *q)
{
	return q->user;
}

void vbi_qpe_set_user(struct vbi_qpe *q, void *user)
{
	q->user = user;
}

int vbi_qpe_async_error(const struct vbi_qpe *q)
{
	return __atomic_load_n(&q->async_err, __ATOMIC_ACQUIRE);
}

uint32_t vbi_qpe_outstanding(const struct vbi_qpe *q)
{
	return outstanding(q);
}

void vbi_qpe_stats(const struct vbi_qpe *q, struct vbi_qpe_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->qpn = q->qp->qpn;
	st->state = vbt_qp_state(q->qp);
	st->posted_send = LOAD(q->posted_send);
	st->posted_recv = LOAD(q->posted_recv);
	st->completed_ok = LOAD(q->ok);
	st->completed_flush = LOAD(q->flush);
	st->completed_err = LOAD(q->err);
	st->synthetic = LOAD(q->synthetic);
	st->outstanding_send = LOAD(q->out_send);
	st->outstanding_recv = LOAD(q->out_recv);
	st->drains = LOAD(q->drains);
	st->drain_timeouts = LOAD(q->drain_timeouts);
	st->resets = LOAD(q->resets);
	st->recoveries = LOAD(q->recoveries);
	st->sq_markers_seen = LOAD(q->sq_marks);
	st->rq_markers_seen = LOAD(q->rq_marks);
	st->last_drain_ns = LOAD(q->last_drain_ns);
	st->last_drain_wrs = LOAD(q->last_drain_wrs);
	st->async_errors = LOAD(q->async_errors);
}
