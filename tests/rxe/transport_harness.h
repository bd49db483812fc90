/* SPDX-License-Identifier: MIT */
/*
 * Shared by the transport_*_test.c files (rxe and fault): one endpoint =
 * PD + CQ + QP + a registered buffer of slots, all through struct vbt_ops,
 * plus bounded waits for completions and a leak audit. Header-only (static
 * inline) so it is not a test of its own.
 */
#ifndef VERBUS_TESTS_RXE_TRANSPORT_HARNESS_H
#define VERBUS_TESTS_RXE_TRANSPORT_HARNESS_H

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/qp_fsm.h"
#include "tests/common/rxe_env.h"
#include "transport/transport.h"

#define TH_SLOT 4096
#define TH_GRH 40 /* UD receives start with a 40-byte GRH */

struct th_ep {
	struct vbt_dev *dev;
	struct vbt_pd *pd;
	struct vbt_cq *cq;
	struct vbt_qp *qp;
	struct vbt_mr *mr;
	char *buf;
	unsigned nslots;
	struct vbt_conn *conn;
};

/* IP of the RDMA device under test ($VERBUS_TEST_IP, default rxe0's). */
static inline const char *th_ip(void)
{
	const char *ip = getenv("VERBUS_TEST_IP");

	return ip && *ip ? ip : "10.77.0.1";
}

static inline struct sockaddr_in th_addr(uint16_t port)
{
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	inet_pton(AF_INET, th_ip(), &sa.sin_addr);
	return sa;
}

static inline uint64_t th_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Print and return rc (for `if ((rc = th_chk(op(...), "what")))`). */
static inline int th_chk(int rc, const char *what)
{
	if (rc)
		fprintf(stderr, "%s: %d (%s)\n", what, rc, vbi_errmsg());
	return rc;
}

static inline int th_ep_open(struct th_ep *ep, struct vbt_dev *dev, enum vb_qp_type type,
			     unsigned nslots, unsigned access, int channel)
{
	struct vbt_cq_attr ca = { .cqe = (int)(2 * nslots + 8), .channel = channel };
	struct vbt_qp_init_attr qa = { .type = type };
	int rc;

	memset(ep, 0, sizeof(*ep));
	ep->dev = dev;
	ep->nslots = nslots;
	if ((rc = th_chk(dev->ops->pd_alloc(dev, &ep->pd), "pd_alloc")))
		return rc;
	if ((rc = th_chk(dev->ops->cq_create(dev, &ca, &ep->cq), "cq_create")))
		return rc;
	ep->buf = aligned_alloc(4096, (size_t)nslots * TH_SLOT);
	if (!ep->buf)
		return -ENOMEM;
	memset(ep->buf, 0, (size_t)nslots * TH_SLOT);
	if ((rc = th_chk(dev->ops->mr_reg(ep->pd, ep->buf, (size_t)nslots * TH_SLOT,
					  VBT_ACCESS_LOCAL_WRITE | access, &ep->mr),
			 "mr_reg")))
		return rc;
	qa.send_cq = ep->cq;
	qa.recv_cq = ep->cq;
	qa.cap.max_send_wr = nslots;
	qa.cap.max_recv_wr = nslots;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = dev->caps.max_inline_data < 64 ? dev->caps.max_inline_data : 64;
	qa.user_ctx = ep;
	return th_chk(dev->ops->qp_create(ep->pd, &qa, &ep->qp), "qp_create");
}

static inline void th_ep_close(struct th_ep *ep)
{
	const struct vbt_ops *ops = ep->dev ? ep->dev->ops : NULL;

	if (!ops)
		return;
	if (ep->conn)
		ops->conn_close(ep->conn);
	if (ep->qp)
		th_chk(ops->qp_destroy(ep->qp), "qp_destroy");
	if (ep->mr)
		th_chk(ops->mr_dereg(ep->mr), "mr_dereg");
	if (ep->cq)
		th_chk(ops->cq_destroy(ep->cq), "cq_destroy");
	if (ep->pd)
		th_chk(ops->pd_free(ep->pd), "pd_free");
	free(ep->buf);
	memset(ep, 0, sizeof(*ep));
}

static inline char *th_slot(struct th_ep *ep, unsigned i)
{
	return ep->buf + (size_t)i * TH_SLOT;
}

static inline int th_post_recv(struct th_ep *ep, unsigned slot)
{
	struct vbt_sge sge = { (uintptr_t)th_slot(ep, slot), TH_SLOT, ep->mr->lkey };
	struct vbt_recv_wr wr = { .wr_id = 1000 + slot, .sg_list = &sge, .num_sge = 1 };
	const struct vbt_recv_wr *bad;

	return th_chk(vbt_post_recv(ep->qp, &wr, &bad), "post_recv");
}

