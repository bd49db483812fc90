/* SPDX-License-Identifier: MIT */
/*
 * Multicast through the verbs transport ops (mcast_join / mcast_leave) on
 * one device: a send-only member posts datagrams to the group's AH; two
 * attached UD QPs holding the group's Q_Key receive every one, byte for
 * byte, with a GRH; an attached QP with another Q_Key receives nothing (why
 * the API layer gives its multicast QP the group's Q_Key); after a member
 * leaves it receives nothing more while the other still does. A receiving
 * member that sends to the group is checked for a copy of its own datagram
 * (printed: the API layer must not depend on either answer). Bad arguments
 * are refused before rdma_cm sees them. After each test `rdma res show`
 * lists no QP/CQ/MR/PD of this process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/rxe/transport_harness.h"

#define NDG 16
#define GROUP "239.192.7.7"

static struct vbt_dev *dev;

static struct sockaddr_in group_addr(const char *ip)
{
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	inet_pton(AF_INET, ip, &sa.sin_addr);
	return sa;
}

static void fill(char *p, uint32_t len, unsigned seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (char)(i * 13 + seed * 5 + 3);
}

static int same(const char *p, uint32_t len, unsigned seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (p[i] != (char)(i * 13 + seed * 5 + 3))
			return 0;
	return 1;
}

/* UD QP up to RTS with @qkey (0: random), @nrecv receives posted. */
static int ud_up(struct th_ep *ep, uint32_t qkey, unsigned nrecv)
{
	struct vbt_conn_param p;
	struct vbt_peer local;
	int rc;

	vbt_conn_param_init(&p);
	if ((rc = vbt_qp_local_peer(ep->qp, qkey, &local)))
		return rc;
	if ((rc = th_chk(vbt_qp_to_init(ep->qp, &p, &local), "to_init")))
		return rc;
	for (unsigned i = 0; i < nrecv; i++)
		if ((rc = th_post_recv(ep, i)))
			return rc;
	return th_chk(vbt_qp_bring_up(ep->qp, &p, &local, NULL), "bring_up");
}

static int send_group(struct th_ep *ep, const struct vbt_mcast *mc, unsigned slot, uint32_t len,
		      unsigned seed)
{
	struct vbt_sge sge = { (uintptr_t)th_slot(ep, slot), len, ep->mr->lkey };
	struct vbt_send_wr wr = {
		.wr_id = slot, .sg_list = &sge, .num_sge = 1, .opcode = VBT_WR_SEND,
		.flags = VBT_SEND_SIGNALED, .ah = mc->ah, .remote_qpn = mc->remote_qpn,
		.remote_qkey = mc->qkey,
	};
	const struct vbt_send_wr *bad;

	fill(th_slot(ep, slot), len, seed);
	return th_chk(vbt_post_send(ep->qp, &wr, &bad), "post_send to group");
}

/* Receive completions on @ep within @ms: count, each checked against the
 * seeds @seed0.. in order (datagrams from one sender arrive in order here). */
static int recv_checked(struct th_ep *ep, int want, int ms, uint32_t len, unsigned seed0,
			uint32_t src_qpn)
{
	struct vbt_wc wc[NDG * 2];
	int got = th_poll(ep, wc, want, ms);

	for (int i = 0; i < got; i++) {
		unsigned slot = (unsigned)(wc[i].wr_id - 1000);

		assert_int_equal(wc[i].status, VBT_WC_SUCCESS);
		assert_int_equal(wc[i].opcode, VBT_WC_OP_RECV);
		assert_int_equal(wc[i].byte_len, TH_GRH + len);
		assert_true(wc[i].flags & VBT_WC_F_GRH);
		assert_int_equal(wc[i].src_qp, src_qpn);
		assert_true(same(th_slot(ep, slot) + TH_GRH, len, seed0 + (unsigned)i));
		assert_int_equal(th_post_recv(ep, slot), 0);
	}
	return got;
}

