/* SPDX-License-Identifier: MIT */
/*
 * Receive slots go back to the receive queue, all of them.
 *
 * A consumed receive slot is not posted again on the delivery's path: the
 * lane holds it and posts what it holds in one list at the next timed
 * per-peer round of progress, or at once when VBI_REPOST_BATCH wait
 * (engine/lane.c, vbi_lane_repost_held). Until then the slot is neither posted nor
 * returned to the sender as a credit, so a slot the lane kept for good
 * would shrink the connection's window for good, and enough of them would
 * stall it.
 *
 * The subscriber's context runs in VB_PROGRESS_APP mode, so the test's own
 * thread decides when progress runs. test_one_at_a_time: messages one at a
 * time (each its own SEND, each leaving one slot held behind its
 * delivery); test_burst: a burst larger than the receive queue, published
 * without waiting. After each, once vb_progress() rounds have completed
 * nothing for a few ms, every lane of the subscriber's node must have all
 * of its receive slots posted ("recvs N/N" in vb_node_dump()), and every message must have
 * been delivered once, in order, intact. test_fanout: the same for the
 * context's UD endpoint (FANOUT datagrams, one at a time: each its own
 * datagram), whose slots are held the same way.
 */
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

#define WAIT_MS 10000
#define MSG_LEN 64u
#define ONE_BY_ONE 200u
#define BURST 3000u

struct stream {
	uint64_t got, bad; /* the test's thread alone: APP mode */
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct stream *s = arg;
	uint64_t n = s->got + 1, v;
	const uint8_t *p = m->data;

	(void)sub;
	memcpy(&v, p, sizeof(v));
	if (m->len != MSG_LEN || v != n)
		s->bad++;
	for (unsigned k = sizeof(v); k < MSG_LEN; k++)
		if (p[k] != (uint8_t)n) {
			s->bad++;
			break;
		}
	s->got = n;
}

struct pair {
	vb_ctx_t *ca, *cb; /* publisher (progress thread), subscriber (APP mode) */
	vb_node_t *na, *nb;
	vb_pub_t *pub;
	vb_sub_t *sub;
	struct stream st;
};

static void pair_open_cls(struct pair *p, vb_class_t cls)
{
	vb_ctx_attr_t ca;
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	uint64_t t0;

	memset(p, 0, sizeof(*p));
	p->ca = vbt_ctx_open(NULL);
	vb_ctx_attr_init(&ca);
	ca.progress = VB_PROGRESS_APP;
	p->cb = vbt_ctx_open(&ca);
	p->na = vbt_node_open(p->ca, "rp-a", true);
	p->nb = vbt_node_open(p->cb, "rp-b", false);
	vb_pub_attr_init(&pa);
	pa.linger_ms = WAIT_MS;
	assert_int_equal(vb_pub_create(p->na, "rp.x", cls, &pa, &p->pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &p->st;
	assert_int_equal(vb_sub_create(p->nb, "rp.x", cls, &sa, &p->sub), 0);
	if (vb_node_connect(p->nb, vbt_test_ip(), vb_node_port(p->na)))
		fail_msg("connect: %s", vb_errmsg());
	/* the SUB frame goes from the subscriber's progress: ours to run */
	for (t0 = vbt_now_ms(); vb_pub_subscribers(p->pub) < 1; vb_progress(p->cb))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no subscriber after %d ms", WAIT_MS);
}

static void pair_open(struct pair *p)
{
	pair_open_cls(p, VB_ORDERED);
}

static void pair_close(struct pair *p)
{
	vb_stats_t st;

	/* the subscriber first: its context's progress is this thread's,
	 * and vb_sub_destroy() runs it for its final ACKs; the publisher,
	 * which lingers for them, then finds everything acknowledged */
	assert_int_equal(vb_sub_destroy(p->sub), 0);
	assert_int_equal(vb_pub_destroy(p->pub), 0);
	vb_ctx_stats(p->ca, &st);
	assert_int_equal(st.unacked_on_close, 0);
	assert_int_equal(vb_node_destroy(p->nb), 0);
	assert_int_equal(vb_node_destroy(p->na), 0);
	assert_int_equal(vb_ctx_destroy(p->cb), 0);
	assert_int_equal(vb_ctx_destroy(p->ca), 0);
}

/* Every receive queue vb_node_dump() shows for @node (its lanes, the
 * context's FANOUT QPs) with all its slots posted ("recvs N/N"): true,
 * with the queues looked at in *@lanes and the first short one's line in
 * @why. */
static bool slots_back(vb_node_t *node, unsigned *lanes, char *why, size_t whylen)
{
	char *text = NULL, *line, *save = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	bool ok = true;

	assert_non_null(f);
	assert_int_equal(vb_node_dump(node, f), 0);
	fclose(f);
	*lanes = 0;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *r = strstr(line, " recvs ");
		unsigned posted, slots;

		if (!r || sscanf(r, " recvs %u/%u", &posted, &slots) != 2)
			continue;
		++*lanes;
		if (posted != slots && ok) {
			snprintf(why, whylen, "%s", line);
			ok = false;
		}
	}
	free(text);
	return ok;
}

/* Progress on the subscriber's context until QUIET_MS have passed in
 * rounds that completed nothing. Every slot held before was posted again
 * meanwhile: the UD endpoint's and the multicast QP's at the start of the
 * round after the one that held them, a lane's at the next timed per-peer
 * round (every 200 us of rounds; engine/progress.c), so now every receive
 * slot of every lane and of the FANOUT QPs must be posted. One look, not
 * a wait for a count to come right: a slot held for good fails here
 * whatever arrives meanwhile. */
#define QUIET_MS 5u
static void expect_slots_back(struct pair *p, const char *after)
{
	char why[256] = "";
	unsigned lanes = 0;
	uint64_t t0 = vbt_now_ms(), quiet = t0;

	while (vbt_now_ms() - quiet < QUIET_MS) {
		if (vb_progress(p->cb) != 0)
			quiet = vbt_now_ms();
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("after %s: completions still coming after %d ms", after, WAIT_MS);
	}
	if (!slots_back(p->nb, &lanes, why, sizeof(why)))
		fail_msg("after %s: a receive queue short of slots after %u ms of rounds that "
			 "completed nothing: %s", after, QUIET_MS, why);
	assert_true(lanes >= 1);
	printf("after %s: %u receive queue(s), every slot posted\n", after, lanes);
}

static int publish_n(vb_pub_t *pub, uint64_t n, vb_ctx_t *sub_ctx)
{
	uint8_t buf[MSG_LEN];
	uint64_t t0;
	int rc;

	memcpy(buf, &n, sizeof(n));
	memset(buf + sizeof(n), (uint8_t)n, MSG_LEN - sizeof(n));
	for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, sizeof(buf), NULL)) == -EAGAIN;
	     vb_progress(sub_ctx))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("message %" PRIu64 ": -EAGAIN for %d ms", n, WAIT_MS);
	return rc;
}

