/* SPDX-License-Identifier: MIT */
/* core/path policy with injected time: failover, dedup of one incident's
 * reports, back-pressure while recovering, N-failures-in-T degradation,
 * DOWN, promotion hold + probes, relapse doubling the hold, step promotion,
 * time in each mode, configuration and environment overrides. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/path.h"

#define MS 1000000ull

struct evlog {
	struct vbi_path_event ev[64];
	int n;
};

static void on_event(const struct vbi_path_event *ev, void *arg)
{
	struct evlog *l = arg;

	assert_true(l->n < 64);
	l->ev[l->n++] = *ev;
}

static struct vbi_path_cfg test_cfg(void)
{
	struct vbi_path_cfg c;

	vbi_path_cfg_init(&c);
	c.degrade_failures = 3;
	c.degrade_window_ns = 100 * MS;
	c.promote_hold_ns = 2000 * MS;
	c.promote_hold_max_ns = 8000 * MS;
	c.relapse_window_ns = 10000 * MS;
	c.promote_probes = 3;
	c.promote_direct = 1;
	c.recovery_queue = 0;
	return c;
}

static int lanes[16]; /* lane identities: &lanes[i] */
#define L(i) ((void *)&lanes[i])

static void test_cfg_env_and_validation(void **state)
{
	struct vbi_path_cfg c;
	struct vbi_path p;

	setenv("VERBUS_DEGRADE_FAILURES", "5", 1);
	setenv("VERBUS_DEGRADE_WINDOW_MS", "250", 1);
	setenv("VERBUS_PROMOTE_HOLD_MS", "bogus", 1);
	setenv("VERBUS_RECOVERY_QUEUE", "16", 1);
	vbi_path_cfg_init(&c);
	assert_int_equal(c.degrade_failures, 5);
	assert_int_equal(c.degrade_window_ns, 250 * MS);
	assert_int_equal(c.promote_hold_ns, 2000 * MS); /* bad value ignored */
	assert_int_equal(c.recovery_queue, 16);
	setenv("VERBUS_DEGRADE_FAILURES", "65", 1); /* over the ring size */
	vbi_path_cfg_init(&c);
	assert_int_equal(c.degrade_failures, 3);
	unsetenv("VERBUS_DEGRADE_FAILURES");
	unsetenv("VERBUS_DEGRADE_WINDOW_MS");
	unsetenv("VERBUS_PROMOTE_HOLD_MS");
	unsetenv("VERBUS_RECOVERY_QUEUE");
	vbi_path_cfg_init(&c);
	assert_int_equal(c.degrade_failures, 3);
	assert_int_equal(c.degrade_window_ns, 1000 * MS);
	assert_int_equal(c.best, VB_QPT_RC);
	assert_int_equal(c.worst, VB_QPT_UD);

	c.degrade_failures = 0;
	assert_int_equal(vbi_path_init(&p, &c, 0, NULL, NULL), -EINVAL);
	vbi_path_cfg_init(&c);
	c.best = VB_QPT_UD;
	c.worst = VB_QPT_RC;
	assert_int_equal(vbi_path_init(&p, &c, 0, NULL, NULL), -EINVAL);
	vbi_path_cfg_init(&c);
	c.degrade_window_ns = 0;
	assert_int_equal(vbi_path_init(&p, &c, 0, NULL, NULL), -EINVAL);
	assert_int_equal(vbi_path_init(&p, NULL, 0, NULL, NULL), 0);
	assert_int_equal(p.cur, VB_QPT_RC);
	vbi_path_fini(&p);
}

