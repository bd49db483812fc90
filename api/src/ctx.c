/* SPDX-License-Identifier: MIT */
/*
 * The context's public functions (facade): attributes with their defaults
 * and VERBUS_* environment overrides, argument checks, attribute and
 * statistics struct versioning. The context itself is proto/ctx.c.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proto/proto.h"
#include "core/err.h"
#include "core/log.h"

/* ---- attributes ------------------------------------------------------------ */

static void env_str(const char *name, const char **dst)
{
	const char *v = getenv(name);

	if (v && *v)
		*dst = v;
}

static void env_double(const char *name, double *dst)
{
	const char *v = getenv(name);
	char *end;
	double d;

	if (!v || !*v)
		return;
	d = strtod(v, &end);
	if (*end || !isfinite(d) || d <= 0) {
		vbi_warn("%s=%s ignored: not a positive number", name, v);
		return;
	}
	*dst = d;
}

static void env_size(const char *name, size_t *dst)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long n;

	if (!v || !*v)
		return;
	errno = 0;
	n = strtoull(v, &end, 0);
	switch (*end) {
	case 'k': case 'K': n <<= 10; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	case 'g': case 'G': n <<= 30; end++; break;
	default: break;
	}
	if (errno || *end || !n) {
		vbi_warn("%s=%s ignored: not a positive size", name, v);
		return;
	}
	*dst = (size_t)n;
}

static void env_unsigned(const char *name, unsigned *dst)
{
	size_t v = *dst;

	env_size(name, &v);
	if (v <= 0xffffffffu)
		*dst = (unsigned)v;
}

void vb_ctx_attr_init(vb_ctx_attr_t *a)
{
	const char *mode = NULL;
	size_t to;

	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->progress = VB_PROGRESS_THREAD;
	a->progress_spin = 64;
	a->idle = VB_IDLE_BACKOFF;
	a->idle_spin_us = 200;
	a->msg_rate = 100000;
	a->latency_ms = 1.0;
	a->max_msg = 1u << 20;
	a->slot_size = 16384;
	a->pool_cap = 256u << 20;
	a->max_peers = 16;
	a->window = 4096;
	a->cm_timeout_ms = 5000;
	a->batch = 1;
	a->standby = 1;
	a->keepalive_ms = 100;
	a->max_pending = 32;

	env_str("VERBUS_DEVICE", &a->device);
	env_str("VERBUS_IP", &a->ip);
	env_str("VERBUS_STANDBY_DEVICE", &a->standby_device);
	env_str("VERBUS_STANDBY_IP", &a->standby_ip);
	{
		const char *sb = getenv("VERBUS_STANDBY");

		if (sb && (!strcmp(sb, "0") || !strcmp(sb, "1")))
			a->standby = *sb == '1';
		else if (sb && *sb)
			vbi_warn("VERBUS_STANDBY=%s ignored: 0 or 1", sb);
	}
	env_str("VERBUS_PROGRESS", &mode);
	if (mode) {
		if (!strcasecmp(mode, "app"))
			a->progress = VB_PROGRESS_APP;
		else if (!strcasecmp(mode, "thread"))
			a->progress = VB_PROGRESS_THREAD;
		else
			vbi_warn("VERBUS_PROGRESS=%s ignored: use thread or app", mode);
	}
	env_unsigned("VERBUS_PROGRESS_SPIN", &a->progress_spin);
	env_unsigned("VERBUS_IDLE_SPIN_US", &a->idle_spin_us);
	mode = NULL;
	env_str("VERBUS_IDLE", &mode);
	if (mode) {
		static const char *const names[] = { "backoff", "spin", "yield", "block" };
		unsigned i = 0;

		while (i < 4 && strcasecmp(mode, names[i]))
			i++;
		if (i < 4)
			a->idle = (vb_idle_t)i;
		else
			vbi_warn("VERBUS_IDLE=%s ignored: backoff, spin, yield or block", mode);
	}
	env_double("VERBUS_MSG_RATE", &a->msg_rate);
	env_double("VERBUS_LATENCY_MS", &a->latency_ms);
	env_size("VERBUS_MAX_MSG", &a->max_msg);
	env_size("VERBUS_SLOT_SIZE", &a->slot_size);
	env_size("VERBUS_POOL_CAP", &a->pool_cap);
	env_unsigned("VERBUS_MAX_PEERS", &a->max_peers);
	env_unsigned("VERBUS_WINDOW", &a->window);
	env_unsigned("VERBUS_KEEPALIVE_MS", &a->keepalive_ms);
	env_unsigned("VERBUS_MAX_PENDING", &a->max_pending);
	{
		const char *b = getenv("VERBUS_BATCH");

		if (b && (!strcmp(b, "0") || !strcmp(b, "1")))
			a->batch = *b == '1';
		else if (b && *b)
			vbi_warn("VERBUS_BATCH=%s ignored: 0 or 1", b);
		if (getenv("VERBUS_BATCH_US"))
			vbi_warn("VERBUS_BATCH_US is no longer read: batching is corked (no timer); "
				 "VERBUS_BATCH=0 turns it off");
	}
	vbi_mcast_attr_init(a);
	to = (size_t)a->cm_timeout_ms;
	env_size("VERBUS_CM_TIMEOUT_MS", &to);
	if (to <= 600000)
		a->cm_timeout_ms = (int)to;
}

