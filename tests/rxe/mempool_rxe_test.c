/* SPDX-License-Identifier: MIT */
/*
 * core/mempool with real registrations (transport/verbs/verbs_mr.c) on rxe:
 * `rdma res show mr` lists exactly the pool's chunks; buffers from the pool
 * carry real SENDs and RECVs (64 B .. 1 MiB) between two RC QPs; an address
 * outside the pool is refused with a clear error; shrink and destroy leave
 * no MR behind.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/mempool.h"
#include "tests/common/rxe_env.h"
#include "transport/verbs/verbs_device.h"
#include "tests/common/verbs_mr.h"

#define MiB ((size_t)1 << 20)

static const char *devname;

struct fixture {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
};

static int setup(void **state)
{
	static struct fixture f;

	if (vbi_verbs_open_device(devname, &f.ctx)) {
		fprintf(stderr, "open %s: %s\n", devname, vb_errmsg());
		return -1;
	}
	f.pd = ibv_alloc_pd(f.ctx);
	if (!f.pd)
		return -1;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	ibv_dealloc_pd(f->pd);
	ibv_close_device(f->ctx);
	return 0;
}

static struct vbi_mempool *pool_new(struct ibv_pd *pd, size_t cap)
{
	struct vbi_mempool_attr a;
	struct vbi_mempool *p = NULL;
	int rc;

	vbi_mempool_attr_init(&a);
	a.max_registered = cap;
	a.name = "rxe";
	rc = vbi_verbs_mempool_create(pd, &a, &p);
	if (rc)
		fail_msg("vbi_verbs_mempool_create: %s", vb_errmsg());
	return p;
}

static void test_mr_count_is_chunk_count(void **state)
{
	struct fixture *f = *state;
	struct vbi_mempool *p = pool_new(f->pd, 64 * MiB);
	struct vbi_mempool_stats st;
	struct vbi_buf b[120];
	pid_t me = getpid();

	assert_int_equal(vbt_res_count("mr", me), 0);
	for (int i = 0; i < 120; i++) {
		assert_int_equal(vbi_mempool_alloc(p, i % 4 ? 65536 : 200, &b[i]), 0);
		memset(b[i].addr, i, b[i].len);
	}
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	print_message("      %u chunks (%s pages), %zu bytes registered, %.1f%% in use\n",
		      st.chunks,
		      st.chunks_by_mode[2] ? "hugetlb" : st.chunks_by_mode[1] ? "thp" : "4k",
		      st.registered_bytes, st.utilization_pct);
	assert_true(st.chunks >= 3);
	assert_int_equal(vbt_res_count("mr", me), (int)st.chunks);
	assert_int_equal(st.registrations, st.chunks);

	/* Shrink with live buffers releases nothing; after the frees, all. */
	assert_int_equal(vbi_mempool_shrink(p), 0);
	assert_int_equal(vbt_res_count("mr", me), (int)st.chunks);
	for (int i = 0; i < 120; i++)
		assert_int_equal(vbi_mempool_free(p, b[i].addr), 0);
	assert_int_equal(vbi_mempool_shrink(p), (int)st.chunks);
	assert_int_equal(vbt_res_count("mr", me), 0);

	/* Grows again, then destroy leaves no MR. */
	assert_int_equal(vbi_mempool_alloc(p, 4096, &b[0]), 0);
	assert_int_equal(vbt_res_count("mr", me), 1);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(vbt_res_count("mr", me), 0);
}

static int pick_gid(struct ibv_context *ctx, int tbl_len, union ibv_gid *gid)
{
	static const uint8_t v4pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	for (int i = 0; i < tbl_len; i++) {
		if (!ibv_query_gid(ctx, 1, i, gid) && !memcmp(gid->raw, v4pfx, sizeof(v4pfx)))
			return i;
	}
	return ibv_query_gid(ctx, 1, 0, gid) ? -1 : 0;
}

/* Two RC QPs on one device, connected to each other (as bench/smoke.c). */
static void connect_pair(struct ibv_context *ctx, struct ibv_qp *qp[2])
{
	struct ibv_port_attr pa;
	union ibv_gid gid;
	uint32_t psn[2];
	int gidx;

	assert_int_equal(ibv_query_port(ctx, 1, &pa), 0);
	gidx = pick_gid(ctx, pa.gid_tbl_len, &gid);
	assert_true(gidx >= 0);
	assert_int_equal(getrandom(psn, sizeof(psn), 0), (ssize_t)sizeof(psn));
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

		assert_int_equal(ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
							    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
			.dest_qp_num = qp[1 - i]->qp_num, .rq_psn = psn[1 - i] & 0xffffff,
			.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = gid, .sgid_index = (uint8_t)gidx,
					      .hop_limit = 1 } },
		};

		assert_int_equal(ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV |
							    IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
							    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
							    IBV_QP_MIN_RNR_TIMER), 0);
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 3,
					 .rnr_retry = 3, .sq_psn = psn[i] & 0xffffff,
					 .max_rd_atomic = 1 };

		assert_int_equal(ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
							    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
							    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), 0);
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define NMSG 8

