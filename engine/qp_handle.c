/* SPDX-License-Identifier: MIT */
#include "engine/qp_handle.h"

#include <errno.h>

#include "core/err.h"
#include "engine/qpool.h"

struct vbi_qpe *vbi_qp_handle_publish(struct vbi_qp_handle *h, struct vbi_qpe *q)
{
	return __atomic_exchange_n(&h->qp, q, __ATOMIC_ACQ_REL);
}

struct vbi_qpe *vbi_qp_handle_unpublish(struct vbi_qp_handle *h)
{
	return __atomic_exchange_n(&h->qp, NULL, __ATOMIC_ACQ_REL);
}

int vbi_qp_handle_post_send(struct vbi_qp_handle *h, struct vbt_send_wr *wr, void *buf,
			    uint64_t cookie)
{
	struct vbi_qpe *q;
	int rc;

	vbi_rcu_read_lock();
	q = vbi_qp_handle_deref(h);
	rc = q ? vbi_qpe_post_send(q, wr, buf, cookie) : -ENOTCONN;
	vbi_rcu_read_unlock();
	return rc;
}

int vbi_qp_handle_post_recv(struct vbi_qp_handle *h, struct vbt_recv_wr *wr, void *buf,
			    uint64_t cookie)
{
	struct vbi_qpe *q;
	int rc;

	vbi_rcu_read_lock();
	q = vbi_qp_handle_deref(h);
	rc = q ? vbi_qpe_post_recv(q, wr, buf, cookie) : -ENOTCONN;
	vbi_rcu_read_unlock();
	return rc;
}

int vbi_qp_handle_retire(struct vbi_qp_handle *h, struct vbi_qpool *pool, int timeout_ms)
{
	struct vbi_qpe *old = vbi_qp_handle_unpublish(h);
	int rc, rc2;

	if (!old)
		return 0;
	if (!pool) {
		/* Closed: stale posters get -ESHUTDOWN; drained; unregistered. */
		rc = vbi_qpe_close(old, timeout_ms);
		vbi_rcu_synchronize();
		rc2 = vbi_qpe_free(old);
		if (rc2)
			return rc2;
		return rc < 0 ? rc : 1;
	}
	/* Paused (stale posters get -EAGAIN, then see the empty handle) and
	 * drained; after the grace period nobody holds it: safe to reuse. */
	rc = vbi_qpe_fail(old, timeout_ms);
	vbi_rcu_synchronize();
	if (rc < 0) {
		vbi_qpe_destroy(old, timeout_ms);
		return rc;
	}
	rc = vbi_qpool_release(pool, old);
	return rc < 0 ? rc : 1;
}
