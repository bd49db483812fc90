/* SPDX-License-Identifier: MIT */
/*
 * Message descriptors, send rings and receive slots: the buffers of a lane
 * (and of the UD endpoint) in the device's registered pool.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sring.h"
#include "transport/transport.h"

#include "core/err.h"

int vbi_msg_new(struct vbi_mempool *pool, struct vbi_devres *dr, size_t need,
		struct vbi_msg **out)
{
	struct vbi_buf blk;
	struct vbi_msg *m;
	int rc = vbi_mempool_alloc(pool, VBI_MSG_DESC + need, &blk);

	if (rc)
		return rc;
	m = blk.addr;
	memset(m, 0, sizeof(*m));
	atomic_init(&m->refs, 1);
	m->dr = dr;
	m->pool = pool;
	m->buf = (struct vbi_buf){ .addr = (uint8_t *)blk.addr + VBI_MSG_DESC,
				   .len = (uint32_t)need, .lkey = blk.lkey, .rkey = blk.rkey };
	*out = m;
	return 0;
}

void vbi_msg_put(struct vbi_msg *m)
{
	/* the descriptor heads the block; its size (what vbi_msg_new asked
	 * for) spares the pool a size lookup */
	if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
		vbi_mempool_free_sized(m->pool, m, VBI_MSG_DESC + m->buf.len);
}

/* ---- send rings ------------------------------------------------------------------ */

int vbi_buf_block(struct vbi_mempool *pool, size_t size, uint32_t n, struct vbi_buf *out)
{
	size_t fit = VBI_BUF_BLOCK_BYTES / size; /* 0: a buffer larger than a block */
	struct vbi_buf b;
	int rc;

	if (fit < n)
		n = fit ? (uint32_t)fit : 1;
	if ((rc = vbi_mempool_alloc(pool, size * n, &b)))
		return rc;
	for (uint32_t i = 0; i < n; i++)
		out[i] = (struct vbi_buf){ .addr = (uint8_t *)b.addr + size * i,
					   .len = (uint32_t)size, .lkey = b.lkey, .rkey = b.rkey };
	return (int)n;
}

/* Batch buffers for entries [@from, @to) of @sr that have none, in
 * blocks (vbi_buf_block). */
static int sring_bufs(struct vbi_sring *sr, uint32_t from, uint32_t to)
{
	while (from < to) {
		struct vbi_buf b[VBI_BUF_BLOCK];
		uint32_t n = 0;
		int rc;

		if (sr->ctx[from].buf.addr) {
			from++;
			continue;
		}
		while (from + n < to && n < VBI_BUF_BLOCK && !sr->ctx[from + n].buf.addr)
			n++;
		if ((rc = vbi_buf_block(sr->pool, sr->buf_size, n, b)) < 0)
			return rc;
		n = (uint32_t)rc;
		for (uint32_t j = 0; j < n; j++) {
			sr->ctx[from + j].buf = b[j];
			sr->ctx[from + j].carved = j != 0;
		}
		from += n;
	}
	return 0;
}

int vbi_sring_add_bufs(struct vbi_sring *sr)
{
	int rc = sring_bufs(sr, 0, sr->n);

	return rc ? vbi_err_prefix(rc, "send ring buffers") : 0;
}

int vbi_sring_init(struct vbi_mempool *pool, struct vbi_sring *sr, uint32_t n, uint8_t kind,
		   struct vbi_lane *lane, uint32_t nbufs, size_t buf_size)
{
	int rc;

	memset(sr, 0, sizeof(*sr));
	sr->ctx = calloc(n, sizeof(*sr->ctx));
	if (!sr->ctx)
		return vbi_err(-ENOMEM, "send ring of %u entries", n);
	sr->n = n;
	sr->pool = pool;
	sr->buf_size = buf_size;
	rc = vbi_mempool_alloc(pool, (size_t)n * 64, &sr->hdr_area);
	if (rc)
		goto err;
	for (uint32_t i = 0; i < n; i++) {
		struct vbi_sctx *s = &sr->ctx[i];

		s->kind = kind;
		s->lane = lane;
		s->hdr = (uint8_t *)sr->hdr_area.addr + (size_t)i * 64;
		s->hdr_lkey = sr->hdr_area.lkey;
	}
	rc = sring_bufs(sr, 0, nbufs < n ? nbufs : n);
	if (rc)
		goto err;
	return 0;
err:
	vbi_sring_fini(sr);
	return vbi_err_prefix(rc, "send ring");
}

void vbi_slots_free(struct vbi_mempool *pool, struct vbi_slot *slots, uint32_t n)
{
	if (!slots)
		return;
	for (uint32_t i = 0; i < n; i++) {
		if (slots[i].buf.addr && !slots[i].carved)
			vbi_mempool_free(pool, slots[i].buf.addr);
		if (slots[i].head_owner)
			vbi_mempool_free(pool, slots[i].head);
	}
	free(slots);
}

