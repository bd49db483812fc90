/* SPDX-License-Identifier: MIT */
/*
 * A peer killed with SIGKILL gives IBV_WC_RETRY_EXC_ERR (VBT_WC_RETRY_EXC_ERR)
 * on the RC sender within the configured timeout x retries, not "never".
 * The peer is a fork()ed child (forked before this process opens anything),
 * connected over rdma_cm; after `kill -9` the parent keeps sending until a
 * completion fails. The time it took is printed; the only timing assertion
 * is a generous bound that proves it is not forever. Afterwards `rdma res
 * show` lists no QP/CQ/MR/PD of this process.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "tests/rxe/transport_harness.h"

#define GENEROUS_BOUND_MS 60000

static int child_main(int wfd)
{
	struct vbt_dev_attr da = { .ip = th_ip(), .gid_index = -1 };
	struct vbt_dev *dev;
	struct vbt_listener *l;
	struct vbt_conn_param p;
	struct sockaddr_in sa = th_addr(0);
	struct th_ep ep;
	uint16_t port;

	vbt_conn_param_init(&p);
	p.cm_timeout_ms = 30000;
	if (th_chk(vbt_dev_open(&vbt_verbs_ops, &da, &dev), "child dev_open") ||
	    th_ep_open(&ep, dev, VB_QPT_RC, 64, 0, 0) ||
	    th_chk(dev->ops->listen(dev, VB_QPT_RC, (struct sockaddr *)&sa, &l), "child listen") ||
	    th_to_init(&ep, &p))
		return 1;
	for (unsigned i = 0; i < 64; i++)
		if (th_post_recv(&ep, i))
			return 1;
	port = l->port;
	if (write(wfd, &port, sizeof(port)) != (ssize_t)sizeof(port))
		return 1;
	if (th_chk(l->ops->accept(l, ep.qp, &p, &ep.conn), "child accept"))
		return 1;
	/* Serve until killed. */
	for (;;)
		pause();
}

static void test_peer_sigkill(void **state)
{
	int pfd[2];
	pid_t child;
	uint16_t port = 0;
	struct vbt_dev_attr da = { .ip = th_ip(), .gid_index = -1 };
	struct vbt_dev *dev;
	struct vbt_conn_param p;
	struct th_ep ep;
	struct vbt_wc wc[4];
	struct sockaddr_in sa;
	int status, n;

	assert_int_equal(pipe(pfd), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(pfd[0]);
		_exit(child_main(pfd[1]));
	}
	close(pfd[1]);
	n = (int)read(pfd[0], &port, sizeof(port));
	close(pfd[0]);
	if (n != (int)sizeof(port)) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		fail_msg("child peer did not come up");
	}

	vbt_conn_param_init(&p);
	p.cm_timeout_ms = 30000;
	assert_int_equal(vbt_dev_open(&vbt_verbs_ops, &da, &dev), 0);
	assert_int_equal(th_ep_open(&ep, dev, VB_QPT_RC, 16, 0, 0), 0);
	sa = th_addr(port);
	assert_int_equal(th_chk(dev->ops->connect(dev, ep.qp, (struct sockaddr *)&sa, &p, &ep.conn),
				"connect"),
			 0);
	printf("connected to child %d: timeout %u retry_cnt %u rnr_retry %u -> detection bound "
	       "4.096us x 2^%u x %u = %llu us on hardware\n",
	       (int)child, p.timeout, p.retry_cnt, p.rnr_retry, p.timeout, p.retry_cnt + 1u,
	       (unsigned long long)vbt_conn_param_detect_us(&p));

	/* alive: one message round trip */
	memset(th_slot(&ep, 0), 'x', 256);
	assert_int_equal(th_post_send(&ep, 0, 256, VBT_WR_SEND, 0, 0), 0);
	assert_int_equal(th_poll(&ep, wc, 1, 20000), 1);
	assert_int_equal(wc[0].status, VBT_WC_SUCCESS);

	assert_int_equal(kill(child, SIGKILL), 0);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	uint64_t t0 = th_now_us();

	/* keep sending, one at a time, until a completion fails */
	enum vbt_wc_status first = VBT_WC_SUCCESS;
	unsigned sent_ok = 0;
	while (th_now_us() - t0 < GENEROUS_BOUND_MS * 1000ull) {
		assert_int_equal(th_post_send(&ep, 1, 256, VBT_WR_SEND, 0, 0), 0);
		n = th_poll(&ep, wc, 1, GENEROUS_BOUND_MS);
		assert_int_equal(n, 1);
		if (wc[0].status != VBT_WC_SUCCESS) {
			first = wc[0].status;
			break;
		}
		sent_ok++;
	}
	uint64_t dt = th_now_us() - t0;
	printf("after SIGKILL: %u sends still completed, then %s after %.1f ms "
	       "(hardware bound %.1f ms)\n",
	       sent_ok, vbt_wc_status_str(first), dt / 1e3, vbt_conn_param_detect_us(&p) / 1e3);
	assert_int_equal(first, VBT_WC_RETRY_EXC_ERR);
	assert_true(dt < GENEROUS_BOUND_MS * 1000ull);
	/* the device moved the QP to ERR */
	assert_int_equal(vbt_qp_wait_state(ep.qp, VB_QPS_ERR, 5000), 0);

	th_ep_close(&ep);
	dev->ops->dev_close(dev);
	assert_int_equal(th_leaks(), 0);
}

int main(void)
{
	vbt_require_device();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_peer_sigkill),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
