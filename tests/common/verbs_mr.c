/* SPDX-License-Identifier: MIT */
#include "tests/common/verbs_mr.h"

#include <errno.h>
#include <string.h>

#include "core/err.h"

_Static_assert(VB_ACCESS_LOCAL_WRITE == IBV_ACCESS_LOCAL_WRITE, "access bits differ");
_Static_assert(VB_ACCESS_REMOTE_WRITE == IBV_ACCESS_REMOTE_WRITE, "access bits differ");
_Static_assert(VB_ACCESS_REMOTE_READ == IBV_ACCESS_REMOTE_READ, "access bits differ");
_Static_assert(VB_ACCESS_REMOTE_ATOMIC == IBV_ACCESS_REMOTE_ATOMIC, "access bits differ");

static int verbs_mr_reg(void *ctx, void *addr, size_t len, unsigned access, uint32_t *lkey,
			uint32_t *rkey, void **handle)
{
	struct ibv_pd *pd = ctx;
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(pd, addr, len, (int)access);
	if (!mr) {
		int e = errno ? errno : ENOMEM;

		return vbi_err(-e, "ibv_reg_mr(%p, %zu bytes, access %#x) on %s: %s", addr, len,
			       access, ibv_get_device_name(pd->context->device), strerror(e));
	}
	*lkey = mr->lkey;
	*rkey = mr->rkey;
	*handle = mr;
	return 0;
}

static int verbs_mr_dereg(void *ctx, void *handle)
{
	struct ibv_mr *mr = handle;
	void *addr = mr->addr;
	int rc = ibv_dereg_mr(mr);

	/* ibv_dereg_mr returns a positive errno (older providers: -1 + errno). */
	if (rc) {
		int e = rc > 0 ? rc : (errno ? errno : EIO);

		return vbi_err(-e, "ibv_dereg_mr(%p): %s", addr, strerror(e));
	}
	return 0;
}

const struct vbi_mempool_reg_ops vbi_verbs_mr_ops = {
	.reg = verbs_mr_reg,
	.dereg = verbs_mr_dereg,
};

int vbi_verbs_mempool_create(struct ibv_pd *pd, const struct vbi_mempool_attr *attr,
			     struct vbi_mempool **out)
{
	if (!pd)
		return vbi_err(-EINVAL, "vbi_verbs_mempool_create: pd is NULL");
	return vbi_mempool_create(attr, &vbi_verbs_mr_ops, pd, out);
}
