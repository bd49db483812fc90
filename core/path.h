/* SPDX-License-Identifier: MIT */
/*
 * Per-peer path: the lane publishers post to, its standby, and the policy
 * that decides between failover, degradation (RC -> UC -> UD) and promotion
 * back (with hysteresis). Transport-independent: a lane is an opaque pointer
 * (typically the caller's per-connection object holding a vbi_qpe); the path
 * never dereferences it.
 *
 * RCU. The active lane is read by posting threads inside
 * vbi_rcu_read_lock() (liburcu memb flavour, helpers from core/rcu.h)
 * with vbi_path_lane() or, when the epoch/mode must match the lane,
 * vbi_path_read() (a seqcount: retried if a switch ran meanwhile). A switch
 * publishes the new lane with an atomic exchange (rcu_xchg_pointer
 * semantics: release, so the lane's contents are visible to readers that
 * see the pointer) and returns the old one; the caller drains it and frees
 * or recycles it only after vbi_rcu_synchronize(). The path itself never
 * waits for a grace period and never frees a lane.
 *
 * Failure handling (all times are caller-supplied monotonic ns, so tests
 * are deterministic):
 *   d = vbi_path_fail(p, epoch_of_failed_lane, now, flags)
 *     STALE / IN_PROGRESS   nothing to do (a lane no longer published, or
 *                           this lane's failure is already being handled)
 *     SWITCH_TO_STANDBY     d.lane is the standby (taken out of the path):
 *                           old = vbi_path_switch(p, d.lane, now, &epoch);
 *                           retransmit the unacknowledged window; resume;
 *                           retire old after a grace period; warm a new
 *                           standby and vbi_path_set_standby() it.
 *     REBUILD               no standby: recover the lane in place or build a
 *                           new one in d.mode, then switch (or not, when
 *                           recovered in place) and resume. If that fails:
 *                           vbi_path_fail(..., VBI_PATH_F_RETRY).
 *     DEGRADE               the mode was lowered to d.mode (event emitted);
 *                           d.lane is the old mode's standby (may be NULL)
 *                           to retire or to probe with; build a lane in
 *                           d.mode, switch, resume.
 *     DOWN                  worst mode and nothing can be built: tell the
 *                           application (e.g. switch to a backup peer);
 *                           stays recovering until a switch + resume.
 *   Degradation: degrade_failures failures within degrade_window (in the
 *   current mode), or VBI_PATH_F_NO_STANDBY (no lane of the current mode can
 *   be had). Promotion: the caller probes vbi_path_probe_target() and
 *   reports each result with vbi_path_probe(); when that mode has been probed
 *   healthy (>= promote_probes successes, no failure) for promote_hold, it
 *   returns 1 and the caller builds a lane of that mode and calls
 *   vbi_path_promote(). A degrade within relapse_window of a promotion into
 *   the mode doubles that mode's hold (up to promote_hold_max); a later
 *   degrade resets it. No flapping faster than the hold.
 *
 * Back-pressure while recovering: vbi_path_admit() (hot path, lock-free)
 * returns 0 (post now), 1 (recovering: accepted within the recovery queue
 * bound: keep the message in the retransmit window and do not post it; the
 * retransmission after the switch sends it), or -EAGAIN (recovering and the
 * bound is used up: back-pressure, nothing is dropped). With the default
 * bound 0 every publish during a recovery gets -EAGAIN. Admission is
 * advisory: a publisher that read "not recovering" just before a failure
 * posts to the failing lane; its message is in the window and is
 * retransmitted like the others.
 *
 * Events (callback + counters): SWITCH (planned), FAILOVER (switch during a
 * recovery, same mode), DEGRADE, PROMOTE, DOWN, RECOVERED (carries the
 * outage: first failure of the incident -> resume). The callback runs in the
 * thread that made the change, after the path's lock is released; it may
 * call vbi_path_* read functions but should not block.
 *
 * Synchronization table (same path):
 *   call                               may run concurrently with
 *   vbi_path_lane, _read, _epoch,      everything (readers: inside
 *   _admit, _recovering                vbi_rcu_read_lock() for the lane)
 *   vbi_path_fail, _switch, _promote,  each other (serialized by the path's
 *   _probe, _resume, _set_standby,     mutex) and readers
 *   _take_standby, _stats
 *   vbi_path_init / _fini              alone
 *
 * Ownership: lanes stay the caller's. vbi_path_fini() returns nothing: the
 * caller takes the active and standby lanes out first (switch to NULL,
 * take_standby).
 *
 * Return codes: 0 / a value, or negative errno with vb_errmsg() set
 * (-EINVAL for bad arguments); vbi_path_admit's -EAGAIN sets no message.
 */
