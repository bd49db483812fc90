/* SPDX-License-Identifier: MIT */
#include "core/path.h"

#include <errno.h>
#include <string.h>

#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

/* ---- configuration ----------------------------------------------------- */

/* Durations: vbi_cfg_ms_ns (the table's default when unset or malformed). */
void vbi_path_cfg_init(struct vbi_path_cfg *c)
{
	uint64_t v = 0;

	memset(c, 0, sizeof(*c));
	vbi_cfg_unsigned(VBI_CFG_DEGRADE_FAILURES, &c->degrade_failures);
	c->degrade_window_ns = vbi_cfg_ms_ns(VBI_CFG_DEGRADE_WINDOW_MS);
	c->promote_hold_ns = vbi_cfg_ms_ns(VBI_CFG_PROMOTE_HOLD_MS);
	c->promote_hold_max_ns = vbi_cfg_ms_ns(VBI_CFG_PROMOTE_HOLD_MAX_MS);
	if (c->promote_hold_max_ns < c->promote_hold_ns)
		c->promote_hold_max_ns = c->promote_hold_ns;
	c->relapse_window_ns = vbi_cfg_ms_ns(VBI_CFG_PROMOTE_RELAPSE_MS);
	vbi_cfg_unsigned(VBI_CFG_PROMOTE_PROBES, &c->promote_probes);
	vbi_cfg_u64(VBI_CFG_PROMOTE_DIRECT, &v);
	c->promote_direct = (int)v;
	c->recovery_queue = 0; /* unset: 0 here (the library's peers: the window) */
	vbi_cfg_unsigned(VBI_CFG_RECOVERY_QUEUE, &c->recovery_queue);
	c->best = VB_QPT_RC;
	c->worst = VB_QPT_UD;
}

static int cfg_check(const struct vbi_path_cfg *c)
{
	if (c->degrade_failures < 1 || c->degrade_failures > VBI_PATH_MAX_FAILURES)
		return vbi_err(-EINVAL, "degrade_failures %u outside 1..%d", c->degrade_failures,
			       VBI_PATH_MAX_FAILURES);
	if (!c->degrade_window_ns)
		return vbi_err(-EINVAL, "degrade_window_ns is 0");
	if (c->promote_hold_max_ns < c->promote_hold_ns)
		return vbi_err(-EINVAL, "promote_hold_max_ns below promote_hold_ns");
	if (!c->promote_probes)
		return vbi_err(-EINVAL, "promote_probes is 0");
	if ((unsigned)c->best >= VB_QPT__COUNT || (unsigned)c->worst >= VB_QPT__COUNT ||
	    c->best > c->worst)
		return vbi_err(-EINVAL, "modes best=%d worst=%d: need RC <= best <= worst <= UD",
			       c->best, c->worst);
	return 0;
}

int vbi_path_init(struct vbi_path *p, const struct vbi_path_cfg *cfg, uint64_t now,
		  vbi_path_event_fn cb, void *arg)
{
	struct vbi_path_cfg dflt;
	int rc;

	if (!cfg) {
		vbi_path_cfg_init(&dflt);
		cfg = &dflt;
	}
	rc = cfg_check(cfg);
	if (rc)
		return rc;
	memset(p, 0, sizeof(*p));
	rc = pthread_mutex_init(&p->mu, NULL);
	if (rc)
		return vbi_err(-rc, "pthread_mutex_init: %s", strerror(rc));
	p->cfg = *cfg;
	p->cb = cb;
	p->cb_arg = arg;
	p->cur = cfg->best;
	p->mode = (int)cfg->best;
	p->mode_since = now;
	for (int m = 0; m < VB_QPT__COUNT; m++)
		p->hold_ns[m] = cfg->promote_hold_ns;
	return 0;
}

void vbi_path_fini(struct vbi_path *p)
{
	if (p->lane || p->standby)
		vbi_warn("path finalized with a lane still in it (active %p, standby %p)",
			 p->lane, p->standby);
	pthread_mutex_destroy(&p->mu);
}

/* ---- write-side helpers (called with mu held) ------------------------- */

struct evbuf {
	struct vbi_path_event ev[3];
	int n;
};

static void ev_add(struct evbuf *b, const struct vbi_path *p, enum vbi_path_ev_type t,
		   enum vb_qp_type from, uint64_t now, uint64_t outage, const char *why)
{
	struct vbi_path_event *e = &b->ev[b->n++];

	e->type = t;
	e->from = from;
	e->to = p->cur;
	e->epoch = p->epoch;
	e->now_ns = now;
	e->outage_ns = outage;
	e->reason = why;
}

