/* SPDX-License-Identifier: MIT */
/*
 * vb_bench lifecycle: what a QP costs to bring up and tear down through the
 * library's own QP lifecycle, the device pool the lanes take their QPs from
 * (engine/qpool.h, called by engine/lanepool.c): cold (a pool miss) vs
 * pre-warmed (a hit) vs recycled through RESET.
 *
 * Per QP type (RC, UD), over --qps N QPs (>= 200 by default), with the same
 * calls a lane makes:
 *   cold:    vbi_qpool_get on an empty pool (a miss: create + RESET->INIT),
 *            then what the transport's connect does (local parameters,
 *            INIT->RTR->RTS); retire: ->ERR + vbi_qpool_put(reuse = false)
 *            (destroy)
 *   pool:    vbi_qpool_refill (create + RESET->INIT ahead of demand: off the
 *            critical path), then vbi_qpool_get (a hit) + INIT->RTR->RTS
 *   recycle: ->ERR, then vbi_qpool_put(reuse = true) (RESET + RESET->INIT:
 *            off the critical path; timed), then get + INIT->RTR->RTS on the recycled
 *            QP (same qp_num)
 * No WR is outstanding, so the retire times hold no drain (a lane's drain
 * depends on its traffic). RC QPs go to RTR/RTS against one peer QP's
 * parameters (the modify needs a destination; no traffic flows).
 * Percentiles come from a sorted array of the N samples. Output: a human
 * table on stdout, optionally JSON lines.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <verbus/verbus.h>

#include "bench/bench.h"
#include "core/err.h"
#include "core/qp_fsm.h"
#include "engine/qpool.h"
#include "transport/transport.h"

enum {
	S_MISS, S_UP_LOCAL, S_RTR, S_RTS, S_COLD_READY, S_ERR, S_DESTROY,
	S_REFILL, S_GET, S_POOL_UP, S_POOL_READY,
	S_RECYCLE, S_RGET, S_RUP, S_RECYCLE_READY,
	S__COUNT
};

static const char *const s_name[S__COUNT] = {
	[S_MISS] = "cold    get (miss: create+INIT)",
	[S_UP_LOCAL] = "cold    local parameters",
	[S_RTR] = "cold    INIT->RTR",
	[S_RTS] = "cold    RTR->RTS",
	[S_COLD_READY] = "cold    get..RTS (ready)",
	[S_ERR] = "retire  ->ERR",
	[S_DESTROY] = "retire  put (destroy)",
	[S_REFILL] = "pool    refill/QP (off path)",
	[S_GET] = "pool    get (hit)",
	[S_POOL_UP] = "pool    INIT->RTR->RTS",
	[S_POOL_READY] = "pool    get..RTS (ready)",
	[S_RECYCLE] = "recycle put after ERR (RESET+INIT, off path)",
	[S_RGET] = "recycle get (hit)",
	[S_RUP] = "recycle INIT->RTR->RTS",
	[S_RECYCLE_READY] = "recycle get..RTS (ready)",
};

struct series {
	double *v; /* microseconds */
	unsigned n;
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted series. */
static double pct(const struct series *s, double p)
{
	unsigned r;

	if (!s->n)
		return NAN;
	r = (unsigned)ceil(p / 100.0 * s->n);
	return s->v[r ? r - 1 : 0];
}

static double mean(const struct series *s)
{
	double t = 0;

	for (unsigned i = 0; i < s->n; i++)
		t += s->v[i];
	return s->n ? t / s->n : NAN;
}

static void add(struct series *s, double us)
{
	s->v[s->n++] = us;
}

struct run {
	enum vb_qp_type type;
	unsigned n;
	struct series s[S__COUNT];
	unsigned qpn_reused;
};

/* What the transport's accept/connect does to a QP in INIT: fresh local
 * parameters, INIT->RTR->RTS. Returns the time of each step. */
static int bring_up(struct vbt_qp *qp, const struct vbt_conn_param *p, const struct vbt_peer *remote,
		    double t[3])
{
	struct vbt_peer local;
	double t0 = now_us();
	int rc = vbt_qp_local_peer(qp, 0, &local);

	t[0] = now_us();
	if (!rc)
		rc = vbt_qp_to_rtr(qp, p, &local, qp->type == VB_QPT_UD ? NULL : remote);
	t[1] = now_us();
	if (!rc)
		rc = vbt_qp_to_rts(qp, p, &local);
	t[2] = now_us();
	t[2] -= t[1];
	t[1] -= t[0];
	t[0] -= t0;
	return rc;
}

/* Retire as a lane does once drained: ->ERR, then back to the pool. */
static int retire(struct vbi_qpool *pool, struct vbt_qp *qp, bool reuse, struct series *err,
		  struct series *put)
{
	double t0 = now_us(), t1;
	int rc = vbt_qp_set_state(qp, VB_QPS_ERR);

	t1 = now_us();
	if (rc)
		return rc;
	rc = vbi_qpool_put(pool, qp, reuse);
	if (err)
		add(err, t1 - t0);
	if (put)
		add(put, now_us() - t1);
	return rc < 0 ? rc : 0;
}

