/* SPDX-License-Identifier: MIT */
/*
 * The verbs backend of struct vbt_ops: libibverbs objects behind core-side
 * types, the QP state validator in front of every ibv_modify_qp, and one
 * async-event thread per device. Connection set-up is in verbs_cm.c.
 *
 * Thread-safety: see the synchronization table in transport/transport.h.
 * Internally: qp_modify/qp_query take the QP's mutex (never held while
 * calling back into the user or while destroying); the event thread reads
 * only the device's async fd and calls the user's callback with no lock.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_priv.h"

/* The core-side constants cross the boundary unconverted. */
_Static_assert(VB_QPS_RESET == (int)IBV_QPS_RESET && VB_QPS_INIT == (int)IBV_QPS_INIT &&
		       VB_QPS_RTR == (int)IBV_QPS_RTR && VB_QPS_RTS == (int)IBV_QPS_RTS &&
		       VB_QPS_SQD == (int)IBV_QPS_SQD && VB_QPS_SQE == (int)IBV_QPS_SQE &&
		       VB_QPS_ERR == (int)IBV_QPS_ERR,
	       "qp states");
_Static_assert(VB_QP_STATE == (int)IBV_QP_STATE && VB_QP_CUR_STATE == (int)IBV_QP_CUR_STATE &&
		       VB_QP_EN_SQD_ASYNC_NOTIFY == (int)IBV_QP_EN_SQD_ASYNC_NOTIFY &&
		       VB_QP_ACCESS_FLAGS == (int)IBV_QP_ACCESS_FLAGS &&
		       VB_QP_PKEY_INDEX == (int)IBV_QP_PKEY_INDEX && VB_QP_PORT == (int)IBV_QP_PORT &&
		       VB_QP_QKEY == (int)IBV_QP_QKEY && VB_QP_AV == (int)IBV_QP_AV &&
		       VB_QP_PATH_MTU == (int)IBV_QP_PATH_MTU && VB_QP_TIMEOUT == (int)IBV_QP_TIMEOUT &&
		       VB_QP_RETRY_CNT == (int)IBV_QP_RETRY_CNT &&
		       VB_QP_RNR_RETRY == (int)IBV_QP_RNR_RETRY && VB_QP_RQ_PSN == (int)IBV_QP_RQ_PSN &&
		       VB_QP_MAX_QP_RD_ATOMIC == (int)IBV_QP_MAX_QP_RD_ATOMIC &&
		       VB_QP_ALT_PATH == (int)IBV_QP_ALT_PATH &&
		       VB_QP_MIN_RNR_TIMER == (int)IBV_QP_MIN_RNR_TIMER &&
		       VB_QP_SQ_PSN == (int)IBV_QP_SQ_PSN &&
		       VB_QP_MAX_DEST_RD_ATOMIC == (int)IBV_QP_MAX_DEST_RD_ATOMIC &&
		       VB_QP_PATH_MIG_STATE == (int)IBV_QP_PATH_MIG_STATE && VB_QP_CAP == (int)IBV_QP_CAP &&
		       VB_QP_DEST_QPN == (int)IBV_QP_DEST_QPN &&
		       VB_QP_RATE_LIMIT == (int)IBV_QP_RATE_LIMIT,
	       "qp attr mask bits");
_Static_assert((int)VBT_ACCESS_LOCAL_WRITE == (int)IBV_ACCESS_LOCAL_WRITE &&
		       (int)VBT_ACCESS_REMOTE_WRITE == (int)IBV_ACCESS_REMOTE_WRITE &&
		       (int)VBT_ACCESS_REMOTE_READ == (int)IBV_ACCESS_REMOTE_READ &&
		       (int)VBT_ACCESS_REMOTE_ATOMIC == (int)IBV_ACCESS_REMOTE_ATOMIC,
	       "access flags");
_Static_assert(VBT_MTU_256 == (int)IBV_MTU_256 && VBT_MTU_4096 == (int)IBV_MTU_4096, "mtu");
_Static_assert(VBT_PORT_DOWN == (int)IBV_PORT_DOWN && VBT_PORT_ACTIVE == (int)IBV_PORT_ACTIVE,
	       "port state");
