/* SPDX-License-Identifier: MIT */
/*
 * A LANE frame on a standby the other end has already replaced.
 *
 * The connector of a peer switches to its standby lane on a failure (and
 * sends LANE there), then warms a new standby at once. Frames on different
 * connections are not ordered: the accepting end may see the new standby's
 * HELLO before the LANE on the old one. It used to retire the old standby
 * on that HELLO, so the LANE arrived on a dead lane and was dropped: the
 * accepting end went on sending on the failed connection until its RC
 * retries ran out (about 250 ms in the VM; vb_bench failover's p99 showed
 * it in about one fault of 40).
 *
 * Here a raw-verbs peer plays the connector against a verbus node (the
 * "victim", in a child process, publishing ORDERED messages every few ms
 * to whoever subscribes): lane 1 (primary) with a SUB, so DATA comes on
 * lane 1; lane 2 as standby; lane 3 as standby, replacing lane 2; then LANE
 * on lane 2. The victim must follow: its DATA must come on lane 2, and
 * none on lane 1 after a first one there. It must also keep lane 3 (the
 * current standby): a LANE on lane 3 afterwards moves the DATA there.
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
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/wire.h"
#include "tests/common/proc.h"
#include "tests/common/rawpeer.h"
#include "tests/common/rxe_env.h"

#define TOPIC "race.out"
#define UID 0x5a5a7e57000000a1ull
#define WAIT_MS 10000

static int port_pipe[2];
static int *finish; /* shared with the victim (mapped before fork) */
static pid_t child = -1;

/* ---- the victim ---------------------------------------------------------------------- */

static int victim(void *unused)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint16_t port;
	uint64_t t0 = vbt_now_ms(), i = 0;

	(void)unused;
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "victim: ctx: %s\n", vb_errmsg());
		return 10;
	}
	vb_node_attr_init(&na);
	na.name = "victim";
	na.listen_ip = vbt_test_ip();
	vb_pub_attr_init(&pa);
	pa.slow_policy = VB_SLOW_BLOCK; /* the raw peer never acknowledges */
	if (vb_node_create(ctx, &na, &node) || vb_pub_create(node, TOPIC, VB_ORDERED, &pa, &pub))
		return 11;
	port = vb_node_port(node);
	if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port))
		return 12;
	/* the raw peer never acknowledges: the window (4096) outlasts the test */
	while (!__atomic_load_n(finish, __ATOMIC_ACQUIRE) && vbt_now_ms() - t0 < 120000) {
		if (vb_pub_subscribers(pub) > 0) {
			i++;
			(void)vb_publish(pub, &i, sizeof(i), NULL);
		}
		usleep(3000);
	}
	vb_pub_destroy(pub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return 0;
}

/* ---- the raw connector --------------------------------------------------------------- */

static void send_hello(struct rawqp *q, uint32_t lane, uint32_t role)
{
	uint8_t buf[RAW_SLOT];
	uint64_t t0;

	raw_send(q, buf, raw_hello(buf, UID, lane, role, NULL), NULL, NULL);
	for (t0 = vbt_now_ms(); !q->got_hello && vbt_now_ms() - t0 < WAIT_MS;)
		raw_poll(q);
	if (!q->got_hello)
		fail_msg("no HELLO back on lane %u", lane);
}

static void send_lane(struct rawqp *q, uint32_t lane, uint32_t epoch)
{
	uint8_t buf[VBI_WIRE_HDR_LEN];
	struct vbi_wire_hdr h = { .type = VBI_WT_LANE, .seq = lane, .epoch = epoch };

	vbi_wire_put(buf, &h);
	raw_send(q, buf, sizeof(buf), NULL, NULL);
}

/* Poll every lane until DATA arrives on @want (fresh), bounded. */
static bool data_on(struct rawqp *lanes, unsigned n, unsigned want)
{
	for (unsigned i = 0; i < n; i++)
		lanes[i].got_data = false;
	for (uint64_t t0 = vbt_now_ms(); vbt_now_ms() - t0 < WAIT_MS;) {
		for (unsigned i = 0; i < n; i++)
			raw_poll(&lanes[i]);
		if (lanes[want].got_data)
			return true;
	}
	return false;
}

static void test_lane_on_replaced_standby(void **state)
{
	struct raw r;
	struct rawqp q[3];
	uint8_t buf[RAW_SLOT];
	struct vbi_wire_hdr h = { .type = VBI_WT_SUB, .topic = topic_id(TOPIC),
				  .len = 1 + (uint32_t)strlen(TOPIC) };
	uint16_t port;
	int status;

	(void)state;
	memset(q, 0, sizeof(q));
	finish = mmap(NULL, sizeof(*finish), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		      -1, 0);
	assert_true(finish != MAP_FAILED);
	*finish = 0;
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(victim, NULL);
	assert_true(child > 0);
	assert_int_equal(read(port_pipe[0], &port, sizeof(port)), sizeof(port));
	raw_open(&r);

	/* lane 1, primary; an ORDERED subscription: DATA comes on it */
	raw_connect(&r, &q[0], port);
	send_hello(&q[0], 1, 0);
	vbi_wire_put(buf, &h);
	buf[VBI_WIRE_HDR_LEN] = 0; /* ORDERED */
	memcpy(buf + VBI_WIRE_HDR_LEN + 1, TOPIC, strlen(TOPIC));
	raw_send(&q[0], buf, (uint32_t)vbi_wire_frame_size(h.len), NULL, NULL);
	assert_true(data_on(q, 1, 0));
	printf("lane 1 (primary): DATA from session %08x\n", q[0].data_session);

	/* lane 2 standby, then lane 3 standby replacing it */
	raw_connect(&r, &q[1], port);
	send_hello(&q[1], 2, 1);
	raw_connect(&r, &q[2], port);
	send_hello(&q[2], 3, 1);
	printf("lanes 2 and 3 up as standbys (3 replaces 2 at the victim)\n");

	/* we switched to lane 2 before we built lane 3: LANE on lane 2 */
	send_lane(&q[1], 2, 2);
	if (!data_on(q, 3, 1))
		fail_msg("LANE on the replaced standby (lane 2) was not followed: the victim's "
			 "DATA did not move to lane 2 within %d ms (lane 1 got %s)", WAIT_MS,
			 q[0].got_data ? "DATA" : "none");
	printf("LANE on lane 2: the victim's DATA follows to lane 2\n");
	/* and lane 3 is still its standby: a second switch works */
	send_lane(&q[2], 3, 3);
	if (!data_on(q, 3, 2))
		fail_msg("LANE on the standby lane 3 was not followed within %d ms", WAIT_MS);
	printf("LANE on lane 3: the victim's DATA follows to lane 3\n");

	__atomic_store_n(finish, 1, __ATOMIC_RELEASE);
	for (int i = 2; i >= 0; i--)
		raw_close(&q[i]);
	raw_fini(&r);
	assert_int_equal(waitpid(child, &status, 0), child);
	child = -1;
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
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
		cmocka_unit_test_teardown(test_lane_on_replaced_standby, teardown),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