static void test_failover_to_standby(void **state)
{
	struct vbi_path_cfg c = test_cfg();
	struct evlog log = { .n = 0 };
	struct vbi_path p;
	struct vbi_path_decision d;
	struct vbi_path_view v;
	struct vbi_path_stats st;
	uint32_t ep = 0;

	assert_int_equal(vbi_path_init(&p, &c, 1000, on_event, &log), 0);
	assert_null(vbi_path_switch(&p, L(0), 1000, &ep)); /* first lane */
	assert_int_equal(ep, 1);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.ev[0].type, VBI_PATH_EV_SWITCH);
	assert_null(vbi_path_set_standby(&p, L(1)));
	vbi_rcu_register_thread();
	vbi_rcu_read_lock();
	vbi_path_read(&p, &v);
	vbi_rcu_read_unlock();
	assert_ptr_equal(v.lane, L(0));
	assert_int_equal(v.epoch, 1);
	assert_int_equal(v.mode, VB_QPT_RC);
	assert_int_equal(v.recovering, 0);
	assert_int_equal(vbi_path_admit(&p), 0);

	d = vbi_path_fail(&p, 1, 5000, 0);
	assert_int_equal(d.action, VBI_PATH_SWITCH_TO_STANDBY);
	assert_ptr_equal(d.lane, L(1));
	assert_int_equal(d.mode, VB_QPT_RC);
	assert_true(vbi_path_recovering(&p));
	assert_null(vbi_path_take_standby(&p)); /* taken by the decision */
	/* the same incident reported again (flushes, async event) */
	assert_int_equal(vbi_path_fail(&p, 1, 5001, 0).action, VBI_PATH_IN_PROGRESS);
	/* a failure reported against an older lane */
	assert_int_equal(vbi_path_fail(&p, 0, 5002, 0).action, VBI_PATH_STALE);
	/* publishers see back-pressure (bound 0) */
	assert_int_equal(vbi_path_admit(&p), -EAGAIN);
	assert_int_equal(vbi_path_admit(&p), -EAGAIN);

	assert_ptr_equal(vbi_path_switch(&p, d.lane, 6000, &ep), L(0));
	assert_int_equal(ep, 2);
	assert_int_equal(log.ev[log.n - 1].type, VBI_PATH_EV_FAILOVER);
	assert_int_equal(log.ev[log.n - 1].epoch, 2);
	assert_true(vbi_path_recovering(&p)); /* until the window is retransmitted */
	assert_int_equal(vbi_path_resume(&p, 9000), 2);
	assert_int_equal(log.ev[log.n - 1].type, VBI_PATH_EV_RECOVERED);
	assert_int_equal(log.ev[log.n - 1].outage_ns, 4000);
	assert_int_equal(vbi_path_resume(&p, 9100), 0); /* nothing in progress */
	assert_int_equal(vbi_path_admit(&p), 0);
	/* old epoch's stragglers after the recovery */
	assert_int_equal(vbi_path_fail(&p, 1, 9200, 0).action, VBI_PATH_STALE);
	assert_false(vbi_path_recovering(&p));

	vbi_path_stats(&p, 10000, &st);
	assert_int_equal(st.failures, 1);
	assert_int_equal(st.ignored, 3);
	assert_int_equal(st.failovers, 1);
	assert_int_equal(st.switches, 2);
	assert_int_equal(st.recoveries, 1);
	assert_int_equal(st.backpressured, 2);
	assert_int_equal(st.queued, 0);
	assert_int_equal(st.last_outage_ns, 4000);
	assert_int_equal(st.degradations, 0);
	assert_int_equal(st.time_in_mode_ns[VB_QPT_RC], 9000);
	assert_int_equal(st.epoch, 2);

	assert_ptr_equal(vbi_path_switch(&p, NULL, 10000, NULL), L(1));
	vbi_rcu_unregister_thread();
	vbi_path_fini(&p);
}

static void test_recovery_queue_bound_and_rebuild(void **state)
{
	struct vbi_path_cfg c = test_cfg();
	struct vbi_path p;
	struct vbi_path_decision d;
	struct vbi_path_stats st;

	c.recovery_queue = 2;
	assert_int_equal(vbi_path_init(&p, &c, 0, NULL, NULL), 0);
	vbi_path_switch(&p, L(0), 0, NULL);
	d = vbi_path_fail(&p, 1, 10, 0); /* no standby */
	assert_int_equal(d.action, VBI_PATH_REBUILD);
	assert_int_equal(d.mode, VB_QPT_RC);
	assert_null(d.lane);
	assert_int_equal(vbi_path_admit(&p), 1);
	assert_int_equal(vbi_path_admit(&p), 1);
	assert_int_equal(vbi_path_admit(&p), -EAGAIN);
	/* the rebuild failed once: counted although a recovery is running */
	d = vbi_path_fail(&p, 1, 20, VBI_PATH_F_RETRY);
	assert_int_equal(d.action, VBI_PATH_REBUILD);
	/* recovered in place: same lane, new epoch, nothing to retire */
	assert_null(vbi_path_switch(&p, L(0), 30, NULL));
	assert_int_equal(vbi_path_resume(&p, 40), 3);
	/* the next recovery starts with a fresh budget */
	assert_int_equal(vbi_path_fail(&p, 2, 500 * MS, 0).action, VBI_PATH_REBUILD);
	assert_int_equal(vbi_path_admit(&p), 1);
	vbi_path_stats(&p, 500 * MS, &st);
	assert_int_equal(st.queued, 3);
	assert_int_equal(st.backpressured, 1);
	assert_int_equal(st.failures, 3);
	assert_int_equal(st.mode, VB_QPT_RC); /* 2 within 100 ms, 3rd much later */
	vbi_path_switch(&p, NULL, 600 * MS, NULL);
	vbi_path_fini(&p);
}

