/* SPDX-License-Identifier: MIT */
/*
 * The QP state machine table: all 7x7 state pairs x RC/UC/UD against
 * expectations written by hand from ibv_modify_qp(3) and the kernel's
 * qp_state_table, the validator's verdicts and messages, and the mirror's
 * bookkeeping.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/err.h"
#include "core/qp_fsm.h"

#define S VB_QP_STATE

static const enum vb_qp_type types[] = { VB_QPT_RC, VB_QPT_UC, VB_QPT_UD };

/* Legal pairs, the same for RC, UC and UD (22 of 49). */
static const char *const legal_pairs[] = {
	"RESET>RESET", "RESET>INIT",
	"INIT>RESET",  "INIT>INIT",  "INIT>RTR",  "INIT>ERR",
	"RTR>RESET",   "RTR>RTS",    "RTR>ERR",
	"RTS>RESET",   "RTS>RTS",    "RTS>SQD",   "RTS>ERR",
	"SQD>RESET",   "SQD>RTS",    "SQD>SQD",   "SQD>ERR",
	"SQE>RESET",   "SQE>RTS",    "SQE>ERR",
	"ERR>RESET",   "ERR>ERR",
};

static bool expect_legal(int from, int to)
{
	char key[32];

	snprintf(key, sizeof(key), "%s>%s", vbi_qp_state_name((enum vb_qp_state)from),
		 vbi_qp_state_name((enum vb_qp_state)to));
	for (size_t i = 0; i < sizeof(legal_pairs) / sizeof(legal_pairs[0]); i++)
		if (!strcmp(legal_pairs[i], key))
			return true;
	return false;
}

static void test_names(void **state)
{
	static const char *const sn[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };
	char buf[256];

	for (int s = 0; s < VB_QPS__COUNT; s++)
		assert_string_equal(vbi_qp_state_name((enum vb_qp_state)s), sn[s]);
	assert_string_equal(vbi_qp_state_name((enum vb_qp_state)7), "?");
	assert_string_equal(vbi_qp_type_name(VB_QPT_RC), "RC");
	assert_string_equal(vbi_qp_type_name(VB_QPT_UC), "UC");
	assert_string_equal(vbi_qp_type_name(VB_QPT_UD), "UD");
	assert_string_equal(vbi_qp_type_name((enum vb_qp_type)3), "?");

	assert_int_equal(vbi_qp_mask_str(S | VB_QP_PKEY_INDEX | VB_QP_PORT, buf, sizeof(buf)),
			 strlen("STATE|PKEY_INDEX|PORT"));
	assert_string_equal(buf, "STATE|PKEY_INDEX|PORT");
	vbi_qp_mask_str(0, buf, sizeof(buf));
	assert_string_equal(buf, "0");
	vbi_qp_mask_str(VB_QP_DEST_QPN | VB_QP_RATE_LIMIT | (1u << 21) | (1u << 30), buf,
			sizeof(buf));
	assert_string_equal(buf, "DEST_QPN|RATE_LIMIT|0x40200000");
	vbi_qp_mask_str(1u << 22, buf, sizeof(buf));
	assert_string_equal(buf, "0x400000");
	/* every defined bit has a distinct name */
	for (int b = 0; b < 32; b++) {
		uint32_t bit = 1u << b;
		const char *n = vbi_qp_bit_name(bit);

		assert_int_equal(n != NULL, (VBI_QP_ALL_BITS & bit) != 0);
		for (int c = 0; n && c < b; c++) {
			const char *o = vbi_qp_bit_name(1u << c);

			assert_true(!o || strcmp(o, n));
		}
	}
	assert_null(vbi_qp_bit_name(S | VB_QP_PORT));
	/* truncation: snprintf-like */
	size_t full = vbi_qp_mask_str(VBI_QP_ALL_BITS, buf, sizeof(buf));
	char small[8];

	assert_int_equal(full, strlen(buf));
	assert_int_equal(vbi_qp_mask_str(VBI_QP_ALL_BITS, small, sizeof(small)), full);
	assert_string_equal(small, "STATE|C");
	assert_int_equal(vbi_qp_mask_str(S, small, 0), 5);
}

