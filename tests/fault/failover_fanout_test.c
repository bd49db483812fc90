/* SPDX-License-Identifier: MIT */
/*
 * FANOUT under the faults of the ORDERED tests: the subscriber's RC
 * connection (control: HELLO/SUB) is moved to ERR twice and fails over,
 * while datagrams keep flowing on UD. Every message is either delivered
 * (byte-exact, in sequence order) or reported lost: for the subscriber,
 * delivered + reported lost == published.
 */
#include "tests/fault/fo_report.h"

static void test_fanout(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	(void)state;
	vbt_require_device();
	fo_defaults(&c, "fanout");
	c.cls = VB_FANOUT;
	c.msgs = vbt_scaled(50000);
	c.nfaults = 2;
	c.side = VBT_FO_SUB;
	c.fault = vbt_fo_fault_qp_err;
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	fo_check(&c, &r);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_fanout) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
