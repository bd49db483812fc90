/* SPDX-License-Identifier: MIT */
/*
 * RC, UC and UD exchanges through the verbs transport ops, connected over
 * rdma_cm between two endpoints (accept in a thread, connect in this one) on
 * the device found by IP (rdma_cm address resolution). Every message and
 * every completion is checked: SEND, SEND_WITH_IMM, inline SEND, RDMA
 * WRITE_WITH_IMM (RC/UC), a reply the other way; UD receives carry the GRH
 * and the sender's QPN; the Q_Key is not rdma_cm's default. Also blocking
 * mode (completion channel: arm, wait with timeout) and device caps. After
 * each test `rdma res show` lists no QP/CQ/MR/PD of this process.
 */
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/rxe/transport_harness.h"

#define NMSG 24

static struct vbt_dev *dev;

static void fill(char *p, uint32_t len, unsigned seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (char)(i * 31 + seed * 7 + 1);
}

static int same(const char *p, uint32_t len, unsigned seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (p[i] != (char)(i * 31 + seed * 7 + 1))
			return 0;
	return 1;
}

static void check_mirror_rts(struct vbt_qp *qp)
{
	struct vbi_qp_transition t;

	assert_int_equal(vbt_qp_state(qp), VB_QPS_RTS);
	assert_int_equal(qp->mirror->state, VB_QPS_RTS);
	assert_int_equal(qp->mirror->transitions, 3);
	assert_int_equal(vbi_qp_mirror_recent(qp->mirror, 0, &t), 0);
	assert_int_equal(t.from, VB_QPS_RTR);
	assert_int_equal(t.to, VB_QPS_RTS);
	assert_int_equal(vbi_qp_mirror_recent(qp->mirror, 2, &t), 0);
	assert_int_equal(t.from, VB_QPS_RESET);
	assert_int_equal(t.to, VB_QPS_INIT);
	assert_int_equal(qp->mirror->count[VB_QPS_INIT][VB_QPS_RTR], 1);
}

