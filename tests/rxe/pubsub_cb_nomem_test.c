/* SPDX-License-Identifier: MIT */
/*
 * No memory to queue the deliveries of a received SEND: nothing is lost,
 * nothing is delivered twice, and no callback runs under a verbus lock.
 *
 * The receive path reserves room in the callback queue for every delivery a
 * buffer may hold before it takes any lock (vbi_cb_reserve). When that
 * fails the SEND is not used, the lane fails over (or is rebuilt) and the
 * publisher sends again what was not acknowledged. Before, a full queue
 * made deliver() call on_msg under the node lock, where a callback that
 * creates or destroys a subscriber deadlocks its own thread.
 *
 * A subscriber process with no standby connection (one lane: the failure
 * is rebuilt) whose VERBUS_TEST_CBQ_ENOMEM makes its 40th
 * reservation fail (as if memory ran out) receives ORDERED self-checking
 * messages, the first 100 one SEND each (so that the 40th comes among
 * them at any VERBUS_TEST_SCALE); its callback creates and destroys a second subscriber every
 * 100th message (allowed from a callback: verbus.h). Asserted: every
 * message delivered exactly once, in order, intact; the subscriber's
 * context counted a failover or a rebuild; the publisher's last message is
 * acknowledged.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define TOPIC "nomem.orders"
#define ST 9u
#define WAIT_MS 60000
#define PACED 100 /* messages sent one at a time first, each after the one before
		   * was delivered (not scaled) */

static uint64_t n_msgs;
static int port_pipe[2];
static pid_t child = -1;

/* shared with the subscriber process (mapped before fork) */
struct shared {
	uint64_t got, bad, dup, helpers, recoveries;
	int done;
};
static struct shared *sh;

static size_t msg_len(uint64_t i)
{
	return vbt_msg_len(ST, i, 1, 512);
}

/* ---- the subscriber process -------------------------------------------------------- */

struct rx {
	uint64_t next;
	vb_node_t *node;
};

static void on_helper(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub, (void)m, (void)arg;
}

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why = "length";

	(void)sub;
	if (m->seq < r->next) {
		__atomic_fetch_add(&sh->dup, 1, __ATOMIC_RELAXED);
		return;
	}
	if (m->seq != r->next || m->len != msg_len(m->seq - 1) ||
	    vbt_msg_verify(m->data, m->len, ST, m->seq - 1, &why)) {
		if (__atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "sub: seq %" PRIu64 " (expected %" PRIu64 "): %s\n", m->seq,
				r->next, m->seq != r->next ? "out of order" : why);
		r->next = m->seq + 1;
		return;
	}
	r->next++;
	if (m->seq % 100 == 0) { /* a callback may create and destroy subscribers */
		vb_sub_attr_t sa;
		vb_sub_t *h;

		vb_sub_attr_init(&sa);
		sa.on_msg = on_helper;
		if (vb_sub_create(r->node, "nomem.helper", VB_ORDERED, &sa, &h) == 0 &&
		    vb_sub_destroy(h) == 0)
			__atomic_fetch_add(&sh->helpers, 1, __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(&sh->got, 1, __ATOMIC_RELEASE);
}

static int subscriber(void *unused)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_sub_t *sub;
	vb_stats_t st;
	static struct rx r = { .next = 1 };
	uint16_t port;
	uint64_t t0;

	(void)unused;
	setenv("VERBUS_TEST_CBQ_ENOMEM", "40", 1); /* before the context reads it */
	if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port))
		return 10;
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200; /* two processes on two vCPUs */
	/* One connection, so the 40th reservation is one of its receives: with
	 * a standby (built by this, the connecting side) it could be one of
	 * the standby's control frames, whose failure is neither a failover
	 * nor a rebuild (full test run 18). The failure is then rebuilt. */
	ca.standby = 0;
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "sub: ctx: %s\n", vb_errmsg());
		return 11;
	}
	vb_node_attr_init(&na);
	na.name = "nomem-sub";
	if (vb_node_create(ctx, &na, &r.node))
		return 12;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &r;
	if (vb_sub_create(r.node, TOPIC, VB_ORDERED, &sa, &sub))
		return 13;
	if (vb_node_connect(r.node, vbt_test_ip(), port)) {
		fprintf(stderr, "sub: connect: %s\n", vb_errmsg());
		return 14;
	}
	for (t0 = vbt_now_ms(); !__atomic_load_n(&sh->done, __ATOMIC_ACQUIRE) &&
	     vbt_now_ms() - t0 < 3 * WAIT_MS;)
		usleep(10000);
	vb_ctx_stats(ctx, &st);
	__atomic_store_n(&sh->recoveries, st.failovers + st.rebuilds, __ATOMIC_RELEASE);
	vb_sub_destroy(sub);
	vb_node_destroy(r.node);
	vb_ctx_destroy(ctx);
	return 0;
}

