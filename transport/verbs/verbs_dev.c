/* SPDX-License-Identifier: MIT */
/*
 * The verbs backend's devices: opening one (by name or by the IP address
 * rdma_cm binds, port, GID choice, inline-size probe, removal watch),
 * querying and closing it, and its async-event thread, which mirrors a QP
 * the device moved to ERR and hands every event to the user's callback.
 *
 * Thread-safety: see the synchronization table in transport/transport.h.
 * The event thread reads only the device's async fd (and the removal watch)
 * and calls the user's callback with no lock; it takes a QP's mutex only to
 * mirror an error state.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_priv.h"

/* ---- async events ---------------------------------------------------- */

static enum vbt_event_type ev_from_ibv(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL: return VBT_EV_QP_FATAL;
	case IBV_EVENT_QP_REQ_ERR: return VBT_EV_QP_REQ_ERR;
	case IBV_EVENT_QP_ACCESS_ERR: return VBT_EV_QP_ACCESS_ERR;
	case IBV_EVENT_COMM_EST: return VBT_EV_COMM_EST;
	case IBV_EVENT_SQ_DRAINED: return VBT_EV_SQ_DRAINED;
	case IBV_EVENT_PATH_MIG: return VBT_EV_PATH_MIG;
	case IBV_EVENT_PATH_MIG_ERR: return VBT_EV_PATH_MIG_ERR;
	case IBV_EVENT_QP_LAST_WQE_REACHED: return VBT_EV_QP_LAST_WQE_REACHED;
	case IBV_EVENT_CQ_ERR: return VBT_EV_CQ_ERR;
	case IBV_EVENT_SRQ_ERR: return VBT_EV_SRQ_ERR;
	case IBV_EVENT_SRQ_LIMIT_REACHED: return VBT_EV_SRQ_LIMIT_REACHED;
	case IBV_EVENT_PORT_ACTIVE: return VBT_EV_PORT_ACTIVE;
	case IBV_EVENT_PORT_ERR: return VBT_EV_PORT_ERR;
	case IBV_EVENT_LID_CHANGE: return VBT_EV_LID_CHANGE;
	case IBV_EVENT_PKEY_CHANGE: return VBT_EV_PKEY_CHANGE;
	case IBV_EVENT_SM_CHANGE: return VBT_EV_SM_CHANGE;
	case IBV_EVENT_CLIENT_REREGISTER: return VBT_EV_CLIENT_REREGISTER;
	case IBV_EVENT_GID_CHANGE: return VBT_EV_GID_CHANGE;
	case IBV_EVENT_DEVICE_FATAL: return VBT_EV_DEVICE_FATAL;
	case IBV_EVENT_WQ_FATAL: return VBT_EV_WQ_FATAL;
	}
	return VBT_EV_OTHER;
}