_Static_assert(VBT_WC_SUCCESS == (int)IBV_WC_SUCCESS &&
		       VBT_WC_WR_FLUSH_ERR == (int)IBV_WC_WR_FLUSH_ERR &&
		       VBT_WC_RETRY_EXC_ERR == (int)IBV_WC_RETRY_EXC_ERR &&
		       VBT_WC_RNR_RETRY_EXC_ERR == (int)IBV_WC_RNR_RETRY_EXC_ERR &&
		       VBT_WC_GENERAL_ERR == (int)IBV_WC_GENERAL_ERR,
	       "wc status");
_Static_assert((int)VBT_SEND_FENCE == (int)IBV_SEND_FENCE && (int)VBT_SEND_SIGNALED == (int)IBV_SEND_SIGNALED &&
		       (int)VBT_SEND_SOLICITED == (int)IBV_SEND_SOLICITED && (int)VBT_SEND_INLINE == (int)IBV_SEND_INLINE,
	       "send flags");
_Static_assert(sizeof(struct vbt_sge) == sizeof(struct ibv_sge) &&
		       offsetof(struct vbt_sge, addr) == offsetof(struct ibv_sge, addr) &&
		       offsetof(struct vbt_sge, length) == offsetof(struct ibv_sge, length) &&
		       offsetof(struct vbt_sge, lkey) == offsetof(struct ibv_sge, lkey),
	       "sge layout");

/* WRs converted per ibv_post_* call (on the stack; longer chains loop). */
#define VBV_POST_BATCH 32
#define VBV_POLL_BATCH 32

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int errno_or(int dflt)
{
	return errno ? -errno : -dflt;
}

static const enum ibv_qp_type qpt_to_ibv[VB_QPT__COUNT] = {
	[VB_QPT_RC] = IBV_QPT_RC,
	[VB_QPT_UC] = IBV_QPT_UC,
	[VB_QPT_UD] = IBV_QPT_UD,
};

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

static int is_v4_mapped(const uint8_t *g)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(g, pfx, sizeof(pfx));
}

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
		if (is_v4_mapped(ent.gid.raw)) {
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

static int v_dev_open(const struct vbt_dev_attr *attr, struct vbt_dev **out)
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

static void v_dev_close(struct vbt_dev *dev)
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

static int v_dev_query(struct vbt_dev *dev, struct vbt_dev_caps *caps)
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

/* ---- PD, MR ---------------------------------------------------------- */

static int v_pd_alloc(struct vbt_dev *dev, struct vbt_pd **out)
{
	struct vbv_pd *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p)
		return vbi_err(-ENOMEM, "out of memory");
	errno = 0;
	p->pd = ibv_alloc_pd(to_vdev(dev)->ctx);
	if (!p->pd) {
		int rc = errno_or(ENOMEM);

		free(p);
		return vbi_err(rc, "ibv_alloc_pd(%s): %s", dev->caps.name, strerror(-rc));
	}
	p->core.ops = dev->ops;
	p->core.dev = dev;
	*out = &p->core;
	return 0;
}

static int v_pd_free(struct vbt_pd *pd)
{
	struct vbv_pd *p = to_vpd(pd);
	int rc = ibv_dealloc_pd(p->pd);

	if (rc)
		return vbi_err(-rc, "ibv_dealloc_pd: %s (objects still use it?)", strerror(rc));
	free(p);
	return 0;
}

static int v_mr_reg(struct vbt_pd *pd, void *addr, size_t len, unsigned access,
		    struct vbt_mr **out)
{
	struct vbv_mr *m;

	*out = NULL;
	if (!addr || !len)
		return vbi_err(-EINVAL, "mr_reg: empty range");
	if (access & ~(unsigned)(VBT_ACCESS_LOCAL_WRITE | VBT_ACCESS_REMOTE_WRITE |
				 VBT_ACCESS_REMOTE_READ | VBT_ACCESS_REMOTE_ATOMIC))
		return vbi_err(-EINVAL, "mr_reg: unknown access bits 0x%x", access);
	m = calloc(1, sizeof(*m));
	if (!m)
		return vbi_err(-ENOMEM, "out of memory");
	errno = 0;
	m->mr = ibv_reg_mr(to_vpd(pd)->pd, addr, len, (int)access);
	if (!m->mr) {
		int rc = errno_or(ENOMEM);

		free(m);
		return vbi_err(rc, "ibv_reg_mr(%p, %zu, 0x%x): %s", addr, len, access,
			       strerror(-rc));
	}
	m->core.ops = pd->ops;
	m->core.pd = pd;
	m->core.addr = addr;
	m->core.length = len;
	m->core.lkey = m->mr->lkey;
	m->core.rkey = m->mr->rkey;
	m->core.access = access;
	*out = &m->core;
	return 0;
}