static void test_legal_pairs_all_types(void **state)
{
	int legal = 0;

	for (size_t ti = 0; ti < 3; ti++)
		for (int f = 0; f < VB_QPS__COUNT; f++)
			for (int t = 0; t < VB_QPS__COUNT; t++) {
				bool want = expect_legal(f, t);
				bool got = vbi_qp_fsm_legal(types[ti], (enum vb_qp_state)f,
							    (enum vb_qp_state)t);

				if (want != got)
					fail_msg("%s %s->%s: legal %d, expected %d",
						 vbi_qp_type_name(types[ti]),
						 vbi_qp_state_name((enum vb_qp_state)f),
						 vbi_qp_state_name((enum vb_qp_state)t), got, want);
				legal += got;
			}
	assert_int_equal(legal, 3 * 22);
	/* out of range */
	assert_false(vbi_qp_fsm_legal((enum vb_qp_type)3, VB_QPS_RESET, VB_QPS_INIT));
	assert_false(vbi_qp_fsm_legal(VB_QPT_RC, (enum vb_qp_state)7, VB_QPS_RESET));
	assert_false(vbi_qp_fsm_legal(VB_QPT_RC, VB_QPS_RESET, (enum vb_qp_state)-1));
	assert_int_equal(vbi_qp_fsm_required((enum vb_qp_type)3, VB_QPS_RESET, VB_QPS_INIT), 0);
}

struct row {
	enum vb_qp_type t;
	enum vb_qp_state from, to;
	uint32_t req, opt;
};

