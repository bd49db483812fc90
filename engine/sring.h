/* SPDX-License-Identifier: MIT */
/*
 * The buffers of a lane (and of the UD endpoint), all in a device's
 * registered pool (core/mempool): receive slots, send rings of send
 * contexts (one per SQ entry, completed in order), and message descriptors
 * that live at the start of their own pool block. Pure bookkeeping over the
 * pool: no verbs call, no lock (the owner of each ring says which lock
 * guards it: docs/architecture.md, "Who owns which state").
 */
#ifndef VERBUS_ENGINE_SRING_H
#define VERBUS_ENGINE_SRING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/mempool.h"

struct vbt_qp;

struct vbi_lane;
struct vbi_devres;
struct vb_pub;

/* wr_id of every posted WR points at a struct starting with this. */
enum vbi_wr_kind {
	VBI_WR_RC_RECV = 1,
	VBI_WR_RC_SEND,
	VBI_WR_UD_RECV,
	VBI_WR_UD_SEND,
	VBI_WR_MC_RECV,          /* the multicast QP's receive slots (mcast.c) */
};

/* A receive slot: one registered buffer, posted again after use. A lane's
 * slot also has a head: the first VBI_RX_HEAD bytes of what arrives land
 * there (a receive of two scatter entries), and the rest in @buf after its
 * first VBI_RX_HEAD bytes, which stay free. The heads of a lane's slots lie
 * side by side, 16 to a page, so a receive of a small SEND (a request, an
 * answer, an ACK) touches one of a few pages rather than a new page each
 * time: the slots are consumed in turn, hundreds of them 16 KiB apart, and
 * under an emulated MMU (the project's VM) a page that fell out of its TLB
 * costs ~0.2 us to look up again, in the kernel's copy and in our parse
 * alike (docs/benchmarks.md). vbi_slot_data() gives the bytes as one run. */
#define VBI_RX_HEAD 256u
struct vbi_slot {
	uint8_t kind;
	bool carved;             /* @buf is part of a block another slot owns
				  * (vbi_buf_block): not freed on its own */
	bool head_owner;         /* @head starts an allocation this slot frees */
	struct vbi_lane *lane;   /* RC; NULL for UD */
	struct vbi_buf buf;
	uint8_t *head;           /* NULL: all of it lands in @buf */
	uint32_t head_lkey;
};

/* The @byte_len bytes a completion of @s delivered, as one run: the head
 * itself when they fit in it, else @s->buf with the head's bytes copied
 * in front of the rest. Progress context (the slot's owner). */
static inline const uint8_t *vbi_slot_data(struct vbi_slot *s, uint32_t byte_len)
{
	if (!s->head)
		return s->buf.addr;
	if (byte_len <= VBI_RX_HEAD)
		return s->head;
	memcpy(s->buf.addr, s->head, VBI_RX_HEAD);
	return s->buf.addr;
}

/* A published message (ORDERED: in the retransmit window; FANOUT: until its
 * datagrams completed). It lives at the start of its own registered pool
 * block, [struct vbi_msg | pad to VBI_MSG_DESC | buf: wire header | payload],
 * so a publish allocates once (vbi_msg_new) and the last reference frees
 * the block (vbi_msg_put). */
struct vbi_msg {
	atomic_int refs;         /* window + send contexts still pointing at it */
	struct vbi_buf buf;
	struct vbi_devres *dr;   /* the device whose pool holds buf */
	struct vbi_mempool *pool; /* that pool (vbi_msg_put frees the block there) */
	uint32_t len;            /* payload bytes */
	uint16_t flags;          /* wire flags of the whole message */
	uint64_t seq;
	const struct vb_pub *owner; /* the publisher that claimed it (commit/abort check) */
};
#define VBI_MSG_DESC ((sizeof(struct vbi_msg) + 63) & ~(size_t)63) /* buf stays 64-aligned */

