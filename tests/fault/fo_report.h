/* SPDX-License-Identifier: MIT */
/*
 * Shared by the failover fault tests: the default configuration (ORDERED,
 * small messages, primary on rxe0 / 10.77.0.1, standby device rxe1 /
 * 10.77.1.1), the printed report and the audit's assertions.
 */
#ifndef VERBUS_TESTS_FAULT_FO_REPORT_H
#define VERBUS_TESTS_FAULT_FO_REPORT_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/common/failover.h"
#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

/* >= 100,000 messages at VERBUS_TEST_SCALE=1 (the sanitizer runs use 0.2). */
static inline void fo_defaults(struct vbt_fo_cfg *c, const char *name)
{
	const char *sb = getenv("VERBUS_TEST_STANDBY_IP");

	memset(c, 0, sizeof(*c));
	c->name = name;
	c->msgs = vbt_scaled(100000);
	c->topics = 1;
	c->cls = VB_ORDERED;
	c->min_len = 8;
	c->max_len = 256;
	c->nfaults = 1;
	c->ip = vbt_test_ip();
	c->standby_ip = sb && *sb ? sb : "10.77.1.1";
	c->wait_standby = true;
}

static inline void fo_check(const struct vbt_fo_cfg *c, const struct vbt_fo_result *r)
{
	uint64_t v[VBT_FO_MAX_FAULTS];

	memcpy(v, r->first_ns, sizeof(v));
	printf("%s: published %" PRIu64 ", delivered %" PRIu64 ", lost %" PRIu64
	       ", out of order %" PRIu64 ", duplicates %" PRIu64 ", corrupt %" PRIu64 "\n",
	       c->name, r->published, r->delivered, r->lost, r->out_of_order, r->duplicates,
	       r->corrupt);
	printf("%s: faults %u; fault -> first delivery over the new connection: measured %u, "
	       "p50 %.3f ms, max %.3f ms; a fresh RC connection took %.3f ms\n", c->name,
	       r->faults, r->measured, vbt_fo_pct(v, r->measured, 50) / 1e6,
	       vbt_fo_pct(v, r->measured, 100) / 1e6, r->cold_connect_ns / 1e6);
	printf("%s: publisher: failovers %" PRIu64 ", rebuilds %" PRIu64 ", retransmitted %" PRIu64
	       ", stale frames %" PRIu64 ", connections built %" PRIu64 "/retired %" PRIu64
	       ", recovery max %.3f ms\n", c->name, r->pub_stats.failovers, r->pub_stats.rebuilds,
	       r->pub_stats.retransmits, r->pub_stats.stale_frames, r->pub_stats.lanes_created,
	       r->pub_stats.lanes_retired, r->pub_stats.recover_max_ns / 1e6);
	printf("%s: subscriber: failovers %" PRIu64 ", rebuilds %" PRIu64 ", duplicates dropped %"
	       PRIu64 ", stale frames %" PRIu64 ", recovery max %.3f ms\n", c->name,
	       r->sub_stats.failovers, r->sub_stats.rebuilds, r->sub_stats.duplicates_dropped,
	       r->sub_stats.stale_frames, r->sub_stats.recover_max_ns / 1e6);
	for (unsigned i = 0; i < 16; i++)
		if (r->pub_stats.err_by_action[i] || r->sub_stats.err_by_action[i])
			printf("%s: recovery action %-22s publisher %" PRIu64 ", subscriber %" PRIu64
			       "\n", c->name, vb_recovery_action_name(i), r->pub_stats.err_by_action[i],
			       r->sub_stats.err_by_action[i]);
	if (!r->ok)
		fail_msg("%s: %s", c->name, r->why);
	assert_int_equal(r->faults, c->nfaults);
	assert_int_equal(r->out_of_order, 0);
	assert_int_equal(r->duplicates, 0);
	assert_int_equal(r->corrupt, 0);
	if (c->cls == VB_ORDERED) {
		assert_int_equal(r->delivered, r->published);
		assert_int_equal(r->lost, 0);
	} else {
		assert_int_equal(r->delivered + r->lost, r->published);
	}
}

#endif
