/* SPDX-License-Identifier: MIT */
/*
 * An idle node's conductor (vb-maint) sleeps; it still answers a fault.
 *
 * The conductor used to run its round every 50 ms whatever the node's
 * state: 20 wake-ups a second per node with two connected peers and
 * their standbys warm, nothing to do. Each one takes a CPU from whatever
 * runs there: on a host whose cores the application's threads fill (a
 * ping-pong that spins), it is that thread which waits. In `vb_bench
 * lat` the conductors' rounds were the guest-visible cause of a sixth
 * of the round trips over 300 us and of 2 in 5 of those over 1 ms
 * (docs/benchmarks.md, "The conductor's idle rounds").
 *
 * test_idle_conductor_sleeps: two nodes (one context each, so two
 * conductors in this process), an ORDERED stream set up, its standby
 * warm; then, over IDLE_S seconds of no traffic, each conductor may
 * block at most MAX_WAKES times (its voluntary context switches: each
 * wait in poll() that sleeps is one). At 50 ms a round that is 20 a
 * second. Then a fault on the subscriber's connection: the stream must
 * fail over to the standby and a new standby must be warmed (what a
 * sleeping conductor must still do promptly), and every message
 * published before and after arrives, once and in order.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define WAIT_MS 20000
#define IDLE_S 3
#define MAX_WAKES (4 * IDLE_S) /* 2 a second expected; 20 a second before */
#define MAX_MAINT 8

/* the subscriber's count: message n carries n, from 1 (vbt_count_cb) */
static struct vbt_count cnt;

/* The voluntary context switches of this process's threads named
 * vb-maint, into @out (their number is returned). */
static unsigned maint_wakes(uint64_t *out)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	unsigned n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) && n < MAX_MAINT) {
		char path[300], line[128];
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		if (!fgets(line, sizeof(line), f) || strncmp(line, "vb-maint", 8)) {
			fclose(f);
			continue;
		}
		fclose(f);
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %" SCNu64, &out[n]) == 1) {
				n++;
				break;
			}
		fclose(f);
	}
	closedir(d);
	return n;
}

static void wait_standbys(vb_ctx_t *ctx, uint64_t n)
{
	uint64_t t0 = vbt_now_ms();
	vb_stats_t st;

	for (;; usleep(10000)) {
		vb_ctx_stats(ctx, &st);
		if (st.standbys_warmed >= n)
			return;
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " standbys warmed after %d ms, waiting for %" PRIu64,
				 (uint64_t)st.standbys_warmed, WAIT_MS, n);
	}
}

static void wait_got(uint64_t n)
{
	uint64_t t0 = vbt_now_ms();

	while (atomic_load(&cnt.got) < n) {
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %" PRIu64 " delivered after %d ms",
				 (uint64_t)atomic_load(&cnt.got), n, WAIT_MS);
		usleep(1000);
	}
}

static void publish_n(vb_pub_t *pub, uint64_t from, uint64_t n)
{
	for (uint64_t i = from; i < from + n;) {
		int rc = vb_publish(pub, &i, sizeof(i), NULL);

		if (rc == 0)
			i++;
		else if (rc == -EAGAIN)
			usleep(100);
		else
			fail_msg("publish #%" PRIu64 ": %s", i, vb_errmsg());
	}
}

static void test_idle_conductor_sleeps(void **state)
{
	vb_ctx_t *ca, *cb;
	vb_node_t *na, *nb;
	vb_sub_attr_t sa;
	vb_pub_t *pub;
	vb_sub_t *sub;
	vb_stats_t stb;
	uint64_t w0[MAX_MAINT], w1[MAX_MAINT];
	unsigned n0, n1;

	(void)state;
	vbt_require_device();
	ca = vbt_ctx_open(NULL);
	cb = vbt_ctx_open(NULL);
	na = vbt_node_open(ca, "ci-a", true);
	nb = vbt_node_open(cb, "ci-b", false);
	assert_int_equal(vb_pub_create(na, "ci.x", VB_ORDERED, NULL, &pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = vbt_count_cb;
	sa.arg = &cnt;
	assert_int_equal(vb_sub_create(nb, "ci.x", VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(nb, vbt_test_ip(), vb_node_port(na)))
		fail_msg("connect: %s", vb_errmsg());
	if (!vbt_wait_subscribers(pub, 1, WAIT_MS))
		fail_msg("no subscriber after %d ms", WAIT_MS);
	publish_n(pub, 1, 100);
	wait_got(100);
	wait_standbys(cb, 1); /* the connector warms it */

	/* the standby's HELLO and what follows it settle first */
	sleep(1);
	n0 = maint_wakes(w0);
	assert_int_equal(n0, 2);
	sleep(IDLE_S);
	n1 = maint_wakes(w1);
	assert_int_equal(n1, n0);
	for (unsigned i = 0; i < n0; i++) {
		printf("conductor %u: %" PRIu64 " wake-ups in %d s idle\n", i, w1[i] - w0[i],
		       IDLE_S);
		if (w1[i] - w0[i] > MAX_WAKES)
			fail_msg("conductor %u woke %" PRIu64 " times in %d s of an idle node "
				 "(at most %d expected)", i, w1[i] - w0[i], IDLE_S, MAX_WAKES);
	}

	/* asleep, it still answers: a fault fails over to the standby, and
	 * the next standby is warmed */
	assert_int_equal(vb_node_inject_fault(nb, NULL, VB_FAULT_QP_ERR), 0);
	publish_n(pub, 101, 100);
	wait_got(200);
	wait_standbys(cb, 2);
	vb_ctx_stats(cb, &stb);
	assert_true(stb.failovers >= 1);
	publish_n(pub, 201, 100);
	wait_got(300);
	printf("after the fault: %" PRIu64 " failovers, %" PRIu64 " standbys warmed, %" PRIu64
	       " delivered\n", (uint64_t)stb.failovers, (uint64_t)stb.standbys_warmed,
	       (uint64_t)atomic_load(&cnt.got));
	/* each exactly once and in order, across the failover */
	assert_int_equal(atomic_load(&cnt.bad), 0);

	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(nb), 0);
	assert_int_equal(vb_node_destroy(na), 0);
	assert_int_equal(vb_ctx_destroy(cb), 0);
	assert_int_equal(vb_ctx_destroy(ca), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_conductor_sleeps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