/* A send context: one per SQ entry. Batches are built in @buf; fragments
 * of large messages use @hdr (registered) + a slice of @msg. */
struct vbi_sctx {
	uint8_t kind;
	atomic_bool signaled;    /* posted signaled, completion not yet seen */
	bool carved;             /* @buf is part of a block another entry owns
				  * (vbi_buf_block): not freed on its own */
	_Atomic uint64_t pos;    /* its position in the ring's sequence of takes
				  * (vbi_sring_take); read by vbi_sring_complete */
	struct vbi_lane *lane;   /* RC; NULL for UD */
	struct vbi_buf buf;      /* batch buffer (slot_size) */
	struct vbi_msg *msg;     /* ref held for a zero-copy fragment */
	void *ud_ref;            /* UD: struct vbi_udmsg ref */
	uint8_t *hdr;            /* 64 registered bytes for a fragment header */
	uint32_t hdr_lkey;
};

/* A ring of send contexts the size of the SQ; completions are in order,
 * so a completion for entry i releases every entry up to i. Two ways to
 * complete, one per ring: vbi_sring_release_upto under the ring's lock
 * (RC lanes), or vbi_sring_complete on the poller with no lock and
 * vbi_sring_reclaim under it later (the UD endpoint: its posters hold
 * ctx->ud_lock across rxe's whole transfer, and the poller must not wait
 * for them). */
struct vbi_sring {
	struct vbi_sctx *ctx;
	uint32_t n;              /* entries (== SQ depth) */
	uint32_t head;           /* next to post */
	uint32_t tail;           /* oldest outstanding */
	atomic_uint outstanding;   /* written under the ring's lock; read
				    * without it by busy heuristics */
	uint32_t since_signal;
	atomic_uint sig_inflight;  /* signaled WRs posted, not yet completed
				    * (under the ring's lock; read without it
				    * by the cork rule) */
	uint64_t head_pos;       /* takes so far (under the ring's lock) */
	uint64_t tail_pos;       /* entries released so far (under the lock) */
	_Atomic uint64_t done_pos; /* vbi_sring_complete: every entry below
				    * this position completed (the poller
				    * writes it, no lock; release/acquire) */
	struct vbi_buf hdr_area; /* n x 64 bytes */
	struct vbi_mempool *pool; /* where the buffers came from */
	size_t buf_size;         /* each batch buffer's bytes (vbi_sring_init) */
};

/* A ring of @n send contexts of @kind for @lane, each with a 64-byte
 * registered header, the first @nbufs with a batch buffer of @buf_size
 * bytes too, all from @pool. 0 or negative errno (nothing left behind). */
int vbi_sring_init(struct vbi_mempool *pool, struct vbi_sring *sr, uint32_t n, uint8_t kind,
		   struct vbi_lane *lane, uint32_t nbufs, size_t buf_size);
/* The most buffers, and bytes, one pool allocation holds (vbi_buf_block). */
#define VBI_BUF_BLOCK 16u
#define VBI_BUF_BLOCK_BYTES (256u * 1024u)
/* Up to @n (1..VBI_BUF_BLOCK) buffers of @size bytes in one allocation
 * from @pool of at most VBI_BUF_BLOCK_BYTES (one buffer when @size is
 * larger), carved: out[i] is the i-th. A connection's receive slots and
 * send buffers (16 KiB each by default, jemalloc's large sizes) cost a
 * large allocation each otherwise, thousands of instructions and a page
 * of padding apiece. out[0] owns the block: freeing its address frees
 * them all, so the owner marks the others carved. Returns how many
 * buffers it made (1..@n), or a negative errno (nothing allocated). */
int vbi_buf_block(struct vbi_mempool *pool, size_t size, uint32_t n, struct vbi_buf *out);
/* Batch buffers for the entries that have none yet: 0 or negative errno. */
int vbi_sring_add_bufs(struct vbi_sring *sr);
/* Release every entry and free the buffers; NULL-safe on a zeroed ring. */
void vbi_sring_fini(struct vbi_sring *sr);
/* Free receive slots' buffers (back to @pool) and the array; NULL-safe.
 * Nothing may still be posted from them. */
