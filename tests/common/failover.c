/* SPDX-License-Identifier: MIT */
/* Failover runs: see failover.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/failover.h"
#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)

/* Shared between the two processes (MAP_SHARED). */
struct shm {
	uint16_t port;
	int sub_ready, go, pub_done, sub_done, abort, dump;
	uint64_t published[VBT_FO_MAX_TOPICS];
	uint64_t delivered[VBT_FO_MAX_TOPICS], lost[VBT_FO_MAX_TOPICS];
	uint64_t ooo, dup, corrupt;
	unsigned faults;           /* faults done (tried): releases the holds */
	unsigned armed;            /* faults whose side is ready (a warm standby) */
	unsigned caused;           /* of those, the ones whose hook returned 0 */
	int fault_rc[VBT_FO_MAX_FAULTS];
	uint64_t fault_ns[VBT_FO_MAX_FAULTS];
	uint64_t first_ns[VBT_FO_MAX_FAULTS];
	uint64_t cold_ns;
	vb_stats_t sub_stats;
	struct vbt_held held[2]; /* check_held: before fault 1, the last */
	char why[256];
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t vbt_fo_pct(uint64_t *v, unsigned n, double p)
{
	if (!n)
		return 0;
	for (unsigned i = 1; i < n; i++) /* insertion sort: n <= 64 */
		for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
			uint64_t t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return v[(unsigned)((p / 100.0) * (n - 1) + 0.5)];
}

/* ---- faults ----------------------------------------------------------------------------- */

int vbt_fo_fault_qp_err(vb_node_t *node, unsigned k, void *arg)
{
	(void)k;
	(void)arg;
	return vb_node_inject_fault(node, NULL, VB_FAULT_QP_ERR);
}

int vbt_fo_fault_loc_prot(vb_node_t *node, unsigned k, void *arg)
{
	(void)k;
	(void)arg;
	return vb_node_inject_fault(node, NULL, VB_FAULT_LOC_PROT);
}

int vbt_fo_fault_rem_access(vb_node_t *node, unsigned k, void *arg)
{
	(void)k;
	(void)arg;
	return vb_node_inject_fault(node, NULL, VB_FAULT_REM_ACCESS);
}

int vbt_fo_fault_shell(vb_node_t *node, unsigned k, void *arg)
{
	(void)node;
	(void)k;
	return system((const char *)arg) == 0 ? 0 : -EIO;
}

/* ---- both sides ------------------------------------------------------------------------ */

static const struct vbt_fo_cfg *cfg;
static struct shm *sh;

static void topic_name(unsigned t, char *buf, size_t n)
{
	snprintf(buf, n, "fo.%u", t);
}

static size_t msg_len(unsigned t, uint64_t i)
{
	return vbt_msg_len(t + 1, i, cfg->min_len, cfg->max_len);
}

static void on_event(const vb_event_t *ev, void *arg)
{
	if (cfg->quiet)
		return;
	if (ev->type == VB_EV_FAILOVER || ev->type == VB_EV_RECOVERED ||
	    ev->type == VB_EV_PATH_DOWN || ev->type == VB_EV_PEER_DOWN ||
	    ev->type == VB_EV_DEGRADED || ev->type == VB_EV_PROMOTED)
		fprintf(stderr, "  [%s] event %d peer '%s': %s\n", (const char *)arg, (int)ev->type,
			ev->peer, ev->detail);
}

static void ctx_attr(vb_ctx_attr_t *a, const char *who)
{
	vb_ctx_attr_init(a);
	a->ip = cfg->ip;
	a->standby_ip = cfg->standby_ip;
	a->on_event = on_event;
	a->event_arg = (void *)who;
}

static uint64_t run_timeout_ms(void)
{
	return (cfg->timeout_s ? cfg->timeout_s : 200) * 1000ull;
}

/* A warm standby on this side for fault @k (the k+1-th warmed)? */
static bool standby_warm(vb_ctx_t *ctx, unsigned k)
{
	vb_stats_t s;

	vb_ctx_stats(ctx, &s);
	return s.standbys_warmed >= k + 1;
}

/* Before fault @k: a warm standby on this side (bounded wait). */
static void wait_standby(vb_ctx_t *ctx, unsigned k)
{
	uint64_t t0 = vbt_now_ms();

	if (!cfg->wait_standby)
		return;
	do {
		if (standby_warm(ctx, k))
			return;
		usleep(2000);
	} while (vbt_now_ms() - t0 < 60000);
	fprintf(stderr, "  (no warm standby before fault %u after 60 s: it goes ahead)\n", k);
}

static unsigned cur_fault; /* the fault being caused (fault_ctx may mark it) */

void vbt_fo_mark_fault(void)
{
	ST(&sh->fault_ns[cur_fault], mono_ns());
}

/* Messages (topic 0) before fault @k may be caused. */
static uint64_t fault_threshold(unsigned k)
{
	return cfg->fault_at[k] ? cfg->fault_at[k] : (cfg->msgs * (k + 1)) / (cfg->nfaults + 1);
}

/*
 * With the faults on the subscriber's side (caused from its wait loop when
 * enough has arrived), the publishers hold message @fault_hold(k) of every
 * topic until fault k is done: the stream cannot drain before a fault
 * whatever the host's speed, and at least one message follows each fault.
 */
static uint64_t fault_hold(unsigned k)
{
	uint64_t slack = cfg->hold_slack ? cfg->hold_slack
					 : cfg->msgs / (2 * (cfg->nfaults + 1));
	uint64_t at = fault_threshold(k) + (slack ? slack : 1);

	return at < cfg->msgs ? at : cfg->msgs - 1;
}

/*
 * With @wait_standby and the faults on the subscriber's side, the stream
 * must still flow when a fault comes (a failover is timed to the first
 * message that follows it over the standby): waiting for the standby at
 * the fault itself would let the publishers drain to their hold first, and
 * the time measured would then include their wake-up from it. So the
 * publishers pause ahead of the fault (fault_arm_at) until the faulting
 * side says its standby is warm (arm_fault, from its wait loop), then
 * run on through the fault.
 */
static bool arming(void)
{
	return cfg->side == VBT_FO_SUB && cfg->wait_standby;
}

/* Messages (topic 0) before which the publishers wait for fault @k's arming:
 * half the hold's slack ahead of the fault. */
static uint64_t fault_arm_at(unsigned k)
{
	uint64_t at = fault_threshold(k), lead = (fault_hold(k) - at + 1) / 2;

	return at > lead ? at - lead : 0;
}

/* Faulting side's wait loop: fault @k armed once its standby is warm (or
 * after 60 s without one: wait_standby says so at the fault). */
static void arm_fault(vb_ctx_t *ctx)
{
	static uint64_t since;
	unsigned k = LD(&sh->faults);

	if (!arming() || k >= cfg->nfaults || LD(&sh->armed) > k)
		return;
	if (!since)
		since = vbt_now_ms();
	if (standby_warm(ctx, k) || vbt_now_ms() - since > 60000) {
		ST(&sh->armed, k + 1);
		since = 0;
	}
}

/* A fault hook's error that may go away (no active lane at that moment):
 * tried again for a while. */
static bool fault_retryable(int rc)
{
	return rc == -EAGAIN || rc == -ENOTCONN || rc == -ENOENT || rc == -EBUSY;
}

/* Cause the faults whose thresholds @count has reached. Only a fault whose
 * hook succeeded counts as caused; either way it is done (the holds
 * release) and its result is kept for the audit. */
static void maybe_fault(vb_ctx_t *ctx, vb_node_t *node, uint64_t count)
{
	unsigned k = sh->faults;
	uint64_t t0;
	int rc;

	if (k >= cfg->nfaults || count < fault_threshold(k))
		return;
	wait_standby(ctx, k);
	/* what this process holds (check_held), published by the release of
	 * sh->faults below; the parent reads it after the run */
	if (cfg->check_held && (k == 1 || k + 1 == cfg->nfaults))
		(void)vbt_held_stable(ctx, &sh->held[k == 1 ? 0 : 1]);
	cur_fault = k;
	for (t0 = vbt_now_ms();; usleep(10000)) {
		ST(&sh->fault_ns[k], mono_ns());
		rc = cfg->fault_ctx ? cfg->fault_ctx(ctx, node, k, cfg->arg)
				    : cfg->fault(node, k, cfg->arg);
		if (!fault_retryable(rc) || vbt_now_ms() - t0 > 10000)
			break;
	}
	sh->fault_rc[k] = rc;
	if (rc) {
		ST(&sh->fault_ns[k], 0); /* nothing to measure from */
		fprintf(stderr, "  fault %u not caused: %d %s\n", k, rc, vb_errmsg());
	} else {
		ST(&sh->caused, LD(&sh->caused) + 1);
	}
	ST(&sh->faults, k + 1);
	if (!cfg->quiet)
		fprintf(stderr, "  fault %u %s at %" PRIu64 " messages\n", k, rc ? "tried" : "caused",
			count);
}

/* Publisher threads, before message @i: wait while a subscriber-side fault
 * that must come first is not done (or, from fault_arm_at on, not armed),
 * and before the last tenth while a fault's effect has not settled. 0, or
 * -ETIMEDOUT/-ECANCELED. */
static int hold_for_faults(uint64_t i, uint64_t t0)
{
	unsigned k;

	if (cfg->settled && i >= cfg->msgs - cfg->msgs / 10)
		while (LD(&sh->faults) < cfg->nfaults || !cfg->settled(cfg->arg)) {
			if (LD(&sh->abort) || LD(&sh->sub_done))
				return -ECANCELED;
			if (vbt_now_ms() - t0 > run_timeout_ms())
				return -ETIMEDOUT;
			usleep(1000);
		}
	if (cfg->side != VBT_FO_SUB)
		return 0;
	while ((k = LD(&sh->faults)) < cfg->nfaults &&
	       (i >= fault_hold(k) || (arming() && LD(&sh->armed) <= k && i >= fault_arm_at(k)))) {
		if (LD(&sh->abort) || LD(&sh->sub_done))
			return -ECANCELED;
		if (vbt_now_ms() - t0 > run_timeout_ms())
			return -ETIMEDOUT;
		usleep(200);
	}
	return 0;
}

/* ---- subscriber process ------------------------------------------------------------------- */

struct rxstate {
	unsigned t;
	uint64_t next;
	uint32_t epoch;
};

static struct rxstate rxs[VBT_FO_MAX_TOPICS];

static void note_epoch(uint32_t epoch)
{
	uint64_t now = mono_ns();
	unsigned nf = LD(&sh->faults);

	/* the first message over a new connection after each pending fault */
	for (unsigned k = 0; k < nf; k++)
		if (!LD(&sh->first_ns[k]) && LD(&sh->fault_ns[k]) && now > LD(&sh->fault_ns[k]))
			ST(&sh->first_ns[k], now - LD(&sh->fault_ns[k]));
	(void)epoch;
}

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rxstate *r = arg;
	const char *why = "length";