static int v_mr_dereg(struct vbt_mr *mr)
{
	struct vbv_mr *m = to_vmr(mr);
	int rc = ibv_dereg_mr(m->mr);

	if (rc)
		return vbi_err(-rc, "ibv_dereg_mr: %s", strerror(rc));
	free(m);
	return 0;
}

/* ---- CQ -------------------------------------------------------------- */

static int v_cq_create(struct vbt_dev *dev, const struct vbt_cq_attr *attr, struct vbt_cq **out)
{
	struct vbv_dev *vd = to_vdev(dev);
	struct vbv_cq *c;
	int rc;

	*out = NULL;
	if (attr->cqe <= 0 || (uint32_t)attr->cqe > dev->caps.max_cqe)
		return vbi_err(-EINVAL, "cq_create: %d entries (device %s allows 1..%u)", attr->cqe,
			       dev->caps.name, dev->caps.max_cqe);
	c = calloc(1, sizeof(*c));
	if (!c)
		return vbi_err(-ENOMEM, "out of memory");
	if (attr->channel) {
		c->ch = ibv_create_comp_channel(vd->ctx);
		if (!c->ch) {
			rc = vbi_err(errno_or(ENOMEM), "ibv_create_comp_channel: %s",
				     strerror(errno));
			goto err_free;
		}
		int fl = fcntl(c->ch->fd, F_GETFL);
		if (fl < 0 || fcntl(c->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
			rc = vbi_err(-errno, "completion channel fd: %s", strerror(errno));
			goto err_ch;
		}
	}
	errno = 0;
	c->cq = ibv_create_cq(vd->ctx, attr->cqe, c, c->ch, attr->comp_vector);
	if (!c->cq) {
		rc = vbi_err(errno_or(ENOMEM), "ibv_create_cq(%d): %s", attr->cqe,
			     strerror(errno));
		goto err_ch;
	}
	c->core.ops = dev->ops;
	c->core.dev = dev;
	c->core.cqe = c->cq->cqe;
	c->core.has_channel = !!c->ch;
	c->core.user_ctx = attr->user_ctx;
	__atomic_fetch_add(&vd->published, 1, __ATOMIC_RELEASE);
	*out = &c->core;
	return 0;

err_ch:
	if (c->ch)
		ibv_destroy_comp_channel(c->ch);
err_free:
	free(c);
	return rc;
}

static int v_cq_destroy(struct vbt_cq *cq)
{
	struct vbv_cq *c = to_vcq(cq);
	int rc = ibv_destroy_cq(c->cq);

	if (rc)
		return vbi_err(-rc, "ibv_destroy_cq: %s (a QP still uses it?)", strerror(rc));
	if (c->ch && (rc = ibv_destroy_comp_channel(c->ch)))
		vbi_warn("ibv_destroy_comp_channel: %s", strerror(rc));
	free(c);
	return 0;
}

static enum vbt_wc_opcode wc_op(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND: return VBT_WC_OP_SEND;
	case IBV_WC_RDMA_WRITE: return VBT_WC_OP_RDMA_WRITE;
	case IBV_WC_RDMA_READ: return VBT_WC_OP_RDMA_READ;
	case IBV_WC_RECV: return VBT_WC_OP_RECV;
	case IBV_WC_RECV_RDMA_WITH_IMM: return VBT_WC_OP_RECV_RDMA_WITH_IMM;
	default: return VBT_WC_OP_OTHER;
	}
}

static int v_cq_poll(struct vbt_cq *cq, struct vbt_wc *wc, int n)
{
	struct ibv_cq *icq = to_vcq(cq)->cq;
	struct ibv_wc w[VBV_POLL_BATCH];
	int got = 0;

	while (got < n) {
		int want = n - got < VBV_POLL_BATCH ? n - got : VBV_POLL_BATCH;
		int r = ibv_poll_cq(icq, want, w);

		if (r < 0)
			return vbi_err(-EIO, "ibv_poll_cq failed (%d)", r);
		for (int i = 0; i < r; i++) {
			struct vbt_wc *o = &wc[got + i];

			o->wr_id = w[i].wr_id;
			o->status = (enum vbt_wc_status)w[i].status;
			o->opcode = wc_op(w[i].opcode);
			o->byte_len = w[i].byte_len;
			o->qp_num = w[i].qp_num;
			o->src_qp = w[i].src_qp;
			o->vendor_err = w[i].vendor_err;
			o->flags = 0;
			o->imm_data = 0;
			if (w[i].wc_flags & IBV_WC_GRH)
				o->flags |= VBT_WC_F_GRH;
			if (w[i].wc_flags & IBV_WC_WITH_IMM) {
				o->flags |= VBT_WC_F_WITH_IMM;
				o->imm_data = be32toh(w[i].imm_data);
			}
		}
		got += r;
		if (r < want)
			break;
	}
	return got;
}

