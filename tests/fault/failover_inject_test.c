/* SPDX-License-Identifier: MIT */
/*
 * Work-request errors caused for real on the publisher's active QP: a SEND
 * with a wrong lkey (the device completes it with LOC_PROT_ERR) and an RDMA
 * WRITE with a bogus rkey (the subscriber's side refuses it:
 * REM_ACCESS_ERR). Each is classified (counted under its recovery action),
 * the path fails over to the standby, and the stream goes on: nothing lost,
 * duplicated or out of order.
 */
#include "tests/fault/fo_report.h"

static int two_kinds(vb_node_t *node, unsigned k, void *arg)
{
	(void)arg;
	return k % 2 ? vbt_fo_fault_rem_access(node, k, NULL) : vbt_fo_fault_loc_prot(node, k, NULL);
}

static void test_inject(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	(void)state;
	vbt_require_device();
	fo_defaults(&c, "inject");
	c.nfaults = 2;
	c.side = VBT_FO_PUB;
	c.fault = two_kinds;
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	fo_check(&c, &r);
	/* LOC_PROT_ERR -> REREGISTER_AND_RESET: the publisher's own SEND, always
	 * seen there. REM_ACCESS_ERR -> REFETCH_RKEY_RETRY when the WRITE's
	 * NAK completes it; but the subscriber's QP fails on that WRITE too,
	 * and when it switches and its LANE frame reaches the publisher first,
	 * the publisher retires the lane and the WRITE completes flushed
	 * (full test run, 3 Dec: REFETCH_RKEY_RETRY 0). Then the subscriber's
	 * side of the fault is what shows: its QP failed (its receives flushed
	 * unexpectedly: RESET_QP). */
	{
		uint64_t rereg = 0, refetch = 0, sub_reset = 0;

		for (unsigned i = 0; i < 16; i++) {
			const char *n = vb_recovery_action_name(i);

			if (!strcmp(n, "REREGISTER_AND_RESET"))
				rereg = r.pub_stats.err_by_action[i];
			if (!strcmp(n, "REFETCH_RKEY_RETRY"))
				refetch = r.pub_stats.err_by_action[i];
			if (!strcmp(n, "RESET_QP"))
				sub_reset = r.sub_stats.err_by_action[i];
		}
		assert_true(rereg >= 1);
		if (!refetch)
			printf("inject: the publisher saw no REM_ACCESS_ERR (the subscriber "
			       "switched first); subscriber RESET_QP %" PRIu64 "\n", sub_reset);
		assert_true(refetch >= 1 || sub_reset >= 1);
	}
	assert_true(r.pub_stats.failovers >= c.nfaults);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_inject) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