static void test_join_send_receive_leave(void **state)
{
	struct th_ep s, r1, r2, x;
	struct vbt_mcast *ms = NULL, *m1 = NULL, *m2 = NULL, *mx = NULL;
	struct sockaddr_in g = group_addr(GROUP);
	struct vbt_conn_param p;
	struct vbt_wc wc[NDG];
	int got;

	(void)state;
	vbt_conn_param_init(&p);
	assert_int_equal(th_ep_open(&s, dev, VB_QPT_UD, NDG, 0, 0), 0);
	assert_int_equal(th_ep_open(&r1, dev, VB_QPT_UD, NDG, 0, 0), 0);
	assert_int_equal(th_ep_open(&r2, dev, VB_QPT_UD, NDG, 0, 0), 0);
	assert_int_equal(th_ep_open(&x, dev, VB_QPT_UD, NDG, 0, 0), 0);

	/* Send-only member: no QP attached, an AH on the sender's PD. */
	assert_int_equal(th_chk(dev->ops->mcast_join(dev, s.pd, NULL, (struct sockaddr *)&g, &p,
						     &ms), "join (send only)"), 0);
	assert_null(ms->qp);
	assert_non_null(ms->ah);
	assert_int_equal(ms->remote_qpn, VBT_MCAST_QPN);
	assert_true(ms->qkey != 0);
	printf("group %s: qpn %#x qkey %#x mlid %u mgid %02x%02x..%02x%02x%02x%02x\n", GROUP,
	       ms->remote_qpn, ms->qkey, ms->mlid, ms->mgid[0], ms->mgid[1], ms->mgid[12],
	       ms->mgid[13], ms->mgid[14], ms->mgid[15]);

	/* Receivers attach while in RESET, then come up with the group's Q_Key. */
	assert_int_equal(th_chk(dev->ops->mcast_join(dev, NULL, r1.qp, (struct sockaddr *)&g, &p,
						     &m1), "join r1"), 0);
	assert_ptr_equal(m1->qp, r1.qp);
	assert_int_equal(m1->qkey, ms->qkey);
	assert_memory_equal(m1->mgid, ms->mgid, 16);
	assert_int_equal(th_chk(dev->ops->mcast_join(dev, NULL, r2.qp, (struct sockaddr *)&g, &p,
						     &m2), "join r2"), 0);
	assert_int_equal(th_chk(dev->ops->mcast_join(dev, NULL, x.qp, (struct sockaddr *)&g, &p,
						     &mx), "join x"), 0);
	assert_int_equal(ud_up(&r1, m1->qkey, NDG - 2), 0);
	assert_int_equal(ud_up(&r2, m2->qkey, NDG - 2), 0);
	assert_int_equal(ud_up(&x, 0, NDG - 2), 0); /* a random Q_Key: not the group's */
	assert_int_equal(ud_up(&s, 0, 0), 0);

	for (unsigned i = 0; i < NDG / 2; i++)
		assert_int_equal(send_group(&s, ms, i, 200 + i, 10 + i), 0);
	assert_int_equal(th_poll(&s, wc, NDG / 2, 20000), NDG / 2);
	for (int i = 0; i < NDG / 2; i++)
		assert_int_equal(wc[i].status, VBT_WC_SUCCESS);
	/* Lengths differ per datagram: check one by one. */
	for (unsigned i = 0; i < NDG / 2; i++) {
		assert_int_equal(recv_checked(&r1, 1, 20000, 200 + i, 10 + i, s.qp->qpn), 1);
		assert_int_equal(recv_checked(&r2, 1, 20000, 200 + i, 10 + i, s.qp->qpn), 1);
	}
	/* Nothing more arrives: exactly one copy each. */
	assert_int_equal(th_poll(&r1, wc, 1, 300), 0);
	assert_int_equal(th_poll(&r2, wc, 1, 300), 0);
	/* The attached QP with a foreign Q_Key got none of them. */
	got = th_poll(&x, wc, 1, 300);
	printf("attached QP with Q_Key != group's received %d datagrams\n", got);
	assert_int_equal(got, 0);

	/* A member that sends: the other member receives; a copy back to the
	 * sender's own QP is reported. */
	assert_int_equal(send_group(&r1, m1, NDG - 1, 64, 99), 0);
	assert_int_equal(recv_checked(&r2, 1, 20000, 64, 99, r1.qp->qpn), 1);
	got = th_poll(&r1, wc, 2, 1000); /* the send completion, maybe a receive */
	assert_true(got >= 1);
	{
		int self = 0;

		for (int i = 0; i < got; i++)
			if (wc[i].opcode == VBT_WC_OP_RECV) {
				self++;
				assert_int_equal(th_post_recv(&r1, (unsigned)(wc[i].wr_id - 1000)), 0);
			} else {
				assert_int_equal(wc[i].status, VBT_WC_SUCCESS);
			}
		printf("loopback: the sending member's own QP received %d copy(ies)\n", self);
	}

	/* After r2 leaves, only r1 receives. */
	dev->ops->mcast_leave(m2);
	m2 = NULL;
	assert_int_equal(send_group(&s, ms, 0, 100, 42), 0);
	assert_int_equal(th_poll(&s, wc, 1, 20000), 1);
	assert_int_equal(recv_checked(&r1, 1, 20000, 100, 42, s.qp->qpn), 1);
	assert_int_equal(th_poll(&r2, wc, 1, 500), 0);

	dev->ops->mcast_leave(mx);
	dev->ops->mcast_leave(m1);
	dev->ops->mcast_leave(ms);
	dev->ops->mcast_leave(NULL);
	th_ep_close(&x);
	th_ep_close(&r2);
	th_ep_close(&r1);
	th_ep_close(&s);
	assert_int_equal(th_leaks(), 0);
}

