/* SPDX-License-Identifier: MIT */
/* Queue sizing from rate x latency; see sizing.h for the contract. */
#include "core/sizing.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"

uint64_t vbi_pow2_roundup(uint64_t v)
{
	uint64_t p = 1;

	if (v > ((uint64_t)1 << 63))
		return 0;
	while (p < v)
		p <<= 1;
	return p;
}

static bool bad_positive(double v)
{
	return !isfinite(v) || !(v > 0.0);
}

/*
 * ceil(rate x latency_ms / 1000 x headroom) as an integer. A product that is
 * an integer up to floating-point noise (relative 1e-9) counts as that
 * integer, so 100000/s x 5 ms x 1.5 is 750, never 751.
 */
static int need_of(const char *q, double rate, double latency_ms, double headroom, uint64_t *need)
{
	double x = rate * latency_ms / 1000.0 * headroom;
	uint64_t fl;

	if (!isfinite(x) || x > (double)UINT32_MAX)
		return vbi_err(-EINVAL,
			       "%s depth for %g msg/s x %g ms x %g = %g entries does not fit in "
			       "32 bits",
			       q, rate, latency_ms, headroom, x);
	/* 0 <= x <= UINT32_MAX: truncation is floor (no libm needed) */
	fl = (uint64_t)x;
	*need = (x - (double)fl) <= x * 1e-9 ? fl : fl + 1;
	return 0;
}

/* need -> wanted (floor, power of two) -> depth (device cap). */
static int depth_of(const char *q, uint64_t need, uint32_t floor_, uint32_t max, uint64_t *wanted,
		    uint32_t *depth, bool *floored, bool *clamped)
{
	uint64_t w = need < floor_ ? floor_ : need;

	*floored = need < floor_;
	w = vbi_pow2_roundup(w);
	if (w > UINT32_MAX)
		return vbi_err(-EINVAL, "%s depth %llu rounds up to %llu, beyond 32 bits", q,
			       (unsigned long long)need, (unsigned long long)w);
	*wanted = w;
	*clamped = w > max;
	*depth = *clamped ? max : (uint32_t)w;
	return 0;
}

int vbi_sizing_compute(const struct vbi_sizing_in *in, struct vbi_sizing_out *out)
{
	double headroom, rrate;
	bool floored = false, clamped = false;
	char line[512];
	int rc;

	memset(out, 0, sizeof(*out));
	if (bad_positive(in->msg_rate_per_sec))
		return vbi_err(-EINVAL, "message rate %g/s: must be a finite number > 0",
			       in->msg_rate_per_sec);
	if (bad_positive(in->latency_ms))
		return vbi_err(-EINVAL, "latency %g ms: must be a finite number > 0", in->latency_ms);
	if (!isfinite(in->recv_rate_per_sec) || in->recv_rate_per_sec < 0)
		return vbi_err(-EINVAL, "receive rate %g/s: must be finite and >= 0 (0 = send rate)",
			       in->recv_rate_per_sec);
	headroom = in->headroom == 0.0 ? VBI_SIZING_HEADROOM_DEFAULT : in->headroom;
	if (!isfinite(headroom) || headroom < 1.0)
		return vbi_err(-EINVAL, "headroom %g: must be finite and >= 1 (0 = default %g)",
			       in->headroom, VBI_SIZING_HEADROOM_DEFAULT);
	if (!in->max_qp_wr || !in->max_cqe)
		return vbi_err(-EINVAL, "device limits missing: max_qp_wr %u, max_cqe %u",
			       in->max_qp_wr, in->max_cqe);
	rrate = in->recv_rate_per_sec == 0.0 ? in->msg_rate_per_sec : in->recv_rate_per_sec;

	out->msg_rate_per_sec = in->msg_rate_per_sec;
	out->recv_rate_per_sec = in->no_rq ? 0.0 : rrate;
	out->latency_ms = in->latency_ms;
	out->headroom = headroom;
	out->floor = in->floor ? in->floor : VBI_SIZING_FLOOR_DEFAULT;
	out->max_qp_wr = in->max_qp_wr;
	out->max_cqe = in->max_cqe;
	out->max_inline_data = in->max_inline_data;

	rc = need_of("SQ", in->msg_rate_per_sec, in->latency_ms, headroom, &out->sq_need);
	if (rc)
		return rc;
	rc = depth_of("SQ", out->sq_need, out->floor, in->max_qp_wr, &out->sq_wanted,
		      &out->sq_depth, &floored, &clamped);
	if (rc)
		return rc;
	out->flags |= (floored ? VBI_SIZING_SQ_FLOORED : 0) | (clamped ? VBI_SIZING_SQ_CLAMPED : 0);

	if (!in->no_rq) {
		rc = need_of("RQ", rrate, in->latency_ms, headroom, &out->rq_need);
		if (rc)
			return rc;
		rc = depth_of("RQ", out->rq_need, out->floor, in->max_qp_wr, &out->rq_wanted,
			      &out->rq_depth, &floored, &clamped);
		if (rc)
			return rc;
		out->flags |= (floored ? VBI_SIZING_RQ_FLOORED : 0) |
			      (clamped ? VBI_SIZING_RQ_CLAMPED : 0);
	}

	out->cq_wanted = (uint64_t)out->sq_depth + out->rq_depth;
	if (out->cq_wanted > in->max_cqe) {
		out->cq_depth = in->max_cqe;
		out->flags |= VBI_SIZING_CQ_CLAMPED;
	} else {
		out->cq_depth = (uint32_t)out->cq_wanted;
	}

	out->inline_wanted = in->inline_wanted;
	if (in->inline_wanted > in->max_inline_data) {
		out->max_inline = in->max_inline_data;
		out->flags |= VBI_SIZING_INLINE_CLAMPED;
	} else {
		out->max_inline = in->inline_wanted;
	}

	vbi_sizing_describe(out, line, sizeof(line));
	if (out->flags & VBI_SIZING_ANY_CLAMPED)
		vbi_warn("queue sizing exceeds the device: %s", line);
	else
		vbi_info("queue sizing: %s", line);
	return 0;
}