static void run_exchange(enum vb_qp_type type)
{
	struct th_ep srv, cli;
	struct vbt_conn_param p;
	struct vbt_wc wc[NMSG + 2];
	uint32_t len[NMSG];
	unsigned off = type == VB_QPT_UD ? TH_GRH : 0;
	int rdma = type != VB_QPT_UD;
	uint32_t inl = dev->caps.max_inline_data < 64 ? dev->caps.max_inline_data : 64;

	vbt_conn_param_init(&p);
	p.cm_timeout_ms = 20000;
	if (rdma)
		p.access = VBT_ACCESS_REMOTE_WRITE;
	assert_int_equal(th_ep_open(&srv, dev, type, NMSG + 4, rdma ? VBT_ACCESS_REMOTE_WRITE : 0, 0), 0);
	assert_int_equal(th_ep_open(&cli, dev, type, NMSG + 4, 0, 0), 0);
	/* server: NMSG sends + 1 write-with-imm; client: 1 reply */
	assert_int_equal(th_pair(dev, &srv, &cli, &p, NMSG + 1, 1, NMSG), 0);
	check_mirror_rts(srv.qp);
	check_mirror_rts(cli.qp);
	assert_int_equal(cli.conn->remote.qpn, srv.qp->qpn);
	assert_int_equal(srv.conn->remote.qpn, cli.qp->qpn);
	assert_int_equal(cli.conn->remote.psn, srv.conn->local.psn);
	assert_int_equal(srv.conn->remote.psn, cli.conn->local.psn);
	if (type == VB_QPT_UD) {
		struct vbt_qp_attr a;

		assert_non_null(cli.conn->ah);
		assert_non_null(srv.conn->ah);
		assert_int_equal(srv.qp->ops->qp_query(srv.qp, &a, VB_QP_QKEY), 0);
		assert_int_equal(a.qkey, srv.conn->local.qkey);
		assert_int_equal(cli.conn->remote.qkey, a.qkey);
		assert_int_not_equal(a.qkey, 0x01234567);
		assert_int_equal(a.qkey & 0x80000000u, 0);
	}
	printf("%s: client qpn %u psn %u <-> server qpn %u psn %u\n", vbi_qp_type_name(type),
	       cli.qp->qpn, cli.conn->local.psn, srv.qp->qpn, srv.conn->local.psn);

	/* client -> server: SEND, SEND_WITH_IMM, inline SEND */
	for (unsigned i = 0; i < NMSG; i++) {
		enum vbt_wr_opcode op = i % 3 == 1 ? VBT_WR_SEND_WITH_IMM : VBT_WR_SEND;
		unsigned fl = (i % 3 == 2 && inl) ? VBT_SEND_INLINE : 0;

		len[i] = fl ? inl : 100 + 37 * i;
		fill(th_slot(&cli, i), len[i], i);
		assert_int_equal(th_post_send(&cli, i, len[i], op, fl, 0xc0de0000u + i), 0);
	}
	assert_int_equal(th_poll(&cli, wc, NMSG, 20000), NMSG);
	for (unsigned i = 0; i < NMSG; i++) {
		assert_int_equal(wc[i].status, VBT_WC_SUCCESS);
		assert_int_equal(wc[i].opcode, VBT_WC_OP_SEND);
		assert_int_equal(wc[i].wr_id, i);
		assert_int_equal(wc[i].qp_num, cli.qp->qpn);
	}
	assert_int_equal(th_poll(&srv, wc, NMSG, 20000), NMSG);
	for (unsigned i = 0; i < NMSG; i++) {
		if (wc[i].status != VBT_WC_SUCCESS)
			fail_msg("recv %u: %s", i, vbt_wc_status_str(wc[i].status));
		assert_int_equal(wc[i].opcode, VBT_WC_OP_RECV);
		assert_int_equal(wc[i].wr_id, 1000 + i);
		assert_int_equal(wc[i].byte_len, len[i] + off);
		assert_true(same(th_slot(&srv, i) + off, len[i], i));
		if (i % 3 == 1) {
			assert_true(wc[i].flags & VBT_WC_F_WITH_IMM);
			assert_int_equal(wc[i].imm_data, 0xc0de0000u + i);
		} else {
			assert_false(wc[i].flags & VBT_WC_F_WITH_IMM);
		}
		if (type == VB_QPT_UD) {
			assert_true(wc[i].flags & VBT_WC_F_GRH);
			assert_int_equal(wc[i].src_qp, cli.qp->qpn);
		}
	}

	if (rdma) {
		/* RDMA WRITE_WITH_IMM into the server's slot NMSG+2 */
		struct vbt_sge sge = { (uintptr_t)th_slot(&cli, NMSG + 2), 2000, cli.mr->lkey };
		struct vbt_send_wr wr = {
			.wr_id = 77, .sg_list = &sge, .num_sge = 1,
			.opcode = VBT_WR_RDMA_WRITE_WITH_IMM, .flags = VBT_SEND_SIGNALED,
			.imm_data = 0xfeed, .remote_addr = (uintptr_t)th_slot(&srv, NMSG + 2),
			.rkey = srv.mr->rkey,
		};
		const struct vbt_send_wr *bad = NULL;

		fill(th_slot(&cli, NMSG + 2), 2000, 99);
		assert_int_equal(vbt_post_send(cli.qp, &wr, &bad), 0);
		assert_int_equal(th_poll(&cli, wc, 1, 20000), 1);
		assert_int_equal(wc[0].status, VBT_WC_SUCCESS);
		assert_int_equal(wc[0].opcode, VBT_WC_OP_RDMA_WRITE);
		assert_int_equal(th_poll(&srv, wc, 1, 20000), 1);
		assert_int_equal(wc[0].status, VBT_WC_SUCCESS);
		assert_int_equal(wc[0].opcode, VBT_WC_OP_RECV_RDMA_WITH_IMM);
		assert_int_equal(wc[0].imm_data, 0xfeed);
		assert_true(same(th_slot(&srv, NMSG + 2), 2000, 99));
	}

	/* server -> client reply */
	fill(th_slot(&srv, NMSG + 3), 512, 42);
	if (type == VB_QPT_UD)
		assert_non_null(srv.conn->ah);
	assert_int_equal(th_post_send(&srv, NMSG + 3, 512, VBT_WR_SEND, 0, 0), 0);
	assert_int_equal(th_poll(&srv, wc, 1, 20000), 1);
	assert_int_equal(wc[0].status, VBT_WC_SUCCESS);
	assert_int_equal(th_poll(&cli, wc, 1, 20000), 1);
	assert_int_equal(wc[0].status, VBT_WC_SUCCESS);
	assert_int_equal(wc[0].byte_len, 512 + off);
	assert_true(same(th_slot(&cli, NMSG) + off, 512, 42));

	th_ep_close(&cli);
	th_ep_close(&srv);
	assert_int_equal(th_leaks(), 0);
}