	(void)sub;
	if (cfg->cls == VB_ORDERED) {
		if (m->seq != r->next) {
			if (m->seq < r->next)
				ADD(&sh->dup, 1);
			else
				ADD(&sh->ooo, 1);
			if (LD(&sh->ooo) + LD(&sh->dup) < 5)
				fprintf(stderr, "  sub: topic %u seq %" PRIu64 ", expected %" PRIu64 "\n",
					r->t, m->seq, r->next);
		}
		if (r->next && m->epoch > r->epoch)
			note_epoch(m->epoch);
		if (m->epoch > r->epoch)
			r->epoch = m->epoch;
	} else if (LD(&sh->faults) && !LD(&sh->first_ns[LD(&sh->faults) - 1])) {
		note_epoch(0);
	}
	if (m->len != msg_len(r->t, m->seq - 1) ||
	    vbt_msg_verify(m->data, m->len, r->t + 1, m->seq - 1, &why)) {
		if (ADD(&sh->corrupt, 1) < 3)
			fprintf(stderr, "  sub: topic %u seq %" PRIu64 " corrupt: %s\n", r->t, m->seq,
				why);
	}
	r->next = m->seq + 1;
	ADD(&sh->delivered[r->t], 1);
}

static void on_gap(vb_sub_t *sub, uint32_t publisher, uint64_t lost, uint64_t next, void *arg)
{
	struct rxstate *r = arg;

	(void)sub;
	(void)publisher;
	(void)next;
	ADD(&sh->lost[r->t], lost);
}