/* Send @len bytes from @slot to the connected peer. */
static inline int th_post_send(struct th_ep *ep, unsigned slot, uint32_t len,
			       enum vbt_wr_opcode op, unsigned flags, uint32_t imm)
{
	struct vbt_sge sge = { (uintptr_t)th_slot(ep, slot), len, ep->mr->lkey };
	struct vbt_send_wr wr = {
		.wr_id = slot, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.flags = VBT_SEND_SIGNALED | flags, .imm_data = imm,
	};
	const struct vbt_send_wr *bad;

	if (ep->qp->type == VB_QPT_UD && ep->conn) {
		wr.ah = ep->conn->ah;
		wr.remote_qpn = ep->conn->remote.qpn;
		wr.remote_qkey = ep->conn->remote.qkey;
	}
	return th_chk(vbt_post_send(ep->qp, &wr, &bad), "post_send");
}

/* Poll until @n completions arrived or @timeout_ms passed: count polled. */
static inline int th_poll(struct th_ep *ep, struct vbt_wc *wc, int n, int timeout_ms)
{
	uint64_t end = th_now_us() + (uint64_t)timeout_ms * 1000u;
	int got = 0;

	while (got < n && th_now_us() < end) {
		int r = vbt_cq_poll(ep->cq, wc + got, n - got);

		if (r < 0)
			return r;
		got += r;
		if (!r)
			usleep(100);
	}
	return got;
}

/* Leaked QP/CQ/MR/PD of this process per `rdma res show` (0 = clean). */
static inline int th_leaks(void)
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

/* Bring a RESET QP to INIT so receives can be posted before connecting. */
static inline int th_to_init(struct th_ep *ep, const struct vbt_conn_param *p)
{
	struct vbt_peer local;
	int rc = vbt_qp_local_peer(ep->qp, p->qkey, &local);

	return rc ? rc : th_chk(vbt_qp_to_init(ep->qp, p, &local), "to_init");
}

struct th_accept_arg {
	struct vbt_listener *l;
	struct th_ep *ep;
	const struct vbt_conn_param *p;
	int rc;
	char msg[VBI_ERRMSG_MAX];
};

static inline void *th_accept_thread(void *arg)
{
	struct th_accept_arg *a = arg;

	a->rc = a->l->ops->accept(a->l, a->ep->qp, a->p, &a->ep->conn);
	if (a->rc)
		snprintf(a->msg, sizeof(a->msg), "%s", vbi_errmsg());
	return NULL;
}

/* Connect @cli to @srv (both open, same type, QPs in RESET) over rdma_cm on
 * th_ip(): both go to INIT, @srv_recvs / @cli_recvs receives are posted
 * (slots 0.., and slots from @cli_slot0 on the client), then accept runs
 * in a thread while this one connects. */
static inline int th_pair(struct vbt_dev *dev, struct th_ep *srv, struct th_ep *cli,
			  const struct vbt_conn_param *p, unsigned srv_recvs, unsigned cli_recvs,
			  unsigned cli_slot0)
{
	struct sockaddr_in sa = th_addr(0);
	struct th_accept_arg a = { .ep = srv, .p = p };
	pthread_t t;
	int rc;

	if ((rc = th_chk(dev->ops->listen(dev, srv->qp->type, (struct sockaddr *)&sa, &a.l),
			 "listen")))
		return rc;
	if ((rc = th_to_init(srv, p)) || (rc = th_to_init(cli, p)))
		goto out;
	for (unsigned i = 0; i < srv_recvs; i++)
		if ((rc = th_post_recv(srv, i)))
			goto out;
	for (unsigned i = 0; i < cli_recvs; i++)
		if ((rc = th_post_recv(cli, cli_slot0 + i)))
			goto out;
	if ((rc = pthread_create(&t, NULL, th_accept_thread, &a))) {
		rc = -rc;
		goto out;
	}
	sa = th_addr(a.l->port);
	rc = th_chk(dev->ops->connect(dev, cli->qp, (struct sockaddr *)&sa, p, &cli->conn),
		    "connect");
	pthread_join(t, NULL);
	if (a.rc) {
		fprintf(stderr, "accept: %d (%s)\n", a.rc, a.msg);
		if (!rc)
			rc = a.rc;
	}
out:
	dev->ops->listener_close(a.l);
	return rc;
}

#endif
