/* SPDX-License-Identifier: MIT */
/*
 * `ip link set d0 down` under an ORDERED stream: rxe0's port goes down
 * (PORT_ERR on both processes' devices), every connection on it fails, and
 * the path moves to the standby connection on rxe1 (d1). The link is
 * brought back up afterwards (also when the test fails). Runs only inside
 * the Soft-RoCE VM (VERBUS_IN_VM): it must never take a host link down.
 *
 * Label "destructive": run last in a VM boot (scripts/rxe-suite.sh).
 * Soft-RoCE on this kernel (6.1) did not always answer rdma_cm connection
 * requests on rxe0 again after such a flap under traffic (seen: later
 * connects to 10.77.0.1 timed out; re-creating rxe0 blocked in the kernel),
 * so nothing that needs rxe0 runs after it.
 */
#include "tests/fault/fo_report.h"

static const char *down_cmd = "ip link set d0 down";

static void link_up(void *arg)
{
	(void)arg;
	if (system("ip link set d0 up"))
		fprintf(stderr, "could not bring d0 back up\n");
	/* wait (bounded) until rxe0's port is ACTIVE again */
	for (int i = 0; i < 100; i++) {
		if (system("rdma link show rxe0/1 | grep -q 'state ACTIVE'") == 0)
			break;
		usleep(100000);
	}
	sleep(1);
}

static void test_link_down(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	(void)state;
	vbt_require_device();
	if (!getenv("VERBUS_IN_VM"))
		skip();
	fo_defaults(&c, "link-down");
	c.side = VBT_FO_PUB;
	c.fault = vbt_fo_fault_shell;
	c.arg = (void *)down_cmd;
	c.restore = link_up;
	c.no_cold = true; /* d0 stays down until restore: no fresh connection to time */
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	fo_check(&c, &r);
	assert_true(r.pub_stats.failovers + r.sub_stats.failovers >= 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_link_down) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
