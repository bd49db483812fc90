/* SPDX-License-Identifier: MIT */
/* Error policy: the full completion-status and async-event tables, counters,
 * unknown codes, flush with and without a drain in progress. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/errpolicy.h"
#include "transport/transport.h" /* vbt_wc_status_str, vbt_event_name: failure messages */

struct expect {
	int code;
	enum vbi_err_action act;
	enum vbi_err_scope scope;
};

/* What the issue and docs/recovery.md promise, row by row. */
static const struct expect wc_expect[] = {
	{ VBT_WC_SUCCESS, VBI_ACT_NONE, VBI_SCOPE_WR },
	{ VBT_WC_LOC_LEN_ERR, VBI_ACT_RESET_BOTH_ENDS, VBI_SCOPE_QP },
	{ VBT_WC_LOC_QP_OP_ERR, VBI_ACT_RESET_QP, VBI_SCOPE_QP },
	{ VBT_WC_LOC_EEC_OP_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_LOC_PROT_ERR, VBI_ACT_REREGISTER_AND_RESET, VBI_SCOPE_QP },
	{ VBT_WC_WR_FLUSH_ERR, VBI_ACT_RECLAIM, VBI_SCOPE_WR },
	{ VBT_WC_MW_BIND_ERR, VBI_ACT_RESET_QP, VBI_SCOPE_QP },
	{ VBT_WC_BAD_RESP_ERR, VBI_ACT_RESET_BOTH_ENDS, VBI_SCOPE_QP },
	{ VBT_WC_LOC_ACCESS_ERR, VBI_ACT_REREGISTER_AND_RESET, VBI_SCOPE_QP },
	{ VBT_WC_REM_INV_REQ_ERR, VBI_ACT_RESET_BOTH_ENDS, VBI_SCOPE_QP },
	{ VBT_WC_REM_ACCESS_ERR, VBI_ACT_REFETCH_RKEY_RETRY, VBI_SCOPE_QP },
	{ VBT_WC_REM_OP_ERR, VBI_ACT_RESET_BOTH_ENDS, VBI_SCOPE_QP },
	{ VBT_WC_RETRY_EXC_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_RNR_RETRY_EXC_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_LOC_RDD_VIOL_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_REM_INV_RD_REQ_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_REM_ABORT_ERR, VBI_ACT_RESET_BOTH_ENDS, VBI_SCOPE_QP },
	{ VBT_WC_INV_EECN_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_INV_EEC_STATE_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_FATAL_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_RESP_TIMEOUT_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_WC_GENERAL_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
};

static const struct expect ev_expect[] = {
	{ VBT_EV_QP_FATAL, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_EV_QP_REQ_ERR, VBI_ACT_RESET_BOTH_ENDS, VBI_SCOPE_QP },
	{ VBT_EV_QP_ACCESS_ERR, VBI_ACT_RESET_BOTH_ENDS, VBI_SCOPE_QP },
	{ VBT_EV_COMM_EST, VBI_ACT_NOTE, VBI_SCOPE_QP },
	{ VBT_EV_SQ_DRAINED, VBI_ACT_NOTE, VBI_SCOPE_QP },
	{ VBT_EV_PATH_MIG, VBI_ACT_NOTE, VBI_SCOPE_QP },
	{ VBT_EV_PATH_MIG_ERR, VBI_ACT_NOTE, VBI_SCOPE_QP },
	{ VBT_EV_QP_LAST_WQE_REACHED, VBI_ACT_RECLAIM, VBI_SCOPE_QP },
	{ VBT_EV_CQ_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_CQ },
	{ VBT_EV_SRQ_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_SRQ },
	{ VBT_EV_SRQ_LIMIT_REACHED, VBI_ACT_REPLENISH, VBI_SCOPE_SRQ },
	{ VBT_EV_PORT_ACTIVE, VBI_ACT_PROBE, VBI_SCOPE_PORT },
	{ VBT_EV_PORT_ERR, VBI_ACT_FAILOVER, VBI_SCOPE_PORT },
	{ VBT_EV_LID_CHANGE, VBI_ACT_REFRESH_PORT, VBI_SCOPE_PORT },
	{ VBT_EV_PKEY_CHANGE, VBI_ACT_REFRESH_PORT, VBI_SCOPE_PORT },
	{ VBT_EV_SM_CHANGE, VBI_ACT_REFRESH_PORT, VBI_SCOPE_PORT },
	{ VBT_EV_CLIENT_REREGISTER, VBI_ACT_REFRESH_PORT, VBI_SCOPE_PORT },
	{ VBT_EV_GID_CHANGE, VBI_ACT_REFRESH_PORT, VBI_SCOPE_PORT },
	{ VBT_EV_DEVICE_FATAL, VBI_ACT_FAILOVER, VBI_SCOPE_DEVICE },
	{ VBT_EV_WQ_FATAL, VBI_ACT_FAILOVER, VBI_SCOPE_QP },
	{ VBT_EV_DEVICE_REMOVAL, VBI_ACT_FAILOVER, VBI_SCOPE_DEVICE },
	{ VBT_EV_OTHER, VBI_ACT_NOTE, VBI_SCOPE_WR },
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_wc_table_complete(void **state)
{
	struct vbi_errpol p;
	struct vbi_errpol_stats st;
	uint64_t per_action[VBI_ACT__COUNT] = { 0 };

	assert_int_equal(N(wc_expect), VBI_WC_STATUS__COUNT);
	vbi_errpol_init(&p);
	for (size_t i = 0; i < N(wc_expect); i++) {
		const struct expect *e = &wc_expect[i];
		/* every code twice: counts must come out as 2 per status */
		for (int k = 0; k < 2; k++) {
			struct vbi_err_verdict v = vbi_errpol_wc(&p, e->code, VBI_ERRPOL_DRAINING);

			assert_int_equal(e->code, (int)i); /* the table is dense, in order */
			if (v.action != e->act)
				fail_msg("%s: %s, expected %s", vbt_wc_status_str(e->code),
					 vbi_err_action_name(v.action), vbi_err_action_name(e->act));
			assert_int_equal(v.scope, e->scope);
			assert_non_null(v.reason);
			assert_true(strlen(v.reason) > (e->code ? 10u : 0u));
			assert_ptr_equal(v.reason, vbi_errpol_wc_rule(e->code)->reason);
			per_action[e->act]++;
		}
	}
	vbi_errpol_snapshot(&p, &st);
	for (size_t i = 0; i < VBI_WC_STATUS__COUNT; i++)
		assert_int_equal(st.by_status[i], 2);
	for (int a = 0; a < VBI_ACT__COUNT; a++)
		assert_int_equal(st.by_action[a], per_action[a]);
	assert_int_equal(st.unexpected_flush, 0);
	assert_int_equal(st.unknown_status, 0);
	for (int e = 0; e < VBT_EV__COUNT; e++)
		assert_int_equal(st.by_event[e], 0);
}

static void test_event_table_complete(void **state)
{
	struct vbi_errpol p;
	struct vbi_errpol_stats st;

	assert_int_equal(N(ev_expect), VBT_EV__COUNT);
	vbi_errpol_init(&p);
	for (size_t i = 0; i < N(ev_expect); i++) {
		const struct expect *e = &ev_expect[i];
		struct vbi_err_verdict v = vbi_errpol_event(&p, e->code);

		assert_int_equal(e->code, (int)i);
		if (v.action != e->act || v.scope != e->scope)
			fail_msg("%s: %s/%s, expected %s/%s", vbt_event_name(e->code),
				 vbi_err_action_name(v.action), vbi_err_scope_name(v.scope),
				 vbi_err_action_name(e->act), vbi_err_scope_name(e->scope));
		assert_true(strlen(v.reason) > 10);
	}
	vbi_errpol_snapshot(&p, &st);
	for (int e = 0; e < VBT_EV__COUNT; e++)
		assert_int_equal(st.by_event[e], 1);
	assert_int_equal(st.by_action[VBI_ACT_FAILOVER], 7); /* + DEVICE_REMOVAL */
	assert_int_equal(st.by_action[VBI_ACT_REFRESH_PORT], 5);
	assert_int_equal(st.by_action[VBI_ACT_NOTE], 5);
	assert_int_equal(st.by_action[VBI_ACT_NONE], 0);
}

static void test_flush_context_and_unknown(void **state)
{
	struct vbi_errpol p;
	struct vbi_errpol_stats st;
	struct vbi_err_verdict v;

	vbi_errpol_init(&p);
	/* a flush we did not cause: the QP went to ERR behind our back */
	v = vbi_errpol_wc(&p, VBT_WC_WR_FLUSH_ERR, 0);
	assert_int_equal(v.action, VBI_ACT_RESET_QP);
	assert_ptr_equal(v.reason, vbi_errpol_unexpected_flush_rule()->reason);
	v = vbi_errpol_wc(&p, VBT_WC_WR_FLUSH_ERR, VBI_ERRPOL_DRAINING);
	assert_int_equal(v.action, VBI_ACT_RECLAIM);
	/* the DRAINING flag changes nothing for other codes */
	v = vbi_errpol_wc(&p, VBT_WC_RETRY_EXC_ERR, 0);
	assert_int_equal(v.action, VBI_ACT_FAILOVER);

	v = vbi_errpol_wc(&p, (enum vbt_wc_status)99, 0);
	assert_int_equal(v.action, VBI_ACT_FAILOVER);
	v = vbi_errpol_wc(&p, (enum vbt_wc_status)-1, 0);
	assert_int_equal(v.action, VBI_ACT_FAILOVER);
	v = vbi_errpol_event(&p, (enum vbt_event_type)1000);
	assert_int_equal(v.action, VBI_ACT_NOTE);

	vbi_errpol_snapshot(&p, &st);
	assert_int_equal(st.by_status[VBT_WC_WR_FLUSH_ERR], 2);
	assert_int_equal(st.unexpected_flush, 1);
	assert_int_equal(st.by_action[VBI_ACT_RESET_QP], 1);
	assert_int_equal(st.by_action[VBI_ACT_RECLAIM], 1);
	assert_int_equal(st.by_action[VBI_ACT_FAILOVER], 3);
	assert_int_equal(st.by_action[VBI_ACT_NOTE], 1);
	assert_int_equal(st.unknown_status, 2);
	assert_int_equal(st.unknown_event, 1);
}

static void test_severity_and_names(void **state)
{
	/* a burst: the real error then flushes: the worst one wins */
	enum vbi_err_action w = VBI_ACT_NONE;
	static const enum vbt_wc_status burst[] = {
		VBT_WC_SUCCESS, VBT_WC_REM_ACCESS_ERR, VBT_WC_WR_FLUSH_ERR, VBT_WC_WR_FLUSH_ERR,
	};
	struct vbi_errpol p;

	vbi_errpol_init(&p);
	for (size_t i = 0; i < N(burst); i++)
		w = vbi_err_action_worse(w, vbi_errpol_wc(&p, burst[i], VBI_ERRPOL_DRAINING).action);
	assert_int_equal(w, VBI_ACT_REFETCH_RKEY_RETRY);
	assert_int_equal(vbi_err_action_worse(VBI_ACT_FAILOVER, VBI_ACT_RECLAIM), VBI_ACT_FAILOVER);
	assert_false(vbi_err_action_disrupts(VBI_ACT_RECLAIM));
	assert_false(vbi_err_action_disrupts(VBI_ACT_PROBE));
	assert_true(vbi_err_action_disrupts(VBI_ACT_RESET_QP));
	assert_true(vbi_err_action_disrupts(VBI_ACT_FAILOVER));

	for (int a = 0; a < VBI_ACT__COUNT; a++) {
		assert_string_not_equal(vbi_err_action_name(a), "?");
		for (int b = a + 1; b < VBI_ACT__COUNT; b++)
			assert_string_not_equal(vbi_err_action_name(a), vbi_err_action_name(b));
	}
	assert_string_equal(vbi_err_action_name(VBI_ACT__COUNT), "?");
	for (int s = 0; s < VBI_SCOPE__COUNT; s++)
		assert_string_not_equal(vbi_err_scope_name(s), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wc_table_complete),
		cmocka_unit_test(test_event_table_complete),
		cmocka_unit_test(test_flush_context_and_unknown),
		cmocka_unit_test(test_severity_and_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
