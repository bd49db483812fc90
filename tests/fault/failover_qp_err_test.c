/* SPDX-License-Identifier: MIT */
/*
 * The subscriber's active QP is moved to ERR from the test's own thread
 * (outside the library's threads), three times during an ORDERED stream:
 * each time the library sees the flushes, switches to the pre-warmed
 * standby (on rxe1), the publisher follows and retransmits what was not
 * acknowledged. The receiver's sequence log: nothing lost, duplicated or
 * out of order. Three failures within the path policy's window (1 s)
 * would make it degrade to UC instead (failover_degrade_test's subject):
 * on a fast host the three faults can come that close, so the policy's
 * threshold is raised here.
 */
#include "tests/fault/fo_report.h"

static void test_qp_err(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	(void)state;
	vbt_require_device();
	setenv("VERBUS_DEGRADE_FAILURES", "64", 1);
	fo_defaults(&c, "qp-err");
	c.nfaults = 3;
	c.side = VBT_FO_SUB;
	c.fault = vbt_fo_fault_qp_err;
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	fo_check(&c, &r);
	assert_true(r.sub_stats.failovers >= c.nfaults);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_qp_err) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