/* Hand-written from ibv_modify_qp(3) and the kernel's qp_state_table. */
static const struct row rows[] = {
	{ VB_QPT_RC, VB_QPS_RESET, VB_QPS_INIT,
	  S | VB_QP_PKEY_INDEX | VB_QP_PORT | VB_QP_ACCESS_FLAGS, 0 },
	{ VB_QPT_UC, VB_QPS_RESET, VB_QPS_INIT,
	  S | VB_QP_PKEY_INDEX | VB_QP_PORT | VB_QP_ACCESS_FLAGS, 0 },
	{ VB_QPT_UD, VB_QPS_RESET, VB_QPS_INIT, S | VB_QP_PKEY_INDEX | VB_QP_PORT | VB_QP_QKEY,
	  0 },
	{ VB_QPT_RC, VB_QPS_INIT, VB_QPS_RTR,
	  S | VB_QP_AV | VB_QP_PATH_MTU | VB_QP_DEST_QPN | VB_QP_RQ_PSN |
		  VB_QP_MAX_DEST_RD_ATOMIC | VB_QP_MIN_RNR_TIMER,
	  VB_QP_ALT_PATH | VB_QP_ACCESS_FLAGS | VB_QP_PKEY_INDEX },
	{ VB_QPT_UC, VB_QPS_INIT, VB_QPS_RTR,
	  S | VB_QP_AV | VB_QP_PATH_MTU | VB_QP_DEST_QPN | VB_QP_RQ_PSN,
	  VB_QP_ALT_PATH | VB_QP_ACCESS_FLAGS | VB_QP_PKEY_INDEX },
	{ VB_QPT_UD, VB_QPS_INIT, VB_QPS_RTR, S, VB_QP_PKEY_INDEX | VB_QP_QKEY },
	{ VB_QPT_RC, VB_QPS_RTR, VB_QPS_RTS,
	  S | VB_QP_SQ_PSN | VB_QP_TIMEOUT | VB_QP_RETRY_CNT | VB_QP_RNR_RETRY |
		  VB_QP_MAX_QP_RD_ATOMIC,
	  VB_QP_CUR_STATE | VB_QP_ALT_PATH | VB_QP_ACCESS_FLAGS | VB_QP_MIN_RNR_TIMER |
		  VB_QP_PATH_MIG_STATE },
	{ VB_QPT_UC, VB_QPS_RTR, VB_QPS_RTS, S | VB_QP_SQ_PSN,
	  VB_QP_CUR_STATE | VB_QP_ALT_PATH | VB_QP_ACCESS_FLAGS | VB_QP_PATH_MIG_STATE },
	{ VB_QPT_UD, VB_QPS_RTR, VB_QPS_RTS, S | VB_QP_SQ_PSN, VB_QP_CUR_STATE | VB_QP_QKEY },
	{ VB_QPT_RC, VB_QPS_RTS, VB_QPS_SQD, S, VB_QP_EN_SQD_ASYNC_NOTIFY },
	{ VB_QPT_UD, VB_QPS_RTS, VB_QPS_SQD, S, VB_QP_EN_SQD_ASYNC_NOTIFY },
	{ VB_QPT_RC, VB_QPS_SQD, VB_QPS_RTS, S,
	  VB_QP_CUR_STATE | VB_QP_ALT_PATH | VB_QP_ACCESS_FLAGS | VB_QP_MIN_RNR_TIMER |
		  VB_QP_PATH_MIG_STATE },
	{ VB_QPT_UD, VB_QPS_SQD, VB_QPS_SQD, 0, S | VB_QP_PKEY_INDEX | VB_QP_QKEY },
	{ VB_QPT_RC, VB_QPS_SQD, VB_QPS_SQD, 0,
	  S | VB_QP_PORT | VB_QP_AV | VB_QP_TIMEOUT | VB_QP_RETRY_CNT | VB_QP_RNR_RETRY |
		  VB_QP_MAX_QP_RD_ATOMIC | VB_QP_MAX_DEST_RD_ATOMIC | VB_QP_ALT_PATH |
		  VB_QP_ACCESS_FLAGS | VB_QP_PKEY_INDEX | VB_QP_MIN_RNR_TIMER |
		  VB_QP_PATH_MIG_STATE },
	/* the kernel table also lists AV, but uverbs turns AV into AV|PORT
	 * and PORT is not accepted here, so user space can never use it */
	{ VB_QPT_UC, VB_QPS_SQD, VB_QPS_SQD, 0,
	  S | VB_QP_ALT_PATH | VB_QP_ACCESS_FLAGS | VB_QP_PKEY_INDEX | VB_QP_PATH_MIG_STATE },
	{ VB_QPT_UC, VB_QPS_SQE, VB_QPS_RTS, S, VB_QP_CUR_STATE | VB_QP_ACCESS_FLAGS },
	{ VB_QPT_UD, VB_QPS_SQE, VB_QPS_RTS, S, VB_QP_CUR_STATE | VB_QP_QKEY },
	{ VB_QPT_RC, VB_QPS_SQE, VB_QPS_RTS, S, 0 },
	{ VB_QPT_RC, VB_QPS_RTS, VB_QPS_RTS, 0,
	  S | VB_QP_CUR_STATE | VB_QP_ACCESS_FLAGS | VB_QP_ALT_PATH | VB_QP_PATH_MIG_STATE |
		  VB_QP_MIN_RNR_TIMER },
	{ VB_QPT_UD, VB_QPS_INIT, VB_QPS_INIT, 0,
	  S | VB_QP_PKEY_INDEX | VB_QP_PORT | VB_QP_QKEY },
	{ VB_QPT_UC, VB_QPS_INIT, VB_QPS_INIT, 0,
	  S | VB_QP_PKEY_INDEX | VB_QP_PORT | VB_QP_ACCESS_FLAGS },
	{ VB_QPT_RC, VB_QPS_RESET, VB_QPS_RESET, 0, S },
	{ VB_QPT_UD, VB_QPS_ERR, VB_QPS_ERR, 0, S },
	{ VB_QPT_RC, VB_QPS_SQD, VB_QPS_ERR, S, 0 },
	{ VB_QPT_UD, VB_QPS_RTR, VB_QPS_RESET, S, 0 },
};

static void test_known_rows(void **state)
{
	char a[256], b[256];

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		uint32_t req = vbi_qp_fsm_required(r->t, r->from, r->to);
		uint32_t opt = vbi_qp_fsm_optional(r->t, r->from, r->to);

		if (req != r->req || opt != r->opt) {
			vbi_qp_mask_str(req, a, sizeof(a));
			vbi_qp_mask_str(opt, b, sizeof(b));
			fail_msg("%s %s->%s: required %s optional %s", vbi_qp_type_name(r->t),
				 vbi_qp_state_name(r->from), vbi_qp_state_name(r->to), a, b);
		}
	}
}