static int sub_done_yet(void)
{
	if (!LD(&sh->pub_done))
		return 0;
	for (unsigned t = 0; t < cfg->topics; t++)
		if (LD(&sh->delivered[t]) + LD(&sh->lost[t]) < LD(&sh->published[t]))
			return 0;
	return 1;
}

static int sub_main(void *arg)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node, *cold;
	vb_sub_t *subs[VBT_FO_MAX_TOPICS];
	uint64_t t0;
	int rc = 1;

	(void)arg;
	ctx_attr(&ca, "sub");
	if (vb_ctx_create(&ca, &ctx)) {
		snprintf(sh->why, sizeof(sh->why), "sub ctx: %s", vb_errmsg());
		ST(&sh->abort, 1);
		return 2;
	}
	vb_node_attr_init(&na);
	na.name = "fo-sub";
	if (vb_node_create(ctx, &na, &node))
		goto out_ctx;
	for (unsigned t = 0; t < cfg->topics; t++) {
		char name[32];

		topic_name(t, name, sizeof(name));
		rxs[t].t = t;
		rxs[t].next = 1;
		vb_sub_attr_init(&sa);
		sa.on_msg = on_msg;
		sa.on_gap = on_gap;
		sa.arg = &rxs[t];
		if (vb_sub_create(node, name, cfg->cls, &sa, &subs[t]))
			goto out_node;
	}
	for (t0 = vbt_now_ms(); !LD(&sh->port) && !LD(&sh->abort); usleep(1000))
		if (vbt_now_ms() - t0 > 60000)
			goto out_subs;
	if (vb_node_connect(node, cfg->ip, LD(&sh->port))) {
		snprintf(sh->why, sizeof(sh->why), "sub connect: %s", vb_errmsg());
		goto out_subs;
	}
	ST(&sh->sub_ready, 1);
	t0 = vbt_now_ms();
	while (!sub_done_yet() && !LD(&sh->abort)) {
		static uint64_t last_print;

		if (cfg->side == VBT_FO_SUB && LD(&sh->go)) { /* FANOUT: lost ones arrived too */
			arm_fault(ctx);
			maybe_fault(ctx, node, LD(&sh->delivered[0]) + LD(&sh->lost[0]));
		}
		usleep(500);
		if (vbt_now_ms() - last_print >= 10000) { /* progress on long runs */
			static uint64_t last_delivered = UINT64_MAX;

			last_print = vbt_now_ms();
			uint64_t pubd = 0, deld = 0;

			for (unsigned t = 0; t < cfg->topics; t++) {
				pubd += LD(&sh->published[t]);
				deld += LD(&sh->delivered[t]);
			}
			if (deld == last_delivered) { /* stalled: say why, both sides */
				vb_node_dump(node, stderr);
				ST(&sh->dump, 1);
			}
			last_delivered = deld;
			fprintf(stderr, "  %s: published %" PRIu64 ", delivered %" PRIu64 ", faults %u\n",
				cfg->name, pubd, deld, LD(&sh->faults));
		}
		if (vbt_now_ms() - t0 > run_timeout_ms()) { /* under ctest's, so restore runs */
			snprintf(sh->why, sizeof(sh->why), "sub: not everything arrived in %u s",
				 (unsigned)(run_timeout_ms() / 1000));
			goto out_subs;
		}
	}
	if (cfg->settle && cfg->side == VBT_FO_SUB && !LD(&sh->abort) &&
	    cfg->settle(ctx, node, cfg->arg)) {
		snprintf(sh->why, sizeof(sh->why), "sub: settle: %s", vb_errmsg());
		goto out_subs;
	}
	/* For comparison: fresh RC connections (CM + handshake), same run;
	 * the median of 5. */
	if (!cfg->no_cold) {
		uint64_t v[5];
		unsigned n = 0;

		for (unsigned k = 0; k < 5; k++) {
			vb_node_attr_init(&na);
			na.name = "fo-cold";
			if (vb_node_create(ctx, &na, &cold))
				break;
			uint64_t c0 = mono_ns();

			if (vb_node_connect(cold, cfg->ip, LD(&sh->port)) == 0)
				v[n++] = mono_ns() - c0;
			vb_node_destroy(cold);
		}
		ST(&sh->cold_ns, vbt_fo_pct(v, n, 50));
	}
	rc = 0;