static int v_cq_arm(struct vbt_cq *cq, int solicited_only)
{
	struct vbv_cq *c = to_vcq(cq);
	int rc;

	if (!c->ch)
		return vbi_err(-EOPNOTSUPP, "cq_arm: CQ created without a completion channel");
	if ((rc = ibv_req_notify_cq(c->cq, solicited_only)))
		return vbi_err(rc > 0 ? -rc : -EIO, "ibv_req_notify_cq: %s", strerror(rc));
	return 0;
}

static int v_cq_wait_any(struct vbt_cq *const *cqs, unsigned n, int timeout_ms)
{
	struct pollfd pfd[8];
	int hit = -1;

	if (!n || n > 8)
		return vbi_err(-EINVAL, "cq_wait_any: %u CQs (1..8)", n);
	for (unsigned i = 0; i < n; i++) {
		struct vbv_cq *c = to_vcq(cqs[i]);

		if (!c->ch)
			return vbi_err(-EOPNOTSUPP,
				       "cq_wait_any: CQ created without a completion channel");
		pfd[i].fd = c->ch->fd;
		pfd[i].events = POLLIN;
		pfd[i].revents = 0;
	}
	for (;;) {
		/* every channel is non-blocking: take what is pending */
		for (unsigned i = 0; i < n; i++) {
			struct vbv_cq *c = to_vcq(cqs[i]);
			struct ibv_cq *ev_cq;
			void *ev_ctx;

			while (!ibv_get_cq_event(c->ch, &ev_cq, &ev_ctx)) {
				ibv_ack_cq_events(ev_cq, 1);
				if (hit < 0)
					hit = (int)i;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return vbi_err(-errno, "ibv_get_cq_event: %s", strerror(errno));
		}
		if (hit >= 0)
			return hit;
		int r = poll(pfd, n, timeout_ms);

		if (r == 0)
			return vbi_err(-ETIMEDOUT, "no completion event within %d ms", timeout_ms);
		if (r < 0 && errno != EINTR)
			return vbi_err(-errno, "poll on completion channels: %s", strerror(errno));
	}
}

static int v_cq_wait(struct vbt_cq *cq, int timeout_ms)
{
	return v_cq_wait_any(&cq, 1, timeout_ms); /* the index of one CQ is 0 */
}

/* ---- QP -------------------------------------------------------------- */

static int v_qp_create(struct vbt_pd *pd, const struct vbt_qp_init_attr *attr, struct vbt_qp **out)
{
	const struct vbt_dev_caps *c = &pd->dev->caps;
	struct vbv_qp *q;
	struct ibv_qp_init_attr ia;
	int rc;

	*out = NULL;
	if ((unsigned)attr->type >= VB_QPT__COUNT)
		return vbi_err(-EINVAL, "qp_create: unknown QP type %d", (int)attr->type);
	if (!attr->send_cq || !attr->recv_cq)
		return vbi_err(-EINVAL, "qp_create: send and receive CQs are required");
	if (attr->cap.max_send_wr > c->max_qp_wr || attr->cap.max_recv_wr > c->max_qp_wr ||
	    attr->cap.max_send_sge > c->max_sge || attr->cap.max_recv_sge > c->max_sge ||
	    attr->cap.max_inline_data > c->max_inline_data)
		return vbi_err(-EINVAL,
			       "qp_create: asked send_wr %u recv_wr %u send_sge %u recv_sge %u "
			       "inline %u; %s allows wr %u sge %u inline %u",
			       attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
			       attr->cap.max_recv_sge, attr->cap.max_inline_data, c->name,
			       c->max_qp_wr, c->max_sge, c->max_inline_data);
	q = calloc(1, sizeof(*q));
	if (!q)
		return vbi_err(-ENOMEM, "out of memory");
	memset(&ia, 0, sizeof(ia));
	ia.qp_context = q;
	ia.send_cq = to_vcq(attr->send_cq)->cq;
	ia.recv_cq = to_vcq(attr->recv_cq)->cq;
	ia.qp_type = qpt_to_ibv[attr->type];
	ia.sq_sig_all = !!attr->sq_sig_all;
	ia.cap.max_send_wr = attr->cap.max_send_wr;
	ia.cap.max_recv_wr = attr->cap.max_recv_wr;
	ia.cap.max_send_sge = attr->cap.max_send_sge;
	ia.cap.max_recv_sge = attr->cap.max_recv_sge;
	ia.cap.max_inline_data = attr->cap.max_inline_data;
	errno = 0;
	q->qp = ibv_create_qp(to_vpd(pd)->pd, &ia);
	if (!q->qp) {
		rc = vbi_err(errno_or(ENOMEM), "ibv_create_qp(%s, send_wr %u recv_wr %u): %s",
			     vbi_qp_type_name(attr->type), attr->cap.max_send_wr,
			     attr->cap.max_recv_wr, strerror(errno));
		free(q);
		return rc;
	}
	pthread_mutex_init(&q->lock, NULL);
	vbi_qp_mirror_init(&q->mirror, attr->type);
	q->core.ops = pd->ops;
	q->core.pd = pd;
	q->core.type = attr->type;
	q->core.qpn = q->qp->qp_num;
	q->core.send_cq = attr->send_cq;
	q->core.recv_cq = attr->recv_cq;
	q->core.cap.max_send_wr = ia.cap.max_send_wr;
	q->core.cap.max_recv_wr = ia.cap.max_recv_wr;
	q->core.cap.max_send_sge = ia.cap.max_send_sge;
	q->core.cap.max_recv_sge = ia.cap.max_recv_sge;
	q->core.cap.max_inline_data = ia.cap.max_inline_data;
	q->core.user_ctx = attr->user_ctx;
	q->core.state = VB_QPS_RESET;
	q->core.mirror = &q->mirror;
	__atomic_fetch_add(&to_vdev(pd->dev)->published, 1, __ATOMIC_RELEASE);
	*out = &q->core;
	return 0;
}

static void ah_to_ibv(const struct vbt_ah_attr *a, struct ibv_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->grh.dgid.raw, a->dgid, 16);
	o->grh.flow_label = a->flow_label;
	o->grh.sgid_index = a->sgid_index;
	o->grh.hop_limit = a->hop_limit;
	o->grh.traffic_class = a->traffic_class;
	o->is_global = a->is_global;
	o->dlid = a->dlid;
	o->sl = a->sl;
	o->src_path_bits = a->src_path_bits;
	o->static_rate = a->static_rate;
	o->port_num = a->port_num;
}

