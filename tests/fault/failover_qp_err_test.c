/* SPDX-License-Identifier: MIT */
/*
 * The subscriber's active QP is moved to ERR from the test's own thread
 * (outside the library's threads), eight times during an ORDERED stream:
 * each time the library sees the flushes, switches to the pre-warmed
 * standby (on rxe1), the publisher follows and retransmits what was not
 * acknowledged. The receiver's sequence log: nothing lost, duplicated or
 * out of order, and no message sent to it twice: the subscriber's ACKs
 * ride ahead of its LANE frame, so the publisher rewinds to what was
 * delivered. Three failures within the path policy's window (1 s)
 * would make it degrade to UC instead (failover_degrade_test's subject):
 * on a fast host the faults can come that close, so the policy's
 * threshold is raised here. And the subscriber's process holds as many
 * file descriptors and threads before its last fault as before its second,
 * and its lanes do not pile up (check_held): a node that fails over for
 * weeks gains nothing per failover.
 *
 * test_quiet_after_switch: after a switch the conductors leave the work
 * that can wait (retiring the failed connection, warming the next
 * standby) for VERBUS_FAILOVER_QUIET_MS, here 10 s: once the stream is
 * through, for 2 s (well inside the 10 s) no standby is warmed and no
 * connection is retired; after the window both happen.
 */
#include "tests/fault/fo_report.h"

#define QUIET_MS 10000u
#define WATCH_MS 2000u

static uint64_t retired_before; /* the subscriber's, just before its fault */

static int quiet_fault(vb_ctx_t *ctx, vb_node_t *node, unsigned k, void *arg)
{
	vb_stats_t s;

	vb_ctx_stats(ctx, &s);
	retired_before = s.lanes_retired;
	return vbt_fo_fault_qp_err(node, k, arg);
}

/* Subscriber, after everything arrived: 0, or -1 with the reason on stderr. */
static int quiet_settle(vb_ctx_t *ctx, vb_node_t *node, void *arg)
{
	uint64_t t0 = vbt_now_ms();
	vb_stats_t s;

	(void)node;
	(void)arg;
	do {
		vb_ctx_stats(ctx, &s);
		if (s.failovers < 1 || s.standbys_warmed != 1 || s.lanes_retired != retired_before) {
			fprintf(stderr, "quiet: %" PRIu64 " ms after the stream, within the quiet "
				"time: failovers %" PRIu64 ", standbys warmed %" PRIu64 " (want 1), "
				"connections retired %" PRIu64 " (before the fault %" PRIu64 ")\n",
				vbt_now_ms() - t0, s.failovers, s.standbys_warmed, s.lanes_retired,
				retired_before);
			return -1;
		}
		usleep(20000);
	} while (vbt_now_ms() - t0 < WATCH_MS);
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < QUIET_MS + 60000; usleep(20000)) {
		vb_ctx_stats(ctx, &s);
		if (s.standbys_warmed >= 2 && s.lanes_retired > retired_before)
			return 0;
	}
	fprintf(stderr, "quiet: after the quiet time, standbys warmed %" PRIu64 " (want 2), "
		"connections retired %" PRIu64 " (before the fault %" PRIu64 ")\n",
		s.standbys_warmed, s.lanes_retired, retired_before);
	return -1;
}

static void test_qp_err(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	(void)state;
	vbt_require_device();
	setenv("VERBUS_DEGRADE_FAILURES", "64", 1);
	fo_defaults(&c, "qp-err");
	c.nfaults = 8;
	c.side = VBT_FO_SUB;
	c.fault = vbt_fo_fault_qp_err;
	c.check_held = true;
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	printf("qp-err: the subscriber before fault 1 / fault %u: descriptors %d / %d, threads "
	       "%d / %d, live lanes %" PRIu64 " / %" PRIu64 "\n", c.nfaults - 1, r.held[0].fds,
	       r.held[1].fds, r.held[0].threads, r.held[1].threads, r.held[0].live_lanes,
	       r.held[1].live_lanes);
	fo_check(&c, &r);
	assert_true(r.sub_stats.failovers >= c.nfaults);
	/* The subscriber's ACKs go in its LANE frame's SEND, ahead of it: the
	 * publisher rewinds to what was delivered, not to the last ACK that
	 * made it before the fault, and resends none of it (they came again
	 * and were dropped by sequence: hundreds per fault before). */
	if (r.sub_stats.duplicates_dropped)
		fail_msg("%" PRIu64 " messages the subscriber had were sent to it again after the "
			 "switches", r.sub_stats.duplicates_dropped);
}

static void test_quiet_after_switch(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;
	char ms[16];

	(void)state;
	vbt_require_device();
	snprintf(ms, sizeof(ms), "%u", QUIET_MS);
	setenv("VERBUS_FAILOVER_QUIET_MS", ms, 1); /* both processes (forked) */
	fo_defaults(&c, "quiet");
	c.msgs = vbt_scaled(20000);
	c.fault_at[0] = c.msgs - c.msgs / 10; /* the stream ends soon after it */
	c.side = VBT_FO_SUB;
	c.fault_ctx = quiet_fault;
	c.settle = quiet_settle;
	c.no_cold = true;
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	unsetenv("VERBUS_FAILOVER_QUIET_MS");
	fo_check(&c, &r);
	assert_int_equal(r.sub_stats.failovers, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_qp_err),
					    cmocka_unit_test(test_quiet_after_switch) };

	/* VBT_TEST_FILTER=NAME runs one case: the TSan build runs each case
	 * in a process of its own (tests/CMakeLists.txt), since under TSan a
	 * second fork in one process trips TSan itself (jemalloc's fork
	 * handler takes more locks than its deadlock detector holds) */
	if (getenv("VBT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("VBT_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