static void test_bad_arguments(void **state)
{
	struct th_ep rc;
	struct vbt_mcast *mc = (struct vbt_mcast *)1;
	struct sockaddr_in uni = group_addr("10.77.0.1"), g = group_addr(GROUP);
	struct vbt_conn_param p;

	(void)state;
	vbt_conn_param_init(&p);
	assert_int_equal(th_ep_open(&rc, dev, VB_QPT_RC, 4, 0, 0), 0);
	assert_int_equal(dev->ops->mcast_join(dev, rc.pd, NULL, (struct sockaddr *)&uni, &p, &mc),
			 -EINVAL);
	assert_null(mc);
	assert_int_equal(dev->ops->mcast_join(dev, NULL, rc.qp, (struct sockaddr *)&g, &p, &mc),
			 -EINVAL);
	assert_int_equal(dev->ops->mcast_join(dev, NULL, NULL, (struct sockaddr *)&g, &p, &mc),
			 -EINVAL);
	th_ep_close(&rc);
	assert_int_equal(th_leaks(), 0);
}

/* Join/leave repeatedly: nothing accumulates (rdma_cm ids, AHs, QPs). */
static void test_join_leave_cycles(void **state)
{
	struct th_ep r;
	struct sockaddr_in g = group_addr("239.192.7.8");
	struct vbt_conn_param p;

	(void)state;
	vbt_conn_param_init(&p);
	assert_int_equal(th_ep_open(&r, dev, VB_QPT_UD, 4, 0, 0), 0);
	for (int i = 0; i < 8; i++) {
		struct vbt_mcast *mc;

		assert_int_equal(th_chk(dev->ops->mcast_join(dev, NULL, r.qp, (struct sockaddr *)&g,
							     &p, &mc), "join"), 0);
		dev->ops->mcast_leave(mc);
	}
	th_ep_close(&r);
	assert_int_equal(th_leaks(), 0);
}

static int setup(void **state)
{
	struct vbt_dev_attr a = { .ip = th_ip(), .gid_index = -1 };

	(void)state;
	if (th_chk(vbt_dev_open(&vbt_verbs_ops, &a, &dev), "dev_open by ip"))
		return -1;
	printf("opened %s (by ip %s)\n", dev->caps.name, th_ip());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	dev->ops->dev_close(dev);
	return th_leaks();
}

int main(void)
{
	vbt_require_device();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_join_send_receive_leave),
		cmocka_unit_test(test_join_leave_cycles),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
