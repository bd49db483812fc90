/* SPDX-License-Identifier: MIT */
/*
 * core/qp_fsm against the real kernel: for RC, UC and UD and every
 * (from, to) pair that can be reached on this device, a fresh QP is driven
 * to `from` with legal transitions and ibv_modify_qp is asked to go to `to`
 * with
 *   (a) the required mask (for an illegal pair: STATE alone),
 *   (b) the required mask minus each required bit,
 *   (c) the required mask plus each bit that is neither required nor
 *       optional,
 *   (d) the required mask plus each optional bit,
 *   (e) for an illegal pair, STATE plus every bit a legal way into `to`
 *       requires (a skipped step done "right"),
 * with sensible attribute values. The validator's verdict must agree with
 * the kernel's answer. The kernel checks masks in ib_modify_qp_is_ok()
 * (rxe_qp_chk_attr -> ib_modify_qp_is_ok); it may additionally refuse
 * attribute VALUES it cannot honour. Such refusals are classified by a
 * known reason and reported, not counted as agreement; anything else is a
 * mismatch and fails the test.
 *
 * A mask without STATE is read by the kernel as an attribute change in place
 * (new_state = cur_state), so in (b) the "STATE removed" attempt is compared
 * with the validator's verdict for from -> from, while the validator must
 * still refuse from -> to for it.
 *
 * SQE cannot be reached: no legal modify leads into it (the kernel's table
 * has no X -> SQE row) and rxe never moves a QP to SQE on its own (its
 * error path goes to ERR), so pairs from SQE are untested here; they are
 * covered by the unit test against the table.
 *
 * Finally `rdma res show` must list no QP, CQ, MR or PD of this process.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <infiniband/verbs.h>

#include "core/err.h"
#include "core/qp_fsm.h"
#include "tests/common/rxe_env.h"
#include "transport/verbs/verbs_device.h"

#define S VB_QP_STATE
#define NSTATES VB_QPS__COUNT

static const char *devname;

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	union ibv_gid gid;
	int gid_index;
	bool roce;
	enum ibv_mtu mtu;
} E;

struct cell {
	int tested, agree, explained;
};

static struct {
	struct cell c[VB_QPT__COUNT][NSTATES][NSTATES];
	int mismatches;
	int explained_alt_path;
	int explained_other;
} R;

static const char *ibv_err(int rc)
{
	return rc ? strerror(rc) : "ok";
}

static enum ibv_qp_type to_ibv(enum vb_qp_type t)
{
	return t == VB_QPT_RC ? IBV_QPT_RC : t == VB_QPT_UC ? IBV_QPT_UC : IBV_QPT_UD;
}

static int pick_gid(void)
{
	static const uint8_t v4pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct ibv_port_attr pa;

	if (ibv_query_port(E.ctx, 1, &pa))
		return -1;
	E.roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	E.mtu = pa.active_mtu < IBV_MTU_1024 ? pa.active_mtu : IBV_MTU_1024;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;

		if (ibv_query_gid(E.ctx, 1, i, &g))
			continue;
		if (!memcmp(g.raw, v4pfx, sizeof(v4pfx))) {
			E.gid = g;
			return i;
		}
	}
	return ibv_query_gid(E.ctx, 1, 0, &E.gid) ? -1 : 0;
}

/* Every attribute a mask bit may select, with values the device accepts. */
static void fill_attr(struct ibv_qp_attr *a, const struct ibv_qp *qp, enum vb_qp_type t,
		      enum vb_qp_state from, enum vb_qp_state to)
{
	struct ibv_ah_attr ah = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = E.gid, .sgid_index = (uint8_t)E.gid_index, .hop_limit = 64 },
	};

	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ibv_qp_state)to;
	a->cur_qp_state = (enum ibv_qp_state)from;
	a->en_sqd_async_notify = 1;
	a->qp_access_flags = t == VB_QPT_RC ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						      IBV_ACCESS_REMOTE_READ
			     : t == VB_QPT_UC ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
					      : 0;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qkey = 0x1a2b3c4d;
	a->ah_attr = ah;
	a->path_mtu = E.mtu;
	a->timeout = 14;
	a->retry_cnt = 3;
	a->rnr_retry = 3;
	a->rq_psn = 0x1234;
	a->max_rd_atomic = 1;
	a->alt_ah_attr = ah;
	a->alt_pkey_index = 0;
	a->alt_port_num = 1;
	a->alt_timeout = 14;
	a->min_rnr_timer = 12;
	a->sq_psn = 0x5678;
	a->max_dest_rd_atomic = 1;
	a->path_mig_state = IBV_MIG_MIGRATED;
	a->cap = (struct ibv_qp_cap){ .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
				      .max_recv_sge = 1 };
	a->dest_qp_num = qp->qp_num; /* loop back to itself */
	a->rate_limit = 0;
}