#ifndef VERBUS_CORE_PATH_H
#define VERBUS_CORE_PATH_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <urcu/arch.h>     /* caa_cpu_relax */

#include "core/qp_types.h"  /* enum vb_qp_type: RC < UC < UD = best..worst */
#include "core/rcu.h"       /* vbi_rcu_*: readers of the lane pointer */

#define VBI_PATH_MAX_FAILURES 64

/* Defaults; environment overrides in brackets (read by vbi_path_cfg_init). */
struct vbi_path_cfg {
	unsigned degrade_failures;     /* N, 3 [VERBUS_DEGRADE_FAILURES], 1..64 */
	uint64_t degrade_window_ns;    /* T, 1000 ms [VERBUS_DEGRADE_WINDOW_MS] */
	uint64_t promote_hold_ns;      /* healthy probing before promotion, 2000 ms
					* [VERBUS_PROMOTE_HOLD_MS] */
	uint64_t promote_hold_max_ns;  /* cap of the doubled hold, 60000 ms
					* [VERBUS_PROMOTE_HOLD_MAX_MS] */
	uint64_t relapse_window_ns;    /* degrade this soon after a promotion =
					* relapse, 10000 ms [VERBUS_PROMOTE_RELAPSE_MS] */
	unsigned promote_probes;       /* successes needed within the hold, 3
					* [VERBUS_PROMOTE_PROBES] */
	int promote_direct;            /* 1: promote straight to the best healthy
					* mode (UD -> RC); 0: one step at a time. 1
					* [VERBUS_PROMOTE_DIRECT] */
	unsigned recovery_queue;       /* publishes admitted while recovering, 0
					* [VERBUS_RECOVERY_QUEUE] */
	enum vb_qp_type best, worst;   /* RC, UD: the modes the path may use */
};

enum vbi_path_ev_type {
	VBI_PATH_EV_SWITCH = 0,  /* lane published outside a recovery (first lane, planned) */
	VBI_PATH_EV_FAILOVER,    /* lane published during a recovery, same mode */
	VBI_PATH_EV_DEGRADE,     /* mode lowered (from -> to) */
	VBI_PATH_EV_PROMOTE,     /* mode raised and its lane published */
	VBI_PATH_EV_DOWN,        /* nothing left to try */
	VBI_PATH_EV_RECOVERED,   /* recovery finished (vbi_path_resume) */
	VBI_PATH_EV__COUNT
};

struct vbi_path_event {
	enum vbi_path_ev_type type;
	enum vb_qp_type from, to; /* modes before/after (equal unless DEGRADE/PROMOTE) */
	uint32_t epoch;           /* epoch after the event */
	uint64_t now_ns;
	uint64_t outage_ns;       /* RECOVERED: since the incident's first failure */
	const char *reason;       /* static */
};

typedef void (*vbi_path_event_fn)(const struct vbi_path_event *ev, void *arg);

enum vbi_path_action {
	VBI_PATH_STALE = 0,
	VBI_PATH_IN_PROGRESS,
	VBI_PATH_SWITCH_TO_STANDBY,
	VBI_PATH_REBUILD,
	VBI_PATH_DEGRADE,
	VBI_PATH_DOWN,
};

struct vbi_path_decision {
	enum vbi_path_action action;
	enum vb_qp_type mode; /* the mode to (re)build / switch in */
	void *lane;           /* SWITCH_TO_STANDBY: the standby; DEGRADE: old standby */
};