out_subs:
	vb_ctx_stats(ctx, &sh->sub_stats);
	ST(&sh->sub_done, 1);
	/* the publisher reads our results, then lets us go */
	for (t0 = vbt_now_ms(); !LD(&sh->abort) && LD(&sh->sub_done) != 2 &&
	     vbt_now_ms() - t0 < 60000;)
		usleep(1000);
	for (unsigned t = 0; t < cfg->topics; t++)
		if (subs[t])
			vb_sub_destroy(subs[t]);
out_node:
	vb_node_destroy(node);
out_ctx:
	vb_ctx_destroy(ctx);
	return rc;
}

/* The subscriber saw no progress and asked for the publisher's state:
 * true for the one caller that takes the request. */
static bool dump_once(void)
{
	int want = 1;

	return __atomic_compare_exchange_n(&sh->dump, &want, 2, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

/* ---- publisher process ----------------------------------------------------------------------- */

struct pubthr {
	pthread_t th;
	unsigned t;
	vb_pub_t *pub;
	vb_ctx_t *ctx;
	vb_node_t *node;
	int rc;
};

static void *pub_thread(void *arg)
{
	struct pubthr *p = arg;
	uint8_t *buf = malloc(cfg->max_len ? cfg->max_len : 1);
	uint64_t t0 = vbt_now_ms();

	if (!buf) {
		p->rc = -ENOMEM;
		return NULL;
	}
	for (uint64_t i = 0; i < cfg->msgs;) {
		size_t len = msg_len(p->t, i);
		int rc;

		if (p->t == 0 && cfg->side == VBT_FO_PUB)
			maybe_fault(p->ctx, p->node, i);
		if ((rc = hold_for_faults(i, t0))) {
			snprintf(sh->why, sizeof(sh->why),
				 "publish topic %u: held at #%" PRIu64 " for fault %u: %s", p->t, i,
				 LD(&sh->faults), rc == -ETIMEDOUT ? "timed out" : "run ended");
			p->rc = rc;
			break;
		}
		vbt_msg_fill(buf, len, p->t + 1, i);
		rc = vb_publish(p->pub, buf, len, NULL);
		if (rc == 0) {
			i++;
			ST(&sh->published[p->t], i);
			continue;
		}
		if (dump_once())
			vb_node_dump(p->node, stderr);
		if (rc != -EAGAIN) {
			snprintf(sh->why, sizeof(sh->why), "publish topic %u #%" PRIu64 ": %s", p->t,
				 i, vb_errmsg());
			p->rc = rc;
			break;
		}
		if (LD(&sh->abort) || LD(&sh->sub_done) || vbt_now_ms() - t0 > run_timeout_ms()) {
			snprintf(sh->why, sizeof(sh->why), "publish topic %u stuck at #%" PRIu64,
				 p->t, i);
			p->rc = -ETIMEDOUT;
			break;
		}
		usleep(100);
	}
	free(buf);
	return NULL;
}

/* Append one failed clause to @res->why ("; "-separated). */
static void clause(struct vbt_fo_result *res, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void clause(struct vbt_fo_result *res, const char *fmt, ...)
{
	size_t n = strlen(res->why);
	va_list ap;

	if (n && n + 2 < sizeof(res->why)) {
		memcpy(res->why + n, "; ", 3);
		n += 2;
	}
	va_start(ap, fmt);
	vsnprintf(res->why + n, sizeof(res->why) - n, fmt, ap);
	va_end(ap);
}

/* The verdict, each failed clause named in @res->why (after what the run
 * itself reported). */
static void audit(const struct vbt_fo_cfg *c, struct vbt_fo_result *res, int rc, int st)
{
	uint64_t want = (uint64_t)c->topics * c->msgs;
	size_t before;

	if (!res->why[0] && sh->why[0])
		snprintf(res->why, sizeof(res->why), "%s", sh->why);
	before = strlen(res->why);
	if (rc)
		clause(res, "run: %d (%s)", rc, strerror(-rc));
	if (st)
		clause(res, "subscriber process: exit %d", st);
	if (res->faults != c->nfaults) {
		clause(res, "faults caused: %u of %u", res->faults, c->nfaults);
		for (unsigned k = 0; k < res->faults_tried; k++)
			if (sh->fault_rc[k])
				clause(res, "fault %u: %d (%s)", k, sh->fault_rc[k],
				       strerror(-sh->fault_rc[k]));
	}
	if (res->published != want)
		clause(res, "published: %" PRIu64 " of %" PRIu64, res->published, want);
	if (res->out_of_order)
		clause(res, "out of order: %" PRIu64, res->out_of_order);
	if (res->duplicates)
		clause(res, "duplicates: %" PRIu64, res->duplicates);
	if (res->corrupt)
		clause(res, "corrupt: %" PRIu64, res->corrupt);
	if (c->cls == VB_ORDERED && res->delivered != res->published)
		clause(res, "delivered: %" PRIu64 " of %" PRIu64, res->delivered, res->published);
	if (c->cls == VB_ORDERED && res->lost)
		clause(res, "reported lost (ORDERED): %" PRIu64, res->lost);
	if (c->cls != VB_ORDERED && res->delivered + res->lost != res->published)
		clause(res, "delivered + lost: %" PRIu64 " + %" PRIu64 " != published %" PRIu64,
		       res->delivered, res->lost, res->published);
	if (c->check_held &&
	    (res->held[0].fds <= 0 || res->held[1].fds != res->held[0].fds ||
	     res->held[0].threads <= 0 || res->held[1].threads != res->held[0].threads ||
	     res->held[1].live_lanes > res->held[0].live_lanes + 2))
		clause(res, "held by the faulting side before fault 1 / fault %u: descriptors %d / "
		       "%d, threads %d / %d, live lanes %" PRIu64 " / %" PRIu64, c->nfaults - 1,
		       res->held[0].fds, res->held[1].fds, res->held[0].threads,
		       res->held[1].threads, res->held[0].live_lanes, res->held[1].live_lanes);
	res->ok = strlen(res->why) == before && !rc && !st;
}

int vbt_failover_run(const struct vbt_fo_cfg *c, struct vbt_fo_result *res)
{
	struct pubthr thr[VBT_FO_MAX_TOPICS] = { 0 };
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_ctx_t *ctx = NULL;
	vb_node_t *node = NULL;
	pid_t child;
	uint64_t t0;
	int rc = 0, st;

	memset(res, 0, sizeof(*res));
	if (!c->topics || c->topics > VBT_FO_MAX_TOPICS || c->nfaults > VBT_FO_MAX_FAULTS ||
	    c->msgs < 2 || (!c->fault && !c->fault_ctx) || (c->check_held && c->nfaults < 3))
		return -EINVAL;
	cfg = c;
	for (unsigned k = 0; k < c->nfaults; k++) /* each threshold reachable, in order */
		if (fault_threshold(k) >= c->msgs || (k && fault_threshold(k) < fault_threshold(k - 1)))
			return -EINVAL;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return -errno;
	memset(sh, 0, sizeof(*sh));
	child = vbt_spawn(sub_main, NULL); /* before any verbs object exists here */
	if (child <= 0) {
		munmap(sh, sizeof(*sh));
		return -ECHILD;
	}
	ctx_attr(&ca, "pub");
	if ((rc = vb_ctx_create(&ca, &ctx))) {
		snprintf(res->why, sizeof(res->why), "pub ctx: %s", vb_errmsg());
		goto out;
	}
	vb_node_attr_init(&na);
	na.name = "fo-pub";
	na.listen_ip = c->ip;
	if ((rc = vb_node_create(ctx, &na, &node))) {
		snprintf(res->why, sizeof(res->why), "pub node: %s", vb_errmsg());
		goto out;
	}
	for (unsigned t = 0; t < c->topics; t++) {
		char name[32];

		topic_name(t, name, sizeof(name));
		vb_pub_attr_init(&pa);
		pa.ack_quorum = c->cls == VB_ORDERED ? 1 : 0;
		pa.slow_sub_ms = VBT_NO_SLOW_CUT_MS;
		thr[t].t = t;
		thr[t].ctx = ctx;
		thr[t].node = node;
		if ((rc = vb_pub_create(node, name, c->cls, &pa, &thr[t].pub))) {
			snprintf(res->why, sizeof(res->why), "pub create: %s", vb_errmsg());
			goto out;
		}
	}
	ST(&sh->port, vb_node_port(node));
	for (t0 = vbt_now_ms();;) {
		unsigned ready = 0;

		for (unsigned t = 0; t < c->topics; t++)
			ready += vb_pub_subscribers(thr[t].pub) == 1;
		if (ready == c->topics && LD(&sh->sub_ready))
			break;
		if (vbt_now_ms() - t0 > 60000 || LD(&sh->sub_done)) {
			rc = -ETIMEDOUT;
			snprintf(res->why, sizeof(res->why), "subscriber not there after 60 s: %.200s",
				 sh->why);
			goto out;
		}
		usleep(2000);
	}
	if (c->wait_standby)
		wait_standby(ctx, 0);
	ST(&sh->go, 1);
	for (unsigned t = 0; t < c->topics; t++)
		pthread_create(&thr[t].th, NULL, pub_thread, &thr[t]);
	for (unsigned t = 0; t < c->topics; t++) {
		/* the publishing threads dump the node when the subscriber
		 * asks and they are blocked; when they are all done, we do */
		while (pthread_tryjoin_np(thr[t].th, NULL) == EBUSY) {
			if (LD(&sh->abort) == 0 && dump_once())
				vb_node_dump(node, stderr);
			usleep(2000);
		}
		thr[t].th = 0;
		if (thr[t].rc)
			rc = thr[t].rc;
	}
	if (rc)
		goto out;
	if (c->cls == VB_ORDERED)
		for (unsigned t = 0; t < c->topics; t++)
			if (vb_pub_wait_acked(thr[t].pub, c->msgs, 30000)) {
				snprintf(res->why, sizeof(res->why), "topic %u: %s", t, vb_errmsg());
				vb_node_dump(node, stderr);
				rc = -ETIMEDOUT;
				goto out;
			}
	ST(&sh->pub_done, 1);
	for (t0 = vbt_now_ms(); !LD(&sh->sub_done); usleep(2000))
		/* the subscriber times 5 fresh connections, each bounded
		 * by cm_timeout_ms (5 s) */
		if (vbt_now_ms() - t0 > (c->settle ? 90000u : 60000u)) {
			rc = -ETIMEDOUT;
			snprintf(res->why, sizeof(res->why), "subscriber did not finish in %u s",
				 c->settle ? 90u : 60u);
			goto out;
		}
out:
	if (rc)
		ST(&sh->abort, 1);
	for (unsigned t = 0; t < c->topics; t++) {
		res->published += LD(&sh->published[t]);
		res->delivered += LD(&sh->delivered[t]);
		res->lost += LD(&sh->lost[t]);
	}
	res->out_of_order = LD(&sh->ooo);
	res->duplicates = LD(&sh->dup);
	res->corrupt = LD(&sh->corrupt);
	res->faults = LD(&sh->caused);
	res->faults_tried = LD(&sh->faults);
	for (unsigned k = 0; k < res->faults_tried; k++)
		if (LD(&sh->first_ns[k]))
			res->first_ns[res->measured++] = LD(&sh->first_ns[k]);
	res->cold_connect_ns = LD(&sh->cold_ns);
	memcpy(res->held, sh->held, sizeof(res->held));
	res->sub_stats = sh->sub_stats;
	if (ctx)
		vb_ctx_stats(ctx, &res->pub_stats);
	/* undo the fault while both sides still run (a link comes back
	 * under live connections), then tear down */
	if (c->restore)
		c->restore(c->arg);
	ST(&sh->sub_done, 2);
	st = vbt_wait(child, 120);
	for (unsigned t = 0; t < c->topics; t++)
		if (thr[t].pub)
			vb_pub_destroy(thr[t].pub);
	if (node)
		vb_node_destroy(node);
	if (ctx)
		vb_ctx_destroy(ctx);
	if (!res->why[0] && sh->why[0])
		snprintf(res->why, sizeof(res->why), "%s", sh->why);
	audit(c, res, rc, st);
	munmap(sh, sizeof(*sh));
	return 0;
}