/* Invariants over the whole table. */
static void test_table_invariants(void **state)
{
	for (size_t ti = 0; ti < 3; ti++)
		for (int f = 0; f < VB_QPS__COUNT; f++)
			for (int t = 0; t < VB_QPS__COUNT; t++) {
				enum vb_qp_type ty = types[ti];
				enum vb_qp_state from = (enum vb_qp_state)f, to = (enum vb_qp_state)t;
				uint32_t req = vbi_qp_fsm_required(ty, from, to);
				uint32_t opt = vbi_qp_fsm_optional(ty, from, to);

				if (!vbi_qp_fsm_legal(ty, from, to)) {
					assert_int_equal(req, 0);
					assert_int_equal(opt, 0);
					continue;
				}
				assert_int_equal(req & opt, 0);
				assert_int_equal((req | opt) & ~VBI_QP_ALL_BITS, 0);
				assert_int_equal((req | opt) & VB_QP_RATE_LIMIT, 0);
				assert_int_equal((req | opt) & VB_QP_CAP, 0);
				/* STATE required for a change, optional in place */
				assert_int_equal(!!(req & S), from != to);
				assert_int_equal(!!(opt & S), from == to);
				/* ->RESET and ->ERR (other than in place) take STATE alone */
				if ((to == VB_QPS_RESET || to == VB_QPS_ERR) && from != to) {
					assert_int_equal(req, S);
					assert_int_equal(opt, 0);
				}
				/* CUR_STATE only from RTR, RTS, SQD, SQE */
				if (opt & VB_QP_CUR_STATE)
					assert_true(from == VB_QPS_RTR || from == VB_QPS_RTS ||
						    from == VB_QPS_SQD || from == VB_QPS_SQE);
				/* EN_SQD_ASYNC_NOTIFY only on RTS->SQD, for every type */
				assert_int_equal(!!(opt & VB_QP_EN_SQD_ASYNC_NOTIFY),
						 from == VB_QPS_RTS && to == VB_QPS_SQD);
			}
}

/* For every pair and type: the required mask passes, each required bit
 * removed fails naming it, each bit outside required|optional added fails
 * naming it, each optional bit added passes. */
static void test_check_every_pair(void **state)
{
	char name[64];
	int checks = 0;

	for (size_t ti = 0; ti < 3; ti++)
		for (int f = 0; f < VB_QPS__COUNT; f++)
			for (int t = 0; t < VB_QPS__COUNT; t++) {
				enum vb_qp_type ty = types[ti];
				enum vb_qp_state from = (enum vb_qp_state)f, to = (enum vb_qp_state)t;
				uint32_t req = vbi_qp_fsm_required(ty, from, to);
				uint32_t opt = vbi_qp_fsm_optional(ty, from, to);
				char pair[64];

				snprintf(pair, sizeof(pair), "%s QP %s->%s", vbi_qp_type_name(ty),
					 vbi_qp_state_name(from), vbi_qp_state_name(to));
				if (!vbi_qp_fsm_legal(ty, from, to)) {
					assert_int_equal(vbi_qp_fsm_check(ty, from, to, S), -EINVAL);
					assert_non_null(strstr(vbi_errmsg(), pair));
					assert_non_null(strstr(vbi_errmsg(), "illegal"));
					checks++;
					continue;
				}
				vbi_err_clear();
				if (vbi_qp_fsm_check(ty, from, to, req))
					fail_msg("%s: required mask refused: %s", pair, vbi_errmsg());
				checks++;
				for (int b = 0; b < 32; b++) {
					uint32_t bit = 1u << b;

					if (!(VBI_QP_ALL_BITS & bit))
						continue;
					snprintf(name, sizeof(name), "%s", vbi_qp_bit_name(bit));
					if (req & bit) {
						if (bit == S && from == to)
							continue;
						assert_int_equal(
							vbi_qp_fsm_check(ty, from, to, req & ~bit),
							-EINVAL);
						assert_non_null(strstr(vbi_errmsg(), pair));
						if (bit != S)
							assert_non_null(strstr(vbi_errmsg(), "missing"));
						assert_non_null(strstr(vbi_errmsg(), name));
					} else if (opt & bit) {
						if (vbi_qp_fsm_check(ty, from, to, req | bit))
							fail_msg("%s: optional %s refused: %s", pair,
								 name, vbi_errmsg());
					} else {
						assert_int_equal(
							vbi_qp_fsm_check(ty, from, to, req | bit),
							-EINVAL);
						assert_non_null(strstr(vbi_errmsg(), pair));
						assert_non_null(strstr(vbi_errmsg(), "unexpected"));
						assert_non_null(strstr(vbi_errmsg(), name));
					}
					checks++;
				}
				/* everything allowed at once */
				assert_int_equal(vbi_qp_fsm_check(ty, from, to, req | opt), 0);
			}
	printf("validator checks: %d\n", checks);
	assert_true(checks > 3 * 49);
}