void vbv_ah_from_ibv(const struct ibv_ah_attr *a, struct vbt_ah_attr *o)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->dgid, a->grh.dgid.raw, 16);
	o->flow_label = a->grh.flow_label;
	o->sgid_index = a->grh.sgid_index;
	o->hop_limit = a->grh.hop_limit;
	o->traffic_class = a->grh.traffic_class;
	o->is_global = a->is_global;
	o->dlid = a->dlid;
	o->sl = a->sl;
	o->src_path_bits = a->src_path_bits;
	o->static_rate = a->static_rate;
	o->port_num = a->port_num;
}

static void attr_to_ibv(const struct vbt_qp_attr *a, struct ibv_qp_attr *o)
{
	memset(o, 0, sizeof(*o));
	o->qp_state = (enum ibv_qp_state)a->qp_state;
	o->cur_qp_state = (enum ibv_qp_state)a->cur_qp_state;
	o->en_sqd_async_notify = a->en_sqd_async_notify;
	o->qp_access_flags = a->access;
	o->pkey_index = a->pkey_index;
	o->port_num = a->port_num;
	o->qkey = a->qkey;
	ah_to_ibv(&a->ah, &o->ah_attr);
	o->path_mtu = (enum ibv_mtu)a->path_mtu;
	o->timeout = a->timeout;
	o->retry_cnt = a->retry_cnt;
	o->rnr_retry = a->rnr_retry;
	o->rq_psn = a->rq_psn;
	o->max_rd_atomic = a->max_rd_atomic;
	o->min_rnr_timer = a->min_rnr_timer;
	o->sq_psn = a->sq_psn;
	o->max_dest_rd_atomic = a->max_dest_rd_atomic;
	o->cap.max_send_wr = a->cap.max_send_wr;
	o->cap.max_recv_wr = a->cap.max_recv_wr;
	o->cap.max_send_sge = a->cap.max_send_sge;
	o->cap.max_recv_sge = a->cap.max_recv_sge;
	o->cap.max_inline_data = a->cap.max_inline_data;
	o->dest_qp_num = a->dest_qp_num;
}

