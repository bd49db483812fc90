/* SPDX-License-Identifier: MIT */
#include "engine/qpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/log.h"

struct parked {
	struct vbt_qp *qp;
	uint64_t ready_ns; /* recycled: not handed out before (quarantine) */
};

struct vbi_qpool {
	struct vbi_qpool_attr attr;
	pthread_mutex_t lock;
	struct parked *parked[VBI_QPOOL_TYPES]; /* stacks of attr.max */
	unsigned n[VBI_QPOOL_TYPES];
	bool closed;
	struct vbi_qpool_stats st; /* under lock */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Index of the newest parked QP of type @t that may be handed out at @now,
 * or -1. Under lock. */
static int ready_at(struct vbi_qpool *p, unsigned t, uint64_t now)
{
	for (unsigned i = p->n[t]; i--;)
		if (p->parked[t][i].ready_ns <= now)
			return (int)i;
	return -1;
}

/* Parked QPs of type @t that may be handed out at @now. Under lock. */
static unsigned n_ready(struct vbi_qpool *p, unsigned t, uint64_t now)
{
	unsigned r = 0;

	for (unsigned i = 0; i < p->n[t]; i++)
		r += p->parked[t][i].ready_ns <= now;
	return r;
}

static void count(struct vbi_qpool *p, uint64_t *c)
{
	pthread_mutex_lock(&p->lock);
	(*c)++;
	pthread_mutex_unlock(&p->lock);
}

/* RESET->INIT with fresh local parameters (a UD QP gets a new Q_Key). */
static int park(struct vbi_qpool *p, struct vbt_qp *qp)
{
	struct vbt_peer local;
	int rc = vbt_qp_local_peer(qp, 0, &local);

	return rc ? rc : vbt_qp_to_init(qp, &p->attr.param, &local);
}

static int destroy(struct vbi_qpool *p, struct vbt_qp *qp)
{
	int rc = qp->ops->qp_destroy(qp);

	if (!rc)
		count(p, &p->st.destroyed);
	return rc;
}

static int create_parked(struct vbi_qpool *p, enum vb_qp_type type, struct vbt_qp **out)
{
	struct vbt_qp_init_attr qa = {
		.type = type, .send_cq = p->attr.cq, .recv_cq = p->attr.cq, .cap = p->attr.cap,
	};
	struct vbt_qp *qp;
	int rc = p->attr.pd->ops->qp_create(p->attr.pd, &qa, &qp);

	if (rc)
		return rc;
	count(p, &p->st.created);
	if ((rc = park(p, qp))) {
		destroy(p, qp);
		return rc;
	}
	*out = qp;
	return 0;
}

/* Push @qp on its stack if there is room and the pool is open. */
static bool push(struct vbi_qpool *p, struct vbt_qp *qp, bool recycled)
{
	unsigned t = (unsigned)qp->type;
	bool ok;

	pthread_mutex_lock(&p->lock);
	ok = !p->closed && p->n[t] < p->attr.max;
	if (ok) {
		p->parked[t][p->n[t]].qp = qp;
		p->parked[t][p->n[t]++].ready_ns =
			recycled ? mono_ns() + (uint64_t)p->attr.quarantine_ms * 1000000ull : 0;
		if (recycled)
			p->st.recycled++;
	}
	pthread_mutex_unlock(&p->lock);
	return ok;
}

int vbi_qpool_create(const struct vbi_qpool_attr *attr, struct vbi_qpool **out)
{
	struct vbi_qpool *p;

	*out = NULL;
	if (!attr || !attr->pd || !attr->cq || !attr->max)
		return vbi_err(-EINVAL, "vbi_qpool_create: pd, cq and max >= 1 required");
	for (unsigned t = 0; t < VBI_QPOOL_TYPES; t++)
		if (attr->low[t] > attr->max)
			return vbi_err(-EINVAL, "vbi_qpool_create: low watermark %u above max %u",
				       attr->low[t], attr->max);
	p = calloc(1, sizeof(*p));
	if (!p)
		return vbi_err(-ENOMEM, "vbi_qpool_create");
	p->attr = *attr;
	for (unsigned t = 0; t < VBI_QPOOL_TYPES; t++) {
		p->parked[t] = calloc(attr->max, sizeof(*p->parked[t]));
		if (!p->parked[t]) {
			while (t--)
				free(p->parked[t]);
			free(p);
			return vbi_err(-ENOMEM, "vbi_qpool_create: %u entries", attr->max);
		}
	}
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
}

int vbi_qpool_get(struct vbi_qpool *p, enum vb_qp_type type, void *user_ctx,
		  struct vbt_qp **out)
{
	unsigned t = (unsigned)type;
	struct vbt_qp *qp = NULL;
	int i, rc;