/* vbi_path_fail() flags */
enum {
	VBI_PATH_F_NO_STANDBY = 1 << 0, /* no lane of the current mode can be had */
	VBI_PATH_F_RETRY = 1 << 1,      /* a recovery attempt failed: count it even
					 * though a recovery is in progress */
};

struct vbi_path_stats {
	enum vb_qp_type mode;
	uint32_t epoch;
	int recovering;
	uint64_t failures;        /* counted failures (not STALE / IN_PROGRESS) */
	uint64_t ignored;         /* STALE + IN_PROGRESS */
	uint64_t switches;        /* every publication (epoch bumps) */
	uint64_t failovers, degradations, promotions, downs, recoveries, relapses;
	uint64_t probes_ok, probes_failed;
	uint64_t queued;          /* admitted while recovering (vbi_path_admit == 1) */
	uint64_t backpressured;   /* vbi_path_admit == -EAGAIN */
	uint64_t last_outage_ns, max_outage_ns;
	uint64_t time_in_mode_ns[VB_QPT__COUNT]; /* up to the @now of vbi_path_stats */
};

struct vbi_path {
	/* read side (lock-free) */
	unsigned seq;      /* seqcount over lane/epoch/mode: odd = being written */
	void *lane;        /* RCU-protected */
	uint32_t epoch;
	int mode;          /* enum vb_qp_type of the published lane */
	int recovering;
	unsigned admitted; /* admissions in the current recovery */
	uint64_t queued, backpressured;

	/* write side (mutex) */
	pthread_mutex_t mu;
	struct vbi_path_cfg cfg;
	vbi_path_event_fn cb;
	void *cb_arg;
	enum vb_qp_type cur;      /* policy mode (may lead the lane's mode) */
	void *standby;
	uint64_t fail_ts[VBI_PATH_MAX_FAILURES]; /* ring of failure times, cur mode */
	unsigned fail_n, fail_head;
	uint64_t recover_start;
	uint32_t fail_epoch;      /* epoch of the last counted failure */
	uint64_t mode_since;
	uint64_t hold_ns[VB_QPT__COUNT];
	uint64_t promoted_at[VB_QPT__COUNT]; /* 0 = never promoted into it */
	uint64_t streak_start[VB_QPT__COUNT];
	unsigned streak_ok[VB_QPT__COUNT];
	struct vbi_path_stats st; /* write-side counters (read under mu) */
};

/* Defaults + VERBUS_* environment overrides, both from the table
 * (core/config.h): a malformed value is logged and its default kept. */
void vbi_path_cfg_init(struct vbi_path_cfg *c);

/* @cfg NULL: defaults. Starts in cfg->best mode with no lane, not
 * recovering, epoch 0; @now starts the time-in-mode clock. @cb may be NULL.
 * 0 or -EINVAL (inconsistent cfg: the message says which field). */
int vbi_path_init(struct vbi_path *p, const struct vbi_path_cfg *cfg, uint64_t now,
		  vbi_path_event_fn cb, void *arg);
void vbi_path_fini(struct vbi_path *p);

/* ---- read side --------------------------------------------------------- */

/* Inside vbi_rcu_read_lock(): the active lane or NULL. */
static inline void *vbi_path_lane(struct vbi_path *p)
{
	return __atomic_load_n(&p->lane, __ATOMIC_ACQUIRE);
}

static inline uint32_t vbi_path_epoch(struct vbi_path *p)
{
	return __atomic_load_n(&p->epoch, __ATOMIC_ACQUIRE);
}

static inline int vbi_path_recovering(struct vbi_path *p)
{
	return __atomic_load_n(&p->recovering, __ATOMIC_ACQUIRE);
}

struct vbi_path_view {
	void *lane;
	uint32_t epoch;
	enum vb_qp_type mode;
	int recovering;
};

/* Inside vbi_rcu_read_lock(): lane, epoch and mode as one consistent
 * snapshot (the epoch is the one the lane was published with). */