/* Fail the published lane, switch to a fresh one, resume: one cycle. */
static struct vbi_path_decision fail_cycle(struct vbi_path *p, uint64_t now, int lane)
{
	struct vbi_path_decision d = vbi_path_fail(p, vbi_path_epoch(p), now, 0);

	vbi_path_switch(p, L(lane), now + 1, NULL);
	vbi_path_resume(p, now + 2);
	return d;
}

static void test_degrade_by_failure_rate(void **state)
{
	struct vbi_path_cfg c = test_cfg();
	struct evlog log = { .n = 0 };
	struct vbi_path p;
	struct vbi_path_decision d;
	struct vbi_path_stats st;
	uint64_t t = 0;

	assert_int_equal(vbi_path_init(&p, &c, 0, on_event, &log), 0);
	vbi_path_switch(&p, L(0), 0, NULL);
	/* failures 150 ms apart never reach 3 within 100 ms */
	for (int i = 0; i < 10; i++) {
		t += 150 * MS;
		vbi_path_set_standby(&p, L(1 + i % 2));
		d = fail_cycle(&p, t, 1 + i % 2);
		assert_int_equal(d.action, VBI_PATH_SWITCH_TO_STANDBY);
	}
	vbi_path_stats(&p, t, &st);
	assert_int_equal(st.mode, VB_QPT_RC);
	assert_int_equal(st.failovers, 10);

	/* three within 100 ms: the third degrades to UC, the RC standby is
	 * handed back for retirement */
	t += 1000 * MS;
	vbi_path_set_standby(&p, L(3));
	assert_int_equal(fail_cycle(&p, t, 3).action, VBI_PATH_SWITCH_TO_STANDBY);
	assert_int_equal(fail_cycle(&p, t + 40 * MS, 4).action, VBI_PATH_REBUILD);
	vbi_path_set_standby(&p, L(5));
	log.n = 0;
	d = vbi_path_fail(&p, vbi_path_epoch(&p), t + 80 * MS, 0);
	assert_int_equal(d.action, VBI_PATH_DEGRADE);
	assert_int_equal(d.mode, VB_QPT_UC);
	assert_ptr_equal(d.lane, L(5));
	/* the policy's mode leads the published lane's (still the RC one) */
	assert_int_equal(vbi_path_mode(&p), VB_QPT_UC);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.ev[0].type, VBI_PATH_EV_DEGRADE);
	assert_int_equal(log.ev[0].from, VB_QPT_RC);
	assert_int_equal(log.ev[0].to, VB_QPT_UC);
	/* the UC lane is published in UC; no FAILOVER (the mode changed) */
	vbi_path_switch(&p, L(6), t + 90 * MS, NULL);
	assert_int_equal(log.ev[1].type, VBI_PATH_EV_SWITCH);
	vbi_rcu_register_thread();
	{
		struct vbi_path_view v;

		vbi_rcu_read_lock();
		vbi_path_read(&p, &v);
		vbi_rcu_read_unlock();
		assert_int_equal(v.mode, VB_QPT_UC);
		assert_ptr_equal(v.lane, L(6));
	}
	vbi_rcu_unregister_thread();
	vbi_path_resume(&p, t + 95 * MS);

	/* the failure history restarts in UC: two more do not degrade */
	assert_int_equal(fail_cycle(&p, t + 100 * MS, 7).action, VBI_PATH_REBUILD);
	assert_int_equal(fail_cycle(&p, t + 110 * MS, 8).action, VBI_PATH_REBUILD);
	/* the third does: UD */
	d = fail_cycle(&p, t + 120 * MS, 9);
	assert_int_equal(d.action, VBI_PATH_DEGRADE);
	assert_int_equal(d.mode, VB_QPT_UD);
	assert_int_equal(vbi_path_mode(&p), VB_QPT_UD);
	/* UD is the floor: more failures rebuild, never degrade */
	for (int i = 0; i < 5; i++)
		assert_int_equal(fail_cycle(&p, t + (130 + i) * MS, 10).action, VBI_PATH_REBUILD);
	vbi_path_stats(&p, t + 200 * MS, &st);
	assert_int_equal(st.mode, VB_QPT_UD);
	assert_int_equal(st.degradations, 2);
	assert_int_equal(st.time_in_mode_ns[VB_QPT_UC], 40 * MS);
	assert_int_equal(st.time_in_mode_ns[VB_QPT_UD], 80 * MS);
	assert_int_equal(st.time_in_mode_ns[VB_QPT_RC], t + 80 * MS);
	vbi_path_switch(&p, NULL, t, NULL);
	vbi_path_fini(&p);
}