static void wait_got(struct pair *p, uint64_t n)
{
	uint64_t t0 = vbt_now_ms();

	while (p->st.got < n) {
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %" PRIu64 " delivered after %d ms", p->st.got, n,
				 WAIT_MS);
		vb_progress(p->cb);
	}
}

static void test_one_at_a_time(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p);
	for (uint64_t n = 1; n <= ONE_BY_ONE; n++) {
		assert_int_equal(publish_n(p.pub, n, p.cb), 0);
		wait_got(&p, n);
	}
	expect_slots_back(&p, "messages one at a time");
	assert_int_equal(p.st.got, ONE_BY_ONE);
	assert_int_equal(p.st.bad, 0);
	pair_close(&p);
}

static void test_burst(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p);
	/* more than any receive queue holds: the publisher runs on the
	 * credits the held slots give back (-EAGAIN meanwhile: publish_n
	 * runs the subscriber's progress) */
	for (uint64_t n = 1; n <= BURST; n++)
		assert_int_equal(publish_n(p.pub, n, p.cb), 0);
	wait_got(&p, BURST);
	expect_slots_back(&p, "a burst");
	assert_int_equal(p.st.bad, 0);
	/* and the connection still carries the next one at once */
	assert_int_equal(publish_n(p.pub, BURST + 1, p.cb), 0);
	wait_got(&p, BURST + 1);
	expect_slots_back(&p, "one more");
	pair_close(&p);
}

static void test_fanout(void **state)
{
	struct pair p;
	uint64_t t0;

	(void)state;
	pair_open_cls(&p, VB_FANOUT);
	/* each waits for its delivery: one datagram each, none lost to a
	 * full receive queue (a loss would be a gap, and a wait timing out) */
	for (uint64_t n = 1; n <= ONE_BY_ONE; n++) {
		assert_int_equal(publish_n(p.pub, n, p.cb), 0);
		for (t0 = vbt_now_ms(); p.st.got < n; vb_progress(p.cb))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("FANOUT message %" PRIu64 " not delivered after %d ms "
					 "(lost?)", n, WAIT_MS);
	}
	expect_slots_back(&p, "FANOUT messages one at a time");
	assert_int_equal(p.st.bad, 0);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_at_a_time),
		cmocka_unit_test(test_burst),
		cmocka_unit_test(test_fanout),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