static int pool_new(struct vbt_pd *pd, struct vbt_cq *cq, const struct vbt_conn_param *p,
		    enum vb_qp_type type, unsigned low, unsigned max, struct vbi_qpool **out)
{
	struct vbi_qpool_attr pa = {
		.pd = pd, .cq = cq, .cap = { .max_send_wr = 64, .max_recv_wr = 64,
					      .max_send_sge = 2, .max_recv_sge = 1 },
		.param = *p, .max = max,
	};

	pa.low[type] = low;
	return vbi_qpool_create(&pa, out);
}

static int one_type(struct vbt_pd *pd, struct vbt_cq *cq, struct run *r)
{
	struct vbt_conn_param p;
	struct vbi_qpool *cold = NULL, *pool = NULL;
	struct vbt_qp **q = calloc(r->n, sizeof(*q)), *peer = NULL;
	uint32_t *qpn = calloc(r->n, sizeof(*qpn));
	struct vbt_peer remote;
	double t0, t[3];
	int rc = 0;

	if (!q || !qpn) {
		rc = vbi_err(-ENOMEM, "bench arrays");
		goto out;
	}
	vbt_conn_param_init(&p);
	if ((rc = pool_new(pd, cq, &p, r->type, 0, r->n, &cold)) ||
	    (rc = pool_new(pd, cq, &p, r->type, r->n, r->n, &pool)))
		goto out;
	/* A peer whose parameters the RC QPs go to RTR against. */
	if ((rc = vbi_qpool_get(cold, r->type, NULL, &peer)) ||
	    (rc = vbt_qp_local_peer(peer, 0, &remote)))
		goto out;

	/* ---- cold: misses, then destroyed ---- */
	for (unsigned i = 0; i < r->n; i++) {
		t0 = now_us();
		if ((rc = vbi_qpool_get(cold, r->type, NULL, &q[i])))
			goto out;
		add(&r->s[S_MISS], now_us() - t0);
		if ((rc = bring_up(q[i], &p, &remote, t)))
			goto out;
		add(&r->s[S_UP_LOCAL], t[0]);
		add(&r->s[S_RTR], t[1]);
		add(&r->s[S_RTS], t[2]);
		add(&r->s[S_COLD_READY], now_us() - t0);
	}
	for (unsigned i = 0; i < r->n; i++) {
		rc = retire(cold, q[i], false, &r->s[S_ERR], &r->s[S_DESTROY]);
		q[i] = NULL;
		if (rc)
			goto out;
	}

	/* ---- pool: refilled ahead, hits; then recycled, hits again ---- */
	t0 = now_us();
	rc = vbi_qpool_refill(pool);
	if (rc < 0)
		goto out;
	for (unsigned i = 0; i < r->n; i++)
		add(&r->s[S_REFILL], (now_us() - t0) / r->n);
	for (int pass = 0; pass < 2; pass++) {
		int sg = pass ? S_RGET : S_GET, su = pass ? S_RUP : S_POOL_UP,
		    sy = pass ? S_RECYCLE_READY : S_POOL_READY;

		for (unsigned i = 0; i < r->n; i++) {
			double a;

			t0 = now_us();
			if ((rc = vbi_qpool_get(pool, r->type, NULL, &q[i])))
				goto out;
			a = now_us();
			if ((rc = bring_up(q[i], &p, &remote, t)))
				goto out;
			add(&r->s[sg], a - t0);
			add(&r->s[su], now_us() - a);
			add(&r->s[sy], now_us() - t0);
			if (pass) {
				for (unsigned j = 0; j < r->n; j++)
					if (qpn[j] == q[i]->qpn) {
						r->qpn_reused++;
						break;
					}
			} else {
				qpn[i] = q[i]->qpn;
			}
		}
		for (unsigned i = 0; i < r->n; i++) {
			rc = retire(pool, q[i], true, NULL, pass ? NULL : &r->s[S_RECYCLE]);
			q[i] = NULL;
			if (rc)
				goto out;
		}
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "vb_bench lifecycle (%s): %s\n", vbi_qp_type_name(r->type),
			vbi_errmsg());
	for (unsigned i = 0; q && i < r->n; i++)
		if (q[i])
			vbi_qpool_put(cold, q[i], false);
	if (peer)
		vbi_qpool_put(cold, peer, false);
	vbi_qpool_destroy(pool);
	vbi_qpool_destroy(cold);
	free(q);
	free(qpn);
	return rc;
}

/* One JSON line per QP type: every step's p50/p99/mean with the config. */
static void json_run(FILE *f, struct run *r, const char *dev)
{
	fprintf(f, "{\"bench\":\"lifecycle\",\"device\":\"%s\",\"qp_type\":\"%s\",\"qps\":%u,"
		   "\"unit\":\"us\",\"steps\":{", dev, vbi_qp_type_name(r->type), r->n);
	for (int s = 0, first = 1; s < S__COUNT; s++) {
		if (!r->s[s].n)
			continue;
		fprintf(f, "%s\"%s\":{\"p50\":%.1f,\"p99\":%.1f,\"mean\":%.1f}", first ? "" : ",",
			s_name[s], pct(&r->s[s], 50), pct(&r->s[s], 99), mean(&r->s[s]));
		first = 0;
	}
	fprintf(f, "},\"qpn_reused\":%u}\n", r->qpn_reused);
}