static int query_state(struct ibv_qp *qp, int *draining)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	if (draining)
		*draining = a.sq_draining;
	return (int)a.qp_state;
}

static struct ibv_qp *create_qp(enum vb_qp_type t)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = E.cq, .recv_cq = E.cq, .qp_type = to_ibv(t),
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(E.pd, &ia);

	if (!qp)
		fail_msg("ibv_create_qp(%s): %s", vbi_qp_type_name(t), strerror(errno));
	return qp;
}

static void destroy_qp(struct ibv_qp **qp)
{
	if (*qp) {
		int rc = ibv_destroy_qp(*qp);

		if (rc)
			fail_msg("ibv_destroy_qp: %s", strerror(rc));
		*qp = NULL;
	}
}

/* rxe refuses SQD -> anything but ERR while the SQ is still draining (the
 * IB spec's SQD "drain in progress"); wait for the drain like an application
 * waiting for IBV_EVENT_SQ_DRAINED would. */
static void wait_drained(struct ibv_qp *qp)
{
	struct timespec ts = { 0, 1000000 };

	for (int i = 0; i < 5000; i++) {
		int draining = 1;
		int st = query_state(qp, &draining);

		if (st == IBV_QPS_SQD && !draining)
			return;
		nanosleep(&ts, NULL);
	}
	fail_msg("QP %u still draining in SQD after 5 s", qp->qp_num);
}

/* One legal step, validated first; both must accept. */
static void step(struct ibv_qp *qp, enum vb_qp_type t, enum vb_qp_state from,
		 enum vb_qp_state to)
{
	uint32_t mask = vbi_qp_fsm_required(t, from, to);
	struct ibv_qp_attr a;
	int rc;

	if (vbi_qp_fsm_check(t, from, to, mask))
		fail_msg("driving: validator refuses its own required mask: %s", vbi_errmsg());
	fill_attr(&a, qp, t, from, to);
	rc = ibv_modify_qp(qp, &a, (int)mask);
	if (rc)
		fail_msg("driving %s QP %u %s->%s: ibv_modify_qp: %s", vbi_qp_type_name(t),
			 qp->qp_num, vbi_qp_state_name(from), vbi_qp_state_name(to), ibv_err(rc));
	if (to == VB_QPS_SQD)
		wait_drained(qp);
}

/* A fresh QP in state `from`, reached with legal transitions only. */
static struct ibv_qp *fresh(enum vb_qp_type t, enum vb_qp_state from)
{
	static const enum vb_qp_state path[] = { VB_QPS_RESET, VB_QPS_INIT, VB_QPS_RTR,
						 VB_QPS_RTS, VB_QPS_SQD };
	struct ibv_qp *qp = create_qp(t);
	enum vb_qp_state target = from == VB_QPS_ERR ? VB_QPS_INIT : from;

	for (size_t i = 0; path[i] != target; i++)
		step(qp, t, path[i], path[i + 1]);
	if (from == VB_QPS_ERR)
		step(qp, t, VB_QPS_INIT, VB_QPS_ERR);
	assert_int_equal(query_state(qp, NULL), (int)from);
	return qp;
}

static void attempt(struct ibv_qp **qpp, enum vb_qp_type t, enum vb_qp_state from,
		    enum vb_qp_state to, uint32_t mask, const char *kind)
{
	struct cell *c = &R.c[t][from][to];
	/* The kernel's reading of the call: without STATE, an in-place change. */
	enum vb_qp_state kto = (mask & S) ? to : from;
	struct ibv_qp_attr a;
	char ms[384], vmsg[VBI_ERRMSG_MAX];
	bool v, k;
	int rc, st;