	*out = NULL;
	if (t >= VBI_QPOOL_TYPES)
		return vbi_err(-EINVAL, "vbi_qpool_get: QP type %u", t);
	pthread_mutex_lock(&p->lock);
	if ((i = ready_at(p, t, mono_ns())) >= 0) {
		qp = p->parked[t][i].qp;
		memmove(&p->parked[t][i], &p->parked[t][i + 1],
			(p->n[t] - (unsigned)i - 1) * sizeof(p->parked[t][0]));
		p->n[t]--;
		p->st.hits++;
	} else {
		p->st.misses++;
	}
	pthread_mutex_unlock(&p->lock);
	if (!qp && (rc = create_parked(p, type, &qp)))
		return rc;
	__atomic_store_n(&qp->user_ctx, user_ctx, __ATOMIC_RELEASE);
	*out = qp;
	return 0;
}

int vbi_qpool_put(struct vbi_qpool *p, struct vbt_qp *qp, bool reuse)
{
	int rc;

	if (!qp)
		return 0;
	__atomic_store_n(&qp->user_ctx, NULL, __ATOMIC_RELEASE);
	if (!reuse || qp->pd != p->attr.pd || qp->send_cq != p->attr.cq ||
	    (unsigned)qp->type >= VBI_QPOOL_TYPES)
		goto out_destroy;
	pthread_mutex_lock(&p->lock);
	reuse = !p->closed && p->n[qp->type] < p->attr.max;
	pthread_mutex_unlock(&p->lock);
	if (!reuse)
		goto out_destroy;
	if ((vbt_qp_state(qp) != VB_QPS_RESET && vbt_qp_set_state(qp, VB_QPS_RESET)) ||
	    park(p, qp)) {
		vbi_warn("QP %u not recycled: %s", qp->qpn, vbi_errmsg());
		goto out_destroy;
	}
	if (push(p, qp, true))
		return 0;
out_destroy:
	rc = destroy(p, qp);
	return rc ? rc : 1;
}

int vbi_qpool_refill(struct vbi_qpool *p)
{
	int made = 0;

	for (unsigned t = 0; t < VBI_QPOOL_TYPES; t++) {
		for (;;) {
			struct vbt_qp *qp;
			bool need;
			int rc;

			pthread_mutex_lock(&p->lock);
			need = !p->closed && p->n[t] < p->attr.max &&
			       n_ready(p, t, mono_ns()) < p->attr.low[t];
			pthread_mutex_unlock(&p->lock);
			if (!need)
				break;
			if ((rc = create_parked(p, (enum vb_qp_type)t, &qp)))
				return rc;
			made++;
			if (!push(p, qp, false)) {
				destroy(p, qp);
				break;
			}
		}
	}
	return made;
}

void vbi_qpool_stats(struct vbi_qpool *p, struct vbi_qpool_stats *st)
{
	pthread_mutex_lock(&p->lock);
	*st = p->st;
	st->parked = 0;
	for (unsigned t = 0; t < VBI_QPOOL_TYPES; t++)
		st->parked += p->n[t];
	pthread_mutex_unlock(&p->lock);
}

void vbi_qpool_close(struct vbi_qpool *p)
{
	for (unsigned t = 0; t < VBI_QPOOL_TYPES; t++) {
		for (;;) {
			struct vbt_qp *qp = NULL;

			pthread_mutex_lock(&p->lock);
			p->closed = true;
			if (p->n[t])
				qp = p->parked[t][--p->n[t]].qp;
			pthread_mutex_unlock(&p->lock);
			if (!qp)
				break;
			/* parked: no WR, no reader; nothing to drain or wait for */
			if (destroy(p, qp))
				vbi_warn("parked QP %u: %s", qp->qpn, vbi_errmsg());
		}
	}
}

void vbi_qpool_destroy(struct vbi_qpool *p)
{
	if (!p)
		return;
	vbi_qpool_close(p);
	pthread_mutex_destroy(&p->lock);
	for (unsigned t = 0; t < VBI_QPOOL_TYPES; t++)
		free(p->parked[t]);
	free(p);
}
