/* SPDX-License-Identifier: MIT */
/*
 * vb_bench lifecycle: what a QP costs to bring up and tear down, cold vs
 * taken from the pre-warmed pool (engine/qpool.h) vs recycled through RESET.
 *
 * Per QP type (RC, UD), over --qps N QPs (>= 200 by default):
 *   cold:    create, RESET->INIT, INIT->RTR, RTR->RTS, then retire:
 *            ERR + marker drain, destroy (after one grace period for all)
 *   pool:    prewarm N (create + park: off the critical path), then
 *            get (a hit) + INIT->RTR + RTR->RTS
 *   recycle: release (drain + RESET + park: off the critical path), then
 *            get + INIT->RTR + RTR->RTS on the recycled QP (same qp_num)
 * RC QPs are brought to RTR/RTS against one peer QP's parameters (the modify
 * needs a destination, no traffic flows). Percentiles come from a sorted
 * array of the N samples. Output: a human table on stdout.
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
#include "engine/qp_handle.h"
#include "engine/qpool.h"
#include "transport/transport.h"

enum {
	S_CREATE, S_INIT, S_RTR, S_RTS, S_RESET_RTS, S_COLD_READY, S_DRAIN, S_DESTROY,
	S_PREWARM, S_GET, S_POOL_RTR, S_POOL_RTS, S_POOL_READY,
	S_RELEASE, S_RGET, S_RRTR, S_RRTS, S_RECYCLE_READY,
	S__COUNT
};

static const char *const s_name[S__COUNT] = {
	[S_CREATE] = "cold    create",
	[S_INIT] = "cold    RESET->INIT",
	[S_RTR] = "cold    INIT->RTR",
	[S_RTS] = "cold    RTR->RTS",
	[S_RESET_RTS] = "cold    RESET->RTS (3 modifies)",
	[S_COLD_READY] = "cold    create..RTS (ready)",
	[S_DRAIN] = "cold    ERR + drain",
	[S_DESTROY] = "cold    destroy",
	[S_PREWARM] = "pool    prewarm/QP (off path)",
	[S_GET] = "pool    get (hit)",
	[S_POOL_RTR] = "pool    INIT->RTR",
	[S_POOL_RTS] = "pool    RTR->RTS",
	[S_POOL_READY] = "pool    get..RTS (ready)",
	[S_RELEASE] = "recycle release (off path)",
	[S_RGET] = "recycle get (hit)",
	[S_RRTR] = "recycle INIT->RTR",
	[S_RRTS] = "recycle RTR->RTS",
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

static void discard(const struct vbi_qpe_cqe *c, void *arg)
{
	(void)c;
	(void)arg;
}

struct run {
	enum vb_qp_type type;
	unsigned n;
	struct series s[S__COUNT];
	unsigned qpn_reused;
};

static int one_type(struct vbt_dev *dev, struct vbt_pd *pd, struct vbt_cq *cq, struct run *r)
{
	struct vbt_conn_param p;
	struct vbi_qpe_attr qa = {
		.type = r->type, .cq = cq, .cap = { .max_send_wr = 64, .max_recv_wr = 64 },
		.on_complete = discard,
	};
	struct vbi_qpool_attr pa;
	struct vbi_qpool *pool = NULL;
	struct vbi_qpe **q = calloc(r->n, sizeof(*q)), *peer = NULL;
	uint32_t *qpn = calloc(r->n, sizeof(*qpn));
	struct vbt_peer remote;
	double t, t0;
	int rc = 0;

	(void)dev;
	if (!q || !qpn) {
		rc = vbi_err(-ENOMEM, "bench arrays");
		goto out;
	}
	vbt_conn_param_init(&p);
	/* A peer whose parameters the RC QPs go to RTR against. */
	if ((rc = vbi_qpe_create(pd, &qa, &peer)) || (rc = vbi_qpe_park(peer, &p, 1000)))
		goto out;
	remote = *vbi_qpe_local(peer);

	/* ---- cold ---- */
	for (unsigned i = 0; i < r->n; i++) {
		double c, a, b, d;

		t0 = now_us();
		if ((rc = vbi_qpe_create(pd, &qa, &q[i])))
			goto out;
		c = now_us();
		/* vbi_qpe_park = RESET->INIT (RC) or ->INIT->RTR->RTS (UD):
		 * time each modify through the transport helpers instead. */
		{
			struct vbt_peer local;

			if ((rc = vbt_qp_local_peer(vbi_qpe_qp(q[i]), 0, &local)))
				goto out;
			a = now_us();
			if ((rc = vbt_qp_to_init(vbi_qpe_qp(q[i]), &p, &local)))
				goto out;
			b = now_us();
			if ((rc = vbt_qp_to_rtr(vbi_qpe_qp(q[i]), &p, &local,
						r->type == VB_QPT_UD ? NULL : &remote)))
				goto out;
			d = now_us();
			if ((rc = vbt_qp_to_rts(vbi_qpe_qp(q[i]), &p, &local)))
				goto out;
			t = now_us();
		}
		add(&r->s[S_CREATE], c - t0);
		add(&r->s[S_INIT], b - a);
		add(&r->s[S_RTR], d - b);
		add(&r->s[S_RTS], t - d);
		add(&r->s[S_RESET_RTS], t - a);
		add(&r->s[S_COLD_READY], (c - t0) + (t - a));
		qpn[i] = vbi_qpe_qpn(q[i]);
	}
	for (unsigned i = 0; i < r->n; i++) {
		t0 = now_us();
		vbi_qpe_close(q[i], 1000);
		add(&r->s[S_DRAIN], now_us() - t0);
	}
	vbi_rcu_synchronize();
	for (unsigned i = 0; i < r->n; i++) {
		t0 = now_us();
		rc = vbi_qpe_free(q[i]);
		add(&r->s[S_DESTROY], now_us() - t0);
		q[i] = NULL;
		if (rc)
			goto out;
	}

	/* ---- pool ---- */
	memset(&pa, 0, sizeof(pa));
	pa.pd = pd;
	pa.cq = cq;
	pa.type = r->type;
	pa.cap = qa.cap;
	pa.on_complete = discard;
	pa.param = p;
	pa.max = r->n;
	if ((rc = vbi_qpool_create(&pa, &pool)))
		goto out;
	t0 = now_us();
	rc = vbi_qpool_prewarm(pool, r->n);
	t = now_us();
	if (rc < 0)
		goto out;
	for (unsigned i = 0; i < r->n; i++)
		add(&r->s[S_PREWARM], (t - t0) / r->n);
	for (int pass = 0; pass < 2; pass++) {
		int sg = pass ? S_RGET : S_GET, sr = pass ? S_RRTR : S_POOL_RTR,
		    ss = pass ? S_RRTS : S_POOL_RTS, sy = pass ? S_RECYCLE_READY : S_POOL_READY;

		for (unsigned i = 0; i < r->n; i++) {
			double a, b;

			t0 = now_us();
			if ((rc = vbi_qpool_get(pool, &q[i])))
				goto out;
			a = now_us();
			if (r->type == VB_QPT_UD) {
				b = t = a; /* parked in RTS already */
			} else {
				if ((rc = vbt_qp_to_rtr(vbi_qpe_qp(q[i]), &p, vbi_qpe_local(q[i]), &remote)))
					goto out;
				b = now_us();
				if ((rc = vbt_qp_to_rts(vbi_qpe_qp(q[i]), &p, vbi_qpe_local(q[i]))))
					goto out;
				t = now_us();
			}
			add(&r->s[sg], a - t0);
			add(&r->s[sr], b - a);
			add(&r->s[ss], t - b);
			add(&r->s[sy], t - t0);
			if (pass) {
				for (unsigned j = 0; j < r->n; j++)
					if (qpn[j] == vbi_qpe_qpn(q[i])) {
						r->qpn_reused++;
						break;
					}
			} else {
				qpn[i] = vbi_qpe_qpn(q[i]);
			}
		}
		/* Release: drain + RESET + park, kept (the pool holds n). */
		for (unsigned i = 0; i < r->n; i++) {
			t0 = now_us();
			rc = vbi_qpool_release(pool, q[i]);
			if (!pass)
				add(&r->s[S_RELEASE], now_us() - t0);
			q[i] = NULL;
			if (rc < 0)
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
			vbi_qpe_destroy(q[i], 1000);
	if (pool)
		vbi_qpool_destroy(pool);
	if (peer)
		vbi_qpe_destroy(peer, 1000);
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
	printf("  %-34s %10s %10s %10s\n", "step", "p50", "p99", "mean");
	for (int s = 0; s < S__COUNT; s++) {
		if (!r->s[s].n)
			continue;
		printf("  %-34s %10.1f %10.1f %10.1f\n", s_name[s], pct(&r->s[s], 50),
		       pct(&r->s[s], 99), mean(&r->s[s]));
	}
	cold = pct(&r->s[S_COLD_READY], 50);
	warm = pct(&r->s[S_POOL_READY], 50);
	rec = pct(&r->s[S_RECYCLE_READY], 50);
	rts = pct(&r->s[S_RESET_RTS], 50);
	printf("  -> to a QP ready to send (p50): cold %.1f us, pre-warmed %.1f us (saves %.1f us, %.0f%%), "
	       "recycled %.1f us (saves %.1f us, %.0f%%)\n",
	       cold, warm, cold - warm, 100.0 * (cold - warm) / cold, rec, cold - rec,
	       100.0 * (cold - rec) / cold);
	printf("  -> RESET->RTS p50 here %.1f us (%.2f ms); the article claims 1.8 ms on 100 Gb RoCE\n",
	       rts, rts / 1000.0);
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
	vbi_rcu_register_thread();
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
		if (one_type(dev, pd, cq, &runs[t]))
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
	vbi_rcu_unregister_thread();
	return rc;
}