static void test_send_recv_from_pool_buffers(void **state)
{
	static const size_t sizes[NMSG] = { 64, 200, 1000, 4096, 9000, 65536, 300000, MiB };
	struct fixture *f = *state;
	struct vbi_mempool *p = pool_new(f->pd, 64 * MiB);
	struct ibv_cq *cq = ibv_create_cq(f->ctx, 4 * NMSG, NULL, NULL, 0);
	struct ibv_qp *qp[2] = { NULL, NULL };
	struct vbi_buf sb[NMSG], rb[NMSG];
	struct vbi_mempool_stats st;
	int got = 0;
	double deadline;

	assert_non_null(cq);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr qia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
			.cap = { .max_send_wr = NMSG, .max_recv_wr = NMSG, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};

		qp[i] = ibv_create_qp(f->pd, &qia);
		assert_non_null(qp[i]);
	}
	connect_pair(f->ctx, qp);

	for (int i = 0; i < NMSG; i++) {
		struct ibv_sge sge;
		struct ibv_recv_wr wr = { .wr_id = 100 + (uint64_t)i, .sg_list = &sge, .num_sge = 1 },
				   *bad;

		assert_int_equal(vbi_mempool_alloc(p, sizes[i], &rb[i]), 0);
		memset(rb[i].addr, 0, rb[i].len);
		sge = (struct ibv_sge){ (uintptr_t)rb[i].addr, (uint32_t)sizes[i], rb[i].lkey };
		assert_int_equal(vbi_mempool_inflight_get(p, rb[i].addr), 0);
		assert_int_equal(ibv_post_recv(qp[1], &wr, &bad), 0);
	}
	for (int i = 0; i < NMSG; i++) {
		struct ibv_sge sge;
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND },
				   *bad;
		uint32_t lkey;

		assert_int_equal(vbi_mempool_alloc(p, sizes[i], &sb[i]), 0);
		for (size_t k = 0; k < sizes[i]; k++)
			((uint8_t *)sb[i].addr)[k] = (uint8_t)(k * 7 + (size_t)i);
		/* The lkey of an interior pointer is the buffer's. */
		assert_int_equal(vbi_mempool_lkey(p, (char *)sb[i].addr + sizes[i] - 1, 1, &lkey,
						  NULL), 0);
		assert_int_equal(lkey, sb[i].lkey);
		sge = (struct ibv_sge){ (uintptr_t)sb[i].addr, (uint32_t)sizes[i], sb[i].lkey };
		assert_int_equal(vbi_mempool_inflight_get(p, sb[i].addr), 0);
		assert_int_equal(ibv_post_send(qp[0], &wr, &bad), 0);
	}
	/* While WRs are posted, the pool refuses to go away. */
	assert_int_equal(vbi_mempool_destroy(p), -EBUSY);

	deadline = now_s() + 30;
	while (got < 2 * NMSG && now_s() < deadline) {
		struct ibv_wc wc[8];
		int n = ibv_poll_cq(cq, 8, wc);

		assert_true(n >= 0);
		for (int k = 0; k < n; k++) {
			unsigned i = (unsigned)(wc[k].wr_id % 100);
			struct vbi_buf *b = wc[k].wr_id >= 100 ? &rb[i] : &sb[i];

			if (wc[k].status != IBV_WC_SUCCESS)
				fail_msg("wr_id %lu: %s", (unsigned long)wc[k].wr_id,
					 ibv_wc_status_str(wc[k].status));
			if (wc[k].wr_id >= 100)
				assert_int_equal(wc[k].byte_len, sizes[i]);
			assert_int_equal(vbi_mempool_inflight_put(p, b->addr), 0);
			got++;
		}
	}
	assert_int_equal(got, 2 * NMSG);
	for (int i = 0; i < NMSG; i++) {
		assert_memory_equal(sb[i].addr, rb[i].addr, sizes[i]);
		assert_int_equal(vbi_mempool_free(p, sb[i].addr), 0);
		assert_int_equal(vbi_mempool_free(p, rb[i].addr), 0);
	}
	assert_int_equal(vbi_mempool_stats(p, &st), 0);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(vbt_res_count("mr", getpid()), (int)st.chunks);
	print_message("      %d SEND/RECV (64 B .. 1 MiB) from %u pool chunks\n", NMSG, st.chunks);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ibv_destroy_qp(qp[i]), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(vbt_res_count("mr", getpid()), 0);
}

static void test_outside_address_refused(void **state)
{
	struct fixture *f = *state;
	struct vbi_mempool *p = pool_new(f->pd, 8 * MiB);
	char *heap = malloc(4096);
	struct vbi_buf b;
	uint32_t lkey = 0;

	assert_non_null(heap);
	assert_int_equal(vbi_mempool_alloc(p, 1000, &b), 0);
	assert_int_equal(vbi_mempool_lkey(p, heap, 64, &lkey, NULL), -ENOENT);
	print_message("      refused: %s\n", vb_errmsg());
	assert_non_null(strstr(vb_errmsg(), "not in the pool's registered memory"));
	assert_int_equal(vbi_mempool_inflight_get(p, heap), -ENOENT);
	assert_int_equal(vbi_mempool_free(p, heap), -EINVAL);
	assert_int_equal(vbi_mempool_free(p, b.addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	free(heap);
}

static void test_registration_limits(void **state)
{
	struct fixture *f = *state;
	struct vbi_mempool *p = pool_new(f->pd, 4 * MiB);
	struct vbi_buf b[8];
	int n = 0, rc;

	/* The cap holds against real registrations too. */
	while ((rc = vbi_mempool_alloc(p, MiB, &b[n])) == 0)
		n++;
	assert_int_equal(rc, -EAGAIN);
	assert_int_equal(n, 2); /* one 1 MiB buffer per 2 MiB chunk */
	assert_int_equal(vbt_res_count("mr", getpid()), 2);
	while (n)
		assert_int_equal(vbi_mempool_free(p, b[--n].addr), 0);
	assert_int_equal(vbi_mempool_destroy(p), 0);
	assert_int_equal(vbi_verbs_mempool_create(NULL, NULL, &p), -EINVAL);
}

int main(void)
{
	devname = vbt_require_device();
	printf("rxe test on RDMA device %s\n", devname);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mr_count_is_chunk_count),
		cmocka_unit_test(test_send_recv_from_pool_buffers),
		cmocka_unit_test(test_outside_address_refused),
		cmocka_unit_test(test_registration_limits),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