static void attr_from_ibv(const struct ibv_qp_attr *a, struct vbt_qp_attr *o)
{
	memset(o, 0, sizeof(*o));
	o->qp_state = (enum vb_qp_state)a->qp_state;
	o->cur_qp_state = (enum vb_qp_state)a->cur_qp_state;
	o->en_sqd_async_notify = a->en_sqd_async_notify;
	o->sq_draining = a->sq_draining;
	o->access = (unsigned)a->qp_access_flags;
	o->pkey_index = a->pkey_index;
	o->port_num = a->port_num;
	o->qkey = a->qkey;
	vbv_ah_from_ibv(&a->ah_attr, &o->ah);
	o->path_mtu = (uint8_t)a->path_mtu;
	o->timeout = a->timeout;
	o->retry_cnt = a->retry_cnt;
	o->rnr_retry = a->rnr_retry;
	o->rq_psn = a->rq_psn;
	o->max_rd_atomic = a->max_rd_atomic;
	o->min_rnr_timer = a->min_rnr_timer;
	o->sq_psn = a->sq_psn;
	o->max_dest_rd_atomic = a->max_dest_rd_atomic;
	o->cap.max_send_wr = a->cap.max_send_wr;
	o->cap.max_recv_wr = a->cap.max_recv_wr;
	o->cap.max_send_sge = a->cap.max_send_sge;
	o->cap.max_recv_sge = a->cap.max_recv_sge;
	o->cap.max_inline_data = a->cap.max_inline_data;
	o->dest_qp_num = a->dest_qp_num;
}

static int v_qp_modify(struct vbt_qp *qp, const struct vbt_qp_attr *attr, uint32_t mask)
{
	struct vbv_qp *q = to_vqp(qp);
	struct ibv_qp_attr ia;
	enum vb_qp_state from, to;
	uint64_t t0, dt;
	char mstr[256];
	int rc;

	if (mask & (VB_QP_ALT_PATH | VB_QP_PATH_MIG_STATE | VB_QP_RATE_LIMIT)) {
		vbi_qp_mask_str(mask & (VB_QP_ALT_PATH | VB_QP_PATH_MIG_STATE | VB_QP_RATE_LIMIT),
				mstr, sizeof(mstr));
		return vbi_err(-EOPNOTSUPP, "QP %u: attributes %s are not carried by verbus",
			       qp->qpn, mstr);
	}
	pthread_mutex_lock(&q->lock);
	from = q->mirror.state;
	to = (mask & VB_QP_STATE) ? attr->qp_state : from;
	rc = vbi_qp_fsm_check(qp->type, from, to, mask);
	if (rc) {
		pthread_mutex_unlock(&q->lock);
		return vbi_err_prefix(rc, "QP %u: refused before the device saw it", qp->qpn);
	}
	attr_to_ibv(attr, &ia);
	t0 = now_ns();
	rc = ibv_modify_qp(q->qp, &ia, (int)mask);
	dt = now_ns() - t0;
	if (rc) {
		/* Positive errno by contract; some providers return -1 + errno. */
		rc = rc > 0 ? -rc : errno_or(EIO);
		pthread_mutex_unlock(&q->lock);
		vbi_qp_mask_str(mask, mstr, sizeof(mstr));
		return vbi_err(rc, "QP %u (%s) %s->%s, mask %s: ibv_modify_qp: %s", qp->qpn,
			       vbi_qp_type_name(qp->type), vbi_qp_state_name(from),
			       vbi_qp_state_name(to), mstr, strerror(-rc));
	}
	if (vbi_qp_mirror_record(&q->mirror, from, to, dt))
		vbi_qp_mirror_set(&q->mirror, to); /* validated above: cannot happen */
	__atomic_store_n(&qp->state, to, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q->lock);
	vbi_debug("QP %u %s->%s in %.1f us", qp->qpn, vbi_qp_state_name(from),
		  vbi_qp_state_name(to), dt / 1e3);
	return 0;
}