static void test_messages(void **state)
{
	/* RC INIT->RTR with only STATE|AV: the rest is named */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_INIT, VB_QPS_RTR, S | VB_QP_AV),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "RC QP INIT->RTR: missing "
					     "PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|"
					     "DEST_QPN"));
	/* missing and unexpected together */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UD, VB_QPS_RESET, VB_QPS_INIT,
					  S | VB_QP_PKEY_INDEX | VB_QP_PORT | VB_QP_ACCESS_FLAGS),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "UD QP RESET->INIT: missing QKEY; unexpected "
					     "ACCESS_FLAGS"));
	/* unknown bits are shown in hex */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UD, VB_QPS_RTR, VB_QPS_RTS,
					  S | VB_QP_SQ_PSN | (1u << 28)),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "unexpected 0x10000000"));
	/* illegal pair lists where one can go */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_RESET, VB_QPS_RTS, S), -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "RC QP RESET->RTS: illegal transition"));
	assert_non_null(strstr(vbi_errmsg(), "RESET,INIT"));
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UC, VB_QPS_RESET, VB_QPS_ERR, S), -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "UC QP RESET->ERR: illegal"));
	/* out of range */
	assert_int_equal(vbi_qp_fsm_check((enum vb_qp_type)5, VB_QPS_RESET, VB_QPS_INIT, S),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "out of range"));
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_RESET, (enum vb_qp_state)9, S),
			 -EINVAL);
}

static void test_cur_state_and_in_place(void **state)
{
	/* CUR_STATE: fine from RTR/RTS/SQD where the row allows it */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UD, VB_QPS_RTR, VB_QPS_RTS,
					  S | VB_QP_SQ_PSN | VB_QP_CUR_STATE),
			 0);
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_SQD, VB_QPS_RTS,
					  S | VB_QP_CUR_STATE),
			 0);
	/* but refused from INIT, named */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_INIT, VB_QPS_INIT,
					  S | VB_QP_CUR_STATE),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "unexpected CUR_STATE"));
	/* and from RTS to RESET (row has no optional bits) */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_RTS, VB_QPS_RESET,
					  S | VB_QP_CUR_STATE),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "unexpected CUR_STATE"));

	/* in place (no STATE): checked against from->from */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UD, VB_QPS_RTS, VB_QPS_RTS, VB_QP_QKEY), 0);
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_RTS, VB_QPS_RTS, 0), 0);
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_RTS, VB_QPS_RTS, VB_QP_QKEY),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "unexpected QKEY"));
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_RTR, VB_QPS_RTR, 0), -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "RC QP RTR->RTR: illegal"));
	/* a change of state without STATE in the mask */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UD, VB_QPS_RTR, VB_QPS_RTS, VB_QP_SQ_PSN),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "UD QP RTR->RTS: mask SQ_PSN lacks STATE"));

	/* uverbs adds PORT to AV outside INIT->RTR: fine for RC in SQD->SQD
	 * (PORT optional there), never for UC */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_SQD, VB_QPS_SQD, VB_QP_AV), 0);
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_RC, VB_QPS_SQD, VB_QPS_SQD, S | VB_QP_AV), 0);
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UC, VB_QPS_SQD, VB_QPS_SQD, VB_QP_AV), -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "UC QP SQD->SQD: unexpected AV (user-space verbs "
					     "add PORT"));
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UC, VB_QPS_SQD, VB_QPS_SQD,
					  VB_QP_AV | VB_QP_PORT),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "unexpected PORT"));

	/* EN_SQD_ASYNC_NOTIFY: RTS->SQD only */
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UC, VB_QPS_RTS, VB_QPS_SQD,
					  S | VB_QP_EN_SQD_ASYNC_NOTIFY),
			 0);
	assert_int_equal(vbi_qp_fsm_check(VB_QPT_UC, VB_QPS_SQD, VB_QPS_SQD,
					  S | VB_QP_EN_SQD_ASYNC_NOTIFY),
			 -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "unexpected EN_SQD_ASYNC_NOTIFY"));
}

