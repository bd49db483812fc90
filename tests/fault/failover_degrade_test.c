/* SPDX-License-Identifier: MIT */
/*
 * Degradation and promotion of the ORDERED path, for real on Soft-RoCE:
 * the subscriber (it builds the connections) has its active QP moved to
 * ERR four times in a row during an ORDERED stream, with the policy set to
 * degrade after 2 failures (VERBUS_DEGRADE_FAILURES=2, a long window):
 *   fault 0  RC: the pre-warmed standby (or a new connection, when it is
 *            not warm yet) takes over (failure 1 in RC)
 *   fault 1  RC: failure 2 -> degraded to UC (a UC connection is built)
 *   fault 2  UC: failure 1 in UC -> a new UC connection
 *   fault 3  UC: failure 2 -> degraded to UD
 * then no more faults: the RC probe stays healthy for the promotion hold
 * and the path is promoted back to RC. While degraded, every 100th
 * SEND/datagram received on a UC/UD lane is dropped
 * (VERBUS_TEST_DROP_EVERY): the losses the software reliability repairs. On UC and UD, ORDERED rides on
 * software reliability (NAK go-back-N, retransmission timer, credit
 * resync). The receiver's sequence log: nothing lost, duplicated or out of
 * order, byte-exact; the stats/events show RC -> UC -> UD -> RC.
 * Deterministic on any host: the publisher holds the stream half a percent
 * past each fault's threshold until that fault is done (tests/common/
 * failover.h), and a fault counts only once the library acted on it.
 */
#include <errno.h>
#include <time.h>

#include "tests/fault/fo_report.h"

/* The mode the active connection must be in before fault k. */
static const int want_mode[4] = { 0, 0, 1, 1 };

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t changes(vb_ctx_t *ctx)
{
	vb_stats_t s;

	vb_ctx_stats(ctx, &s);
	return s.failovers + s.rebuilds + s.degrades + s.promotions;
}

/*
 * Wait (bounded) until the connection is up in the mode fault @k expects
 * and nothing changed for a while, then move the active QP to ERR. Before
 * the second RC fault that is 2 s: the far end notices an RC fault only
 * when its own sends time out, and may still switch lanes then (a fault
 * caused meanwhile could hit a lane about to be replaced and not count).
 * UC lanes give the far end no such error: 300 ms.
 */
static int degrade_fault(vb_ctx_t *ctx, vb_node_t *node, unsigned k, void *arg)
{
	uint64_t t0 = ms_now(), quiet = ms_now(), last = changes(ctx);
	int m = -1, rc;

	(void)arg;
	for (;;) {
		uint64_t c = changes(ctx);

		m = vb_node_peer_mode(node, NULL);
		if (m != want_mode[k] || c != last) {
			quiet = ms_now();
			last = c;
		} else if (ms_now() - quiet >= (k == 1 ? 2000u : 300u)) {
			break;
		}
		if (ms_now() - t0 > 60000) {
			fprintf(stderr, "  fault %u: mode %d, %d expected after 60 s\n", k, m,
				want_mode[k]);
			return -ETIMEDOUT;
		}
		usleep(2000);
	}
	vbt_fo_mark_fault();
	last = changes(ctx);
	if ((rc = vb_node_inject_fault(node, NULL, VB_FAULT_QP_ERR)))
		return rc;
	/* caused means acted on: the library counted a failover, rebuild or
	 * degradation for it (bounded) */
	for (t0 = ms_now(); changes(ctx) == last; usleep(2000))
		if (ms_now() - t0 > 30000) {
			fprintf(stderr, "  fault %u: injected, but no failover/rebuild/degradation "
				"followed in 30 s\n", k);
			return -EIO;
		}
	return 0;
}

/* After the stream: back to RC (bounded). */
static int degrade_settle(vb_ctx_t *ctx, vb_node_t *node, void *arg)
{
	uint64_t t0 = ms_now();
	vb_stats_t s;

	(void)arg;
	do {
		vb_ctx_stats(ctx, &s);
		if (s.promotions >= 1 && vb_node_peer_mode(node, NULL) == 0)
			return 0;
		usleep(5000);
	} while (ms_now() - t0 < 40000);
	vb_node_dump(node, stderr);
	fprintf(stderr, "  not promoted back to RC within 40 s (promotions %llu, mode %d)\n",
		(unsigned long long)s.promotions, vb_node_peer_mode(node, NULL));
	return -ETIMEDOUT;
}


static void test_degrade(void **state)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	(void)state;
	vbt_require_device();
	/* the policy (core/path, read when a connection's path is set up) */
	setenv("VERBUS_DEGRADE_FAILURES", "2", 1);
	setenv("VERBUS_DEGRADE_WINDOW_MS", "600000", 1);
	setenv("VERBUS_PROMOTE_HOLD_MS", "10000", 1);
	setenv("VERBUS_PROMOTE_PROBES", "3", 1);
	/* and loss on UC/UD: every 100th SEND/datagram received there is
	 * dropped as the fabric would (its credit too), both ends */
	setenv("VERBUS_TEST_DROP_EVERY", "100", 1);
	fo_defaults(&c, "degrade");
	c.nfaults = 4;
	c.side = VBT_FO_SUB;
	c.fault_ctx = degrade_fault;
	c.settle = degrade_settle;
	c.wait_standby = false; /* degrade_fault waits for what it needs */
	c.timeout_s = 400;
	/* early and close together (each waits for the previous one's
	 * recovery): the UC phase must stay shorter than the promotion hold,
	 * or it is promoted back before it can degrade further */
	for (unsigned k = 0; k < c.nfaults; k++)
		c.fault_at[k] = c.msgs / 10 + k * (c.msgs / 100);
	c.hold_slack = c.msgs / 200; /* the stream waits for each fault */
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	fo_check(&c, &r);
	printf("degrade: subscriber: degrades %llu, promotions %llu, NAKs sent %llu, "
	       "credit resyncs %llu, RC probes %llu\n",
	       (unsigned long long)r.sub_stats.degrades, (unsigned long long)r.sub_stats.promotions,
	       (unsigned long long)r.sub_stats.naks_sent,
	       (unsigned long long)r.sub_stats.credit_resyncs,
	       (unsigned long long)r.sub_stats.probes);
	printf("degrade: publisher: degrades %llu, promotions %llu, NAKs received %llu, "
	       "RTO retransmits %llu, credit resyncs %llu\n",
	       (unsigned long long)r.pub_stats.degrades, (unsigned long long)r.pub_stats.promotions,
	       (unsigned long long)r.pub_stats.naks_received,
	       (unsigned long long)r.pub_stats.rto_retransmits,
	       (unsigned long long)r.pub_stats.credit_resyncs);
	/* RC -> UC -> UD on the side that decides, and the publisher followed;
	 * then back to RC on both */
	assert_true(r.sub_stats.degrades >= 2);
	assert_true(r.sub_stats.promotions >= 1);
	assert_true(r.pub_stats.degrades >= 2);
	assert_true(r.pub_stats.promotions >= 1);
	/* the injected losses were reported (NAK) and repaired (go-back-N) */
	assert_true(r.sub_stats.naks_sent >= 1);
	assert_true(r.pub_stats.naks_received >= 1);
	assert_true(r.pub_stats.naks_received <= r.sub_stats.naks_sent);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_degrade) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
