/* SPDX-License-Identifier: MIT */
/*
 * `rdma link delete rxe0` under an ORDERED stream: rxe0 is unregistered
 * while both processes (publisher and subscriber) use it. rxe cannot
 * disassociate a device, so the kernel waits until every user has closed
 * everything on it: the command only completes if the library, told by
 * rdma_cm's DEVICE_REMOVAL, moved every path to the standby device (rxe1)
 * and closed its QPs, CQ, registrations, PD and device context, in both
 * processes, while they keep running. The command runs on a thread of the
 * publisher process while the stream goes on, and is waited for (bounded)
 * before either process tears down, so the run checks exactly that: the
 * command succeeded while both were live, and no message was lost,
 * duplicated or reordered.
 *
 * The same with FANOUT (unicast datagrams): both ends move their UD
 * endpoint to rxe1; delivered + reported lost == published, and the
 * stream goes on after the removal.
 *
 * Label "destructive", and it runs before the other destructive tests
 * (DEPENDS in tests/CMakeLists.txt): rxe0 is re-created at the end, for
 * them.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>

#include "tests/fault/fo_report.h"

static int del_rc = -1;
static bool del_done; /* del_main returned (atomic) */
static double del_s;
static pthread_t del_thread, seen_thread;
static bool del_started;
static double del_t0, seen_s = -1; /* command start -> the library saw it */
static vb_ctx_t *pub_ctx;

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* It blocks until both processes have closed everything on rxe0. */
static void *del_main(void *arg)
{
	(void)arg;
	del_rc = system("timeout -k 5 120 rdma link delete rxe0");
	del_s = now_s() - del_t0;
	fprintf(stderr, "  rdma link delete rxe0: exit %d after %.3f s\n",
		WIFEXITED(del_rc) ? WEXITSTATUS(del_rc) : -1, del_s);
	__atomic_store_n(&del_done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* The command returns once both processes closed everything on rxe0: the
 * removal has had its full effect (the harness holds the stream's tail). */
static bool dev_gone(void *arg)
{
	(void)arg;
	return __atomic_load_n(&del_done, __ATOMIC_ACQUIRE);
}

/* When the publisher's library learnt of it (bounded by the command). */
static void *seen_main(void *arg)
{
	(void)arg;
	while (now_s() - del_t0 < 130) {
		vb_stats_t st;

		if (vb_ctx_stats(pub_ctx, &st) == 0 && st.devices_removed) {
			seen_s = now_s() - del_t0;
			break;
		}
		usleep(1000);
	}
	return NULL;
}

/* Publisher process, publishing thread: starts the removal, goes on. */
static int dev_delete(vb_ctx_t *ctx, vb_node_t *node, unsigned k, void *arg)
{
	(void)node;
	(void)k;
	(void)arg;
	pub_ctx = ctx;
	del_t0 = now_s();
	if (pthread_create(&del_thread, NULL, del_main, NULL))
		return -EAGAIN;
	del_started = true;
	if (pthread_create(&seen_thread, NULL, seen_main, NULL))
		return -EAGAIN;
	return 0;
}

/* After the stream, both processes still up: the removal must be done. */
static void dev_back(void *arg)
{
	(void)arg;
	if (del_started) {
		pthread_join(del_thread, NULL);
		pthread_join(seen_thread, NULL);
	}
	if (system("rdma link show rxe0 >/dev/null 2>&1 || "
		   "timeout -k 5 60 rdma link add rxe0 type rxe netdev d0"))
		fprintf(stderr, "could not re-create rxe0\n");
	for (int i = 0; i < 100; i++) { /* bounded: until its port is ACTIVE */
		if (system("rdma link show rxe0/1 2>/dev/null | grep -q 'state ACTIVE'") == 0) {
			fprintf(stderr, "  rxe0 re-created\n");
			break;
		}
		usleep(100000);
	}
}

static void run_removal(vb_class_t cls, const char *name)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;

	vbt_require_device();
	if (!getenv("VERBUS_IN_VM"))
		skip();
	del_rc = -1;
	del_s = 0;
	seen_s = -1;
	del_started = false;
	del_done = false;
	fo_defaults(&c, name);
	c.cls = cls;
	if (cls == VB_FANOUT) {
		c.msgs = vbt_scaled(50000);
		/* unicast datagrams: multicast memberships would keep rxe0 */
		setenv("VERBUS_MCAST", "0", 1);
	}
	c.side = VBT_FO_PUB;
	c.fault_ctx = dev_delete;
	c.restore = dev_back;
	c.settled = dev_gone;
	c.no_cold = true; /* rxe0 is gone: no fresh connection to time */
	assert_int_equal(vbt_failover_run(&c, &r), 0);
	fo_check(&c, &r);
	printf("%s: the publisher's library saw the removal %.3f s after the command started\n",
	       name, seen_s);
	printf("%s: rdma link delete took %.3f s; devices removed/released: publisher "
	       "%" PRIu64 "/%" PRIu64 ", subscriber %" PRIu64 "/%" PRIu64 "\n", name, del_s,
	       r.pub_stats.devices_removed, r.pub_stats.devices_released,
	       r.sub_stats.devices_removed, r.sub_stats.devices_released);
	assert_int_equal(del_rc, 0);
	assert_int_equal(r.pub_stats.devices_removed, 1);
	assert_int_equal(r.pub_stats.devices_released, 1);
	assert_int_equal(r.sub_stats.devices_removed, 1);
	assert_int_equal(r.sub_stats.devices_released, 1);
	if (cls == VB_ORDERED) {
		assert_true(r.pub_stats.failovers + r.sub_stats.failovers >= 1);
	} else {
		/* FANOUT moved to rxe1 on both ends: the half of the stream
		 * published after the removal arrives, save what was in flight */
		printf("%s: lost %" PRIu64 " of %" PRIu64 " (reported by the subscriber)\n", name,
		       r.lost, r.published);
		assert_true(r.delivered > r.published * 3 / 4);
	}
}

/* ORDERED: the paths fail over to rxe1, nothing is lost. */
static void test_dev_remove(void **state)
{
	(void)state;
	run_removal(VB_ORDERED, "dev-remove");
}

/* FANOUT: both ends move their UD endpoint to rxe1 (UDADDR frames tell the
 * peer); what was in flight is reported lost, the rest is delivered. */
static void test_dev_remove_fanout(void **state)
{
	(void)state;
	run_removal(VB_FANOUT, "dev-remove-fanout");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dev_remove),
		cmocka_unit_test(test_dev_remove_fanout),
	};

	/* VBT_TEST_FILTER=test_dev_remove_fanout runs one case: under TSan a
	 * second fork in one process trips TSan itself (jemalloc's fork
	 * handler takes more than its 64-lock deadlock-detector limit) */
	if (getenv("VBT_TEST_FILTER"))
		cmocka_set_test_filter(getenv("VBT_TEST_FILTER"));

	return cmocka_run_group_tests(tests, NULL, NULL);
}
