/* SPDX-License-Identifier: MIT */
/*
 * QP state machine table and per-QP mirror; see qp_fsm.h for the contract.
 *
 * Sources, transcribed by hand into this module's own layout:
 *  - Linux drivers/infiniband/core/verbs.c: qp_state_table[][] and
 *    ib_modify_qp_is_ok() (read at torvalds/linux commit f4d8f354d753; the
 *    same table ships in the 6.1 kernel our Soft-RoCE VM runs). rxe calls
 *    ib_modify_qp_is_ok() first thing in rxe_qp_chk_attr(), with cur_state
 *    taken from attr->cur_qp_state when IB_QP_CUR_STATE is in the mask and
 *    new_state = cur_state when IB_QP_STATE is not.
 *  - ibv_modify_qp(3) (rdma-core): the per-transition "required" /
 *    "optional" attribute lists for RESET->INIT, INIT->RTR, RTR->RTS.
 * Only the RC, UC and UD columns are kept, and only bits that exist in
 * qp_types.h matter (IB_QP_RATE_LIMIT is optional for RAW_PACKET QPs only,
 * so it is never accepted here).
 */
#include "core/qp_fsm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/err.h"

struct fsm_row {
	bool valid;
	uint32_t req[VB_QPT__COUNT]; /* without VB_QP_STATE */
	uint32_t opt[VB_QPT__COUNT];
};

/* Shorthands for the table only. */
#define PKEY VB_QP_PKEY_INDEX
#define PORT VB_QP_PORT
#define QKEY VB_QP_QKEY
#define ACC VB_QP_ACCESS_FLAGS
#define AV VB_QP_AV
#define MTU VB_QP_PATH_MTU
#define DQPN VB_QP_DEST_QPN
#define RQPSN VB_QP_RQ_PSN
#define SQPSN VB_QP_SQ_PSN
#define DRDA VB_QP_MAX_DEST_RD_ATOMIC
#define QRDA VB_QP_MAX_QP_RD_ATOMIC
#define RNRT VB_QP_MIN_RNR_TIMER
#define TMO VB_QP_TIMEOUT
#define RETRY VB_QP_RETRY_CNT
#define RNRR VB_QP_RNR_RETRY
#define ALT VB_QP_ALT_PATH
#define MIG VB_QP_PATH_MIG_STATE
#define CUR VB_QP_CUR_STATE
#define SQDN VB_QP_EN_SQD_ASYNC_NOTIFY

#define RC_ VB_QPT_RC
#define UC_ VB_QPT_UC
#define UD_ VB_QPT_UD

/* Only STATE (or nothing, in place): ->RESET, ->ERR and a few self rows. */
#define BARE { .valid = true }