	if (!*qpp)
		*qpp = fresh(t, from);
	vbi_err_clear();
	v = vbi_qp_fsm_check(t, from, kto, mask) == 0;
	snprintf(vmsg, sizeof(vmsg), "%s", vbi_errmsg());
	fill_attr(&a, *qpp, t, from, to);
	rc = ibv_modify_qp(*qpp, &a, (int)mask);
	k = rc == 0;
	c->tested++;
	vbi_qp_mask_str(mask, ms, sizeof(ms));
	if (v == k) {
		c->agree++;
	} else if (v && !k && (mask & VB_QP_ALT_PATH) && E.roce && rc == EINVAL) {
		/* _ib_modify_qp(): "Today the core code can only handle
		 * alternate paths and APM for IB. Ban them in roce mode." */
		c->explained++;
		R.explained_alt_path++;
	} else {
		R.mismatches++;
		printf("MISMATCH %s %s->%s (%s) mask %s: validator %s%s%s, kernel %s\n",
		       vbi_qp_type_name(t), vbi_qp_state_name(from), vbi_qp_state_name(to), kind,
		       ms, v ? "accepts" : "rejects", v ? "" : ": ", v ? "" : vmsg, ibv_err(rc));
	}
	if (k) {
		destroy_qp(qpp); /* it moved (or changed): start over */
		return;
	}
	st = query_state(*qpp, NULL);
	if (st != (int)from) {
		R.mismatches++;
		printf("MISMATCH %s %s->%s (%s) mask %s: refused (%s) but the QP is now in %s\n",
		       vbi_qp_type_name(t), vbi_qp_state_name(from), vbi_qp_state_name(to), kind,
		       ms, ibv_err(rc), st < 0 ? "?" : vbi_qp_state_name((enum vb_qp_state)st));
		destroy_qp(qpp);
	}
}

static void run_pair(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to)
{
	struct ibv_qp *qp = NULL;
	bool legal = vbi_qp_fsm_legal(t, from, to);
	uint32_t req = legal ? vbi_qp_fsm_required(t, from, to) : (uint32_t)S;
	uint32_t opt = vbi_qp_fsm_optional(t, from, to);

	attempt(&qp, t, from, to, req, "a: required");
	if (!legal) {
		/* a skipped step with everything a legal way into `to` needs
		 * (e.g. RESET->RTR with the INIT->RTR attributes) */
		uint32_t all = S;

		for (int f = 0; f < NSTATES; f++)
			all |= vbi_qp_fsm_required(t, (enum vb_qp_state)f, to);
		if (all != S)
			attempt(&qp, t, from, to, all, "e: illegal, attributes of a legal way in");
	}
	if (legal) {
		for (int b = 0; b < 32; b++) {
			uint32_t bit = 1u << b;

			if (!(VBI_QP_ALL_BITS & bit))
				continue;
			if (req & bit) {
				/* the validator refuses from -> to without this bit */
				assert_int_equal(vbi_qp_fsm_check(t, from, to, req & ~bit),
						 -EINVAL);
				attempt(&qp, t, from, to, req & ~bit, "b: required bit removed");
			} else if (opt & bit) {
				attempt(&qp, t, from, to, req | bit, "d: optional bit added");
			} else {
				attempt(&qp, t, from, to, req | bit, "c: foreign bit added");
			}
		}
	}
	destroy_qp(&qp);
}

static void print_table(enum vb_qp_type t)
{
	int tested = 0, agree = 0, explained = 0, pairs = 0;

	printf("\n%s: attempts agreeing / attempts per (from, to); '-' = from state not "
	       "reachable\n%-6s",
	       vbi_qp_type_name(t), "from\\to");
	for (int to = 0; to < NSTATES; to++)
		printf(" %8s", vbi_qp_state_name((enum vb_qp_state)to));
	printf("\n");
	for (int f = 0; f < NSTATES; f++) {
		printf("%-7s", vbi_qp_state_name((enum vb_qp_state)f));
		for (int to = 0; to < NSTATES; to++) {
			struct cell *c = &R.c[t][f][to];
			char cell[24];

			if (!c->tested) {
				printf(" %8s", "-");
				continue;
			}
			snprintf(cell, sizeof(cell), "%d/%d%s", c->agree, c->tested,
				 c->explained ? "*" : "");
			printf(" %8s", cell);
			tested += c->tested;
			agree += c->agree;
			explained += c->explained;
			pairs++;
		}
		printf("\n");
	}
	printf("%s: pairs tested %d, attempts %d, agree %d, explained value refusals %d "
	       "(*)\n",
	       vbi_qp_type_name(t), pairs, tested, agree, explained);
}

