/* SPDX-License-Identifier: MIT */
/*
 * The context's UD endpoint (FANOUT): its QP, send ring and receive slots,
 * moving it off a removed device, and the datagrams it receives.
 */
#include <errno.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "engine/events.h"
#include "engine/lane.h"
#include "engine/mcast.h"
#include "engine/progress.h"
#include "engine/ud.h"
#include "engine/upcalls.h"
#include "core/err.h"
#include "core/log.h"

/* ---- UD endpoint -------------------------------------------------------------------- */

static int ud_post_slot(struct vb_ctx *ctx, struct vbi_slot *s)
{
	int rc;

	if (vbi_slots_post(ctx->ud_qp, &s, 1, VBI_UD_GRH + ctx->ud_mtu, &rc))
		atomic_fetch_add_explicit(&ctx->ud_posted, 1, memory_order_relaxed);
	return rc;
}

void vbi_ud_repost_held(struct vb_ctx *ctx)
{
	uint32_t n = ctx->ud_nheld, ok;
	int rc;

	ctx->ud_nheld = 0;
	if (!n || !ctx->ud_qp || atomic_load(&ctx->stop))
		return;
	ok = vbi_slots_post(ctx->ud_qp, ctx->ud_held, n, VBI_UD_GRH + ctx->ud_mtu, &rc);
	atomic_fetch_add_explicit(&ctx->ud_posted, ok, memory_order_relaxed);
	if (rc)
		vbi_warn("UD receive repost failed (%u of %u slots lost): %s", n - ok, n,
			 vbi_errmsg());
}

void vbi_ud_repost(struct vb_ctx *ctx, struct vbi_slot *s)
{
	if (s->kind == VBI_WR_MC_RECV) {
		vbi_mcast_repost(ctx, s);
		return;
	}
	if (atomic_load(&ctx->stop))
		return;
	/* held: the next round's start posts it (after this poll's
	 * callbacks and the caller's reaction to them) */
	ctx->ud_held[ctx->ud_nheld++] = s;
	if (ctx->ud_nheld >= vbi_repost_batch(ctx->ud_nslots))
		vbi_ud_repost_held(ctx);
}

void vbi_ud_addr(struct vb_ctx *ctx, struct vbt_peer *out)
{
	pthread_mutex_lock(&ctx->ud_addr_lock);
	*out = ctx->ud_local;
	pthread_mutex_unlock(&ctx->ud_addr_lock);
}

/* The UD endpoint on ctx->ud_dr. At create, or under ud_lock (dev_reap). */
int vbi_ud_open(struct vb_ctx *ctx)
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
	rc = vbi_sring_init(dr->pool, &ctx->ud_sr, ctx->ud_qp->cap.max_send_wr,
			    VBI_WR_UD_SEND, NULL, 0, ctx->attr.slot_size);
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

/* The UD endpoint's objects. ud_lock held (or the context is being
 * destroyed: no other thread left). */
void vbi_ud_teardown(struct vb_ctx *ctx)
{
	if (ctx->ud_qp) {
		ctx->ops->qp_destroy(ctx->ud_qp);
		ctx->ud_qp = NULL;
	}
	atomic_store_explicit(&ctx->ud_posted, 0, memory_order_relaxed);
	ctx->ud_nheld = 0; /* they are ud_slots' */
	vbi_sring_fini(&ctx->ud_sr);
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
				ctx->up->peer_set_ud(p, p->ud.qpn, p->ud.qkey, p->ud.gid);
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
void vbi_ud_move(struct vb_ctx *ctx)
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
	vbi_ud_teardown(ctx);
	if (to) {
		atomic_store(&ctx->ud_dr, to);
		rc = vbi_ud_open(ctx);
		if (rc) {
			vbi_warn("FANOUT: no UD endpoint on %s: %s", to->name, vbi_errmsg());
			vbi_ud_teardown(ctx);
		}
	}
	pthread_mutex_unlock(&ctx->ud_lock);
	atomic_store(&ctx->ud_gone, rc != 0);
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

/* ---- UD receive (FANOUT) --------------------------------------------------------------- */

void vbi_ud_recv(struct vb_ctx *ctx, struct vbi_slot *slot, uint32_t byte_len)
{
	const uint8_t *buf;
	uint32_t len = vbi_wire_ud_frames(slot->buf.addr, byte_len, &buf);

	if (!len) {
		atomic_fetch_add(&ctx->st->malformed, 1);
		vbi_event(ctx, VB_EV_PROTOCOL, "(datagram)", "empty datagram dropped");
	}

	/* the frames, to the FANOUT subscribers of every node (the
	 * protocol's: no lock, an RCU read-side section; it reserves room in
	 * the callback queue for each delivery before it makes it) */
	ctx->up->datagram(ctx, buf, len);
	ctx->up->cb_flush(ctx); /* the callbacks read the slot: before it is posted again */
	vbi_ud_repost(ctx, slot);
}
