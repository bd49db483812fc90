/* SPDX-License-Identifier: MIT */
/*
 * The node's test and diagnostic entry points (behind vb_node_inject_fault,
 * vb_node_peer_mode and vb_node_dump: api/src/node.c): fault injection on a
 * peer's active lane, the peer's current mode, and a dump of the node's
 * peers, lanes and publisher cursors.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto/proto.h"
#include "core/err.h"
#include "core/log.h"
#include "core/rcu.h"

/* ---- fault injection ----------------------------------------------------------------------- */

/* The peer named @peer (NULL: the first) that is up. On success node->lock
 * is held for reading (the caller unlocks); on NULL it is not held. */
static struct vbi_peer *find_up_peer(struct vb_node *node, const char *peer)
{
	struct vbi_peer *p;

	pthread_rwlock_rdlock(&node->lock);
	for (p = node->peers; p; p = p->next)
		if (atomic_load(&p->up) && !atomic_load(&p->dead) &&
		    (!peer || !strcmp(peer, p->name)))
			return p;
	pthread_rwlock_unlock(&node->lock);
	return NULL;
}

int vbi_node_inject_fault(struct vb_node *node, const char *peer, vb_fault_t fault)
{
	struct vbi_peer *p;
	struct vbi_lane *l;
	int rc = 0;

	if (!(p = find_up_peer(node, peer)))
		return vbi_err(-ENOENT, "no peer '%s' is up", peer ? peer : "(any)");
	vbi_mutex_lock(&p->txlock);
	vbi_rcu_enter();
	l = vbi_peer_lane(p);
	if (!l) {
		rc = vbi_err(-ENOTCONN, "peer '%s' has no active connection (recovering)", p->name);
	} else if (fault == VB_FAULT_QP_ERR) {
		rc = vbt_qp_set_state(l->qp, VB_QPS_ERR);
		vbi_info("fault: lane %u QP %u moved to ERR", l->id, l->qp->qpn);
	} else if (l->sr.outstanding >= l->sr.n) {
		rc = vbi_err(-EAGAIN, "send queue full");
	} else {
		struct vbi_sctx *s = vbi_sring_take(&l->sr);
		struct vbt_sge sge = { (uintptr_t)s->hdr, VBI_WIRE_HDR_LEN, s->hdr_lkey };
		struct vbt_send_wr wr = { .wr_id = (uintptr_t)s, .sg_list = &sge, .num_sge = 1,
					  .flags = VBT_SEND_SIGNALED };

		if (fault == VB_FAULT_LOC_PROT) {
			/* a valid lkey over an address outside its region: a
			 * local protection fault (an unknown lkey is an
			 * operation error on rxe) */
			sge.addr = 0x1000;
			wr.opcode = VBT_WR_SEND;
		} else {
			/* the QP allows remote writes, but no region on the peer
			 * does (they are registered for local access only):
			 * any rkey is an access violation there */
			struct vbi_wire_hdr h = { .type = VBI_WT_HEARTBEAT };

			vbi_wire_put(s->hdr, &h);
			wr.opcode = VBT_WR_RDMA_WRITE;
			wr.remote_addr = 0x1000;
			wr.rkey = 0x12345678u;
		}
		if (l->mode == VB_QPT_UD && wr.opcode == VBT_WR_RDMA_WRITE)
			rc = vbi_err(-EOPNOTSUPP, "no RDMA WRITE on a UD connection");
		else
			rc = vbi_lane_post_wr(l, &wr);
		if (rc)
			vbi_sring_untake(&l->sr);
		else
			vbi_info("fault: lane %u QP %u: %s posted", l->id, l->qp->qpn,
				 fault == VB_FAULT_LOC_PROT ? "SEND with a bad lkey"
							    : "RDMA WRITE with a bad rkey");
	}
	vbi_rcu_leave();
	vbi_mutex_unlock(&p->txlock);
	pthread_rwlock_unlock(&node->lock);
	return rc;
}