static int v_qp_query(struct vbt_qp *qp, struct vbt_qp_attr *attr, uint32_t mask)
{
	struct vbv_qp *q = to_vqp(qp);
	struct ibv_qp_attr ia;
	struct ibv_qp_init_attr init;
	int rc;

	memset(&ia, 0, sizeof(ia));
	pthread_mutex_lock(&q->lock);
	rc = ibv_query_qp(q->qp, &ia, (int)(mask | VB_QP_STATE), &init);
	if (rc) {
		pthread_mutex_unlock(&q->lock);
		rc = rc > 0 ? -rc : errno_or(EIO);
		return vbi_err(rc, "QP %u: ibv_query_qp: %s", qp->qpn, strerror(-rc));
	}
	if ((enum vb_qp_state)ia.qp_state != q->mirror.state) {
		vbi_debug("QP %u: device reports %s, mirror had %s", qp->qpn,
			  vbi_qp_state_name((enum vb_qp_state)ia.qp_state),
			  vbi_qp_state_name(q->mirror.state));
		vbi_qp_mirror_set(&q->mirror, (enum vb_qp_state)ia.qp_state);
		__atomic_store_n(&qp->state, (enum vb_qp_state)ia.qp_state, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&q->lock);
	attr_from_ibv(&ia, attr);
	return 0;
}

static int v_qp_destroy(struct vbt_qp *qp)
{
	struct vbv_qp *q = to_vqp(qp);
	/* Not under q->lock: ibv_destroy_qp waits for the acknowledgement of
	 * this QP's async events, and the event thread may need the lock. */
	int rc = ibv_destroy_qp(q->qp);

	if (rc) {
		rc = rc > 0 ? -rc : errno_or(EIO);
		return vbi_err(rc, "QP %u: ibv_destroy_qp: %s", qp->qpn, strerror(-rc));
	}
	pthread_mutex_destroy(&q->lock);
	free(q);
	return 0;
}

/* ---- posting --------------------------------------------------------- */

static const enum ibv_wr_opcode wr_op[] = {
	[VBT_WR_SEND] = IBV_WR_SEND,
	[VBT_WR_SEND_WITH_IMM] = IBV_WR_SEND_WITH_IMM,
	[VBT_WR_RDMA_WRITE] = IBV_WR_RDMA_WRITE,
	[VBT_WR_RDMA_WRITE_WITH_IMM] = IBV_WR_RDMA_WRITE_WITH_IMM,
};

static int post_err(struct vbt_qp *qp, int rc, const char *what)
{
	if (rc == ENOMEM)
		return vbi_err(-EAGAIN, "QP %u: %s queue full", qp->qpn, what);
	return vbi_err(rc > 0 ? -rc : -EIO, "QP %u: ibv_post_%s: %s", qp->qpn, what,
		       strerror(rc > 0 ? rc : EIO));
}

static int v_post_send(struct vbt_qp *qp, const struct vbt_send_wr *wr,
		       const struct vbt_send_wr **bad)
{
	struct ibv_qp *iqp = to_vqp(qp)->qp;
	struct ibv_send_wr w[VBV_POST_BATCH], *ibad = NULL;
	const struct vbt_send_wr *src[VBV_POST_BATCH];

	while (wr) {
		int n = 0, rc;

		for (; wr && n < VBV_POST_BATCH; wr = wr->next, n++) {
			struct ibv_send_wr *o = &w[n];

			if ((unsigned)wr->opcode > VBT_WR_RDMA_WRITE_WITH_IMM ||
			    (qp->type == VB_QPT_UD && (!wr->ah || wr->opcode > VBT_WR_SEND_WITH_IMM))) {
				if (n) {
					w[n - 1].next = NULL;
					if ((rc = ibv_post_send(iqp, w, &ibad))) {
						*bad = src[ibad - w];
						return post_err(qp, rc, "send");
					}
				}
				*bad = wr;
				return vbi_err(-EINVAL, "QP %u (%s): bad send WR (opcode %d, ah %p)",
					       qp->qpn, vbi_qp_type_name(qp->type), (int)wr->opcode,
					       (void *)wr->ah);
			}
			src[n] = wr;
			o->wr_id = wr->wr_id;
			o->next = &w[n + 1];
			o->sg_list = (struct ibv_sge *)wr->sg_list;
			o->num_sge = wr->num_sge;
			o->opcode = wr_op[wr->opcode];
			o->send_flags = wr->flags;
			o->imm_data = htobe32(wr->imm_data);
			if (qp->type == VB_QPT_UD) {
				o->wr.ud.ah = to_vah(wr->ah)->ah;
				o->wr.ud.remote_qpn = wr->remote_qpn;
				o->wr.ud.remote_qkey = wr->remote_qkey;
			} else {
				o->wr.rdma.remote_addr = wr->remote_addr;
				o->wr.rdma.rkey = wr->rkey;
			}
		}
		w[n - 1].next = NULL;
		if ((rc = ibv_post_send(iqp, w, &ibad))) {
			*bad = ibad ? src[ibad - w] : src[0];
			return post_err(qp, rc, "send");
		}
	}
	return 0;
}

static int v_post_recv(struct vbt_qp *qp, const struct vbt_recv_wr *wr,
		       const struct vbt_recv_wr **bad)
{
	struct ibv_qp *iqp = to_vqp(qp)->qp;
	struct ibv_recv_wr w[VBV_POST_BATCH], *ibad = NULL;
	const struct vbt_recv_wr *src[VBV_POST_BATCH];

	while (wr) {
		int n = 0, rc;

		for (; wr && n < VBV_POST_BATCH; wr = wr->next, n++) {
			src[n] = wr;
			w[n].wr_id = wr->wr_id;
			w[n].next = &w[n + 1];
			w[n].sg_list = (struct ibv_sge *)wr->sg_list;
			w[n].num_sge = wr->num_sge;
		}
		w[n - 1].next = NULL;
		if ((rc = ibv_post_recv(iqp, w, &ibad))) {
			*bad = ibad ? src[ibad - w] : src[0];
			return post_err(qp, rc, "recv");
		}
	}
	return 0;
}

/* ---- AH -------------------------------------------------------------- */

static int v_ah_create(struct vbt_pd *pd, const struct vbt_ah_attr *attr, struct vbt_ah **out)
{
	struct vbv_ah *a = calloc(1, sizeof(*a));
	struct ibv_ah_attr ia;

	*out = NULL;
	if (!a)
		return vbi_err(-ENOMEM, "out of memory");
	ah_to_ibv(attr, &ia);
	errno = 0;
	a->ah = ibv_create_ah(to_vpd(pd)->pd, &ia);
	if (!a->ah) {
		int rc = errno_or(EINVAL);

		free(a);
		return vbi_err(rc, "ibv_create_ah(sgid index %u): %s", attr->sgid_index,
			       strerror(-rc));
	}
	a->core.ops = pd->ops;
	a->core.pd = pd;
	*out = &a->core;
	return 0;
}

static int v_ah_destroy(struct vbt_ah *ah)
{
	struct vbv_ah *a = to_vah(ah);
	int rc = ibv_destroy_ah(a->ah);

	if (rc)
		return vbi_err(rc > 0 ? -rc : -EIO, "ibv_destroy_ah: %s", strerror(rc > 0 ? rc : EIO));
	free(a);
	return 0;
}

const struct vbt_ops vbt_verbs_ops = {
	.name = "verbs",
	.dev_open = v_dev_open,
	.dev_close = v_dev_close,
	.dev_query = v_dev_query,
	.pd_alloc = v_pd_alloc,
	.pd_free = v_pd_free,
	.mr_reg = v_mr_reg,
	.mr_dereg = v_mr_dereg,
	.cq_create = v_cq_create,
	.cq_destroy = v_cq_destroy,
	.cq_poll = v_cq_poll,
	.cq_arm = v_cq_arm,
	.cq_wait = v_cq_wait,
	.cq_wait_any = v_cq_wait_any,
	.qp_create = v_qp_create,
	.qp_modify = v_qp_modify,
	.qp_query = v_qp_query,
	.qp_destroy = v_qp_destroy,
	.post_send = v_post_send,
	.post_recv = v_post_recv,
	.ah_create = v_ah_create,
	.ah_destroy = v_ah_destroy,
	.listen = vbv_listen,
	.listener_close = vbv_listener_close,
	.accept = vbv_accept,
	.connect = vbv_connect,
	.conn_close = vbv_conn_close,
	.mcast_join = vbv_mcast_join,
	.mcast_leave = vbv_mcast_leave,
};
