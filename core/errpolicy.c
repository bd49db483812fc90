/* SPDX-License-Identifier: MIT */
#include "core/errpolicy.h"

#include <string.h>

/*
 * The table. Sources for the causes: IBTA spec vol. 1 ch. 10.8 / 11.6.2
 * (completion error codes, which ones move the QP to ERR), ibv_poll_cq(3),
 * ibv_get_async_event(3), the seed article's section 3 (first three rows).
 * Every error completion moves an RC/UC QP to ERR (the rest of its WRs
 * flush), so no error row is "retry on the same QP as is". Reliable
 * Datagram (EEC/RDD) codes cannot occur on RC/UC/UD QPs: if a provider
 * reports one, its state is not something verbus can reason about, so the
 * path fails over rather than resetting in place.
 */
#define R(a, s, why) { .action = VBI_ACT_##a, .scope = VBI_SCOPE_##s, .reason = why }

static const struct vbi_errpol_rule wc_rules[VBI_WC_STATUS__COUNT] = {
	[VBT_WC_SUCCESS] = R(NONE, WR, "success"),
	[VBT_WC_LOC_LEN_ERR] = R(RESET_BOTH_ENDS, QP,
		"local length error: an incoming message was larger than the posted receive "
		"(a sizing mismatch or a peer ignoring the agreed maximum), or a send exceeded "
		"the port's maximum; the RC responder is in ERR and the requester sees "
		"REM_INV_REQ_ERR, so both ends reset and re-agree sizes before retransmitting"),
	[VBT_WC_LOC_QP_OP_ERR] = R(RESET_QP, QP,
		"local QP operation error: a malformed work request (opcode/inline/SGE not "
		"valid for this QP), a verbus bug rather than a peer fault; recover the QP "
		"in place and retransmit from the window (counted so the bug shows)"),
	[VBT_WC_LOC_EEC_OP_ERR] = R(FAILOVER, QP,
		"local EE context error: Reliable Datagram only, impossible on RC/UC/UD; "
		"provider state is unknown, fail over"),
	[VBT_WC_LOC_PROT_ERR] = R(REREGISTER_AND_RESET, QP,
		"local protection error: the buffer's lkey/MR does not cover it (MR "
		"deregistered, chunk outside its registration, PD mismatch); re-validate "
		"the chunk, re-register it if needed, reset the QP, retransmit"),
	[VBT_WC_WR_FLUSH_ERR] = R(RECLAIM, WR,
		"flushed: the QP is in ERR (drain in progress); hand the buffer back, the "
		"retransmit window resends what was not acknowledged"),
	[VBT_WC_MW_BIND_ERR] = R(RESET_QP, QP,
		"memory window bind error: verbus binds no memory windows, so this is a "
		"malformed WR; the QP is in ERR, recover it in place"),
	[VBT_WC_BAD_RESP_ERR] = R(RESET_BOTH_ENDS, QP,
		"bad response: the responder sent an unexpected transport opcode; the "
		"PSN/state of both ends is suspect, reset both through the control channel"),
	[VBT_WC_LOC_ACCESS_ERR] = R(REREGISTER_AND_RESET, QP,
		"local access error: protection error on a local buffer while the peer "
		"wrote into it (RDMA write with immediate); re-validate/re-register the "
		"chunk and reset the QP"),
	[VBT_WC_REM_INV_REQ_ERR] = R(RESET_BOTH_ENDS, QP,
		"remote invalid request: the responder rejected the request (length over "
		"its receive, opcode it does not support, or its QP in a bad state); the "
		"responder is in ERR too, reset both ends (coordinated)"),
	[VBT_WC_REM_ACCESS_ERR] = R(REFETCH_RKEY_RETRY, QP,
		"remote access error: the peer refused the rkey/range/access of an RDMA "
		"operation; re-fetch the peer's current rkey over the control channel, "
		"verify it covers the range, reset both ends and retry"),
	[VBT_WC_REM_OP_ERR] = R(RESET_BOTH_ENDS, QP,
		"remote operation error: the responder could not complete the operation "
		"(its QP/receive queue in a bad state); coordinate both ends: reset both "
		"QPs through the control channel"),
	[VBT_WC_RETRY_EXC_ERR] = R(FAILOVER, QP,
		"transport retry counter exceeded: no ACK within timeout x retry_cnt "
		"(peer dead, link down, path lost); fail over to the standby"),
	[VBT_WC_RNR_RETRY_EXC_ERR] = R(FAILOVER, QP,
		"RNR retry counter exceeded: the peer posted no receive for rnr_retry "
		"attempts; with credit flow control this means the peer is stuck or its "
		"QP was reset; fail over (a standby to a different peer fixes a dead one)"),
	[VBT_WC_LOC_RDD_VIOL_ERR] = R(FAILOVER, QP,
		"RDD violation: Reliable Datagram only, impossible on RC/UC/UD; fail over"),
	[VBT_WC_REM_INV_RD_REQ_ERR] = R(FAILOVER, QP,
		"remote invalid RD request: Reliable Datagram only; fail over"),
	[VBT_WC_REM_ABORT_ERR] = R(RESET_BOTH_ENDS, QP,
		"remote aborted: the responder aborted the operation (its QP went to ERR "
		"mid-message); reset both ends, retransmit"),
	[VBT_WC_INV_EECN_ERR] = R(FAILOVER, QP,
		"invalid EE context number: Reliable Datagram only; fail over"),
	[VBT_WC_INV_EEC_STATE_ERR] = R(FAILOVER, QP,
		"invalid EE context state: Reliable Datagram only; fail over"),
	[VBT_WC_FATAL_ERR] = R(FAILOVER, QP,
		"fatal error: the device reported a catastrophic error for this QP; its "
		"state cannot be trusted, fail over (a DEVICE_FATAL event may follow)"),
	[VBT_WC_RESP_TIMEOUT_ERR] = R(FAILOVER, QP,
		"response timeout: the responder did not answer in time (like "
		"RETRY_EXC_ERR); fail over"),
	[VBT_WC_GENERAL_ERR] = R(FAILOVER, QP,
		"general error: the provider could not say what failed; local state "
		"cannot be trusted, fail over"),
};