static const struct fsm_row fsm[VB_QPS__COUNT][VB_QPS__COUNT] = {
	[VB_QPS_RESET] = {
		[VB_QPS_RESET] = BARE,
		[VB_QPS_INIT] = {
			.valid = true,
			.req = { [RC_] = PKEY | PORT | ACC, [UC_] = PKEY | PORT | ACC,
				 [UD_] = PKEY | PORT | QKEY },
		},
		/* no RESET -> ERR row in the kernel's table */
	},
	[VB_QPS_INIT] = {
		[VB_QPS_RESET] = BARE,
		[VB_QPS_ERR] = BARE,
		[VB_QPS_INIT] = {
			.valid = true,
			.opt = { [RC_] = PKEY | PORT | ACC, [UC_] = PKEY | PORT | ACC,
				 [UD_] = PKEY | PORT | QKEY },
		},
		[VB_QPS_RTR] = {
			.valid = true,
			.req = { [RC_] = AV | MTU | DQPN | RQPSN | DRDA | RNRT,
				 [UC_] = AV | MTU | DQPN | RQPSN,
				 [UD_] = 0 },
			.opt = { [RC_] = ALT | ACC | PKEY, [UC_] = ALT | ACC | PKEY,
				 [UD_] = PKEY | QKEY },
		},
	},
	[VB_QPS_RTR] = {
		[VB_QPS_RESET] = BARE,
		[VB_QPS_ERR] = BARE,
		/* no RTR -> RTR row: no in-place change while in RTR */
		[VB_QPS_RTS] = {
			.valid = true,
			.req = { [RC_] = TMO | RETRY | RNRR | SQPSN | QRDA,
				 [UC_] = SQPSN, [UD_] = SQPSN },
			.opt = { [RC_] = CUR | ALT | ACC | RNRT | MIG,
				 [UC_] = CUR | ALT | ACC | MIG,
				 [UD_] = CUR | QKEY },
		},
	},
	[VB_QPS_RTS] = {
		[VB_QPS_RESET] = BARE,
		[VB_QPS_ERR] = BARE,
		[VB_QPS_RTS] = {
			.valid = true,
			.opt = { [RC_] = CUR | ACC | ALT | MIG | RNRT,
				 [UC_] = CUR | ACC | ALT | MIG,
				 [UD_] = CUR | QKEY },
		},
		[VB_QPS_SQD] = {
			.valid = true,
			.opt = { [RC_] = SQDN, [UC_] = SQDN, [UD_] = SQDN },
		},
	},
	[VB_QPS_SQD] = {
		[VB_QPS_RESET] = BARE,
		[VB_QPS_ERR] = BARE,
		[VB_QPS_RTS] = {
			.valid = true,
			.opt = { [RC_] = CUR | ALT | ACC | RNRT | MIG,
				 [UC_] = CUR | ALT | ACC | MIG,
				 [UD_] = CUR | QKEY },
		},
		[VB_QPS_SQD] = {
			.valid = true,
			.opt = { [RC_] = PORT | AV | TMO | RETRY | RNRR | QRDA | DRDA | ALT | ACC |
					 PKEY | RNRT | MIG,
				 [UC_] = AV | ALT | ACC | PKEY | MIG,
				 [UD_] = PKEY | QKEY },
		},
	},
	[VB_QPS_SQE] = {
		[VB_QPS_RESET] = BARE,
		[VB_QPS_ERR] = BARE,
		/* Valid for every type in the kernel's table; an RC QP never
		 * enters SQE (IB spec: SQE is a UC/UD state), so for RC the row
		 * is legal on paper with STATE alone. */
		[VB_QPS_RTS] = {
			.valid = true,
			.opt = { [RC_] = 0, [UC_] = CUR | ACC, [UD_] = CUR | QKEY },
		},
	},
	[VB_QPS_ERR] = {
		[VB_QPS_RESET] = BARE,
		[VB_QPS_ERR] = BARE,
	},
};

static bool in_range(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to)
{
	return (unsigned int)t < VB_QPT__COUNT && (unsigned int)from < VB_QPS__COUNT &&
	       (unsigned int)to < VB_QPS__COUNT;
}

bool vbi_qp_fsm_legal(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to)
{
	return in_range(t, from, to) && fsm[from][to].valid;
}

uint32_t vbi_qp_fsm_required(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to)
{
	if (!vbi_qp_fsm_legal(t, from, to))
		return 0;
	return fsm[from][to].req[t] | (from != to ? (uint32_t)VB_QP_STATE : 0);
}

/*
 * uverbs' modify_qp() (drivers/infiniband/core/uverbs_cmd.c), the path every
 * user-space ibv_modify_qp takes, adds IB_QP_PORT (= the AV's port) to a mask
 * that carries IB_QP_AV without IB_QP_PORT unless the call goes to RTR: it
 * assumes SQD->SQD, where a new primary AV implies the primary port. So the
 * kernel judges such a mask as if PORT were in it. Returns the bit added.
 */
static uint32_t uverbs_implied(enum vb_qp_state to, uint32_t mask)
{
	if ((mask & VB_QP_AV) && !(mask & VB_QP_PORT) &&
	    !((mask & VB_QP_STATE) && to == VB_QPS_RTR))
		return VB_QP_PORT;
	return 0;
}