static void test_mirror(void **state)
{
	struct vbi_qp_mirror m;
	struct vbi_qp_transition tr;

	vbi_qp_mirror_init(&m, VB_QPT_RC);
	assert_int_equal(m.state, VB_QPS_RESET);
	assert_int_equal(m.transitions, 0);
	assert_int_equal(vbi_qp_mirror_recent(&m, 0, &tr), -ENOENT);

	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RESET, VB_QPS_INIT, 100), 0);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_INIT, VB_QPS_RTR, 300), 0);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RTR, VB_QPS_RTS, 200), 0);
	assert_int_equal(m.state, VB_QPS_RTS);
	assert_int_equal(m.transitions, 3);
	assert_int_equal(m.count[VB_QPS_INIT][VB_QPS_RTR], 1);
	assert_int_equal(m.total_ns[VB_QPS_INIT][VB_QPS_RTR], 300);
	assert_int_equal(vbi_qp_mirror_recent(&m, 0, &tr), 0);
	assert_int_equal(tr.from, VB_QPS_RTR);
	assert_int_equal(tr.to, VB_QPS_RTS);
	assert_int_equal(tr.ns, 200);
	assert_int_equal(vbi_qp_mirror_recent(&m, 2, &tr), 0);
	assert_int_equal(tr.from, VB_QPS_RESET);
	assert_int_equal(vbi_qp_mirror_recent(&m, 3, &tr), -ENOENT);

	/* from does not match the mirror: refused, nothing changes */
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_INIT, VB_QPS_RTR, 5), -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "RC QP mirror: recorded INIT->RTR but the mirror "
					     "is in RTS"));
	/* illegal from the mirrored state */
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RTS, VB_QPS_INIT, 5), -EINVAL);
	assert_non_null(strstr(vbi_errmsg(), "RTS->INIT is not a legal transition"));
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RTS, (enum vb_qp_state)8, 5), -EINVAL);
	assert_int_equal(m.refused, 3);
	assert_int_equal(m.state, VB_QPS_RTS);
	assert_int_equal(m.transitions, 3);

	/* async error behind our back: resync, then ERR->RESET is legal */
	vbi_qp_mirror_set(&m, VB_QPS_ERR);
	vbi_qp_mirror_set(&m, VB_QPS_ERR);
	vbi_qp_mirror_set(&m, (enum vb_qp_state)42);
	assert_int_equal(m.state, VB_QPS_ERR);
	assert_int_equal(m.resyncs, 1);
	assert_int_equal(m.transitions, 3);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_ERR, VB_QPS_RESET, 50), 0);

	/* many cycles: counts, totals, max, ring wraps keeping the newest */
	uint64_t cycles = 10;

	for (uint64_t i = 0; i < cycles; i++) {
		assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RESET, VB_QPS_INIT, 10 + i), 0);
		assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_INIT, VB_QPS_RTR, 1000 - i), 0);
		assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RTR, VB_QPS_RESET, 7), 0);
	}
	assert_int_equal(m.transitions, 4 + 3 * cycles);
	assert_int_equal(m.count[VB_QPS_RESET][VB_QPS_INIT], 1 + cycles);
	assert_int_equal(m.total_ns[VB_QPS_RESET][VB_QPS_INIT], 100 + 10 * cycles + 45);
	assert_int_equal(m.max_ns[VB_QPS_RESET][VB_QPS_INIT], 100);
	assert_int_equal(m.max_ns[VB_QPS_INIT][VB_QPS_RTR], 1000);
	assert_int_equal(m.count[VB_QPS_RTR][VB_QPS_RESET], cycles);
	assert_int_equal(vbi_qp_mirror_recent(&m, 0, &tr), 0);
	assert_int_equal(tr.from, VB_QPS_RTR);
	assert_int_equal(tr.to, VB_QPS_RESET);
	assert_int_equal(vbi_qp_mirror_recent(&m, 1, &tr), 0);
	assert_int_equal(tr.ns, 1000 - (cycles - 1));
	assert_int_equal(vbi_qp_mirror_recent(&m, VBI_QP_MIRROR_RING - 1, &tr), 0);
	assert_int_equal(vbi_qp_mirror_recent(&m, VBI_QP_MIRROR_RING, &tr), -ENOENT);
	/* timestamps never go backwards from older to newer */
	uint64_t prev = UINT64_MAX;

	for (unsigned int i = 0; i < VBI_QP_MIRROR_RING; i++) {
		assert_int_equal(vbi_qp_mirror_recent(&m, i, &tr), 0);
		assert_true(tr.at_ns <= prev);
		assert_true(tr.at_ns > 0);
		prev = tr.at_ns;
	}
	/* in-place change is a transition from == to when the row exists */
	vbi_qp_mirror_init(&m, VB_QPT_UD);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RESET, VB_QPS_INIT, 1), 0);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_INIT, VB_QPS_INIT, 1), 0);
	assert_int_equal(m.count[VB_QPS_INIT][VB_QPS_INIT], 1);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_INIT, VB_QPS_RTR, 1), 0);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RTR, VB_QPS_RTR, 1), -EINVAL);
	/* RESET -> ERR is not legal for the kernel either */
	vbi_qp_mirror_init(&m, VB_QPT_UC);
	assert_int_equal(vbi_qp_mirror_record(&m, VB_QPS_RESET, VB_QPS_ERR, 1), -EINVAL);
}

