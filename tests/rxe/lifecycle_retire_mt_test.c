/* SPDX-License-Identifier: MIT */
/*
 * Safe destroy under load on rxe: 4 threads post sends through an
 * RCU-protected QP handle and poll the shared CQ while the main thread, round
 * after round, publishes a freshly connected RC QP, lets them post, and
 * retires it (unpublish, ERR, drain, grace period) — destroying it on even
 * rounds, recycling it through the pre-warmed pool on odd ones. After every
 * round each accepted send has completed exactly once; at the end every
 * buffer is back in the mempool and `rdma res show` lists nothing. Run under
 * ASan and TSan too. Rounds: 1000 x VERBUS_TEST_SCALE; inside the TCG VM
 * (VERBUS_IN_VM set) the base is 250, since a round costs ~0.25 s there
 * (run with VERBUS_TEST_SCALE=4 for the full 1000).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/qpool.h"
#include "tests/rxe/lifecycle_env.h"

#define WORKERS 4
#define RECVS 8

static struct lc_env env;
static struct vbt_conn_param param;
static struct vbi_qp_handle handle;
static int stop;
static uint64_t posted;      /* sends accepted by the handle */
static uint64_t sends_done;  /* send completions delivered */
static uint64_t refused[5];  /* ENOTCONN, ESHUTDOWN, EAGAIN, other, alloc */

static void on_complete(const struct vbi_qpe_cqe *c, void *arg)
{
	if (!(c->flags & VBI_QPE_CQE_RECV))
		LC_ADD(sends_done);
	lc_on_complete(c, arg);
}

static void *worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	uint64_t seq = 0;

	vbi_rcu_register_thread();
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		struct vbi_buf b;
		struct vbt_sge sge;
		struct vbt_send_wr wr;
		int rc;

		if (lc_buf(&env, 64, &b)) {
			LC_ADD(refused[4]);
			vbi_qpe_poll(env.cq, 16);
			continue;
		}
		memset(b.addr, 0xa5, 8);
		sge = (struct vbt_sge){ (uintptr_t)b.addr, 64, b.lkey };
		memset(&wr, 0, sizeof(wr));
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = VBT_WR_SEND;
		/* The count is taken inside the read-side section so that the
		 * retiring thread, after its grace period, sees every accepted
		 * post to the QP it retired. */
		vbi_rcu_read_lock();
		rc = vbi_qp_handle_post_send(&handle, &wr, b.addr, ((uint64_t)id << 40) | seq++);
		if (!rc)
			LC_ADD(posted);
		vbi_rcu_read_unlock();
		if (rc) {
			lc_unbuf(&env, &b);
			LC_ADD(refused[rc == -ENOTCONN ? 0 : rc == -ESHUTDOWN ? 1 : rc == -EAGAIN ? 2 : 3]);
		}
		if (!vbi_qpe_poll(env.cq, 16) && rc)
			sched_yield();
	}
	vbi_rcu_unregister_thread();
	return NULL;
}