static void ev_deliver(struct vbv_dev *vd, struct ibv_async_event *e)
{
	struct vbt_event ev = { .raw = (int)e->event_type, .dev = &vd->core };

	(void)__atomic_load_n(&vd->published, __ATOMIC_ACQUIRE);
	ev.type = ev_from_ibv(e->event_type);
	switch (ev.type) {
	case VBT_EV_QP_FATAL:
	case VBT_EV_QP_REQ_ERR:
	case VBT_EV_QP_ACCESS_ERR:
	case VBT_EV_COMM_EST:
	case VBT_EV_SQ_DRAINED:
	case VBT_EV_PATH_MIG:
	case VBT_EV_PATH_MIG_ERR:
	case VBT_EV_QP_LAST_WQE_REACHED:
		if (e->element.qp && e->element.qp->qp_context) {
			struct vbv_qp *vq = e->element.qp->qp_context;

			ev.qp = &vq->core;
			ev.qp_ctx = vq->core.user_ctx;
			if (ev.type <= VBT_EV_QP_ACCESS_ERR) {
				/* The device moved the QP to ERR behind our back. */
				pthread_mutex_lock(&vq->lock);
				vbi_qp_mirror_set(&vq->mirror, VB_QPS_ERR);
				__atomic_store_n(&vq->core.state, VB_QPS_ERR, __ATOMIC_RELEASE);
				pthread_mutex_unlock(&vq->lock);
			}
		}
		break;
	case VBT_EV_CQ_ERR:
		if (e->element.cq && e->element.cq->cq_context)
			ev.cq = &((struct vbv_cq *)e->element.cq->cq_context)->core;
		break;
	case VBT_EV_PORT_ACTIVE:
	case VBT_EV_PORT_ERR:
	case VBT_EV_LID_CHANGE:
	case VBT_EV_PKEY_CHANGE:
	case VBT_EV_SM_CHANGE:
	case VBT_EV_CLIENT_REREGISTER:
	case VBT_EV_GID_CHANGE:
		ev.port = (uint8_t)e->element.port_num;
		break;
	default:
		break;
	}
	vbi_info("%s: async event %s (%s) qp %u port %u", vd->core.caps.name,
		 vbt_event_name(ev.type), ibv_event_type_str(e->event_type),
		 ev.qp ? ev.qp->qpn : 0, ev.port);
	if (vd->cb)
		vd->cb(&ev, vd->cb_arg);
}

static void *ev_thread(void *arg)
{
	struct vbv_dev *vd = arg;
	struct pollfd pfd[3] = {
		{ .fd = vd->ctx->async_fd, .events = POLLIN },
		{ .fd = vd->stop_fd, .events = POLLIN },
		{ .fd = vd->watch_ch ? vd->watch_ch->fd : -1, .events = POLLIN },
	};

	for (;;) {
		int n = poll(pfd, 3, -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			vbi_error("%s: poll on async fd: %s; event thread stops",
				  vd->core.caps.name, strerror(errno));
			break;
		}
		if (pfd[1].revents)
			break;
		if ((pfd[2].revents & POLLIN) && vbv_watch_removed(vd->watch_ch)) {
			struct vbt_event ev = { .type = VBT_EV_DEVICE_REMOVAL, .raw = -1,
						.dev = &vd->core };

			/* our id no longer pins the device (librdmacm's context
			 * of it closes once no id is bound: vbv_cm_forget_removed) */
			rdma_destroy_id(vd->watch_id);
			vd->watch_id = NULL;
			pfd[2].fd = -1;
			atomic_store(&vd->removed, true);
			vbi_warn("%s: the device is being removed (rdma_cm DEVICE_REMOVAL)",
				 vd->core.caps.name);
			if (vd->cb)
				vd->cb(&ev, vd->cb_arg);
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		for (;;) {
			struct ibv_async_event e;

			/* The fd is non-blocking: -1/EAGAIN when drained. */
			if (ibv_get_async_event(vd->ctx, &e))
				break;
			vd->events++;
			ev_deliver(vd, &e);
			ibv_ack_async_event(&e);
		}
	}
	return NULL;
}

/* ---- device ---------------------------------------------------------- */

/* Source GID: @want (>= 0), else a RoCE v2 IPv4-mapped GID (of @ip when
 * given), else a v4-mapped one of any type, else index 0. */
static int pick_gid(struct vbv_dev *vd, int tbl_len, int want, const uint8_t *ip4)
{
	struct vbt_dev_caps *c = &vd->core.caps;
	int best = -1, best_score = -1;

	for (int i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry ent;
		int score = 0;

		if (want >= 0 && i != want)
			continue;
		if (ibv_query_gid_ex(vd->ctx, c->port, (uint32_t)i, &ent, 0))
			continue;
		if (want >= 0) {
			best = i;
			memcpy(c->gid, ent.gid.raw, 16);
			break;
		}
		if (vbv_is_v4_mapped(ent.gid.raw)) {
			score += 2;
			if (ip4 && !memcmp(ent.gid.raw + 12, ip4, 4))
				score += 4;
		}
		if (ent.gid_type == IBV_GID_TYPE_ROCE_V2)
			score += 1;
		if (score > best_score) {
			best_score = score;
			best = i;
			memcpy(c->gid, ent.gid.raw, 16);
		}
	}
	if (best < 0) {
		union ibv_gid g;

		if (want >= 0)
			return vbi_err(-EINVAL, "%s port %u has no GID at index %d", c->name,
				       c->port, want);
		if (ibv_query_gid(vd->ctx, c->port, 0, &g))
			return vbi_err(-EIO, "%s port %u: no readable GID", c->name, c->port);
		memcpy(c->gid, g.raw, 16);
		best = 0;
	}
	c->gid_index = best;
	return 0;
}

/* max_inline_data is per QP, not in ibv_device_attr: ask for decreasing
 * sizes on a scratch RC QP and keep the first the provider grants. */
static void probe_inline(struct vbv_dev *vd)
{
	static const uint32_t tries[] = { 1024, 512, 256, 128, 64, 32, 0 };
	struct ibv_pd *pd = ibv_alloc_pd(vd->ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(vd->ctx, 2, NULL, NULL, 0) : NULL;

	vd->core.caps.max_inline_data = 0;
	for (size_t i = 0; cq && i < sizeof(tries) / sizeof(tries[0]); i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
				 .max_recv_sge = 1, .max_inline_data = tries[i] },
		};
		struct ibv_qp *qp = ibv_create_qp(pd, &a);

		if (qp) {
			vd->core.caps.max_inline_data = a.cap.max_inline_data;
			ibv_destroy_qp(qp);
			break;
		}
	}
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
}