/* The transition-time aggregate of the counters file (vb_stat's QP
 * section): buckets by powers of two of microseconds, max and last kept. */
static void test_timing(void **state)
{
	struct vbi_qp_timing t;
	const struct vbi_qp_timing_cell *c = &t.t[VB_QPS_INIT][VB_QPS_RTR];

	(void)state;
	memset(&t, 0, sizeof(t));
	assert_int_equal(vbi_qp_timing_bucket(0), 0);
	assert_int_equal(vbi_qp_timing_bucket(999), 0);      /* under 1 us */
	assert_int_equal(vbi_qp_timing_bucket(1000), 1);     /* [1, 2) us */
	assert_int_equal(vbi_qp_timing_bucket(1999), 1);
	assert_int_equal(vbi_qp_timing_bucket(2000), 2);     /* [2, 4) us */
	assert_int_equal(vbi_qp_timing_bucket(16383999), 14); /* [8192, 16384) us */
	assert_int_equal(vbi_qp_timing_bucket(16384000), 15); /* 16.384 ms and more */
	assert_int_equal(vbi_qp_timing_bucket(UINT64_MAX), 15);
	vbi_qp_timing_record(&t, VB_QPS_INIT, VB_QPS_RTR, 5000);
	vbi_qp_timing_record(&t, VB_QPS_INIT, VB_QPS_RTR, 300000);
	vbi_qp_timing_record(&t, VB_QPS_INIT, VB_QPS_RTR, 1500);
	vbi_qp_timing_record(&t, VB_QPS__COUNT, VB_QPS_RTR, 7); /* out of range: nowhere */
	assert_int_equal(c->n, 3);
	assert_int_equal(c->total_ns, 306500);
	assert_int_equal(c->max_ns, 300000);
	assert_int_equal(c->last_ns, 1500);
	assert_int_equal(c->hist[1], 1);
	assert_int_equal(c->hist[3], 1); /* 5 us */
	assert_int_equal(c->hist[9], 1); /* 300 us: [256, 512) */
	assert_int_equal(t.t[VB_QPS_RESET][VB_QPS_INIT].n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_legal_pairs_all_types),
		cmocka_unit_test(test_known_rows),
		cmocka_unit_test(test_table_invariants),
		cmocka_unit_test(test_check_every_pair),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_cur_state_and_in_place),
		cmocka_unit_test(test_mirror),
		cmocka_unit_test(test_timing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