static inline void vbi_path_read(struct vbi_path *p, struct vbi_path_view *v)
{
	unsigned s1, s2;

	for (;;) {
		s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1) {
			caa_cpu_relax();
			continue;
		}
		v->lane = __atomic_load_n(&p->lane, __ATOMIC_ACQUIRE);
		v->epoch = __atomic_load_n(&p->epoch, __ATOMIC_ACQUIRE);
		v->mode = (enum vb_qp_type)__atomic_load_n(&p->mode, __ATOMIC_ACQUIRE);
		v->recovering = __atomic_load_n(&p->recovering, __ATOMIC_ACQUIRE);
		s2 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
		if (s1 == s2)
			return;
	}
}

/* Hot-path admission: 0 post, 1 queue (recovering, within the bound),
 * -EAGAIN back-pressure. Lock-free. */
static inline int vbi_path_admit(struct vbi_path *p)
{
	if (__builtin_expect(!__atomic_load_n(&p->recovering, __ATOMIC_ACQUIRE), 1))
		return 0;
	if (__atomic_fetch_add(&p->admitted, 1, __ATOMIC_RELAXED) < p->cfg.recovery_queue) {
		__atomic_fetch_add(&p->queued, 1, __ATOMIC_RELAXED);
		return 1;
	}
	__atomic_fetch_add(&p->backpressured, 1, __ATOMIC_RELAXED);
	return -EAGAIN;
}

/* ---- write side --------------------------------------------------------- */

/* A failure seen on the lane published with @epoch. See the header comment. */
struct vbi_path_decision vbi_path_fail(struct vbi_path *p, uint32_t epoch, uint64_t now,
				       unsigned flags);

/* Publish @lane (may be NULL: unpublish) in the current policy mode, bump
 * the epoch (*@epoch gets it when non-NULL). Returns the previously
 * published lane (NULL if none, or if it is @lane itself: nothing to
 * retire); retire it after vbi_rcu_synchronize(). */
void *vbi_path_switch(struct vbi_path *p, void *lane, uint64_t now, uint32_t *epoch);

/* Recovery done (the new lane is published and the window retransmitted):
 * admissions go back to "post now". Returns how many publishes were
 * admitted (queued or refused) during the recovery, or 0 when none was in
 * progress. */
int vbi_path_resume(struct vbi_path *p, uint64_t now);

/* Install @lane (fully warmed, of the current mode) as the standby; returns
 * the previous standby (NULL if none) for the caller to retire. */
void *vbi_path_set_standby(struct vbi_path *p, void *lane);
/* Is a standby installed? (a snapshot) */
int vbi_path_has_standby(struct vbi_path *p);
/* Take the standby out (NULL if none). */
void *vbi_path_take_standby(struct vbi_path *p);

/* The policy's current mode (may lead the published lane's: after a
 * DEGRADE, the mode to build the next lane in). */
enum vb_qp_type vbi_path_mode(struct vbi_path *p);
/* The mode worth probing: cfg.best when promote_direct, else one step up;
 * the current mode itself when there is nothing better. */
enum vb_qp_type vbi_path_probe_target(struct vbi_path *p);
/* Report a probe of @mode (better than the current one). Returns 1 when
 * @mode is due for promotion (healthy for its hold), 0 otherwise, -EINVAL
 * when @mode is not better than the current mode or outside best..worst. */
int vbi_path_probe(struct vbi_path *p, enum vb_qp_type mode, int ok, uint64_t now);
/* Promote to @mode publishing @lane (built in @mode). *@old gets the lane
 * published before (retire it after a grace period); *@epoch (may be NULL)
 * the new epoch. The standby stays (of the old mode: replace it with
 * vbi_path_set_standby). 0, or -EINVAL (@mode not better, or @lane NULL). */
int vbi_path_promote(struct vbi_path *p, enum vb_qp_type mode, void *lane, uint64_t now,
		     void **old, uint32_t *epoch);

/* Counters and time in each mode up to @now. */
void vbi_path_stats(struct vbi_path *p, uint64_t now, struct vbi_path_stats *out);

const char *vbi_path_action_name(enum vbi_path_action a);
const char *vbi_path_ev_name(enum vbi_path_ev_type t);
const char *vbi_path_mode_name(enum vb_qp_type m);

#endif