uint32_t vbi_qp_fsm_optional(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to)
{
	uint32_t opt;

	if (!vbi_qp_fsm_legal(t, from, to))
		return 0;
	opt = fsm[from][to].opt[t] | (from == to ? (uint32_t)VB_QP_STATE : 0);
	/* The table lets UC change AV in SQD->SQD, but from user space AV
	 * brings PORT along (uverbs_implied), which UC may not change there:
	 * the kernel refuses every such call, so AV is not offered. */
	if ((opt & VB_QP_AV) && !(opt & VB_QP_PORT))
		opt &= ~(uint32_t)VB_QP_AV;
	return opt;
}

static const char *const state_names[VB_QPS__COUNT] = {
	[VB_QPS_RESET] = "RESET", [VB_QPS_INIT] = "INIT", [VB_QPS_RTR] = "RTR",
	[VB_QPS_RTS] = "RTS",     [VB_QPS_SQD] = "SQD",   [VB_QPS_SQE] = "SQE",
	[VB_QPS_ERR] = "ERR",
};

static const char *const type_names[VB_QPT__COUNT] = {
	[VB_QPT_RC] = "RC", [VB_QPT_UC] = "UC", [VB_QPT_UD] = "UD",
};

const char *vbi_qp_state_name(enum vb_qp_state s)
{
	return (unsigned int)s < VB_QPS__COUNT ? state_names[s] : "?";
}

const char *vbi_qp_type_name(enum vb_qp_type t)
{
	return (unsigned int)t < VB_QPT__COUNT ? type_names[t] : "?";
}

