/* SPDX-License-Identifier: MIT */
/*
 * A dead publisher is noticed fast, with default settings: the publisher
 * process (a child) is SIGKILLed while its subscriber (this process)
 * receives an ORDERED stream; the subscriber's library must report
 * VB_EV_PEER_DOWN for it within the documented bound (docs/recovery.md,
 * "Detecting a dead peer"): keepalive_ms + 2 x the RC retry time (active
 * connection, then its standby) + the refused reconnect, 1 s with the
 * defaults. Twice: once with the publisher idle (only keepalives flow),
 * once while it streams. Everything for the peer is then released (no QP
 * of ours left beyond the context's own), and vb_node_peers() says 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

struct shared {
	uint16_t port;
	int streaming;
};
static struct shared *sh;
static pid_t kid = -1;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The default attributes, whatever the suite's environment says. */
static void default_attr(vb_ctx_attr_t *a)
{
	vb_ctx_attr_init(a);
	a->ip = vbt_test_ip();
	a->standby_ip = "10.77.1.1";
	a->cm_timeout_ms = 5000;
	a->keepalive_ms = 100;
}

static int publisher(void *arg)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint64_t t0 = vbt_now_ms();

	(void)arg;
	default_attr(&ca);
	vb_node_attr_init(&na);
	na.name = "kd-pub";
	na.listen_ip = vbt_test_ip();
	if (vb_ctx_create(&ca, &ctx) || vb_node_create(ctx, &na, &node) ||
	    vb_pub_create(node, "kd.orders", VB_ORDERED, NULL, &pub)) {
		fprintf(stderr, "publisher: %s\n", vb_errmsg());
		return 2;
	}
	ST(&sh->port, vb_node_port(node));
	for (;;) { /* until killed (bounded) */
		if (LD(&sh->streaming))
			vb_publish(pub, "tick", 4, NULL);
		usleep(2000);
		if (vbt_now_ms() - t0 > 120000)
			return 3;
	}
}

struct rx {
	uint64_t got, down_ns, kill_ns;
	int downs;
};
static struct rx rx;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	(void)arg;
	__atomic_fetch_add(&rx.got, 1, __ATOMIC_ACQ_REL);
}

static void on_event(const vb_event_t *ev, void *arg)
{
	(void)arg;
	if (ev->type == VB_EV_PEER_DOWN || ev->type == VB_EV_PATH_DOWN ||
	    ev->type == VB_EV_FAILOVER)
		fprintf(stderr, "  [sub] kill + %.1f ms: event %d peer '%s': %s\n",
			LD(&rx.kill_ns) ? (double)(mono_ns() - LD(&rx.kill_ns)) / 1e6 : -1.0,
			(int)ev->type, ev->peer, ev->detail);
	if (ev->type == VB_EV_PEER_DOWN && !strcmp(ev->peer, "kd-pub") &&
	    __atomic_fetch_add(&rx.downs, 1, __ATOMIC_ACQ_REL) == 0)
		ST(&rx.down_ns, mono_ns());
}

static void kill_and_time(bool streaming)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	uint64_t t0, kill_ns, bound_ms;
	double took;
	int st;

	memset(&rx, 0, sizeof(rx));
	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	sh->streaming = 1;
	kid = vbt_spawn(publisher, NULL);
	assert_true(kid > 0);
	for (t0 = vbt_now_ms(); !LD(&sh->port); usleep(1000))
		assert_true(vbt_now_ms() - t0 < 60000);

	default_attr(&ca);
	ca.on_event = on_event;
	assert_int_equal(vb_ctx_create(&ca, &ctx), 0);
	vb_node_attr_init(&na);
	na.name = "kd-sub";
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(node, "kd.orders", VB_ORDERED, &sa, &sub), 0);
	assert_int_equal(vb_node_connect(node, vbt_test_ip(), LD(&sh->port)), 0);
	for (t0 = vbt_now_ms(); LD(&rx.got) < 200; usleep(1000))
		if (vbt_now_ms() - t0 > 60000)
			fail_msg("only %" PRIu64 " messages before the kill", LD(&rx.got));
	/* a warm standby, as in production (failover is not what is measured) */
	for (t0 = vbt_now_ms();; usleep(2000)) {
		vb_stats_t s;

		vb_ctx_stats(ctx, &s);
		if (s.standbys_warmed >= 1)
			break;
		assert_true(vbt_now_ms() - t0 < 30000);
	}
	if (!streaming) { /* idle: only keepalives flow */
		ST(&sh->streaming, 0);
		usleep(300000);
	}
	kill_ns = mono_ns();
	ST(&rx.kill_ns, kill_ns);
	assert_int_equal(kill(kid, SIGKILL), 0);
	st = vbt_wait(kid, 30);
	kid = -1;
	assert_int_equal(st, 128 + SIGKILL);
	for (t0 = vbt_now_ms(); !LD(&rx.down_ns); usleep(1000))
		if (vbt_now_ms() - t0 > 60000)
			fail_msg("no VB_EV_PEER_DOWN 60 s after the kill");
	took = (double)(LD(&rx.down_ns) - kill_ns) / 1e6;
	/* the documented bound (docs/recovery.md), from the knobs in force */
	bound_ms = ca.keepalive_ms + 2 * 4096ull * (1ull << 14) * 4 / 1000000 + 250;
	printf("kill -> PEER_DOWN (%s publisher): %.1f ms (bound %" PRIu64 " ms); %" PRIu64
	       " messages before\n", streaming ? "streaming" : "idle", took, bound_ms, LD(&rx.got));
	for (t0 = vbt_now_ms(); vb_node_peers(node) != 0; usleep(1000))
		assert_true(vbt_now_ms() - t0 < 10000);
	assert_true(took < (double)bound_ms);
	assert_int_equal(LD(&rx.downs), 1);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	munmap(sh, sizeof(*sh));
}

static void test_idle_publisher_killed(void **state)
{
	(void)state;
	kill_and_time(false);
}

static void test_streaming_publisher_killed(void **state)
{
	(void)state;
	kill_and_time(true);
}

static int teardown(void **state)
{
	(void)state;
	vbt_reap(&kid);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_idle_publisher_killed, teardown),
		cmocka_unit_test_teardown(test_streaming_publisher_killed, teardown),
	};

	vbt_require_device();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
