/* SPDX-License-Identifier: MIT */
/*
 * Proves the chain is real: on rxe0 (or the host's device), two RC QPs go
 * RESET->INIT->RTR->RTS against each other, a 4 KiB SEND arrives intact, and
 * after teardown `rdma res show` lists no QP, CQ, MR or PD of this process
 * (while before teardown it lists exactly ours).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "bench/smoke.h"
#include "tests/common/rxe_env.h"

static const char *dev;

static int audit_alive(const struct vb_smoke_result *r, void *arg)
{
	(void)r;
	(void)arg;
	pid_t me = getpid();

	assert_int_equal(vbt_res_count("qp", me), 2);
	assert_int_equal(vbt_res_count("mr", me), 2);
	assert_int_equal(vbt_res_count("cq", me), 1);
	assert_int_equal(vbt_res_count("pd", me), 1);
	return 0;
}

static void test_rc_exchange(void **state)
{
	struct vb_smoke_result r;
	int rc = vb_smoke_rc(dev, stdout, &r, audit_alive, NULL);

	if (rc)
		fail_msg("smoke exchange failed: %s (%s)", vb_strerror(rc), vb_errmsg());
	printf("device %s: QPs %u and %u exchanged %u bytes\n", r.device, r.qpn[0], r.qpn[1],
	       r.bytes);
	assert_string_equal(r.device, dev);
	assert_int_equal(r.bytes, 4096);
	assert_int_not_equal(r.qpn[0], r.qpn[1]);

	pid_t me = getpid();
	assert_int_equal(vbt_res_count("qp", me), 0);
	assert_int_equal(vbt_res_count("mr", me), 0);
	assert_int_equal(vbt_res_count("cq", me), 0);
	assert_int_equal(vbt_res_count("pd", me), 0);
}

static void test_unknown_device_is_an_error(void **state)
{
	struct vb_smoke_result r;
	int rc = vb_smoke_rc("no_such_dev", NULL, &r, NULL, NULL);

	assert_int_equal(rc, -ENODEV);
	assert_non_null(strstr(vb_errmsg(), "no_such_dev"));
}

int main(void)
{
	dev = vbt_require_device();
	printf("rxe test on RDMA device %s\n", dev);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rc_exchange),
		cmocka_unit_test(test_unknown_device_is_an_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