static const struct {
	uint32_t bit;
	const char *name;
} bit_names[] = {
	{ VB_QP_STATE, "STATE" },
	{ VB_QP_CUR_STATE, "CUR_STATE" },
	{ VB_QP_EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY" },
	{ VB_QP_ACCESS_FLAGS, "ACCESS_FLAGS" },
	{ VB_QP_PKEY_INDEX, "PKEY_INDEX" },
	{ VB_QP_PORT, "PORT" },
	{ VB_QP_QKEY, "QKEY" },
	{ VB_QP_AV, "AV" },
	{ VB_QP_PATH_MTU, "PATH_MTU" },
	{ VB_QP_TIMEOUT, "TIMEOUT" },
	{ VB_QP_RETRY_CNT, "RETRY_CNT" },
	{ VB_QP_RNR_RETRY, "RNR_RETRY" },
	{ VB_QP_RQ_PSN, "RQ_PSN" },
	{ VB_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC" },
	{ VB_QP_ALT_PATH, "ALT_PATH" },
	{ VB_QP_MIN_RNR_TIMER, "MIN_RNR_TIMER" },
	{ VB_QP_SQ_PSN, "SQ_PSN" },
	{ VB_QP_MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC" },
	{ VB_QP_PATH_MIG_STATE, "PATH_MIG_STATE" },
	{ VB_QP_CAP, "CAP" },
	{ VB_QP_DEST_QPN, "DEST_QPN" },
	{ VB_QP_RATE_LIMIT, "RATE_LIMIT" },
};

const char *vbi_qp_bit_name(uint32_t bit)
{
	for (size_t i = 0; i < sizeof(bit_names) / sizeof(bit_names[0]); i++)
		if (bit_names[i].bit == bit)
			return bit_names[i].name;
	return NULL;
}

/* Appends s at *pos when it fits; *pos always advances by strlen(s). */
static void put(char *buf, size_t len, size_t *pos, const char *s)
{
	size_t n = strlen(s);

	if (len && *pos < len - 1) {
		size_t room = len - 1 - *pos;
		size_t k = n < room ? n : room;

		memcpy(buf + *pos, s, k);
		buf[*pos + k] = '\0';
	}
	*pos += n;
}

size_t vbi_qp_mask_str(uint32_t mask, char *buf, size_t len)
{
	size_t pos = 0;
	uint32_t unknown = mask & ~VBI_QP_ALL_BITS;
	bool first = true;

	if (len)
		buf[0] = '\0';
	if (!mask) {
		put(buf, len, &pos, "0");
		return pos;
	}
	for (int b = 0; b < 32; b++) {
		uint32_t bit = (uint32_t)1 << b;
		const char *name;

		if (!(mask & bit) || (unknown & bit))
			continue;
		name = vbi_qp_bit_name(bit);
		if (!first)
			put(buf, len, &pos, "|");
		put(buf, len, &pos, name);
		first = false;
	}
	if (unknown) {
		char hex[16];

		snprintf(hex, sizeof(hex), "0x%x", (unsigned int)unknown);
		if (!first)
			put(buf, len, &pos, "|");
		put(buf, len, &pos, hex);
	}
	return pos;
}

/* Legal targets from `from`, for the message on an illegal pair. */
static void legal_targets(enum vb_qp_type t, enum vb_qp_state from, char *buf, size_t len)
{
	size_t pos = 0;
	bool first = true;

	buf[0] = '\0';
	for (int s = 0; s < VB_QPS__COUNT; s++) {
		if (!vbi_qp_fsm_legal(t, from, (enum vb_qp_state)s))
			continue;
		if (!first)
			put(buf, len, &pos, ",");
		put(buf, len, &pos, state_names[s]);
		first = false;
	}
	if (first)
		put(buf, len, &pos, "none");
}

int vbi_qp_fsm_check(enum vb_qp_type t, enum vb_qp_state from, enum vb_qp_state to,
		     uint32_t mask)
{
	char m[384], miss[384], unexp[384];
	uint32_t req, opt, missing, unexpected, implied;
	const char *note = "";

	if (!in_range(t, from, to))
		return vbi_err(-EINVAL, "QP type %d, state %d -> %d: out of range", (int)t,
			       (int)from, (int)to);
	vbi_qp_mask_str(mask, m, sizeof(m));
	if (!(mask & VB_QP_STATE) && from != to)
		return vbi_err(-EINVAL,
			       "%s QP %s->%s: mask %s lacks STATE (without it the kernel "
			       "treats the call as an attribute change in %s)",
			       type_names[t], state_names[from], state_names[to], m,
			       state_names[from]);
	/* ib_modify_qp_is_ok() refuses CUR_STATE outside RTR/RTS/SQD/SQE
	 * before it looks at the table. */
	if ((mask & VB_QP_CUR_STATE) && from != VB_QPS_RTR && from != VB_QPS_RTS &&
	    from != VB_QPS_SQD && from != VB_QPS_SQE)
		return vbi_err(-EINVAL,
			       "%s QP %s->%s: unexpected CUR_STATE (only accepted from RTR, "
			       "RTS, SQD or SQE; mask %s)",
			       type_names[t], state_names[from], state_names[to], m);
	if (!fsm[from][to].valid) {
		char tg[64];

		legal_targets(t, from, tg, sizeof(tg));
		return vbi_err(-EINVAL, "%s QP %s->%s: illegal transition (from %s: %s; mask %s)",
			       type_names[t], state_names[from], state_names[to],
			       state_names[from], tg, m);
	}
	req = vbi_qp_fsm_required(t, from, to);
	opt = fsm[from][to].opt[t] | (from == to ? (uint32_t)VB_QP_STATE : 0);
	implied = uverbs_implied(to, mask);
	missing = req & ~mask;
	unexpected = (mask | implied) & ~(req | opt);
	if (!missing && !unexpected)
		return 0;
	if (unexpected & implied) {
		/* name what the caller passed, and why it fails */
		unexpected = (unexpected & ~implied) | VB_QP_AV;
		note = " (user-space verbs add PORT to an AV change outside INIT->RTR, and "
		       "PORT is not accepted here)";
	}
	vbi_qp_mask_str(missing, miss, sizeof(miss));
	vbi_qp_mask_str(unexpected, unexp, sizeof(unexp));
	if (missing && unexpected)
		return vbi_err(-EINVAL, "%s QP %s->%s: missing %s; unexpected %s%s (mask %s)",
			       type_names[t], state_names[from], state_names[to], miss, unexp,
			       note, m);
	if (missing)
		return vbi_err(-EINVAL, "%s QP %s->%s: missing %s (mask %s)", type_names[t],
			       state_names[from], state_names[to], miss, m);
	return vbi_err(-EINVAL, "%s QP %s->%s: unexpected %s%s (mask %s)", type_names[t],
		       state_names[from], state_names[to], unexp, note, m);
}

/* ---- mirror ------------------------------------------------------------ */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void vbi_qp_mirror_init(struct vbi_qp_mirror *m, enum vb_qp_type t)
{
	memset(m, 0, sizeof(*m));
	m->type = t;
	m->state = VB_QPS_RESET;
}

int vbi_qp_mirror_record(struct vbi_qp_mirror *m, enum vb_qp_state from, enum vb_qp_state to,
			 uint64_t dur_ns)
{
	struct vbi_qp_transition *e;

	if (!in_range(m->type, from, to)) {
		m->refused++;
		return vbi_err(-EINVAL, "QP mirror: state %d -> %d out of range", (int)from,
			       (int)to);
	}
	if (from != m->state) {
		m->refused++;
		return vbi_err(-EINVAL, "%s QP mirror: recorded %s->%s but the mirror is in %s",
			       type_names[m->type], state_names[from], state_names[to],
			       state_names[m->state]);
	}
	if (!fsm[from][to].valid) {
		m->refused++;
		return vbi_err(-EINVAL, "%s QP mirror: %s->%s is not a legal transition",
			       type_names[m->type], state_names[from], state_names[to]);
	}
	e = &m->ring[m->transitions % VBI_QP_MIRROR_RING];
	e->from = (uint8_t)from;
	e->to = (uint8_t)to;
	e->ns = dur_ns;
	e->at_ns = mono_ns();
	m->transitions++;
	m->count[from][to]++;
	m->total_ns[from][to] += dur_ns;
	if (dur_ns > m->max_ns[from][to])
		m->max_ns[from][to] = dur_ns;
	m->state = to;
	return 0;
}

void vbi_qp_mirror_set(struct vbi_qp_mirror *m, enum vb_qp_state s)
{
	if ((unsigned int)s >= VB_QPS__COUNT)
		return;
	if (s != m->state)
		m->resyncs++;
	m->state = s;
}

int vbi_qp_mirror_recent(const struct vbi_qp_mirror *m, unsigned int i,
			 struct vbi_qp_transition *out)
{
	uint64_t kept = m->transitions < VBI_QP_MIRROR_RING ? m->transitions : VBI_QP_MIRROR_RING;

	if (i >= kept)
		return -ENOENT;
	*out = m->ring[(m->transitions - 1 - i) % VBI_QP_MIRROR_RING];
	return 0;
}

/* ---- transition times of every QP of a device ------------------------- */

unsigned vbi_qp_timing_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = us ? 64u - (unsigned)__builtin_clzll(us) : 0;

	return b < VBI_QPT_HIST ? b : VBI_QPT_HIST - 1;
}

void vbi_qp_timing_record(struct vbi_qp_timing *t, enum vb_qp_state from, enum vb_qp_state to,
			  uint64_t ns)
{
	struct vbi_qp_timing_cell *c;
	uint64_t max;

	if ((unsigned)from >= VB_QPS__COUNT || (unsigned)to >= VB_QPS__COUNT)
		return;
	c = &t->t[from][to];
	__atomic_fetch_add(&c->n, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&c->total_ns, ns, __ATOMIC_RELAXED);
	__atomic_store_n(&c->last_ns, ns, __ATOMIC_RELAXED);
	__atomic_fetch_add(&c->hist[vbi_qp_timing_bucket(ns)], 1, __ATOMIC_RELAXED);
	max = __atomic_load_n(&c->max_ns, __ATOMIC_RELAXED);
	while (ns > max && !__atomic_compare_exchange_n(&c->max_ns, &max, ns, true,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}