static void test_rc(void **state) { run_exchange(VB_QPT_RC); }
static void test_uc(void **state) { run_exchange(VB_QPT_UC); }
static void test_ud(void **state) { run_exchange(VB_QPT_UD); }

static void test_caps(void **state)
{
	struct vbt_dev_caps c;
	uint8_t ip[4];

	assert_int_equal(dev->ops->dev_query(dev, &c), 0);
	printf("%s port %u %s mtu %u gid[%d] max_qp_wr %u max_cqe %u max_sge %u inline %u\n",
	       c.name, c.port, vbt_port_state_str(c.port_state), 128u << c.active_mtu,
	       c.gid_index, c.max_qp_wr, c.max_cqe, c.max_sge, c.max_inline_data);
	assert_int_equal(c.port_state, VBT_PORT_ACTIVE);
	assert_true(c.max_qp_wr > 0 && c.max_cqe > 0 && c.max_sge > 0);
	assert_true(c.max_inline_data > 0);
	assert_true(c.active_mtu >= VBT_MTU_256 && c.active_mtu <= VBT_MTU_4096);
	/* opened by IP: the source GID is that address, IPv4-mapped */
	assert_int_equal(inet_pton(AF_INET, th_ip(), ip), 1);
	assert_memory_equal(c.gid + 12, ip, 4);
}

static void test_by_name_and_bad_ip(void **state)
{
	struct vbt_dev_attr a = { .name = dev->caps.name, .gid_index = -1 };
	struct vbt_dev *d2 = NULL;

	assert_int_equal(vbt_dev_open(&vbt_verbs_ops, &a, &d2), 0);
	assert_string_equal(d2->caps.name, dev->caps.name);
	d2->ops->dev_close(d2);
	a.name = NULL;
	a.ip = "10.77.99.99"; /* not on any interface */
	assert_true(vbt_dev_open(&vbt_verbs_ops, &a, &d2) < 0);
	assert_null(d2);
	printf("bad ip: %s\n", vbi_errmsg());
	a.ip = NULL;
	a.name = "no_such_dev";
	assert_int_equal(vbt_dev_open(&vbt_verbs_ops, &a, &d2), -ENODEV);
	assert_non_null(strstr(vbi_errmsg(), "no_such_dev"));
}

/* Blocking mode: the receiver's CQ has a completion channel. */
static void test_blocking_cq(void **state)
{
	struct th_ep srv, cli;
	struct vbt_conn_param p;
	struct vbt_wc wc[2];

	vbt_conn_param_init(&p);
	p.cm_timeout_ms = 20000;
	assert_int_equal(th_ep_open(&srv, dev, VB_QPT_RC, 4, 0, 1), 0);
	assert_int_equal(th_ep_open(&cli, dev, VB_QPT_RC, 4, 0, 0), 0);
	assert_true(srv.cq->has_channel);
	assert_int_equal(cli.cq->ops->cq_arm(cli.cq, 0), -EOPNOTSUPP);
	assert_int_equal(th_pair(dev, &srv, &cli, &p, 2, 0, 0), 0);

	assert_int_equal(srv.cq->ops->cq_arm(srv.cq, 0), 0);
	assert_int_equal(vbt_cq_poll(srv.cq, wc, 2), 0);
	assert_int_equal(srv.cq->ops->cq_wait(srv.cq, 50), -ETIMEDOUT);
	fill(th_slot(&cli, 0), 64, 5);
	assert_int_equal(th_post_send(&cli, 0, 64, VBT_WR_SEND, 0, 0), 0);
	assert_int_equal(srv.cq->ops->cq_wait(srv.cq, 20000), 0);
	assert_int_equal(th_poll(&srv, wc, 1, 1000), 1);
	assert_int_equal(wc[0].status, VBT_WC_SUCCESS);
	assert_true(same(th_slot(&srv, 0), 64, 5));
	assert_int_equal(th_poll(&cli, wc, 1, 20000), 1);
	th_ep_close(&cli);
	th_ep_close(&srv);
	assert_int_equal(th_leaks(), 0);
}