static void addf(char *buf, size_t len, size_t *pos, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void addf(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*pos < len ? buf + *pos : NULL, *pos < len ? len - *pos : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
}

size_t vbi_sizing_describe(const struct vbi_sizing_out *o, char *buf, size_t len)
{
	size_t pos = 0;

	if (len)
		buf[0] = '\0';
	addf(buf, len, &pos, "SQ %u (need %llu = %g msg/s x %g ms x %g", o->sq_depth,
	     (unsigned long long)o->sq_need, o->msg_rate_per_sec, o->latency_ms, o->headroom);
	if (o->flags & VBI_SIZING_SQ_FLOORED)
		addf(buf, len, &pos, ", floor %u", o->floor);
	addf(buf, len, &pos, ", wanted %llu)", (unsigned long long)o->sq_wanted);
	if (o->rq_depth || o->rq_wanted) {
		addf(buf, len, &pos, ", RQ %u (need %llu at %g msg/s", o->rq_depth,
		     (unsigned long long)o->rq_need, o->recv_rate_per_sec);
		if (o->flags & VBI_SIZING_RQ_FLOORED)
			addf(buf, len, &pos, ", floor %u", o->floor);
		addf(buf, len, &pos, ", wanted %llu)", (unsigned long long)o->rq_wanted);
	} else {
		addf(buf, len, &pos, ", no RQ");
	}
	addf(buf, len, &pos, ", CQ %u (SQ+RQ %llu), inline %u", o->cq_depth,
	     (unsigned long long)o->cq_wanted, o->max_inline);
	if (o->flags & VBI_SIZING_SQ_CLAMPED)
		addf(buf, len, &pos, "; SQ CLAMPED: wanted %llu > device max_qp_wr %u",
		     (unsigned long long)o->sq_wanted, o->max_qp_wr);
	if (o->flags & VBI_SIZING_RQ_CLAMPED)
		addf(buf, len, &pos, "; RQ CLAMPED: wanted %llu > device max_qp_wr %u",
		     (unsigned long long)o->rq_wanted, o->max_qp_wr);
	if (o->flags & VBI_SIZING_CQ_CLAMPED)
		addf(buf, len, &pos, "; CQ CLAMPED: wanted %llu > device max_cqe %u",
		     (unsigned long long)o->cq_wanted, o->max_cqe);
	if (o->flags & VBI_SIZING_INLINE_CLAMPED)
		addf(buf, len, &pos, "; INLINE CLAMPED: wanted %u > device max_inline_data %u",
		     o->inline_wanted, o->max_inline_data);
	if (o->flags & (VBI_SIZING_SQ_CLAMPED | VBI_SIZING_RQ_CLAMPED))
		addf(buf, len, &pos,
		     "; the declared rate x latency needs more than the device allows: expect "
		     "back-pressure (-EAGAIN) at peak");
	return pos;
}

int vbi_sizing_cq(const uint32_t *depths, size_t n, uint32_t max_cqe, struct vbi_cq_sizing *out)
{
	uint64_t sum = 0;

	memset(out, 0, sizeof(*out));
	if (!depths || !n)
		return vbi_err(-EINVAL, "CQ sizing: no queues to serve");
	if (!max_cqe)
		return vbi_err(-EINVAL, "CQ sizing: device max_cqe is 0");
	for (size_t i = 0; i < n; i++) {
		if (!depths[i])
			return vbi_err(-EINVAL, "CQ sizing: queue %zu has depth 0", i);
		sum += depths[i];
	}
	out->wanted = sum;
	out->clamped = sum > max_cqe;
	out->depth = out->clamped ? max_cqe : (uint32_t)sum;
	if (out->clamped)
		vbi_warn("CQ sizing exceeds the device: %zu queues need %llu entries > max_cqe %u; "
			 "CQ clamped to %u (overrun risk if all queues fill)",
			 n, (unsigned long long)sum, max_cqe, out->depth);
	else
		vbi_info("CQ sizing: %zu queues, depth %u", n, out->depth);
	return 0;
}