/* Called after the mutex is released (never call back under our lock). */
static void ev_emit(struct vbi_path *p, const struct evbuf *b)
{
	for (int i = 0; i < b->n; i++) {
		vbi_debug("path %p: %s %s->%s epoch %u", (void *)p, vbi_path_ev_name(b->ev[i].type),
			  vbi_path_mode_name(b->ev[i].from), vbi_path_mode_name(b->ev[i].to),
			  b->ev[i].epoch);
		if (p->cb)
			p->cb(&b->ev[i], p->cb_arg);
	}
}

static void set_mode(struct vbi_path *p, enum vb_qp_type m, uint64_t now)
{
	if (now > p->mode_since)
		p->st.time_in_mode_ns[p->cur] += now - p->mode_since;
	p->mode_since = now;
	p->cur = m;
	p->fail_n = 0;
	p->fail_head = 0;
	for (int i = 0; i < VB_QPT__COUNT; i++) {
		p->streak_ok[i] = 0;
		p->streak_start[i] = 0;
	}
}

/* Seqcount-protected publication of (lane, epoch, mode). */
static void *publish(struct vbi_path *p, void *lane)
{
	unsigned s = __atomic_load_n(&p->seq, __ATOMIC_RELAXED);
	void *old;

	__atomic_store_n(&p->seq, s + 1, __ATOMIC_RELAXED);
	/* release: the odd seq and the lane's contents precede the pointer */
	old = __atomic_exchange_n(&p->lane, lane, __ATOMIC_ACQ_REL);
	__atomic_store_n(&p->epoch, p->epoch + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&p->mode, (int)p->cur, __ATOMIC_RELEASE);
	__atomic_store_n(&p->seq, s + 2, __ATOMIC_RELEASE);
	p->st.switches++;
	return old;
}