/* ---- the publisher (this process) --------------------------------------------------- */

static void test_cb_nomem(void **state)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint8_t buf[512];
	uint16_t port;
	uint64_t seq = 0, t0;
	int status, rc;

	(void)state;
	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(subscriber, NULL);
	assert_true(child > 0);
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200;
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("pub ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	na.name = "nomem-pub";
	na.listen_ip = vbt_test_ip();
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	pa.slow_policy = VB_SLOW_BLOCK; /* a failover is not a slow subscriber */
	assert_int_equal(vb_pub_create(node, TOPIC, VB_ORDERED, &pa, &pub), 0);
	port = vb_node_port(node);
	assert_int_equal(write(port_pipe[1], &port, sizeof(port)), sizeof(port));
	for (t0 = vbt_now_ms(); vb_pub_subscribers(pub) < 1; usleep(5000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no subscriber after %d ms", WAIT_MS);

	for (uint64_t i = 0; i < n_msgs; i++) {
		size_t len = msg_len(i);

		/* the first PACED messages one SEND each: each is published once
		 * the one before was delivered (a fixed pause was not enough
		 * under ASan: SENDs still in flight batched them, and the 40th
		 * reservation came after them), so the 40th reservation falls
		 * among them whatever VERBUS_TEST_SCALE is */
		for (t0 = vbt_now_ms(); i < PACED && __atomic_load_n(&sh->got, __ATOMIC_ACQUIRE) < i;
		     usleep(200))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("message %" PRIu64 " not delivered after %d ms", i - 1,
					 WAIT_MS);

		vbt_msg_fill(buf, len, ST, i);
		for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, len, &seq)) == -EAGAIN;
		     usleep(200))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("publish %" PRIu64 ": -EAGAIN for %d ms: %s", i, WAIT_MS,
					 vb_errmsg());
		assert_int_equal(rc, 0);
	}
	rc = vb_pub_wait_acked(pub, seq, WAIT_MS);
	for (t0 = vbt_now_ms(); __atomic_load_n(&sh->got, __ATOMIC_ACQUIRE) < n_msgs &&
	     vbt_now_ms() - t0 < WAIT_MS;)
		usleep(10000);
	__atomic_store_n(&sh->done, 1, __ATOMIC_RELEASE);
	assert_int_equal(waitpid(child, &status, 0), child);
	child = -1;
	printf("%" PRIu64 " published; subscriber: %" PRIu64 " delivered in order, %" PRIu64
	       " out of order or corrupt, %" PRIu64 " duplicates, %" PRIu64 " helper subscribers "
	       "made and destroyed in callbacks, %" PRIu64 " failovers + rebuilds; last "
	       "acknowledged: %s\n", n_msgs, sh->got, sh->bad, sh->dup, sh->helpers,
	       sh->recoveries, rc ? vb_errmsg() : "yes");
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(sh->got, n_msgs);
	assert_int_equal(sh->bad, 0);
	assert_int_equal(sh->dup, 0);
	assert_true(sh->recoveries >= 1);
	assert_int_equal(rc, 0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
}

static int teardown(void **state)
{
	(void)state;
	vbt_reap(&child);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_cb_nomem, teardown),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	n_msgs = PACED + vbt_scaled(3000);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
