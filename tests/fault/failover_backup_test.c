/* SPDX-License-Identifier: MIT */
/*
 * A subscriber with a primary and a backup publisher
 * (vb_node_connect_backup): the primary publisher process is killed
 * (SIGKILL) mid-stream; the subscriber gives it up and connects to the
 * backup publisher, whose stream it then receives.
 *
 * Three processes: publisher A (primary), publisher B (backup), the
 * subscriber (this process). Both publishers publish the same ORDERED
 * topic, self-checking messages tagged with their name; each publishes only
 * while it has a subscriber. Asserted:
 *  - A's stream, up to the kill, arrived exactly once, in order, intact;
 *  - after the kill, VB_EV_PEER_SWITCHED is reported once
 *    (vb_stats_t.peer_switches == 1) and B's stream arrives from its first
 *    message, exactly once, in order, intact (>= 2,000 messages, scaled);
 *  - nothing arrives from A after the switch.
 * Prints the time from the kill to the first message from B.
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
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#define TOPIC "bk.orders"
#define MAX_LEN 200u

/* Shared with the publisher processes (mapped before fork). */
struct shared {
	uint16_t port[2];
	int stop;
};
static struct shared *sh;
static pid_t kids[2] = { -1, -1 };

#define LD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- publishers ------------------------------------------------------------------- */

static int publisher(void *arg)
{
	unsigned who = (unsigned)(uintptr_t)arg; /* 0 = A, 1 = B */
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint8_t buf[MAX_LEN];
	uint64_t i = 0, t0 = vbt_now_ms();

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.window = 1024;
	vb_node_attr_init(&na);
	na.name = who ? "bk-pub-B" : "bk-pub-A";
	na.listen_ip = vbt_test_ip();
	if (vb_ctx_create(&ca, &ctx) || vb_node_create(ctx, &na, &node) ||
	    vb_pub_create(node, TOPIC, VB_ORDERED, NULL, &pub)) {
		fprintf(stderr, "pub %c: %s\n", 'A' + who, vb_errmsg());
		return 2;
	}
	ST(&sh->port[who], vb_node_port(node));
	/* publish while someone subscribes, at about 20,000 messages/s */
	while (!LD(&sh->stop) && vbt_now_ms() - t0 < 240000) {
		if (vb_pub_subscribers(pub) < 1) {
			usleep(1000);
			continue;
		}
		for (unsigned k = 0; k < 20; k++) {
			size_t len = vbt_msg_len(who + 1, i, 8, MAX_LEN);

			vbt_msg_fill(buf, len, who + 1, i);
			if (vb_publish(pub, buf, len, NULL) == 0)
				i++;
		}
		usleep(1000);
	}
	vb_pub_destroy(pub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return 0;
}

/* ---- subscriber (this process) ------------------------------------------------------- */

struct rx {
	uint32_t session[2];    /* A's, B's publisher id (by the message tag) */
	uint64_t next[2], got[2], bad, after_switch_from_a;
	uint64_t first_b_ns;
	int switched;
	int switch_events;
};
static struct rx rx;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	const char *why = "?";
	unsigned who;

	(void)sub;
	(void)arg;
	/* which publisher: the tag the message was filled with */
	if (vbt_msg_verify(m->data, m->len, 1, m->seq - 1, &why) == 0 &&
	    m->len == vbt_msg_len(1, m->seq - 1, 8, MAX_LEN))
		who = 0;
	else if (vbt_msg_verify(m->data, m->len, 2, m->seq - 1, &why) == 0 &&
		 m->len == vbt_msg_len(2, m->seq - 1, 8, MAX_LEN))
		who = 1;
	else {
		if (rx.bad++ < 5)
			fprintf(stderr, "sub: seq %" PRIu64 " len %zu from %08x: corrupt (%s)\n",
				m->seq, m->len, m->publisher, why);
		return;
	}
	if (!rx.session[who])
		rx.session[who] = m->publisher;
	if (m->publisher != rx.session[who] || m->seq != rx.next[who] + 1) {
		if (rx.bad++ < 5)
			fprintf(stderr, "sub: %c seq %" PRIu64 ", expected %" PRIu64 "\n", 'A' + who,
				m->seq, rx.next[who] + 1);
		rx.next[who] = m->seq;
		return;
	}
	rx.next[who] = m->seq;
	if (who == 1 && !rx.got[1])
		__atomic_store_n(&rx.first_b_ns, mono_ns(), __ATOMIC_RELEASE);
	if (who == 0 && __atomic_load_n(&rx.switched, __ATOMIC_ACQUIRE))
		rx.after_switch_from_a++;
	__atomic_fetch_add(&rx.got[who], 1, __ATOMIC_RELEASE);
}

