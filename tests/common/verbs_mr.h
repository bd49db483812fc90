/* SPDX-License-Identifier: MIT */
/*
 * For the tests and benchmarks that drive raw libibverbs (mempool_rxe_test,
 * vb_bench mempool): the mempool's registration callbacks straight on
 * ibv_reg_mr and ibv_dereg_mr on a protection domain. The library registers
 * through the transport's ops table instead (proto/ctx.c, pool_reg). The callback context is the
 * struct ibv_pd *, which must outlive every pool created on it.
 *
 * Thread-safety: the ops may run concurrently from any thread (ibv_reg_mr and
 * ibv_dereg_mr are thread-safe); vbi_verbs_mempool_create as
 * vbi_mempool_create.
 * Return codes: 0 or a negative errno with vb_errmsg() set.
 */
#ifndef VERBUS_TESTS_COMMON_VERBS_MR_H
#define VERBUS_TESTS_COMMON_VERBS_MR_H

#include <infiniband/verbs.h>

#include "core/mempool.h"

/* reg: ibv_reg_mr(pd, addr, len, access); handle = the struct ibv_mr *.
 * dereg: ibv_dereg_mr(handle). ctx = struct ibv_pd *. */
extern const struct vbi_mempool_reg_ops vbi_verbs_mr_ops;

/* vbi_mempool_create with vbi_verbs_mr_ops on @pd (@attr may be NULL). */
int vbi_verbs_mempool_create(struct ibv_pd *pd, const struct vbi_mempool_attr *attr,
			     struct vbi_mempool **out);

#endif