static int check_attr(const vb_ctx_attr_t *a)
{
	if (!a || a->size < sizeof(*a))
		return vbi_err(-EINVAL, "vb_ctx_attr_t not initialized with vb_ctx_attr_init()");
	if (a->progress != VB_PROGRESS_THREAD && a->progress != VB_PROGRESS_APP)
		return vbi_err(-EINVAL, "progress mode %d unknown", (int)a->progress);
	if (!(a->msg_rate > 0) || !(a->latency_ms > 0))
		return vbi_err(-EINVAL, "msg_rate %.1f / latency_ms %.3f must be positive",
			       a->msg_rate, a->latency_ms);
	if (a->slot_size < 1024 || a->slot_size > (1u << 20) || (a->slot_size & 63))
		return vbi_err(-EINVAL, "slot_size %zu: 1 KiB..1 MiB, a multiple of 64",
			       a->slot_size);
	if (!a->max_msg || a->max_msg > VBI_MEMPOOL_MAX_ALLOC - VBI_WIRE_HDR_LEN)
		return vbi_err(-EINVAL, "max_msg %zu: 1..%u bytes", a->max_msg,
			       VBI_MEMPOOL_MAX_ALLOC - VBI_WIRE_HDR_LEN);
	if (!a->max_peers || a->max_peers > VBI_MAX_PEERS)
		return vbi_err(-EINVAL, "max_peers %u: 1..%u", a->max_peers, VBI_MAX_PEERS);
	if (a->window < 16 || a->window > (1u << 20))
		return vbi_err(-EINVAL, "window %u: 16..1048576", a->window);
	if (a->cm_timeout_ms <= 0)
		return vbi_err(-EINVAL, "cm_timeout_ms %d must be positive", a->cm_timeout_ms);
	if (!a->max_pending || a->max_pending > 1024)
		return vbi_err(-EINVAL, "max_pending %u: 1..1024", a->max_pending);
	if ((unsigned)a->idle > VB_IDLE_BLOCK)
		return vbi_err(-EINVAL, "idle strategy %d unknown", (int)a->idle);
	if (a->idle_spin_us > 1000000)
		return vbi_err(-EINVAL, "idle_spin_us %u: 0..1000000", a->idle_spin_us);
	if (a->batch > 1)
		return vbi_err(-EINVAL, "batch %u: 0 (off) or 1 (cork batching)", a->batch);
	return 0;
}

/* An attribute struct from an older header is shorter: what it does not
 * have keeps its default (@full holds the result then). */
static const vb_ctx_attr_t *attr_full(const vb_ctx_attr_t *attr, vb_ctx_attr_t *full)
{
	if (attr && attr->size >= offsetof(vb_ctx_attr_t, keepalive_ms) &&
	    attr->size < sizeof(*full)) {
		vb_ctx_attr_init(full);
		memcpy(full, attr, attr->size);
		full->size = sizeof(*full);
		attr = full;
	}
	return attr;
}

int vb_ctx_create(const vb_ctx_attr_t *attr, vb_ctx_t **out)
{
	vb_ctx_attr_t full;
	int rc;

	if (!out)
		return vbi_err(-EINVAL, "NULL output pointer");
	*out = NULL;
	attr = attr_full(attr, &full);
	if ((rc = check_attr(attr)))
		return rc;
	return vbi_ctx_open(attr, out);
}

int vb_ctx_destroy(vb_ctx_t *ctx)
{
	return ctx ? vbi_ctx_close(ctx) : 0;
}

int vb_progress(vb_ctx_t *ctx)
{
	if (!ctx)
		return vbi_err(-EINVAL, "NULL context");
	if (ctx->attr.progress != VB_PROGRESS_APP)
		return vbi_err(-EINVAL, "vb_progress() in VB_PROGRESS_THREAD mode");
	return vbi_progress_app(ctx);
}

const char *vb_recovery_action_name(unsigned i)
{
	return i < VBI_ACT__COUNT ? vbi_err_action_name((enum vbi_err_action)i) : "?";
}

int vb_ctx_stats_size(vb_ctx_t *ctx, vb_stats_t *st, size_t size)
{
	vb_stats_t all;

	if (!ctx || !st)
		return vbi_err(-EINVAL, "NULL argument");
	if (size < sizeof(uint64_t))
		return vbi_err(-EINVAL, "vb_stats_t of %zu bytes: call vb_ctx_stats(), which "
			       "passes sizeof(vb_stats_t) of the caller's header", size);
	vbi_ctx_stats(ctx, &all);
	memcpy(st, &all, size < sizeof(all) ? size : sizeof(all));
	return 0;
}