static void print_run(struct run *r, const char *dev)
{
	double cold, warm, rec, rts;

	for (int s = 0; s < S__COUNT; s++)
		qsort(r->s[s].v, r->s[s].n, sizeof(double), cmp_d);
	printf("\n%s QPs on %s: %u per series, microseconds (p50 / p99 nearest rank, mean)\n",
	       vbi_qp_type_name(r->type), dev, r->n);
	printf("  %-44s %10s %10s %10s\n", "step", "p50", "p99", "mean");
	for (int s = 0; s < S__COUNT; s++) {
		if (!r->s[s].n)
			continue;
		printf("  %-44s %10.1f %10.1f %10.1f\n", s_name[s], pct(&r->s[s], 50),
		       pct(&r->s[s], 99), mean(&r->s[s]));
	}
	cold = pct(&r->s[S_COLD_READY], 50);
	warm = pct(&r->s[S_POOL_READY], 50);
	rec = pct(&r->s[S_RECYCLE_READY], 50);
	rts = pct(&r->s[S_POOL_UP], 50);
	printf("  -> to a QP ready to send (p50): cold %.1f us, pre-warmed %.1f us (saves %.1f us, %.0f%%), "
	       "recycled %.1f us (saves %.1f us, %.0f%%)\n",
	       cold, warm, cold - warm, 100.0 * (cold - warm) / cold, rec, cold - rec,
	       100.0 * (cold - rec) / cold);
	printf("  -> INIT->RTR->RTS p50 here %.1f us (%.2f ms); the article claims 1.8 ms RESET->RTS "
	       "on 100 Gb RoCE\n", rts, rts / 1000.0);
	printf("  -> recycled QPs that came back with a qp_num of the pool's first generation: %u of %u\n",
	       r->qpn_reused, r->n);
}

int vb_bench_lifecycle(int argc, char **argv)
{
	const char *devname = getenv("VERBUS_DEVICE");
	unsigned n = 200;
	struct vbt_dev_attr da = { .gid_index = -1 };
	struct vbt_dev *dev = NULL;
	struct vbt_pd *pd = NULL;
	struct vbt_cq *cq = NULL;
	struct vbt_cq_attr ca = { .cqe = 256 };
	struct run runs[2] = { { .type = VB_QPT_RC }, { .type = VB_QPT_UD } };
	const char *json = NULL;
	FILE *jf = NULL;
	int rc = 1;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--device") && i + 1 < argc) {
			devname = argv[++i];
		} else if (!strcmp(argv[i], "--qps") && i + 1 < argc) {
			n = (unsigned)strtoul(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
			json = argv[++i];
		} else {
			fprintf(stderr, "usage: vb_bench lifecycle [--device NAME] [--qps N (>= 200)] "
					"[--json FILE]\n");
			return 2;
		}
	}
	if (n < 200) {
		fprintf(stderr, "vb_bench lifecycle: --qps %u: at least 200 for the percentiles\n", n);
		return 2;
	}
	da.name = devname;
	if (vbt_verbs_ops.dev_open(&da, &dev) || dev->ops->pd_alloc(dev, &pd) ||
	    dev->ops->cq_create(dev, &ca, &cq)) {
		fprintf(stderr, "vb_bench lifecycle: %s\n", vbi_errmsg());
		goto out;
	}
	printf("vb_bench lifecycle: device %s, %u QPs per series, verbus %s\n", dev->caps.name, n,
	       vb_version());
	for (int t = 0; t < 2; t++) {
		runs[t].n = n;
		for (int s = 0; s < S__COUNT; s++) {
			runs[t].s[s].v = calloc(n, sizeof(double));
			if (!runs[t].s[s].v) {
				fprintf(stderr, "vb_bench lifecycle: out of memory\n");
				goto out;
			}
		}
		if (one_type(pd, cq, &runs[t]))
			goto out;
		print_run(&runs[t], dev->caps.name);
		if (json && (jf || (jf = fopen(json, "a"))))
			json_run(jf, &runs[t], dev->caps.name);
	}
	rc = json && !jf;
	if (rc)
		fprintf(stderr, "vb_bench lifecycle: cannot write %s\n", json);
out:
	for (int t = 0; t < 2; t++)
		for (int s = 0; s < S__COUNT; s++)
			free(runs[t].s[s].v);
	if (cq && dev->ops->cq_destroy(cq))
		rc = 1;
	if (pd && dev->ops->pd_free(pd))
		rc = 1;
	if (dev)
		dev->ops->dev_close(dev);
	if (jf)
		fclose(jf);
	return rc;
}