void vbi_slots_free(struct vbi_mempool *pool, struct vbi_slot *slots, uint32_t n);
/* The most consumed receive slots an owner (a lane, the UD endpoint, the
 * multicast QP) holds before posting them again in one list; fewer when
 * the QP has few slots (vbi_repost_batch): an eighth of them. The owner
 * posts what it holds at its next round whatever the count. */
#define VBI_REPOST_BATCH 16u
static inline uint32_t vbi_repost_batch(uint32_t nslots)
{
	uint32_t b = nslots / 8;

	return b < 1 ? 1 : b > VBI_REPOST_BATCH ? VBI_REPOST_BATCH : b;
}
/* Post receive slots @held[0..@n) (n <= VBI_REPOST_BATCH) to @qp again in
 * one list, @len bytes each (a slot with a head: its VBI_RX_HEAD bytes and
 * @len - VBI_RX_HEAD of its buffer; lane_fill gives heads only where @len
 * is larger). Returns how many went: all of them, or those
 * before the one the post refused (*@rc is then its negative errno, else
 * 0). The caller owns the slots and counts what went. */
uint32_t vbi_slots_post(struct vbt_qp *qp, struct vbi_slot *const *held, uint32_t n,
			uint32_t len, int *rc);
/* The next entry to post (the caller checked outstanding < n). Inline:
 * taken for every SEND. */
static inline struct vbi_sctx *vbi_sring_take(struct vbi_sring *sr)
{
	struct vbi_sctx *s = &sr->ctx[sr->head];

	sr->head = sr->head + 1 == sr->n ? 0 : sr->head + 1;
	/* one writer (the ring's lock): a load and a store, not a locked add */
	atomic_store_explicit(&sr->outstanding,
			      atomic_load_explicit(&sr->outstanding, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_store_explicit(&s->signaled, false, memory_order_relaxed);
	atomic_store_explicit(&s->pos, sr->head_pos++, memory_order_relaxed);
	return s;
}
/* Undo vbi_sring_take() for an entry that was not posted (and its
 * vbi_sring_signaled, if any). */
void vbi_sring_untake(struct vbi_sring *sr);
/* @s is (about to be) posted signaled: counted in sig_inflight until its
 * completion. A ring completed by vbi_sring_complete must be told before
 * the post (the completion may be polled before ibv_post_send returns). */
void vbi_sring_signaled(struct vbi_sring *sr, struct vbi_sctx *s);
/* The poller, no lock: a completion for @s (signaled, or flushed). Its
 * signal leaves sig_inflight and every entry up to it may be reclaimed;
 * nothing else of the ring is touched. @s outside the ring (a completion
 * of a QP whose ring was torn down) is ignored. */
void vbi_sring_complete(struct vbi_sring *sr, struct vbi_sctx *s);
/* Under the ring's lock: release the entries completed so far (their
 * message references are dropped). Returns how many. */
uint32_t vbi_sring_reclaim(struct vbi_sring *sr);
/* A completion for @upto: every entry up to it (all with NULL) is done;
 * their message references are dropped. */
void vbi_sring_release_upto(struct vbi_sring *sr, struct vbi_sctx *upto);
/* Drop a reference; the last frees the message's block. */
void vbi_msg_put(struct vbi_msg *m);
/* A message with @need bytes of buffer in @pool, the pool of device @dr
 * (one block holding the descriptor too), one reference; 0 or the pool's
 * error (-EAGAIN at its cap, -ENODEV once the pool is detached, ...). */
int vbi_msg_new(struct vbi_mempool *pool, struct vbi_devres *dr, size_t need,
		struct vbi_msg **out);

#endif