static void test_retire_under_load(void **state)
{
	unsigned rounds = (unsigned)((getenv("VERBUS_IN_VM") ? 250 : 1000) * lc_scale());
	struct vbi_qpool_attr pa = {
		.pd = env.pd, .cq = env.cq, .type = VB_QPT_RC,
		.cap = { .max_send_wr = 64, .max_recv_wr = RECVS },
		.on_complete = on_complete, .cb_arg = &env, .param = param,
		.max = 4, .drain_timeout_ms = 30000,
	};
	struct vbi_qpool *pool;
	struct vbi_qpool_stats ps;
	struct vbi_qpe_poll_stats pls;
	pthread_t th[WORKERS];
	uint64_t mismatches = 0, flushed_rounds = 0, t0 = lc_now_ms();
	unsigned r;

	(void)state;
	vbi_qp_handle_init(&handle);
	assert_int_equal(vbi_qpool_create(&pa, &pool), 0);
	assert_int_equal(lc_chk(vbi_qpool_prewarm(pool, 4), "prewarm"), 4);
	for (unsigned i = 0; i < WORKERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i), 0);

	for (r = 0; r < rounds; r++) {
		struct vbi_qpe *a, *b;
		uint64_t p0 = LC_GET(posted), end, flush0 = LC_GET(env.flush);
		int rc;

		if (lc_chk(vbi_qpool_get(pool, &a), "get a") || lc_chk(vbi_qpool_get(pool, &b), "get b"))
			fail();
		for (unsigned i = 0; i < RECVS; i++)
			assert_int_equal(lc_chk(lc_recv(&env, b, LC_MSG, LC_RECV_COOKIE(i)), "recv"), 0);
		assert_int_equal(lc_chk(lc_pair(a, b, &param), "pair"), 0);
		assert_null(vbi_qp_handle_publish(&handle, a));
		/* Let the workers post (more than B can receive, so some wait
		 * on RNR and are flushed), bounded in time. */
		end = lc_now_ms() + 2000;
		while (LC_GET(posted) - p0 < 24 && lc_now_ms() < end)
			usleep(200);
		rc = vbi_qp_handle_retire(&handle, (r & 1) ? pool : NULL, 30000);
		assert_int_equal(lc_chk(rc, "retire"), 1);
		/* Nothing is published now and A is drained: every accepted
		 * send has its completion. */
		if (LC_GET(posted) != LC_GET(sends_done)) {
			if (!mismatches++)
				fprintf(stderr, "round %u: %llu sends accepted, %llu completed\n", r,
					(unsigned long long)LC_GET(posted),
					(unsigned long long)LC_GET(sends_done));
		}
		if (LC_GET(env.flush) > flush0)
			flushed_rounds++;
		rc = vbi_qpe_fail(b, 30000);
		assert_true(lc_chk(rc, "fail b") >= 0);
		assert_int_equal(vbi_qpe_outstanding(b), 0);
		assert_true(vbi_qpool_release(pool, b) >= 0);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < WORKERS; i++)
		pthread_join(th[i], NULL);
	vbi_qpool_stats(pool, &ps);
	vbi_qpe_poll_stats(&pls);
	printf("%u rounds in %.1f s: %llu sends accepted, %llu completed (%llu ok, %llu flushed, %llu err), "
	       "%llu rounds with flushes; refused: %llu no QP, %llu closed, %llu paused/full, %llu other, %llu no buffer; "
	       "pool hits %llu misses %llu recycled %llu destroyed %llu; poll orphans %llu stale %llu\n",
	       r, (lc_now_ms() - t0) / 1000.0, (unsigned long long)posted,
	       (unsigned long long)sends_done, (unsigned long long)env.ok,
	       (unsigned long long)env.flush, (unsigned long long)env.err,
	       (unsigned long long)flushed_rounds, (unsigned long long)refused[0],
	       (unsigned long long)refused[1], (unsigned long long)refused[2],
	       (unsigned long long)refused[3], (unsigned long long)refused[4],
	       (unsigned long long)ps.hits, (unsigned long long)ps.misses,
	       (unsigned long long)ps.recycled, (unsigned long long)ps.destroyed,
	       (unsigned long long)pls.orphans, (unsigned long long)pls.stale);
	assert_int_equal(mismatches, 0);
	assert_int_equal(posted, sends_done);
	assert_true(posted > 0);
	assert_true(flushed_rounds > 0);
	assert_int_equal(refused[3], 0);
	assert_int_equal(env.err, 0);
	assert_int_equal(env.synthetic, 0);
	assert_true(ps.recycled > 0);
	assert_int_equal(lc_bufs_out(&env), 0);
	assert_int_equal(lc_inflight(&env), 0);
	assert_int_equal(vbi_qpool_destroy(pool), 0);
}

static void test_no_leaks(void **state)
{
	(void)state;
	lc_env_close(&env);
	assert_int_equal(lc_leaks(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_retire_under_load),
		cmocka_unit_test(test_no_leaks),
	};
	int rc;

	vbi_rcu_register_thread();
	if (lc_env_open(&env, 4096))
		return 1;
	vbt_conn_param_init(&param);
	param.rnr_retry = 7;
	param.min_rnr_timer = 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	vbi_rcu_unregister_thread();
	return rc;
}