static const struct vbi_errpol_rule wc_unknown_rule = R(FAILOVER, QP,
	"unknown completion status (newer provider?): treated as fatal for the QP, fail over");

static const struct vbi_errpol_rule wc_unexpected_flush_rule = R(RESET_QP, QP,
	"flushed with no drain in progress: the QP was moved to ERR behind our back "
	"(another thread or process, or its error completion went to the other CQ); "
	"hand the buffer back and recover the QP in place");

static const struct vbi_errpol_rule ev_rules[VBT_EV__COUNT] = {
	[VBT_EV_QP_FATAL] = R(FAILOVER, QP,
		"QP fatal: catastrophic error, the QP is in ERR and the cause is unknown; "
		"fail over"),
	[VBT_EV_QP_REQ_ERR] = R(RESET_BOTH_ENDS, QP,
		"invalid request local work queue error: the peer sent something this "
		"responder rejected (it sees REM_INV_REQ_ERR); reset both ends"),
	[VBT_EV_QP_ACCESS_ERR] = R(RESET_BOTH_ENDS, QP,
		"local access violation: the peer's RDMA hit a bad rkey/range here (it "
		"sees REM_ACCESS_ERR and re-fetches the key); reset both ends"),
	[VBT_EV_COMM_EST] = R(NOTE, QP,
		"communication established: first packet in RTR; rdma_cm moves the QP on"),
	[VBT_EV_SQ_DRAINED] = R(NOTE, QP,
		"send queue drained: expected after an SQD transition the engine asked for"),
	[VBT_EV_PATH_MIG] = R(NOTE, QP,
		"path migrated: automatic path migration is not loaded by verbus; noted"),
	[VBT_EV_PATH_MIG_ERR] = R(NOTE, QP,
		"path migration error: no alternate path is loaded; the primary still "
		"works, noted"),
	[VBT_EV_QP_LAST_WQE_REACHED] = R(RECLAIM, QP,
		"last WQE reached: an SRQ-attached QP in ERR consumed its last receive; "
		"its receives can be reclaimed and the QP destroyed"),
	[VBT_EV_CQ_ERR] = R(FAILOVER, CQ,
		"CQ error (overrun): completions were lost, exact WR accounting is gone for "
		"every QP on it; fail those paths over and recreate the CQ deeper"),
	[VBT_EV_SRQ_ERR] = R(FAILOVER, SRQ,
		"SRQ error: every QP attached to it is in ERR; fail them over"),
	[VBT_EV_SRQ_LIMIT_REACHED] = R(REPLENISH, SRQ,
		"SRQ limit reached: receives ran below the low-water mark; post more"),
	[VBT_EV_PORT_ACTIVE] = R(PROBE, PORT,
		"port active: the link is back; re-warm standbys and start probing for "
		"promotion (hysteresis in core/path)"),
	[VBT_EV_PORT_ERR] = R(FAILOVER, PORT,
		"port error: the link went down; every path on the port fails over (to a "
		"standby on another port/device when there is one)"),
	[VBT_EV_LID_CHANGE] = R(REFRESH_PORT, PORT,
		"LID changed: re-read the port before new connections/AHs; live QPs fail "
		"on their own if the change broke them"),
	[VBT_EV_PKEY_CHANGE] = R(REFRESH_PORT, PORT,
		"P_Key table changed: re-read the port before new connections"),
	[VBT_EV_SM_CHANGE] = R(REFRESH_PORT, PORT,
		"subnet manager changed: re-read the port before new connections"),
	[VBT_EV_CLIENT_REREGISTER] = R(REFRESH_PORT, PORT,
		"client re-register: the SM asks for subscriptions (multicast joins) to be "
		"registered again; re-read the port and re-join"),
	[VBT_EV_GID_CHANGE] = R(REFRESH_PORT, PORT,
		"GID table changed (RoCE: an IP address came or went): re-read the source "
		"GID before new connections/AHs"),
	[VBT_EV_DEVICE_FATAL] = R(FAILOVER, DEVICE,
		"device fatal: the device is gone; every path on it fails over, then close "
		"everything on it"),
	[VBT_EV_WQ_FATAL] = R(FAILOVER, QP,
		"work queue fatal: the WQ (RSS) is in error; fail over the path using it"),
	[VBT_EV_DEVICE_REMOVAL] = R(FAILOVER, DEVICE,
		"device being removed (rdma link delete, hot-unplug): every path on it fails "
		"over, then everything on it is closed so the removal can complete"),
	[VBT_EV_OTHER] = R(NOTE, WR,
		"event code the backend does not know: noted (raw code in the event)"),
};

