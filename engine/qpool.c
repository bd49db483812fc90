/* SPDX-License-Identifier: MIT */
#include "engine/qpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/log.h"
#include "core/rcu.h"

struct vbi_qpool {
	struct vbi_qpool_attr attr;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct vbi_qpe **parked;
	unsigned n;
	bool stop, has_thread;
	pthread_t thread;
	struct vbi_qpool_stats st; /* counters under lock */
};

static int new_parked(struct vbi_qpool *p, struct vbi_qpe **out)
{
	struct vbi_qpe_attr qa = {
		.type = p->attr.type,
		.cq = p->attr.cq,
		.cap = p->attr.cap,
		.on_complete = p->attr.on_complete,
		.cb_arg = p->attr.cb_arg,
	};
	struct vbi_qpe *q;
	int rc;

	rc = vbi_qpe_create(p->attr.pd, &qa, &q);
	if (rc)
		return rc;
	pthread_mutex_lock(&p->lock);
	p->st.created++;
	pthread_mutex_unlock(&p->lock);
	rc = vbi_qpe_park(q, &p->attr.param, p->attr.drain_timeout_ms);
	if (rc) {
		pthread_mutex_lock(&p->lock);
		p->st.park_failures++;
		p->st.destroyed++;
		pthread_mutex_unlock(&p->lock);
		vbi_qpe_destroy(q, p->attr.drain_timeout_ms);
		return rc;
	}
	*out = q;
	return 0;
}

/* Push @q if there is room; false when the pool is full. */
static bool push(struct vbi_qpool *p, struct vbi_qpe *q)
{
	bool ok;

	pthread_mutex_lock(&p->lock);
	ok = p->n < p->attr.max;
	if (ok)
		p->parked[p->n++] = q;
	pthread_mutex_unlock(&p->lock);
	return ok;
}

static void *refill_main(void *arg)
{
	struct vbi_qpool *p = arg;
	struct vbi_qpe *q;
	int fails = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->n >= p->attr.low)
			pthread_cond_wait(&p->cond, &p->lock);
		if (p->stop)
			break;
		pthread_mutex_unlock(&p->lock);
		if (new_parked(p, &q)) {
			vbi_warn("QP pool refill: %s", vbi_errmsg());
			/* Back off: the device refuses; don't spin on it. */
			struct timespec ts = { 0, 100000000L * (fails < 10 ? ++fails : fails) };

			nanosleep(&ts, NULL);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		fails = 0;
		pthread_mutex_lock(&p->lock);
		p->st.refilled++;
		if (p->n < p->attr.max) {
			p->parked[p->n++] = q;
		} else {
			pthread_mutex_unlock(&p->lock);
			vbi_qpe_destroy(q, p->attr.drain_timeout_ms);
			pthread_mutex_lock(&p->lock);
			p->st.destroyed++;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int vbi_qpool_create(const struct vbi_qpool_attr *attr, struct vbi_qpool **out)
{
	struct vbi_qpool *p;
	int rc;

	*out = NULL;
	if (!attr || !attr->pd || !attr->cq || !attr->on_complete || !attr->max)
		return vbi_err(-EINVAL, "vbi_qpool_create: pd, cq, on_complete and max >= 1 required");
	if (attr->low > attr->max)
		return vbi_err(-EINVAL, "vbi_qpool_create: low watermark %u above max %u", attr->low,
			       attr->max);
	p = calloc(1, sizeof(*p));
	if (!p)
		return vbi_err(-ENOMEM, "vbi_qpool_create");
	p->attr = *attr;
	if (!p->attr.drain_timeout_ms)
		p->attr.drain_timeout_ms = 2000;
	p->parked = calloc(attr->max, sizeof(*p->parked));
	if (!p->parked) {
		rc = vbi_err(-ENOMEM, "vbi_qpool_create: %u entries", attr->max);
		goto err_free;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	if (attr->low) {
		rc = pthread_create(&p->thread, NULL, refill_main, p);
		if (rc) {
			rc = vbi_err(-rc, "vbi_qpool_create: refill thread");
			goto err_sync;
		}
		p->has_thread = true;
	}
	*out = p;
	return 0;

err_sync:
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p->parked);
err_free:
	free(p);
	return rc;
}

int vbi_qpool_prewarm(struct vbi_qpool *p, unsigned n)
{
	struct vbi_qpe *q;
	unsigned have;
	int rc;

	if (n > p->attr.max)
		n = p->attr.max;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		have = p->n;
		pthread_mutex_unlock(&p->lock);
		if (have >= n)
			return (int)have;
		rc = new_parked(p, &q);
		if (rc)
			return rc;
		if (!push(p, q)) {
			vbi_qpe_destroy(q, p->attr.drain_timeout_ms);
			pthread_mutex_lock(&p->lock);
			p->st.destroyed++;
			pthread_mutex_unlock(&p->lock);
		}
	}
}

int vbi_qpool_get(struct vbi_qpool *p, struct vbi_qpe **out)
{
	int rc;

	pthread_mutex_lock(&p->lock);
	if (p->n) {
		*out = p->parked[--p->n];
		p->st.hits++;
		if (p->has_thread && p->n < p->attr.low)
			pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	p->st.misses++;
	if (p->has_thread)
		pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	rc = new_parked(p, out);
	if (rc)
		*out = NULL;
	return rc;
}

int vbi_qpool_release(struct vbi_qpool *p, struct vbi_qpe *q)
{
	int rc;

	if (!q)
		return 0;
	if (vbi_qpe_qp(q)->send_cq != p->attr.cq || vbi_qpe_type(q) != p->attr.type)
		goto destroy;
	pthread_mutex_lock(&p->lock);
	rc = p->n < p->attr.max;
	pthread_mutex_unlock(&p->lock);
	if (!rc)
		goto destroy;
	rc = vbi_qpe_park(q, &p->attr.param, p->attr.drain_timeout_ms);
	if (rc) {
		vbi_warn("QP %u not recycled: %s", vbi_qpe_qpn(q), vbi_errmsg());
		pthread_mutex_lock(&p->lock);
		p->st.park_failures++;
		pthread_mutex_unlock(&p->lock);
		goto destroy;
	}
	pthread_mutex_lock(&p->lock);
	if (p->n < p->attr.max) {
		p->parked[p->n++] = q;
		p->st.recycled++;
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	pthread_mutex_unlock(&p->lock);
destroy:
	rc = vbi_qpe_destroy(q, p->attr.drain_timeout_ms);
	pthread_mutex_lock(&p->lock);
	p->st.destroyed++;
	pthread_mutex_unlock(&p->lock);
	/* A drain timeout still destroyed the QP (leftovers completed). */
	return rc && rc != -ETIMEDOUT ? rc : 1;
}

void vbi_qpool_stats(struct vbi_qpool *p, struct vbi_qpool_stats *st)
{
	pthread_mutex_lock(&p->lock);
	*st = p->st;
	st->parked = p->n;
	pthread_mutex_unlock(&p->lock);
}

int vbi_qpool_destroy(struct vbi_qpool *p)
{
	int rc = 0;

	if (!p)
		return 0;
	if (p->has_thread) {
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	for (unsigned i = 0; i < p->n; i++)
		vbi_qpe_close(p->parked[i], p->attr.drain_timeout_ms);
	if (p->n)
		vbi_rcu_synchronize();
	for (unsigned i = 0; i < p->n; i++) {
		int r = vbi_qpe_free(p->parked[i]);

		if (r && !rc)
			rc = r;
		p->st.destroyed++;
	}
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p->parked);
	free(p);
	return rc;
}