/* cq_wait_any: the progress thread's wait over both devices' CQs. Both
 * ends have channels; only the receiver's CQ (index 1) is armed, so only
 * it can be the one notified. A write to the wake-up descriptor (an
 * eventfd: another thread has work for the waiter) ends the wait with @n,
 * and the wait drains it: the next one sleeps again. */
static void test_wait_any(void **state)
{
	struct th_ep srv, cli, plain;
	struct vbt_conn_param p;
	struct vbt_cq *cqs[2];
	struct vbt_wc wc[2];
	uint64_t one = 1;
	int wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	assert_true(wfd >= 0);
	vbt_conn_param_init(&p);
	p.cm_timeout_ms = 20000;
	assert_int_equal(th_ep_open(&srv, dev, VB_QPT_RC, 4, 0, 1), 0);
	assert_int_equal(th_ep_open(&cli, dev, VB_QPT_RC, 4, 0, 1), 0);
	assert_int_equal(th_ep_open(&plain, dev, VB_QPT_RC, 4, 0, 0), 0);
	assert_int_equal(th_pair(dev, &srv, &cli, &p, 2, 0, 0), 0);
	cqs[0] = cli.cq;
	cqs[1] = srv.cq;
	assert_int_equal(srv.cq->ops->cq_wait_any(cqs, 0, -1, 10), -EINVAL);
	cqs[0] = plain.cq;
	assert_int_equal(srv.cq->ops->cq_wait_any(cqs, 2, -1, 10), -EOPNOTSUPP);
	cqs[0] = cli.cq;
	assert_int_equal(srv.cq->ops->cq_arm(srv.cq, 0), 0);
	assert_int_equal(vbt_cq_poll(srv.cq, wc, 2), 0);
	assert_int_equal(srv.cq->ops->cq_wait_any(cqs, 2, -1, 50), -ETIMEDOUT);
	assert_int_equal(srv.cq->ops->cq_wait_any(cqs, 2, wfd, 50), -ETIMEDOUT);
	/* woken: @n, however long the timeout; drained: the next wait sleeps */
	assert_int_equal(write(wfd, &one, sizeof(one)), sizeof(one));
	assert_int_equal(srv.cq->ops->cq_wait_any(cqs, 2, wfd, 600000), 2);
	assert_int_equal(srv.cq->ops->cq_wait_any(cqs, 2, wfd, 50), -ETIMEDOUT);
	fill(th_slot(&cli, 0), 64, 7);
	assert_int_equal(th_post_send(&cli, 0, 64, VBT_WR_SEND, 0, 0), 0);
	assert_int_equal(srv.cq->ops->cq_wait_any(cqs, 2, wfd, 20000), 1);
	assert_int_equal(th_poll(&srv, wc, 1, 1000), 1);
	assert_int_equal(wc[0].status, VBT_WC_SUCCESS);
	assert_true(same(th_slot(&srv, 0), 64, 7));
	assert_int_equal(th_poll(&cli, wc, 1, 20000), 1);
	close(wfd);
	th_ep_close(&plain);
	th_ep_close(&cli);
	th_ep_close(&srv);
	assert_int_equal(th_leaks(), 0);
}

static int setup(void **state)
{
	struct vbt_dev_attr a = { .ip = th_ip(), .gid_index = -1 };

	if (th_chk(vbt_dev_open(&vbt_verbs_ops, &a, &dev), "dev_open by ip"))
		return -1;
	printf("opened %s (by ip %s)\n", dev->caps.name, th_ip());
	return 0;
}

static int teardown(void **state)
{
	dev->ops->dev_close(dev);
	return th_leaks();
}

int main(void)
{
	vbt_require_device();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_by_name_and_bad_ip),
		cmocka_unit_test(test_rc),
		cmocka_unit_test(test_uc),
		cmocka_unit_test(test_ud),
		cmocka_unit_test(test_blocking_cq),
		cmocka_unit_test(test_wait_any),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