static void set_recovering(struct vbi_path *p, int on, uint64_t now)
{
	if (on) {
		p->recover_start = now;
		__atomic_store_n(&p->admitted, 0, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&p->recovering, on, __ATOMIC_RELEASE);
}

/* Failures of the current mode within the window ending at @now. */
static unsigned record_failure(struct vbi_path *p, uint64_t now)
{
	unsigned cap = p->cfg.degrade_failures, n = 0;

	p->fail_ts[p->fail_head] = now;
	p->fail_head = (p->fail_head + 1) % cap;
	if (p->fail_n < cap)
		p->fail_n++;
	for (unsigned i = 0; i < p->fail_n; i++) {
		uint64_t t = p->fail_ts[i];

		if (t <= now && now - t < p->cfg.degrade_window_ns)
			n++;
	}
	return n;
}

/* ---- write side --------------------------------------------------------- */

struct vbi_path_decision vbi_path_fail(struct vbi_path *p, uint32_t epoch, uint64_t now,
				       unsigned flags)
{
	struct vbi_path_decision d = { .action = VBI_PATH_STALE, .mode = VB_QPT_RC, .lane = NULL };
	struct evbuf eb = { .n = 0 };
	unsigned recent;

	pthread_mutex_lock(&p->mu);
	d.mode = p->cur;
	if (epoch != p->epoch) {
		p->st.ignored++;
		goto out;
	}
	/* One incident produces many reports (error completion, flushes, an
	 * async event): only the first for this lane counts. A lane published
	 * during the recovery (new epoch) that fails counts again. */
	if (p->recovering && epoch == p->fail_epoch && !(flags & VBI_PATH_F_RETRY)) {
		d.action = VBI_PATH_IN_PROGRESS;
		p->st.ignored++;
		goto out;
	}
	p->st.failures++;
	p->fail_epoch = epoch;
	if (!p->recovering)
		set_recovering(p, 1, now);
	recent = record_failure(p, now);

	if ((recent >= p->cfg.degrade_failures || (flags & VBI_PATH_F_NO_STANDBY)) &&
	    p->cur < p->cfg.worst) {
		enum vb_qp_type from = p->cur;

		/* Relapse: the mode failed again soon after we promoted into
		 * it: make the next promotion into it wait twice as long. */
		if (p->promoted_at[from] && now - p->promoted_at[from] < p->cfg.relapse_window_ns) {
			p->hold_ns[from] *= 2;
			if (p->hold_ns[from] > p->cfg.promote_hold_max_ns)
				p->hold_ns[from] = p->cfg.promote_hold_max_ns;
			if (!p->hold_ns[from])
				p->hold_ns[from] = p->cfg.promote_hold_max_ns;
			p->st.relapses++;
		} else {
			p->hold_ns[from] = p->cfg.promote_hold_ns;
		}
		set_mode(p, (enum vb_qp_type)(from + 1), now);
		d.action = VBI_PATH_DEGRADE;
		d.mode = p->cur;
		d.lane = p->standby;
		p->standby = NULL;
		p->st.degradations++;
		ev_add(&eb, p, VBI_PATH_EV_DEGRADE, from, now, 0,
		       (flags & VBI_PATH_F_NO_STANDBY) ? "no lane of the mode can be had"
						       : "too many failures within the window");
	} else if (p->standby) {
		d.action = VBI_PATH_SWITCH_TO_STANDBY;
		d.lane = p->standby;
		p->standby = NULL;
	} else if (flags & VBI_PATH_F_NO_STANDBY) {
		d.action = VBI_PATH_DOWN;
		p->st.downs++;
		ev_add(&eb, p, VBI_PATH_EV_DOWN, p->cur, now, 0,
		       "worst mode reached and no lane can be had");
	} else {
		d.action = VBI_PATH_REBUILD;
	}
	d.mode = p->cur;
out:
	pthread_mutex_unlock(&p->mu);
	ev_emit(p, &eb);
	return d;
}

void *vbi_path_switch(struct vbi_path *p, void *lane, uint64_t now, uint32_t *epoch)
{
	struct evbuf eb = { .n = 0 };
	enum vb_qp_type lane_mode;
	void *old;

	pthread_mutex_lock(&p->mu);
	lane_mode = (enum vb_qp_type)p->mode;
	old = publish(p, lane);
	if (p->recovering && lane && lane_mode == p->cur) {
		p->st.failovers++;
		ev_add(&eb, p, VBI_PATH_EV_FAILOVER, lane_mode, now, 0,
		       "new lane published during a recovery");
	} else {
		ev_add(&eb, p, VBI_PATH_EV_SWITCH, lane_mode, now, 0,
		       lane ? "lane published" : "lane unpublished");
	}
	if (epoch)
		*epoch = p->epoch;
	pthread_mutex_unlock(&p->mu);
	ev_emit(p, &eb);
	return old == lane ? NULL : old;
}

int vbi_path_resume(struct vbi_path *p, uint64_t now)
{
	struct evbuf eb = { .n = 0 };
	uint64_t outage;
	unsigned n;

	pthread_mutex_lock(&p->mu);
	if (!p->recovering) {
		pthread_mutex_unlock(&p->mu);
		return 0;
	}
	outage = now > p->recover_start ? now - p->recover_start : 0;
	n = __atomic_load_n(&p->admitted, __ATOMIC_RELAXED);
	set_recovering(p, 0, now);
	p->st.recoveries++;
	p->st.last_outage_ns = outage;
	if (outage > p->st.max_outage_ns)
		p->st.max_outage_ns = outage;
	ev_add(&eb, p, VBI_PATH_EV_RECOVERED, p->cur, now, outage, "recovery finished");
	pthread_mutex_unlock(&p->mu);
	ev_emit(p, &eb);
	return n > (unsigned)INT32_MAX ? INT32_MAX : (int)n;
}

void *vbi_path_set_standby(struct vbi_path *p, void *lane)
{
	void *old;

	pthread_mutex_lock(&p->mu);
	old = p->standby;
	p->standby = lane;
	pthread_mutex_unlock(&p->mu);
	return old;
}

int vbi_path_has_standby(struct vbi_path *p)
{
	int r;

	pthread_mutex_lock(&p->mu);
	r = p->standby != NULL;
	pthread_mutex_unlock(&p->mu);
	return r;
}

void *vbi_path_take_standby(struct vbi_path *p)
{
	return vbi_path_set_standby(p, NULL);
}

enum vb_qp_type vbi_path_mode(struct vbi_path *p)
{
	enum vb_qp_type m;

	pthread_mutex_lock(&p->mu);
	m = p->cur;
	pthread_mutex_unlock(&p->mu);
	return m;
}

enum vb_qp_type vbi_path_probe_target(struct vbi_path *p)
{
	enum vb_qp_type m;

	pthread_mutex_lock(&p->mu);
	if (p->cur <= p->cfg.best)
		m = p->cur;
	else if (p->cfg.promote_direct)
		m = p->cfg.best;
	else
		m = (enum vb_qp_type)(p->cur - 1);
	pthread_mutex_unlock(&p->mu);
	return m;
}

int vbi_path_probe(struct vbi_path *p, enum vb_qp_type mode, int ok, uint64_t now)
{
	int due = 0;

	pthread_mutex_lock(&p->mu);
	if (mode < p->cfg.best || mode >= p->cur) {
		enum vb_qp_type cur = p->cur;

		pthread_mutex_unlock(&p->mu);
		return vbi_err(-EINVAL, "probe of %s while in %s: only better modes are probed",
			       vbi_path_mode_name(mode), vbi_path_mode_name(cur));
	}
	if (!ok) {
		p->st.probes_failed++;
		p->streak_ok[mode] = 0;
		p->streak_start[mode] = 0;
		goto out;
	}
	p->st.probes_ok++;
	if (!p->streak_ok[mode]++)
		p->streak_start[mode] = now;
	if (!p->cfg.promote_direct && mode != p->cur - 1)
		goto out;
	if (p->recovering)
		goto out;
	due = p->streak_ok[mode] >= p->cfg.promote_probes && now >= p->streak_start[mode] &&
	      now - p->streak_start[mode] >= p->hold_ns[mode];
out:
	pthread_mutex_unlock(&p->mu);
	return due;
}

int vbi_path_promote(struct vbi_path *p, enum vb_qp_type mode, void *lane, uint64_t now,
		     void **old, uint32_t *epoch)
{
	struct evbuf eb = { .n = 0 };
	enum vb_qp_type from;
	void *prev;

	if (!lane)
		return vbi_err(-EINVAL, "promotion needs a lane");
	pthread_mutex_lock(&p->mu);
	from = p->cur;
	if (mode < p->cfg.best || mode >= from) {
		pthread_mutex_unlock(&p->mu);
		return vbi_err(-EINVAL, "promotion to %s while in %s", vbi_path_mode_name(mode),
			       vbi_path_mode_name(from));
	}
	set_mode(p, mode, now);
	prev = publish(p, lane);
	p->promoted_at[mode] = now ? now : 1;
	p->st.promotions++;
	ev_add(&eb, p, VBI_PATH_EV_PROMOTE, from, now, 0, "better mode probed healthy for its hold");
	if (epoch)
		*epoch = p->epoch;
	pthread_mutex_unlock(&p->mu);
	ev_emit(p, &eb);
	if (old)
		*old = prev == lane ? NULL : prev;
	return 0;
}

void vbi_path_stats(struct vbi_path *p, uint64_t now, struct vbi_path_stats *out)
{
	pthread_mutex_lock(&p->mu);
	*out = p->st;
	out->mode = p->cur;
	out->epoch = p->epoch;
	out->recovering = p->recovering;
	if (now > p->mode_since)
		out->time_in_mode_ns[p->cur] += now - p->mode_since;
	pthread_mutex_unlock(&p->mu);
	out->queued = __atomic_load_n(&p->queued, __ATOMIC_RELAXED);
	out->backpressured = __atomic_load_n(&p->backpressured, __ATOMIC_RELAXED);
}

const char *vbi_path_action_name(enum vbi_path_action a)
{
	static const char *const names[] = {
		[VBI_PATH_STALE] = "STALE",
		[VBI_PATH_IN_PROGRESS] = "IN_PROGRESS",
		[VBI_PATH_SWITCH_TO_STANDBY] = "SWITCH_TO_STANDBY",
		[VBI_PATH_REBUILD] = "REBUILD",
		[VBI_PATH_DEGRADE] = "DEGRADE",
		[VBI_PATH_DOWN] = "DOWN",
	};

	return (unsigned)a < sizeof(names) / sizeof(names[0]) ? names[a] : "?";
}

const char *vbi_path_ev_name(enum vbi_path_ev_type t)
{
	static const char *const names[VBI_PATH_EV__COUNT] = {
		[VBI_PATH_EV_SWITCH] = "SWITCH",     [VBI_PATH_EV_FAILOVER] = "FAILOVER",
		[VBI_PATH_EV_DEGRADE] = "DEGRADE",   [VBI_PATH_EV_PROMOTE] = "PROMOTE",
		[VBI_PATH_EV_DOWN] = "DOWN",         [VBI_PATH_EV_RECOVERED] = "RECOVERED",
	};

	return (unsigned)t < VBI_PATH_EV__COUNT ? names[t] : "?";
}

const char *vbi_path_mode_name(enum vb_qp_type m)
{
	static const char *const names[VB_QPT__COUNT] = {
		[VB_QPT_RC] = "RC", [VB_QPT_UC] = "UC", [VB_QPT_UD] = "UD",
	};

	return (unsigned)m < VB_QPT__COUNT ? names[m] : "?";
}