static void on_event(const vb_event_t *ev, void *arg)
{
	(void)arg;
	if (ev->type == VB_EV_PEER_SWITCHED) {
		__atomic_fetch_add(&rx.switch_events, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&rx.switched, 1, __ATOMIC_RELEASE);
	}
	if (ev->type == VB_EV_PEER_SWITCHED || ev->type == VB_EV_PATH_DOWN ||
	    ev->type == VB_EV_PEER_DOWN || ev->type == VB_EV_PEER_UP)
		fprintf(stderr, "  [sub] event %d peer '%s': %s\n", (int)ev->type, ev->peer,
			ev->detail);
}

static void test_backup_publisher(void **state)
{
	uint64_t need_a = vbt_scaled(2000), need_b = vbt_scaled(2000), t0, kill_ns;
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	vb_stats_t s;
	int st;

	(void)state;
	vbt_require_device();
	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	kids[0] = vbt_spawn(publisher, (void *)0);
	kids[1] = vbt_spawn(publisher, (void *)1);
	assert_true(kids[0] > 0 && kids[1] > 0);
	for (t0 = vbt_now_ms(); !(LD(&sh->port[0]) && LD(&sh->port[1])); usleep(1000))
		assert_true(vbt_now_ms() - t0 < 60000);

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.cm_timeout_ms = 1000; /* give a dead peer up after 3 s */
	ca.on_event = on_event;
	assert_int_equal(vb_ctx_create(&ca, &ctx), 0);
	vb_node_attr_init(&na);
	na.name = "bk-sub";
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(node, TOPIC, VB_ORDERED, &sa, &sub), 0);

	/* bad input first: clear errors, nothing connected */
	assert_int_equal(vb_node_connect_backup(node, vbt_test_ip(), LD(&sh->port[0]),
						vbt_test_ip(), LD(&sh->port[0])), -EINVAL);
	assert_int_equal(vb_node_connect_backup(node, "not-an-ip", 1, vbt_test_ip(), 2), -EINVAL);

	assert_int_equal(vb_node_connect_backup(node, vbt_test_ip(), LD(&sh->port[0]),
						vbt_test_ip(), LD(&sh->port[1])), 0);
	for (t0 = vbt_now_ms(); LD(&rx.got[0]) < need_a; usleep(1000))
		if (vbt_now_ms() - t0 > 120000)
			fail_msg("only %" PRIu64 " of %" PRIu64 " messages from A",
				 LD(&rx.got[0]), need_a);
	assert_int_equal(LD(&rx.got[1]), 0);

	/* the primary dies */
	kill_ns = mono_ns();
	assert_int_equal(kill(kids[0], SIGKILL), 0);
	st = vbt_wait(kids[0], 30);
	kids[0] = -1;
	assert_int_equal(st, 128 + SIGKILL);
	for (t0 = vbt_now_ms(); LD(&rx.got[1]) < need_b; usleep(1000))
		if (vbt_now_ms() - t0 > 120000)
			fail_msg("only %" PRIu64 " of %" PRIu64 " messages from B after the kill "
				 "(switch events %d)", LD(&rx.got[1]), need_b,
				 LD(&rx.switch_events));
	ST(&sh->stop, 1);
	st = vbt_wait(kids[1], 60);
	kids[1] = -1;
	/* the conductor counts the switch once it sees B's peer up, and B's
	 * messages can flow before that: until it has (bounded) */
	for (t0 = vbt_now_ms(); vb_ctx_stats(ctx, &s), !s.peer_switches; usleep(1000))
		if (vbt_now_ms() - t0 > 10000)
			break;
	printf("backup: %" PRIu64 " messages from A before the kill, %" PRIu64 " from B after; "
	       "kill -> first message from B %.1f ms (cm_timeout 1000 ms: a dead peer is given "
	       "up after 3 x cm_timeout); %d switch event(s), peer_switches %" PRIu64
	       ", bad %" PRIu64 "\n", LD(&rx.got[0]), LD(&rx.got[1]),
	       (double)(LD(&rx.first_b_ns) - kill_ns) / 1e6, LD(&rx.switch_events),
	       s.peer_switches, rx.bad);
	assert_int_equal(st, 0);
	assert_int_equal(rx.bad, 0);
	assert_true(LD(&rx.got[0]) >= need_a);
	assert_true(LD(&rx.got[1]) >= need_b);
	assert_int_equal(rx.next[0], LD(&rx.got[0])); /* A: 1..n, no gap */
	assert_int_equal(rx.next[1], LD(&rx.got[1])); /* B: from its first */
	assert_int_equal(rx.after_switch_from_a, 0);
	assert_int_equal(LD(&rx.switch_events), 1);
	assert_int_equal(s.peer_switches, 1);
	assert_true(LD(&rx.first_b_ns) > kill_ns);

	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	munmap(sh, sizeof(*sh));
}

/* A failed check leaves the publishers running: end them. */
static int teardown(void **state)
{
	(void)state;
	for (unsigned i = 0; i < 2; i++)
		vbt_reap(&kids[i]);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_backup_publisher, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
