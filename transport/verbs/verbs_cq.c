/* SPDX-License-Identifier: MIT */
/*
 * The verbs backend's completion queues: create (optionally with a
 * non-blocking completion channel), destroy, poll (work completions
 * converted to struct vbt_wc), arm, and wait on one or several channels.
 *
 * Thread-safety: see the synchronization table in transport/transport.h.
 * Nothing here takes a lock: a CQ is polled by its one owner.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/log.h"
#include "transport/verbs/verbs_priv.h"

/* Work completions converted per ibv_poll_cq call (on the stack). */
#define VBV_POLL_BATCH 32

int vbv_cq_create(struct vbt_dev *dev, const struct vbt_cq_attr *attr, struct vbt_cq **out)
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
			rc = vbi_err(vbv_errno_or(ENOMEM), "ibv_create_comp_channel: %s",
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
		rc = vbi_err(vbv_errno_or(ENOMEM), "ibv_create_cq(%d): %s", attr->cqe,
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

int vbv_cq_destroy(struct vbt_cq *cq)
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

int vbv_cq_poll(struct vbt_cq *cq, struct vbt_wc *wc, int n)
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

int vbv_cq_arm(struct vbt_cq *cq, int solicited_only)
{
	struct vbv_cq *c = to_vcq(cq);
	int rc;

	if (!c->ch)
		return vbi_err(-EOPNOTSUPP, "cq_arm: CQ created without a completion channel");
	if ((rc = ibv_req_notify_cq(c->cq, solicited_only)))
		return vbi_err(rc > 0 ? -rc : -EIO, "ibv_req_notify_cq: %s", strerror(rc));
	return 0;
}

int vbv_cq_wait_any(struct vbt_cq *const *cqs, unsigned n, int wake_fd, int timeout_ms)
{
	struct pollfd pfd[9];
	unsigned nfd = n;
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
	if (wake_fd >= 0) {
		pfd[nfd].fd = wake_fd;
		pfd[nfd].events = POLLIN;
		pfd[nfd].revents = 0;
		nfd++;
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
		if (nfd > n && (pfd[n].revents & POLLIN)) {
			uint64_t v;

			/* an eventfd: one read takes every write since the last */
			if (read(wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				return vbi_err(-errno, "reading the wake-up descriptor: %s",
					       strerror(errno));
			return (int)n;
		}
		int r = poll(pfd, nfd, timeout_ms);

		if (r == 0)
			return vbi_err(-ETIMEDOUT, "no completion event within %d ms", timeout_ms);
		if (r < 0 && errno != EINTR)
			return vbi_err(-errno, "poll on completion channels: %s", strerror(errno));
	}
}

int vbv_cq_wait(struct vbt_cq *cq, int timeout_ms)
{
	return vbv_cq_wait_any(&cq, 1, -1, timeout_ms); /* the index of one CQ is 0 */
}
