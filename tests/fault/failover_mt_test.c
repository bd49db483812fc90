/* SPDX-License-Identifier: MIT */
/*
 * Failovers while 4 threads publish (4 ORDERED topics over one
 * connection): the subscriber's QP is moved to ERR twice from the test's
 * thread. Every topic's sequence log stays complete and in order. A
 * *_mt_test: also run under ThreadSanitizer (and ASan) by the test command.
 */
#include "tests/fault/fo_report.h"

static void test_mt(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	(void)state;
	vbt_require_device();
	fo_defaults(&c, "mt");
	c.topics = 4;
	c.msgs = vbt_scaled(25000); /* x 4 topics */
	c.nfaults = 2;
	c.side = VBT_FO_SUB;
	c.fault = vbt_fo_fault_qp_err;
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	fo_check(&c, &r);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_mt) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
