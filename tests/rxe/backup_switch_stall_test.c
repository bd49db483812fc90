/* SPDX-License-Identifier: MIT */
/*
 * A switch to a backup node that does not answer must not hold up the
 * node's other peers.
 *
 * The node under test ("conn", cm_timeout_ms 20 s) connects to node A with
 * a backup B (vb_node_connect_backup). A runs in a child process; B is a
 * raw rdma_cm listener in this process that takes connection requests and
 * never answers them. A is killed: conn gives A up and starts its switch
 * to B, whose first attempt waits for an answer that never comes. conn
 * then connects to a third node, C, and must warm C's standby connection
 * meanwhile (vb_stats_t.standbys_warmed), while B still holds the request.
 *
 * The switch used to run on the maintenance thread with a blocking
 * connect: nothing else was maintained until it gave up (20 s per attempt
 * here), so C got no standby within the test's 15 s.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define WAIT_MS 15000

static int port_pipe[2];
static pid_t child = -1;

/* Node A: listens until it is killed. */
static int node_a(void *unused)
{
	vb_ctx_t *ctx;
	vb_node_t *node;
	uint16_t port;

	(void)unused;
	ctx = vbt_ctx_open(NULL);
	node = vbt_node_open(ctx, "a", true);
	port = vb_node_port(node);
	if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port))
		return 12;
	for (;;)
		pause();
	return 0;
}

/* Node B: a raw listener that never answers. */
struct mute {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	uint16_t port;
	unsigned requests;
};

static void mute_open(struct mute *m)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };

	memset(m, 0, sizeof(*m));
	assert_int_equal(inet_pton(AF_INET, vbt_test_ip(), &sa.sin_addr), 1);
	m->ch = rdma_create_event_channel();
	assert_non_null(m->ch);
	assert_int_equal(rdma_create_id(m->ch, &m->id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(m->id, (struct sockaddr *)&sa), 0);
	assert_int_equal(rdma_listen(m->id, 16), 0);
	m->port = ntohs(rdma_get_src_port(m->id));
	assert_int_equal(fcntl(m->ch->fd, F_SETFL, fcntl(m->ch->fd, F_GETFL) | O_NONBLOCK), 0);
}

/* Count the requests that came (taken, never answered). */
static void mute_poll(struct mute *m)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(m->ch, &ev)) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			m->requests++;
		rdma_ack_cm_event(ev);
	}
}

static void mute_close(struct mute *m)
{
	rdma_destroy_id(m->id);
	rdma_destroy_event_channel(m->ch);
}

static unsigned downs;

static void on_event(const vb_event_t *ev, void *arg)
{
	(void)arg;
	if (ev->type == VB_EV_PEER_DOWN)
		__atomic_fetch_add(&downs, 1, __ATOMIC_ACQ_REL);
}

static uint64_t warmed(vb_ctx_t *ctx)
{
	vb_stats_t s;

	vb_ctx_stats(ctx, &s);
	return s.standbys_warmed;
}

static void test_switch_does_not_block(void **state)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *ctx, *cctx;
	vb_node_t *node, *cnode;
	struct mute b;
	uint16_t aport;
	uint64_t t0, before;
	int st;

	(void)state;
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(node_a, NULL);
	assert_true(child > 0);
	assert_int_equal(read(port_pipe[0], &aport, sizeof(aport)), sizeof(aport));
	mute_open(&b);

	vb_ctx_attr_init(&ca);
	ca.cm_timeout_ms = 20000;
	ca.on_event = on_event;
	ctx = vbt_ctx_open(&ca);
	node = vbt_node_open(ctx, "conn", false);
	if (vb_node_connect_backup(node, vbt_test_ip(), aport, vbt_test_ip(), b.port))
		fail_msg("connect to A (backup B): %s", vb_errmsg());
	printf("connected to A (port %u), backup B (port %u) never answers\n", aport, b.port);

	assert_int_equal(kill(child, SIGKILL), 0);
	st = vbt_wait(child, 30);
	child = -1;
	assert_int_equal(st, 128 + SIGKILL);
	/* A given up (at once by the dead-peer rule, at the latest after the
	 * recovery timeout, 3 x cm_timeout_ms): the switch to B starts, and
	 * its request waits at B */
	for (t0 = vbt_now_ms(); !b.requests && vbt_now_ms() - t0 < 5 * WAIT_MS;) {
		usleep(20000);
		mute_poll(&b);
	}
	if (!b.requests)
		fail_msg("no switch to B within %d ms of A's death (%u PEER_DOWN)", 5 * WAIT_MS,
			 __atomic_load_n(&downs, __ATOMIC_ACQUIRE));
	printf("A given up; the switch's request waits at B\n");

	/* a third node: its standby is warmed while the switch waits */
	cctx = vbt_ctx_open(NULL);
	cnode = vbt_node_open(cctx, "c", true);
	before = warmed(ctx);
	if (vb_node_connect(node, vbt_test_ip(), vb_node_port(cnode)))
		fail_msg("connect to C: %s", vb_errmsg());
	for (t0 = vbt_now_ms(); warmed(ctx) == before && vbt_now_ms() - t0 < WAIT_MS;)
		usleep(20000);
	if (warmed(ctx) == before)
		fail_msg("C's standby was not warmed within %d ms while the switch to B waited",
			 WAIT_MS);
	printf("C's standby warmed in %llu ms while B still holds the switch's request\n",
	       (unsigned long long)(vbt_now_ms() - t0));

	/* teardown with the switch still waiting */
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(vb_node_destroy(cnode), 0);
	assert_int_equal(vb_ctx_destroy(cctx), 0);
	mute_close(&b);
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
		cmocka_unit_test_teardown(test_switch_does_not_block, teardown),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