uint32_t vbi_slots_post(struct vbt_qp *qp, struct vbi_slot *const *held, uint32_t n,
			uint32_t len, int *rc)
{
	struct vbt_sge sge[2 * VBI_REPOST_BATCH];
	struct vbt_recv_wr wr[VBI_REPOST_BATCH];
	const struct vbt_recv_wr *bad = NULL;

	*rc = 0;
	if (!n)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct vbi_slot *s = held[i];
		struct vbt_sge *g = &sge[2 * i];
		int nsge = 1;

		if (s->head) { /* the head, then the rest (vbi_slot_data); len > VBI_RX_HEAD */
			g[0] = (struct vbt_sge){ (uintptr_t)s->head, VBI_RX_HEAD, s->head_lkey };
			g[1] = (struct vbt_sge){ (uintptr_t)s->buf.addr + VBI_RX_HEAD,
						 len - VBI_RX_HEAD, s->buf.lkey };
			nsge = 2;
		} else {
			g[0] = (struct vbt_sge){ (uintptr_t)s->buf.addr, len, s->buf.lkey };
		}
		wr[i] = (struct vbt_recv_wr){ .next = i + 1 < n ? &wr[i + 1] : NULL,
					      .wr_id = (uintptr_t)s, .sg_list = g,
					      .num_sge = nsge };
	}
	*rc = vbt_post_recv(qp, wr, &bad);
	return !*rc ? n : bad ? (uint32_t)(bad - wr) : 0;
}

void vbi_sring_fini(struct vbi_sring *sr)
{
	if (!sr->ctx)
		return;
	vbi_sring_release_upto(sr, NULL);
	for (uint32_t i = 0; i < sr->n; i++)
		if (sr->ctx[i].buf.addr && !sr->ctx[i].carved)
			vbi_mempool_free(sr->pool, sr->ctx[i].buf.addr);
	if (sr->hdr_area.addr)
		vbi_mempool_free(sr->pool, sr->hdr_area.addr);
	free(sr->ctx);
	memset(sr, 0, sizeof(*sr));
}

/* Caller holds the ring's lock and has checked outstanding < n. */

/* @s was just posted signaled: its completion will release it (and every
 * unsignaled entry before it). Caller holds the ring's lock. */
void vbi_sring_signaled(struct vbi_sring *sr, struct vbi_sctx *s)
{
	atomic_fetch_add_explicit(&sr->sig_inflight, 1, memory_order_seq_cst);
	atomic_store_explicit(&s->signaled, true, memory_order_relaxed);
}

/* @s's signal is over (completed or released): out of sig_inflight once.
 * One thread at a time touches an entry's flag (the poster until the post,
 * then its completion, or the ring's lock holder), so no exchange. */
static void sctx_unsignal(struct vbi_sring *sr, struct vbi_sctx *s)
{
	if (atomic_load_explicit(&s->signaled, memory_order_relaxed)) {
		atomic_store_explicit(&s->signaled, false, memory_order_relaxed);
		atomic_fetch_sub_explicit(&sr->sig_inflight, 1, memory_order_seq_cst);
	}
}

void vbi_sring_complete(struct vbi_sring *sr, struct vbi_sctx *s)
{
	uintptr_t off = (uintptr_t)s - (uintptr_t)sr->ctx;

	if (!sr->ctx || off >= (uintptr_t)sr->n * sizeof(*s))
		return;
	sctx_unsignal(sr, s);
	atomic_store_explicit(&sr->done_pos,
			      atomic_load_explicit(&s->pos, memory_order_relaxed) + 1,
			      memory_order_release);
}

static void sctx_release(struct vbi_sctx *s)
{
	if (s->msg) {
		vbi_msg_put(s->msg);
		s->msg = NULL;
	}
	if (s->ud_ref) {
		vbi_msg_put(s->ud_ref);
		s->ud_ref = NULL;
	}
}

/* Release the oldest outstanding entry. Caller holds the ring's lock. */
static void ring_pop(struct vbi_sring *sr)
{
	sctx_release(&sr->ctx[sr->tail]);
	sr->tail = (sr->tail + 1) % sr->n;
	sr->tail_pos++;
	sr->outstanding--;
}

/* Release outstanding entries oldest first, up to and including @upto
 * (every outstanding one when NULL). Caller holds the ring's lock. */
void vbi_sring_release_upto(struct vbi_sring *sr, struct vbi_sctx *upto)
{
	while (sr->outstanding) {
		struct vbi_sctx *s = &sr->ctx[sr->tail];

		sctx_unsignal(sr, s);
		ring_pop(sr);
		if (s == upto)
			break;
	}
}

uint32_t vbi_sring_reclaim(struct vbi_sring *sr)
{
	uint64_t done = atomic_load_explicit(&sr->done_pos, memory_order_acquire);
	uint32_t k = 0;

	for (; sr->outstanding && sr->tail_pos < done; k++)
		ring_pop(sr);
	return k;
}

/* Undo vbi_sring_take() for an entry that was not posted. */
void vbi_sring_untake(struct vbi_sring *sr)
{
	sr->head = (sr->head + sr->n - 1) % sr->n;
	sr->head_pos--;
	sr->outstanding--;
	sctx_unsignal(sr, &sr->ctx[sr->head]);
}