static int query_port(struct vbv_dev *vd, struct vbt_dev_caps *c, int *gid_tbl_len)
{
	struct ibv_port_attr pa;
	int rc = ibv_query_port(vd->ctx, c->port, &pa);

	if (rc)
		return vbi_err(rc > 0 ? -rc : -EIO, "ibv_query_port(%s, %u) failed", c->name,
			       c->port);
	c->port_state = (uint8_t)pa.state;
	c->active_mtu = (uint8_t)pa.active_mtu;
	c->is_roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	if (gid_tbl_len)
		*gid_tbl_len = pa.gid_tbl_len;
	return 0;
}

int vbv_dev_open(const struct vbt_dev_attr *attr, struct vbt_dev **out)
{
	struct vbv_dev *vd;
	struct vbt_dev_caps *c;
	struct ibv_device_attr da;
	char byip[64] = "";
	uint8_t ip4[4], *ip4p = NULL, ipport = 0;
	int rc, tbl_len = 0;

	*out = NULL;
	if (attr->ip && *attr->ip) {
		rc = vbv_resolve_local_ip(attr->ip, byip, sizeof(byip), &ipport);
		if (rc)
			return rc;
		if (inet_pton(AF_INET, attr->ip, ip4) == 1)
			ip4p = ip4;
	}
	vd = calloc(1, sizeof(*vd));
	if (!vd)
		return vbi_err(-ENOMEM, "out of memory");
	vd->core.ops = &vbt_verbs_ops;
	vd->cb = attr->event_cb;
	vd->cb_arg = attr->event_arg;
	vd->stop_fd = -1;
	c = &vd->core.caps;
	rc = vbi_verbs_open_device(*byip ? byip : attr->name, &vd->ctx);
	if (rc)
		goto err_free;
	snprintf(c->name, sizeof(c->name), "%s", ibv_get_device_name(vd->ctx->device));
	if ((rc = ibv_query_device(vd->ctx, &da))) {
		rc = vbi_err(rc > 0 ? -rc : -EIO, "ibv_query_device(%s) failed", c->name);
		goto err_close;
	}
	c->max_qp = (uint32_t)da.max_qp;
	c->max_qp_wr = (uint32_t)da.max_qp_wr;
	c->max_cq = (uint32_t)da.max_cq;
	c->max_cqe = (uint32_t)da.max_cqe;
	c->max_mr = (uint32_t)da.max_mr;
	c->max_pd = (uint32_t)da.max_pd;
	c->max_ah = (uint32_t)da.max_ah;
	c->max_sge = (uint32_t)da.max_sge;
	c->max_mr_size = da.max_mr_size;
	c->port = attr->port ? attr->port : ipport ? ipport : 1;
	if (c->port > da.phys_port_cnt) {
		rc = vbi_err(-EINVAL, "%s has %u port(s), asked for port %u", c->name,
			     da.phys_port_cnt, c->port);
		goto err_close;
	}
	if ((rc = query_port(vd, c, &tbl_len)))
		goto err_close;
	if ((rc = pick_gid(vd, tbl_len, attr->gid_index, ip4p)))
		goto err_close;
	probe_inline(vd);
	if (attr->watch_removal &&
	    vbv_watch_open(c->name, attr->ip, c->gid, &vd->watch_ch, &vd->watch_id))
		vbi_info("%s: no removal watch (%s): only a DEVICE_FATAL event will tell that it "
			 "goes", c->name, vbi_errmsg());

	/* Async events: non-blocking fd polled with a stop eventfd. */
	int fl = fcntl(vd->ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(vd->ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = vbi_err(-errno, "%s: cannot make the async fd non-blocking: %s", c->name,
			     strerror(errno));
		goto err_close;
	}
	vd->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (vd->stop_fd < 0) {
		rc = vbi_err(-errno, "eventfd: %s", strerror(errno));
		goto err_close;
	}
	if ((rc = pthread_create(&vd->ev_thread, NULL, ev_thread, vd))) {
		rc = vbi_err(-rc, "cannot start the async event thread: %s", strerror(rc));
		goto err_fd;
	}
	vbi_info("opened %s port %u (%s, MTU %u, gid index %d), max_qp_wr %u max_cqe %u "
		 "max_sge %u max_inline %u",
		 c->name, c->port, vbt_port_state_str(c->port_state), 128u << c->active_mtu,
		 c->gid_index, c->max_qp_wr, c->max_cqe, c->max_sge, c->max_inline_data);
	*out = &vd->core;
	return 0;

err_fd:
	close(vd->stop_fd);
err_close:
	vbv_watch_close(vd->watch_ch, vd->watch_id);
	ibv_close_device(vd->ctx);
err_free:
	free(vd);
	return rc;
}

void vbv_dev_close(struct vbt_dev *dev)
{
	struct vbv_dev *vd;
	uint64_t one = 1;

	if (!dev)
		return;
	vd = to_vdev(dev);
	if (write(vd->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		vbi_warn("%s: cannot wake the event thread: %s", dev->caps.name, strerror(errno));
	pthread_join(vd->ev_thread, NULL);
	close(vd->stop_fd);
	vbv_watch_close(vd->watch_ch, vd->watch_id);
	if (ibv_close_device(vd->ctx))
		vbi_warn("ibv_close_device(%s) failed (objects still open?)", dev->caps.name);
	if (atomic_load(&vd->removed))
		vbv_cm_forget_removed();
	free(vd);
}

int vbv_dev_query(struct vbt_dev *dev, struct vbt_dev_caps *caps)
{
	struct vbv_dev *vd = to_vdev(dev);
	union ibv_gid g;
	int rc;

	*caps = dev->caps;
	if ((rc = query_port(vd, caps, NULL)))
		return rc;
	/* The GID may vanish while the netdev is down: report what is there. */
	if (ibv_query_gid(vd->ctx, caps->port, caps->gid_index, &g))
		return vbi_err(-EIO, "%s: GID %d unreadable", caps->name, caps->gid_index);
	memcpy(caps->gid, g.raw, 16);
	return 0;
}
