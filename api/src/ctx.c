/* SPDX-License-Identifier: MIT */
/*
 * The context's public functions (facade): attributes with their defaults
 * and VERBUS_* environment overrides (both from core/config.c's table), the
 * environment and argument checks, attribute and statistics struct
 * versioning. The context itself is proto/ctx.c.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "proto/proto.h"
#include "core/config.h"
#include "core/err.h"

/* ---- attributes ------------------------------------------------------------ */

/* Every default and VERBUS_* override comes from the table (core/config.c):
 * a malformed value keeps the default here (logged; attr_init cannot fail)
 * and vb_ctx_create() refuses it (vbi_cfg_check_env()). */
void vb_ctx_attr_init(vb_ctx_attr_t *a)
{
	unsigned u = 0;

	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	vbi_cfg_str(VBI_CFG_DEVICE, &a->device);
	vbi_cfg_str(VBI_CFG_IP, &a->ip);
	vbi_cfg_str(VBI_CFG_STANDBY_DEVICE, &a->standby_device);
	vbi_cfg_str(VBI_CFG_STANDBY_IP, &a->standby_ip);
	vbi_cfg_int(VBI_CFG_STANDBY, &a->standby);
	vbi_cfg_unsigned(VBI_CFG_PROGRESS, &u);
	a->progress = (vb_progress_mode_t)u;
	vbi_cfg_unsigned(VBI_CFG_PROGRESS_SPIN, &a->progress_spin);
	u = 0;
	vbi_cfg_unsigned(VBI_CFG_IDLE, &u);
	a->idle = (vb_idle_t)u;
	vbi_cfg_unsigned(VBI_CFG_IDLE_SPIN_US, &a->idle_spin_us);
	vbi_cfg_double(VBI_CFG_MSG_RATE, &a->msg_rate);
	vbi_cfg_double(VBI_CFG_LATENCY_MS, &a->latency_ms);
	vbi_cfg_size(VBI_CFG_MAX_MSG, &a->max_msg);
	vbi_cfg_size(VBI_CFG_SLOT_SIZE, &a->slot_size);
	vbi_cfg_size(VBI_CFG_POOL_CAP, &a->pool_cap);
	vbi_cfg_unsigned(VBI_CFG_MAX_PEERS, &a->max_peers);
	vbi_cfg_unsigned(VBI_CFG_WINDOW, &a->window);
	vbi_cfg_int(VBI_CFG_CM_TIMEOUT_MS, &a->cm_timeout_ms);
	vbi_cfg_unsigned(VBI_CFG_BATCH, &a->batch);
	vbi_cfg_unsigned(VBI_CFG_KEEPALIVE_MS, &a->keepalive_ms);
	vbi_cfg_unsigned(VBI_CFG_MAX_PENDING, &a->max_pending);
	vbi_mcast_attr_init(a);
}

/* The table's range of VERBUS_MAX_PEERS is the engine's bound. */
_Static_assert(VBI_MAX_PEERS == 1024u, "VBI_MAX_PEERS: change VERBUS_MAX_PEERS's row too");

/* @v, the value of @field, outside the range of the variable that fills
 * it (the table's: one range for both): -EINVAL naming the field. */
static int field_range(enum vbi_cfg_id id, const char *field, uint64_t v)
{
	const struct vbi_cfg_var *c = vbi_cfg_var(id);
	char range[96];

	if (v >= c->min && v <= c->max && !(c->mult > 1 && v % c->mult))
		return 0;
	return vbi_err(-EINVAL, "%s %llu: %s", field, (unsigned long long)v,
		       vbi_cfg_range(c, range, sizeof(range)));
}

static int check_attr(const vb_ctx_attr_t *a)
{
	int rc;

	if (!a || a->size < sizeof(*a))
		return vbi_err(-EINVAL, "vb_ctx_attr_t not initialized with vb_ctx_attr_init()");
	if (a->progress != VB_PROGRESS_THREAD && a->progress != VB_PROGRESS_APP)
		return vbi_err(-EINVAL, "progress mode %d unknown", (int)a->progress);
	if (!(a->msg_rate > 0) || !(a->latency_ms > 0))
		return vbi_err(-EINVAL, "msg_rate %.1f / latency_ms %.3f must be positive",
			       a->msg_rate, a->latency_ms);
	if ((rc = field_range(VBI_CFG_SLOT_SIZE, "slot_size", a->slot_size)) ||
	    (rc = field_range(VBI_CFG_MAX_MSG, "max_msg", a->max_msg)) ||
	    (rc = field_range(VBI_CFG_MAX_PEERS, "max_peers", a->max_peers)) ||
	    (rc = field_range(VBI_CFG_WINDOW, "window", a->window)) ||
	    (rc = field_range(VBI_CFG_MAX_PENDING, "max_pending", a->max_pending)) ||
	    (rc = field_range(VBI_CFG_IDLE_SPIN_US, "idle_spin_us", a->idle_spin_us)))
		return rc;
	if (a->cm_timeout_ms <= 0)
		return vbi_err(-EINVAL, "cm_timeout_ms %d must be positive", a->cm_timeout_ms);
	if ((unsigned)a->idle > VB_IDLE_BLOCK)
		return vbi_err(-EINVAL, "idle strategy %d unknown", (int)a->idle);
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
	/* a malformed VERBUS_* value fails here, before anything is set up */
	if ((rc = vbi_cfg_check_env()))
		return rc;
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
