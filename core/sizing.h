/* SPDX-License-Identifier: MIT */
/*
 * Queue sizing from the declared load instead of magic constants.
 *
 *   SQ need   = ceil(msg_rate_per_sec x latency_ms / 1000 x headroom)
 *               (headroom 1.5 by default: the seed article's buffer factor)
 *   SQ wanted = need raised to the floor, rounded up to a power of two
 *   SQ depth  = min(SQ wanted, device max_qp_wr)
 * The RQ is sized the same way from the receive rate (default: the send
 * rate). A CQ serves queues: its depth is the sum of the depths of the queues
 * it serves (SQ + RQ of this QP, or several QPs via vbi_sizing_cq()),
 * clamped to max_cqe. Inline size is min(wanted, device max_inline_data).
 *
 * Whenever the load or the wish needs more than the device allows, the number
 * is clamped AND reported: a VBI_SIZING_*_CLAMPED flag, a warn log line and
 * the text from vbi_sizing_describe(). A normal result is logged at info.
 *
 * Thread-safety: all functions are pure apart from logging and the calling
 * thread's error message; any thread may call them at any time on its own
 * in/out structs.
 *
 * Return codes: 0, or -EINVAL (with a vbi_err() message) for bad input: a
 * rate or latency that is <= 0, NaN or infinite, a headroom < 1, zero device
 * limits, or a need that does not fit in 32 bits.
 */
#ifndef VERBUS_CORE_SIZING_H
#define VERBUS_CORE_SIZING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VBI_SIZING_HEADROOM_DEFAULT 1.5
#define VBI_SIZING_FLOOR_DEFAULT 16u

struct vbi_sizing_in {
	double msg_rate_per_sec;  /* peak sends per second on this QP, > 0 */
	double latency_ms;        /* post -> completion reaped, > 0 */
	double recv_rate_per_sec; /* peak receives per second; 0 = msg_rate_per_sec */
	bool no_rq;               /* QP without its own RQ (SRQ user / send only) */
	double headroom;          /* 0 = VBI_SIZING_HEADROOM_DEFAULT; else >= 1 */
	uint32_t floor;           /* minimum depth; 0 = VBI_SIZING_FLOOR_DEFAULT */
	uint32_t inline_wanted;   /* bytes to send inline; 0 = none */
	/* device limits: ibv_device_attr.max_qp_wr / .max_cqe, and the
	 * max_inline_data the device grants (ibv_qp_cap after a probe create) */
	uint32_t max_qp_wr;
	uint32_t max_cqe;
	uint32_t max_inline_data;
};

enum vbi_sizing_flags {
	VBI_SIZING_SQ_FLOORED = 1 << 0,  /* need < floor: floor used */
	VBI_SIZING_RQ_FLOORED = 1 << 1,
	VBI_SIZING_SQ_CLAMPED = 1 << 2,  /* wanted > max_qp_wr */
	VBI_SIZING_RQ_CLAMPED = 1 << 3,
	VBI_SIZING_CQ_CLAMPED = 1 << 4,  /* sq + rq > max_cqe */
	VBI_SIZING_INLINE_CLAMPED = 1 << 5, /* inline_wanted > max_inline_data */
};
#define VBI_SIZING_ANY_CLAMPED                                                   \
	(VBI_SIZING_SQ_CLAMPED | VBI_SIZING_RQ_CLAMPED | VBI_SIZING_CQ_CLAMPED | \
	 VBI_SIZING_INLINE_CLAMPED)

struct vbi_sizing_out {
	/* chosen */
	uint32_t sq_depth, rq_depth, cq_depth, max_inline;
	/* what the load needs, unrounded (ceil of rate x latency x headroom) */
	uint64_t sq_need, rq_need;
	/* need raised to the floor and rounded to a power of two */
	uint64_t sq_wanted, rq_wanted;
	uint64_t cq_wanted; /* sq_depth + rq_depth */
	uint32_t inline_wanted;
	unsigned int flags; /* enum vbi_sizing_flags */
	/* inputs as used (defaults resolved), for the report */
	double msg_rate_per_sec, recv_rate_per_sec, latency_ms, headroom;
	uint32_t floor, max_qp_wr, max_cqe, max_inline_data;
};

/* Compute every number for one QP into *out (zeroed first). Logs one line:
 * info normally, warn when anything was clamped. */
int vbi_sizing_compute(const struct vbi_sizing_in *in, struct vbi_sizing_out *out);

/* One human line: chosen numbers, how they were derived and, for each
 * clamp, what was needed and what the device allows. Returns the full length
 * (like snprintf); buf always terminated when len > 0. */
size_t vbi_sizing_describe(const struct vbi_sizing_out *out, char *buf, size_t len);

/* A CQ shared by several queues (SQs and/or RQs, possibly of several QPs). */
struct vbi_cq_sizing {
	uint64_t wanted; /* sum of the depths */
	uint32_t depth;  /* min(wanted, max_cqe) */
	bool clamped;
};

/* depths[0..n-1]: the depths of the queues the CQ serves. -EINVAL for n == 0,
 * a NULL array, a zero depth or max_cqe == 0. Warn log line when clamped. */
int vbi_sizing_cq(const uint32_t *depths, size_t n, uint32_t max_cqe, struct vbi_cq_sizing *out);

/* Smallest power of two >= v (1 for v == 0); 0 when it exceeds 2^63. */
uint64_t vbi_pow2_roundup(uint64_t v);

#endif