static void test_no_standby_degrades_then_down(void **state)
{
	struct vbi_path_cfg c = test_cfg();
	struct evlog log = { .n = 0 };
	struct vbi_path p;
	struct vbi_path_decision d;
	struct vbi_path_stats st;

	assert_int_equal(vbi_path_init(&p, &c, 0, on_event, &log), 0);
	vbi_path_switch(&p, L(0), 0, NULL);
	d = vbi_path_fail(&p, 1, 10, VBI_PATH_F_NO_STANDBY);
	assert_int_equal(d.action, VBI_PATH_DEGRADE);
	assert_int_equal(d.mode, VB_QPT_UC);
	/* building UC failed as well and no UC lane can be had */
	d = vbi_path_fail(&p, 1, 20, VBI_PATH_F_NO_STANDBY | VBI_PATH_F_RETRY);
	assert_int_equal(d.action, VBI_PATH_DEGRADE);
	assert_int_equal(d.mode, VB_QPT_UD);
	d = vbi_path_fail(&p, 1, 30, VBI_PATH_F_NO_STANDBY | VBI_PATH_F_RETRY);
	assert_int_equal(d.action, VBI_PATH_DOWN);
	assert_int_equal(log.ev[log.n - 1].type, VBI_PATH_EV_DOWN);
	assert_true(vbi_path_recovering(&p));
	assert_int_equal(vbi_path_admit(&p), -EAGAIN);
	/* a UD lane came back after all */
	vbi_path_switch(&p, L(1), 40, NULL);
	vbi_path_resume(&p, 50);
	assert_int_equal(log.ev[log.n - 1].outage_ns, 40);
	vbi_path_stats(&p, 50, &st);
	assert_int_equal(st.downs, 1);
	assert_int_equal(st.degradations, 2);
	assert_int_equal(st.mode, VB_QPT_UD);
	assert_int_equal(st.max_outage_ns, 40);
	vbi_path_switch(&p, NULL, 60, NULL);
	vbi_path_fini(&p);
}

/* Degrade straight to UD (no lanes of RC or UC) at @t. */
static void to_ud(struct vbi_path *p, uint64_t t)
{
	uint32_t ep = vbi_path_epoch(p);

	assert_int_equal(vbi_path_fail(p, ep, t, VBI_PATH_F_NO_STANDBY).action, VBI_PATH_DEGRADE);
	assert_int_equal(vbi_path_fail(p, ep, t, VBI_PATH_F_NO_STANDBY | VBI_PATH_F_RETRY).action,
			 VBI_PATH_DEGRADE);
	vbi_path_switch(p, L(1), t, NULL);
	vbi_path_resume(p, t);
}