static const struct vbi_errpol_rule ev_unknown_rule = R(NOTE, WR,
	"event code outside the table: noted");

#undef R

void vbi_errpol_init(struct vbi_errpol *p)
{
	memset(p, 0, sizeof(*p));
}

static inline void bump(uint64_t *c)
{
	__atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

const struct vbi_errpol_rule *vbi_errpol_wc_rule(enum vbt_wc_status status)
{
	if ((unsigned)status >= VBI_WC_STATUS__COUNT)
		return &wc_unknown_rule;
	return &wc_rules[status];
}

const struct vbi_errpol_rule *vbi_errpol_event_rule(enum vbt_event_type type)
{
	if ((unsigned)type >= VBT_EV__COUNT)
		return &ev_unknown_rule;
	return &ev_rules[type];
}

const struct vbi_errpol_rule *vbi_errpol_unexpected_flush_rule(void)
{
	return &wc_unexpected_flush_rule;
}

static struct vbi_err_verdict verdict(const struct vbi_errpol_rule *r)
{
	return (struct vbi_err_verdict){ .action = r->action, .scope = r->scope,
					 .reason = r->reason };
}

struct vbi_err_verdict vbi_errpol_wc(struct vbi_errpol *p, enum vbt_wc_status status,
				     unsigned flags)
{
	const struct vbi_errpol_rule *r;

	if ((unsigned)status >= VBI_WC_STATUS__COUNT) {
		bump(&p->st.unknown_status);
		r = &wc_unknown_rule;
	} else {
		bump(&p->st.by_status[status]);
		r = &wc_rules[status];
		if (status == VBT_WC_WR_FLUSH_ERR && !(flags & VBI_ERRPOL_DRAINING)) {
			bump(&p->st.unexpected_flush);
			r = &wc_unexpected_flush_rule;
		}
	}
	bump(&p->st.by_action[r->action]);
	return verdict(r);
}

struct vbi_err_verdict vbi_errpol_event(struct vbi_errpol *p, enum vbt_event_type type)
{
	const struct vbi_errpol_rule *r;

	if ((unsigned)type >= VBT_EV__COUNT) {
		bump(&p->st.unknown_event);
		r = &ev_unknown_rule;
	} else {
		bump(&p->st.by_event[type]);
		r = &ev_rules[type];
	}
	bump(&p->st.by_action[r->action]);
	return verdict(r);
}

static void copy_counters(uint64_t *dst, const uint64_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

void vbi_errpol_snapshot(const struct vbi_errpol *p, struct vbi_errpol_stats *out)
{
	copy_counters(out->by_action, p->st.by_action, VBI_ACT__COUNT);
	copy_counters(out->by_status, p->st.by_status, VBI_WC_STATUS__COUNT);
	copy_counters(out->by_event, p->st.by_event, VBT_EV__COUNT);
	out->unknown_status = __atomic_load_n(&p->st.unknown_status, __ATOMIC_RELAXED);
	out->unknown_event = __atomic_load_n(&p->st.unknown_event, __ATOMIC_RELAXED);
	out->unexpected_flush = __atomic_load_n(&p->st.unexpected_flush, __ATOMIC_RELAXED);
}

const char *vbi_err_action_name(enum vbi_err_action a)
{
	static const char *const names[VBI_ACT__COUNT] = {
		[VBI_ACT_NONE] = "NONE",
		[VBI_ACT_NOTE] = "NOTE",
		[VBI_ACT_RECLAIM] = "RECLAIM",
		[VBI_ACT_REPLENISH] = "REPLENISH",
		[VBI_ACT_REFRESH_PORT] = "REFRESH_PORT",
		[VBI_ACT_PROBE] = "PROBE",
		[VBI_ACT_RESET_QP] = "RESET_QP",
		[VBI_ACT_REREGISTER_AND_RESET] = "REREGISTER_AND_RESET",
		[VBI_ACT_REFETCH_RKEY_RETRY] = "REFETCH_RKEY_RETRY",
		[VBI_ACT_RESET_BOTH_ENDS] = "RESET_BOTH_ENDS",
		[VBI_ACT_FAILOVER] = "FAILOVER",
	};

	return (unsigned)a < VBI_ACT__COUNT ? names[a] : "?";
}

const char *vbi_err_scope_name(enum vbi_err_scope s)
{
	static const char *const names[VBI_SCOPE__COUNT] = {
		[VBI_SCOPE_WR] = "WR",     [VBI_SCOPE_QP] = "QP",     [VBI_SCOPE_CQ] = "CQ",
		[VBI_SCOPE_SRQ] = "SRQ",   [VBI_SCOPE_PORT] = "PORT", [VBI_SCOPE_DEVICE] = "DEVICE",
	};

	return (unsigned)s < VBI_SCOPE__COUNT ? names[s] : "?";
}
