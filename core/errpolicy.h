/* SPDX-License-Identifier: MIT */
/*
 * Error policy: every work completion status (enum vbt_wc_status) and every
 * async event (enum vbt_event_type) mapped to one recovery action, from a
 * static table (docs/recovery.md explains each row). Pure logic: the caller
 * (the pub/sub layer, the lifecycle engine) carries the action out.
 *
 * A verdict is (action, scope, reason): the action says what to do, the scope
 * what it applies to (the QP the completion came from, the CQ, the port, the
 * whole device), the reason is a static human sentence for logs and
 * vb_errmsg(). Actions are ordered by severity (enum order), so when one
 * incident produces a burst of completions (the real error, then flushes) the
 * caller keeps the worst with vbi_err_action_worse() and acts once.
 *
 * Counters: per action, per completion status and per event type; updated
 * with relaxed atomics, read with vbi_errpol_snapshot().
 *
 * Thread-safety: vbi_errpol_wc/_event/_snapshot may run concurrently from any
 * number of threads on the same policy (completion pollers, the device's
 * async-event thread). vbi_errpol_init must finish before any of them. The
 * lookups (vbi_errpol_wc_rule/_event_rule) and names are pure.
 *
 * Ownership: the policy is a plain struct owned by the caller; reasons are
 * static strings.
 *
 * Return codes: the classification never fails: an unknown status or event
 * code gets a defined verdict (FAILOVER for a status, NOTE for an event) and
 * is counted in an "unknown" bucket.
 */
#ifndef VERBUS_CORE_ERRPOLICY_H
#define VERBUS_CORE_ERRPOLICY_H

#include <stdint.h>

#include "core/qp_types.h" /* enum vbt_wc_status, enum vbt_event_type */

/* enum vbt_wc_status is dense 0..VBT_WC_GENERAL_ERR. */
#define VBI_WC_STATUS__COUNT (VBT_WC_GENERAL_ERR + 1)

/* Recovery actions, least to most severe. */
enum vbi_err_action {
	VBI_ACT_NONE = 0,          /* success: nothing to do */
	VBI_ACT_NOTE,              /* informational event: count (and log at debug) */
	VBI_ACT_RECLAIM,           /* flushed WR during a drain we started: hand the
				    * buffer back; the window retransmits it later */
	VBI_ACT_REPLENISH,         /* post more receives (SRQ low-water mark) */
	VBI_ACT_REFRESH_PORT,      /* re-read port attributes (dev_query) before the next
				    * connection / AH; live QPs are left to fail on their own */
	VBI_ACT_PROBE,             /* a port came back: start probing for standby
				    * re-warm / promotion (core/path hysteresis decides) */
	VBI_ACT_RESET_QP,          /* local QP error: drain, recover in place
				    * (ERR->RESET->RTS, same QPN), retransmit from the window */
	VBI_ACT_REREGISTER_AND_RESET, /* local protection: re-validate the buffer's
				    * chunk (re-register it if its MR is gone), reset QP */
	VBI_ACT_REFETCH_RKEY_RETRY, /* remote access: re-fetch the peer's rkey over the
				    * control channel, verify it, reset both ends, retry */
	VBI_ACT_RESET_BOTH_ENDS,   /* peer-side state broken: reset both QPs, coordinated
				    * through the control channel, then retransmit */
	VBI_ACT_FAILOVER,          /* path lost: switch to the standby (core/path decides
				    * switch vs degrade), retire the old QP */
	VBI_ACT__COUNT
};

/* What the action applies to. */
enum vbi_err_scope {
	VBI_SCOPE_WR = 0,  /* the work request only */
	VBI_SCOPE_QP,      /* the QP the completion/event names (and its path) */
	VBI_SCOPE_CQ,      /* every QP on the CQ */
	VBI_SCOPE_SRQ,     /* every QP on the SRQ */
	VBI_SCOPE_PORT,    /* every path on the port */
	VBI_SCOPE_DEVICE,  /* every path on the device */
	VBI_SCOPE__COUNT
};

/* vbi_errpol_wc() flags */
enum {
	/* A drain of this QP is in progress (the caller moved it to ERR):
	 * WR_FLUSH_ERR is expected and only RECLAIM. Without the flag a flush
	 * means the QP went to ERR behind our back (another thread, `rdma`
	 * tooling, an error completion that went to the other CQ): RESET_QP. */
	VBI_ERRPOL_DRAINING = 1 << 0,
};

struct vbi_err_verdict {
	enum vbi_err_action action;
	enum vbi_err_scope scope;
	const char *reason; /* static, never NULL */
};

/* One row of the table (static; exposed for docs, tests and the bench). */
struct vbi_errpol_rule {
	enum vbi_err_action action;
	enum vbi_err_scope scope;
	const char *reason;
};

struct vbi_errpol_stats {
	uint64_t by_action[VBI_ACT__COUNT];
	uint64_t by_status[VBI_WC_STATUS__COUNT];
	uint64_t by_event[VBT_EV__COUNT];
	uint64_t unknown_status;   /* codes outside enum vbt_wc_status */
	uint64_t unknown_event;    /* codes outside enum vbt_event_type */
	uint64_t unexpected_flush; /* WR_FLUSH_ERR without VBI_ERRPOL_DRAINING */
};

struct vbi_errpol {
	struct vbi_errpol_stats st; /* atomics; read with vbi_errpol_snapshot() */
};

void vbi_errpol_init(struct vbi_errpol *p);

/* Classify a completion status and count it. @flags: VBI_ERRPOL_*. */
struct vbi_err_verdict vbi_errpol_wc(struct vbi_errpol *p, enum vbt_wc_status status,
				     unsigned flags);
/* Classify an async event and count it. */
struct vbi_err_verdict vbi_errpol_event(struct vbi_errpol *p, enum vbt_event_type type);

/* The table rows, no counting. Out-of-range codes return the fallback rows. */
const struct vbi_errpol_rule *vbi_errpol_wc_rule(enum vbt_wc_status status);
const struct vbi_errpol_rule *vbi_errpol_event_rule(enum vbt_event_type type);
/* The row WR_FLUSH_ERR uses without VBI_ERRPOL_DRAINING. */
const struct vbi_errpol_rule *vbi_errpol_unexpected_flush_rule(void);

/* Consistent-enough copy of the counters (each counter read atomically). */
void vbi_errpol_snapshot(const struct vbi_errpol *p, struct vbi_errpol_stats *out);

/* The more severe of two actions (keep the worst of a completion burst). */
static inline enum vbi_err_action vbi_err_action_worse(enum vbi_err_action a,
							enum vbi_err_action b)
{
	return a > b ? a : b;
}

/* Does the action take the path out of service (recovering) until done? */
static inline int vbi_err_action_disrupts(enum vbi_err_action a)
{
	return a >= VBI_ACT_RESET_QP;
}

const char *vbi_err_action_name(enum vbi_err_action a);
const char *vbi_err_scope_name(enum vbi_err_scope s);

#endif
