/* SPDX-License-Identifier: MIT */
/*
 * Failover runs for the fault tests (tests/fault) and `vb_bench failover`:
 * a publisher process and a subscriber process on the Soft-RoCE devices,
 * ORDERED (or FANOUT) messages streaming while faults are caused for real,
 * and a receiver-side audit of every stream's sequence log.
 *
 * The publisher listens on the primary address (rxe0) and, with
 * cfg.standby_ip, on the standby device's (rxe1); the subscriber connects,
 * so it builds the connections (primary, then a pre-warmed standby on the
 * other device). Faults are caused from the tests' own threads (never a
 * library thread): by @fault, on the publisher's or the subscriber's side,
 * @nfaults times, spread over the stream; each waits until a standby is
 * warm again before the next one. Faults are scheduled by the run's own
 * control flow, never by a race with the stream: a publisher-side fault at
 * its thread's own count, a subscriber-side one at the delivered count,
 * with the publishers holding the stream a little past each threshold until
 * that fault is done. A fault counts as caused only when its hook returned
 * 0 (retryable errors are tried again for 10 s).
 *
 * Audit (ORDERED): per topic, every seq 1..n delivered exactly once, in
 * order, byte-exact (vbt_msg_verify). FANOUT: delivered + reported lost ==
 * published. For each fault, the time from the fault to the first message
 * delivered over the new connection (a higher epoch than before the fault).
 *
 * Only public API (verbus.h) + tests/common/proc and msgcheck: the bench
 * links it too. Returns 0 when the run completed (the audit's verdict is in
 * the result), negative errno when it could not run.
 */
#ifndef VERBUS_TESTS_COMMON_FAILOVER_H
#define VERBUS_TESTS_COMMON_FAILOVER_H

#include <stdbool.h>
#include <stdint.h>

#include <verbus/verbus.h>

#include "tests/common/held.h"

#define VBT_FO_MAX_FAULTS 64
#define VBT_FO_MAX_TOPICS 4

enum vbt_fo_side { VBT_FO_PUB = 0, VBT_FO_SUB = 1 };

struct vbt_fo_cfg {
	const char *name;          /* for the printed report */
	uint64_t msgs;             /* per topic */
	unsigned topics;           /* publisher threads, one topic each (1..4) */
	vb_class_t cls;
	size_t min_len, max_len;   /* payload sizes */
	unsigned nfaults;
	enum vbt_fo_side side;     /* whose node @fault acts on */
	/* Cause fault @k (0-based) on @node: return 0 once caused. */
	int (*fault)(vb_node_t *node, unsigned k, void *arg);
	/* After the run (also on failure): undo what @fault changed. */
	void (*restore)(void *arg);
	void *arg;
	const char *ip;            /* primary address (rxe0) */
	const char *standby_ip;    /* second device's address, NULL: one device */
	bool wait_standby;         /* wait for a warm standby before each fault */
	bool quiet;
	bool no_cold;              /* skip the fresh-connection comparison (the
				    * fault leaves the primary address unusable
				    * until restore: those connects only time out) */
	/* Optional (zero: the defaults). */
	uint64_t fault_at[VBT_FO_MAX_FAULTS]; /* messages (topic 0) before fault k;
					 * 0: evenly spread over the stream; each
					 * below @msgs, in order (else -EINVAL) */
	/* @side == VBT_FO_SUB: the publishers hold message fault_at[k] +
	 * @hold_slack of every topic until fault k is done (so the stream
	 * never drains before a fault); 0: half the default spacing. */
	uint64_t hold_slack;
	/* @side == VBT_FO_SUB: after everything arrived, before the stats are
	 * taken (e.g. wait for a recovery to finish): 0, or negative = the run
	 * fails (a message in vb_errmsg()/stderr). Bounded by the callee. */
	int (*settle)(vb_ctx_t *ctx, vb_node_t *node, void *arg);
	/* Instead of @fault when set: the same with the faulting side's context
	 * (its stats tell whether a previous fault is still being recovered). */
	int (*fault_ctx)(vb_ctx_t *ctx, vb_node_t *node, unsigned k, void *arg);
	unsigned timeout_s;        /* bound on the stream, 0: 200 s */
	/* A fault whose effect comes later than its hook returns (it runs a
	 * command in a thread): true once every caused fault has taken its
	 * full effect. The publishers hold the last tenth of the stream until
	 * then (bounded by @timeout_s), so the stream cannot drain before. */
	bool (*settled)(void *arg);
	/* The faulting side's process holds, just before its last fault, the
	 * file descriptors and threads it held just before its second (each
	 * after its standby is warm), and at most two more live lanes (made,
	 * not yet freed: one retired may still drain): a node that fails over
	 * for weeks gains nothing per failover. Needs @nfaults >= 3. */
	bool check_held;
};

struct vbt_fo_result {
	uint64_t published, delivered, lost, out_of_order, duplicates, corrupt;
	unsigned faults;           /* caused (the hook returned 0) */
	unsigned faults_tried;     /* reached (caused or not) */
	unsigned measured;         /* faults with a first-delivery time */
	uint64_t first_ns[VBT_FO_MAX_FAULTS]; /* fault -> first delivery after it */
	uint64_t cold_connect_ns;  /* one vb_node_connect handshake, same run */
	vb_stats_t pub_stats, sub_stats;
	/* @check_held: the faulting side before fault 1 [0] and the last [1] */
	struct vbt_held held[2];
	bool ok;                   /* audit passed */
	char why[512];             /* else: every failed clause, by name */
};

int vbt_failover_run(const struct vbt_fo_cfg *cfg, struct vbt_fo_result *res);

/* Faults for @fault. */
int vbt_fo_fault_qp_err(vb_node_t *node, unsigned k, void *arg);
int vbt_fo_fault_loc_prot(vb_node_t *node, unsigned k, void *arg);
int vbt_fo_fault_rem_access(vb_node_t *node, unsigned k, void *arg);
/* Runs the shell command in @arg (a const char *), e.g. "ip link set d0 down". */
int vbt_fo_fault_shell(vb_node_t *node, unsigned k, void *arg);

/* From a fault_ctx hook that waits before causing its fault: the fault
 * happens now (what fault -> first delivery is measured from). */
void vbt_fo_mark_fault(void);

/* p-th percentile (0..100) of @n values (sorted in place). */
uint64_t vbt_fo_pct(uint64_t *v, unsigned n, double p);

#endif