static void test_promotion_hold_and_relapse(void **state)
{
	struct vbi_path_cfg c = test_cfg();
	struct evlog log = { .n = 0 };
	struct vbi_path p;
	struct vbi_path_stats st;
	void *old = NULL;
	uint64_t t = 1000 * MS;

	assert_int_equal(vbi_path_init(&p, &c, 0, on_event, &log), 0);
	vbi_path_switch(&p, L(0), 0, NULL);
	assert_int_equal(vbi_path_probe_target(&p), VB_QPT_RC); /* nothing better */
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t), -EINVAL);
	to_ud(&p, t);
	assert_int_equal(vbi_path_probe_target(&p), VB_QPT_RC); /* direct */
	assert_int_equal(vbi_path_probe(&p, VB_QPT_UD, 1, t), -EINVAL);

	/* probes every 500 ms: not due before the 2 s hold */
	for (int i = 0; i < 4; i++)
		assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + i * 500 * MS), 0);
	/* a failed probe restarts the streak */
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 0, t + 1900 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 2000 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 3000 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 3999 * MS), 0); /* 1.999 s */
	/* held long enough, enough probes */
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 4000 * MS), 1);
	/* not while recovering */
	assert_int_equal(vbi_path_fail(&p, vbi_path_epoch(&p), t + 4000 * MS, 0).action,
			 VBI_PATH_REBUILD);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 4100 * MS), 0);
	vbi_path_switch(&p, L(2), t + 4100 * MS, NULL);
	vbi_path_resume(&p, t + 4100 * MS);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 4200 * MS), 1);

	assert_int_equal(vbi_path_promote(&p, VB_QPT_UD, L(3), t, &old, NULL), -EINVAL);
	assert_int_equal(vbi_path_promote(&p, VB_QPT_RC, NULL, t, &old, NULL), -EINVAL);
	log.n = 0;
	assert_int_equal(vbi_path_promote(&p, VB_QPT_RC, L(3), t + 4200 * MS, &old, NULL), 0);
	assert_ptr_equal(old, L(2));
	assert_int_equal(log.n, 1);
	assert_int_equal(log.ev[0].type, VBI_PATH_EV_PROMOTE);
	assert_int_equal(log.ev[0].from, VB_QPT_UD);
	assert_int_equal(log.ev[0].to, VB_QPT_RC);

	/* relapse: RC fails again 1 s later: the next promotion waits 4 s */
	t += 5200 * MS;
	to_ud(&p, t);
	vbi_path_stats(&p, t, &st);
	assert_int_equal(st.relapses, 1);
	assert_int_equal(st.promotions, 1);
	for (int i = 0; i <= 7; i++)
		assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + i * 500 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 4000 * MS), 1);
	assert_int_equal(vbi_path_promote(&p, VB_QPT_RC, L(4), t + 4000 * MS, &old, NULL), 0);
	/* and again: 8 s (the cap) */
	t += 5000 * MS;
	to_ud(&p, t);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 4000 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 7999 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 8000 * MS), 1);
	assert_int_equal(vbi_path_promote(&p, VB_QPT_RC, L(5), t + 8000 * MS, &old, NULL), 0);
	/* a third relapse stays at the cap */
	t += 9000 * MS;
	to_ud(&p, t);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 1000 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 8000 * MS), 1);
	assert_int_equal(vbi_path_promote(&p, VB_QPT_RC, L(6), t + 8000 * MS, &old, NULL), 0);
	/* RC then holds for longer than the relapse window: the next degrade
	 * resets the hold to 2 s */
	t += 8000 * MS + 20000 * MS;
	to_ud(&p, t);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 1000 * MS), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 2000 * MS), 1);
	vbi_path_stats(&p, t, &st);
	assert_int_equal(st.relapses, 3);
	assert_int_equal(st.promotions, 4);
	assert_int_equal(st.degradations, 10);
	assert_int_equal(st.probes_failed, 1);
	vbi_path_switch(&p, NULL, t, NULL);
	vbi_path_fini(&p);
}

static void test_step_promotion(void **state)
{
	struct vbi_path_cfg c = test_cfg();
	struct vbi_path p;
	void *old;
	uint64_t t = 0;

	c.promote_direct = 0;
	c.promote_hold_ns = 0; /* probes alone decide */
	assert_int_equal(vbi_path_init(&p, &c, 0, NULL, NULL), 0);
	vbi_path_switch(&p, L(0), 0, NULL);
	to_ud(&p, t);
	assert_int_equal(vbi_path_probe_target(&p), VB_QPT_UC);
	/* RC healthy is not enough while one step at a time */
	for (int i = 0; i < 5; i++)
		assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + i), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_UC, 1, t + 10), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_UC, 1, t + 11), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_UC, 1, t + 12), 1);
	assert_int_equal(vbi_path_promote(&p, VB_QPT_UC, L(2), t + 12, &old, NULL), 0);
	assert_int_equal(vbi_path_probe_target(&p), VB_QPT_RC);
	/* streaks restart after a mode change */
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 13), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 14), 0);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_RC, 1, t + 15), 1);
	assert_int_equal(vbi_path_probe(&p, VB_QPT_UC, 1, t + 15), -EINVAL);
	vbi_path_switch(&p, NULL, t, NULL);
	vbi_path_fini(&p);
}

static void test_names(void **state)
{
	assert_string_equal(vbi_path_mode_name(VB_QPT_UC), "UC");
	assert_string_equal(vbi_path_action_name(VBI_PATH_DEGRADE), "DEGRADE");
	assert_string_equal(vbi_path_ev_name(VBI_PATH_EV_RECOVERED), "RECOVERED");
	assert_string_equal(vbi_path_ev_name(VBI_PATH_EV__COUNT), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cfg_env_and_validation),
		cmocka_unit_test(test_failover_to_standby),
		cmocka_unit_test(test_recovery_queue_bound_and_rebuild),
		cmocka_unit_test(test_degrade_by_failure_rate),
		cmocka_unit_test(test_no_standby_degrades_then_down),
		cmocka_unit_test(test_promotion_hold_and_relapse),
		cmocka_unit_test(test_step_promotion),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