static void run_type(enum vb_qp_type t)
{
	static const enum vb_qp_state froms[] = { VB_QPS_RESET, VB_QPS_INIT, VB_QPS_RTR,
						  VB_QPS_RTS, VB_QPS_SQD, VB_QPS_ERR };
	int before = R.mismatches;

	for (size_t i = 0; i < sizeof(froms) / sizeof(froms[0]); i++)
		for (int to = 0; to < NSTATES; to++)
			run_pair(t, froms[i], (enum vb_qp_state)to);
	print_table(t);
	fflush(stdout);
	assert_int_equal(R.mismatches - before, 0);
	/* the pairs the brief singles out were really exercised */
	assert_true(R.c[t][VB_QPS_RTS][VB_QPS_SQD].agree > 0);
	assert_true(R.c[t][VB_QPS_SQD][VB_QPS_RTS].agree > 0);
	assert_true(R.c[t][VB_QPS_ERR][VB_QPS_RESET].agree > 0);
	assert_true(R.c[t][VB_QPS_RTS][VB_QPS_ERR].agree > 0);
	assert_int_equal(vbt_res_count("qp", getpid()), 0);
}

static void test_rc(void **state)
{
	run_type(VB_QPT_RC);
}

static void test_uc(void **state)
{
	run_type(VB_QPT_UC);
}

static void test_ud(void **state)
{
	run_type(VB_QPT_UD);
}

static void close_all(void)
{
	if (E.cq)
		ibv_destroy_cq(E.cq);
	if (E.pd)
		ibv_dealloc_pd(E.pd);
	if (E.ctx)
		ibv_close_device(E.ctx);
	E.cq = NULL;
	E.pd = NULL;
	E.ctx = NULL;
}

static void test_summary_and_audit(void **state)
{
	int tested = 0, agree = 0, explained = 0, pairs = 0;
	pid_t me = getpid();

	for (int t = 0; t < VB_QPT__COUNT; t++)
		for (int f = 0; f < NSTATES; f++)
			for (int to = 0; to < NSTATES; to++) {
				struct cell *c = &R.c[t][f][to];

				tested += c->tested;
				agree += c->agree;
				explained += c->explained;
				pairs += c->tested > 0;
			}
	printf("\nSUMMARY: %d (type, from, to) pairs tested (RC/UC/UD x "
	       "RESET,INIT,RTR,RTS,SQD,ERR x 7; SQE unreachable on rxe), %d ibv_modify_qp "
	       "attempts, %d agree with the validator, %d refused by the kernel for a known "
	       "value reason (ALT_PATH on RoCE: %d), %d mismatches\n",
	       pairs, tested, agree, explained, R.explained_alt_path, R.mismatches);
	assert_int_equal(pairs, 3 * 6 * 7);
	assert_int_equal(R.mismatches, 0);
	assert_int_equal(agree + explained, tested);

	close_all();
	assert_int_equal(vbt_res_count("qp", me), 0);
	assert_int_equal(vbt_res_count("cq", me), 0);
	assert_int_equal(vbt_res_count("mr", me), 0);
	assert_int_equal(vbt_res_count("pd", me), 0);
}

static int group_setup(void **state)
{
	int rc = vbi_verbs_open_device(devname, &E.ctx);

	if (rc) {
		fprintf(stderr, "open %s: %s\n", devname, vbi_errmsg());
		return -1;
	}
	E.gid_index = pick_gid();
	E.pd = ibv_alloc_pd(E.ctx);
	E.cq = E.pd ? ibv_create_cq(E.ctx, 64, NULL, NULL, 0) : NULL;
	if (E.gid_index < 0 || !E.cq) {
		fprintf(stderr, "device set-up failed on %s\n", devname);
		close_all();
		return -1;
	}
	printf("device %s: gid index %d, link layer %s, path MTU %d\n", devname, E.gid_index,
	       E.roce ? "Ethernet (RoCE)" : "InfiniBand", 128 << E.mtu);
	return 0;
}

static int group_teardown(void **state)
{
	close_all();
	return 0;
}

int main(void)
{
	devname = vbt_require_device();
	printf("rxe test on RDMA device %s\n", devname);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rc),
		cmocka_unit_test(test_uc),
		cmocka_unit_test(test_ud),
		cmocka_unit_test(test_summary_and_audit),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