int vbi_node_peer_mode(struct vb_node *node, const char *peer)
{
	struct vbi_peer *p;
	int rc;

	if (!(p = find_up_peer(node, peer)))
		return vbi_err(-ENOENT, "no peer '%s' is up", peer ? peer : "(any)");
	vbi_mutex_lock(&p->txlock);
	vbi_rcu_enter();
	rc = vbi_peer_lane(p) && !vbi_path_recovering(&p->path) ? p->mode
		: vbi_err(-ENOTCONN, "peer '%s' is recovering", p->name);
	vbi_rcu_leave();
	vbi_mutex_unlock(&p->txlock);
	pthread_rwlock_unlock(&node->lock);
	return rc;
}

/* ---- diagnostics ----------------------------------------------------------------------------- */

int vbi_node_dump(struct vb_node *node, FILE *f)
{
	pthread_rwlock_rdlock(&node->lock);
	fprintf(f, "node '%s' uid %016llx\n", node->name, (unsigned long long)node->uid);
	for (struct vbi_lane *l = node->pending; l; l = l->next)
		fprintf(f, "  pending lane QP %u on %s\n", l->qp->qpn, l->dr->dev->caps.name);
	for (struct vbi_peer *p = node->peers; p; p = p->next) {
		struct vbi_lane *a;

		vbi_mutex_lock(&p->txlock);
		a = vbi_path_lane(&p->path);
		fprintf(f, "  peer '%s'%s%s%s epoch %u%s, mode %s (policy %s), active lane %u, "
			"rx lane %u%s\n", p->name,
			p->connector ? " (we connected)" : "", atomic_load(&p->up) ? " up" : "",
			atomic_load(&p->dead) ? " dead" : "", vbi_path_epoch(&p->path),
			vbi_path_recovering(&p->path) ? " recovering" : "",
			vbi_path_mode_name((enum vb_qp_type)p->mode),
			vbi_path_mode_name(vbi_path_mode(&p->path)), a ? a->id : 0, p->rx_lane_id,
			p->probe ? ", probing RC" : "");
		for (struct vbi_lane *l = p->lanes; l; l = l->next)
			fprintf(f, "    lane %u %s QP %u on %s %s%s%s credits %u sq %u/%u recvs %u/%u "
				"to_return %u\n", l->id, vbi_path_mode_name((enum vb_qp_type)l->mode),
				l->qp->qpn, l->dr->dev->caps.name,
				l == a ? "active" : "",
				vbi_lane_draining(l) ? " draining" : vbi_lane_dead(l) ? " retiring" : "",
				atomic_load(&l->hello_rcvd) ? "" : " no-hello", vbi_lane_credits(l),
				(unsigned)l->sr.outstanding, l->sr.n, atomic_load(&l->posted_recvs),
				l->nslots, atomic_load_explicit(&l->to_return, memory_order_relaxed));
		for (struct vbi_pubpeer *pp = p->pubs; pp; pp = pp->next_in_peer) {
			vbi_mutex_lock(&pp->pub->lock);
			fprintf(f, "    pub '%s': sent %llu high %llu acked %llu window next %llu%s\n",
				pp->pub->topic, (unsigned long long)pp->sent,
				(unsigned long long)pp->high, (unsigned long long)pp->acked,
				(unsigned long long)pp->pub->win.next_seq, pp->dead ? " dead" : "");
			vbi_mutex_unlock(&pp->pub->lock);
		}
		vbi_mutex_unlock(&p->txlock);
	}
	pthread_rwlock_unlock(&node->lock);
	/* the context's FANOUT endpoint (ud_lock: it may move meanwhile) */
	pthread_mutex_lock(&node->ctx->ud_lock);
	if (node->ctx->ud_qp)
		fprintf(f, "  FANOUT endpoint UD QP %u recvs %u/%u\n", node->ctx->ud_qp->qpn,
			atomic_load_explicit(&node->ctx->ud_posted, memory_order_relaxed),
			node->ctx->ud_nslots);
	pthread_mutex_unlock(&node->ctx->ud_lock);
	vbi_mcast_dump(node->ctx, f);
	return 0;
}
