/* SPDX-License-Identifier: MIT */
/*
 * ORDERED over RC: a batch that continues the stream of the batch before it
 * on the same connection goes as a compact BATCH frame (wire version 3: a
 * 4-byte header instead of 40; docs/wire.md), and the receiver attributes
 * it to the right stream.
 *
 * A 64-byte message used to take 108 bytes on the wire (BATCH header 40,
 * record 4); on Soft-RoCE a SEND above 76 bytes costs about 2 us more each
 * way than one below (docs/benchmarks.md), and a compact one is 72.
 *
 * test_one_stream: ROUNDS messages one at a time (each waits for its
 * delivery, so each is its own SEND): all but the first go compact
 * (vb_stats_t.compact_batches), every one is delivered once, in order,
 * intact, and acknowledged when the publisher leaves.
 * test_streams_interleaved: two publishers to one subscriber node; taken
 * in turns, every SEND's stream differs from the one before on the
 * connection, so none may go compact (a compact frame would continue the
 * other publisher's stream: the subscriber would see its sequence break);
 * then each in a run of its own, where all but the first of each run do.
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
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define ROUNDS 300u
#define RUN 20u
#define WAIT_MS 10000
#define MSG_LEN 64u

/* A subscriber's count of one stream: messages numbered 1, 2, ... in
 * their first 8 bytes, the rest of the 64 filled with the stream's tag. */
struct stream {
	uint8_t tag;
	atomic_uint_fast64_t got, bad;
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct stream *s = arg;
	uint64_t n = atomic_load(&s->got) + 1, v;
	const uint8_t *p = m->data;

	(void)sub;
	memcpy(&v, p, sizeof(v));
	if (m->len != MSG_LEN || v != n)
		atomic_fetch_add(&s->bad, 1);
	for (unsigned k = sizeof(v); k < MSG_LEN; k++)
		if (p[k] != s->tag) {
			atomic_fetch_add(&s->bad, 1);
			break;
		}
	atomic_store(&s->got, n);
}

/* Publish message @n of @pub's stream (@tag) and wait for its delivery. */
static void send_one(vb_pub_t *pub, uint8_t tag, uint64_t n, struct stream *s)
{
	uint8_t buf[MSG_LEN];
	uint64_t t0;
	int rc;

	memcpy(buf, &n, sizeof(n));
	memset(buf + sizeof(n), tag, MSG_LEN - sizeof(n));
	for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, sizeof(buf), NULL)) == -EAGAIN;
	     sched_yield())
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("message %" PRIu64 ": -EAGAIN for %d ms", n, WAIT_MS);
	assert_int_equal(rc, 0);
	for (t0 = vbt_now_ms(); atomic_load(&s->got) < n; sched_yield())
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("message %" PRIu64 " of stream %c not delivered after %d ms", n,
				 tag, WAIT_MS);
}

struct pair {
	vb_ctx_t *ca, *cb;
	vb_node_t *na, *nb;
	vb_pub_t *pub[2];
	vb_sub_t *sub[2];
	struct stream st[2];
};

static void pair_open(struct pair *p, unsigned npub)
{
	static const char *const topics[2] = { "cmp.x", "cmp.y" };
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;

	memset(p, 0, sizeof(*p));
	p->ca = vbt_ctx_open(NULL);
	p->cb = vbt_ctx_open(NULL);
	p->na = vbt_node_open(p->ca, "cmp-a", true);
	p->nb = vbt_node_open(p->cb, "cmp-b", false);
	for (unsigned i = 0; i < npub; i++) {
		vb_pub_attr_init(&pa);
		pa.linger_ms = WAIT_MS;
		assert_int_equal(vb_pub_create(p->na, topics[i], VB_ORDERED, &pa, &p->pub[i]), 0);
		p->st[i].tag = (uint8_t)('x' + i);
		vb_sub_attr_init(&sa);
		sa.on_msg = on_msg;
		sa.arg = &p->st[i];
		assert_int_equal(vb_sub_create(p->nb, topics[i], VB_ORDERED, &sa, &p->sub[i]), 0);
	}
	if (vb_node_connect(p->nb, vbt_test_ip(), vb_node_port(p->na)))
		fail_msg("connect: %s", vb_errmsg());
	for (unsigned i = 0; i < npub; i++)
		if (!vbt_wait_subscribers(p->pub[i], 1, WAIT_MS))
			fail_msg("no subscriber after %d ms", WAIT_MS);
}

/* The publishers leave (each lingers until everything is acknowledged),
 * then the rest; returns the publishing context's compact_batches. */
static uint64_t pair_close(struct pair *p, unsigned npub)
{
	vb_stats_t st;

	for (unsigned i = 0; i < npub; i++)
		assert_int_equal(vb_pub_destroy(p->pub[i]), 0);
	vb_ctx_stats(p->ca, &st);
	assert_int_equal(st.unacked_on_close, 0);
	for (unsigned i = 0; i < npub; i++) {
		assert_int_equal(atomic_load(&p->st[i].bad), 0);
		assert_int_equal(vb_sub_destroy(p->sub[i]), 0);
	}
	assert_int_equal(vb_node_destroy(p->nb), 0);
	assert_int_equal(vb_node_destroy(p->na), 0);
	assert_int_equal(vb_ctx_destroy(p->cb), 0);
	assert_int_equal(vb_ctx_destroy(p->ca), 0);
	return st.compact_batches;
}

static uint64_t compact_now(struct pair *p)
{
	vb_stats_t st;

	vb_ctx_stats(p->ca, &st);
	return st.compact_batches;
}

static void test_one_stream(void **state)
{
	struct pair p;
	uint64_t c;

	(void)state;
	pair_open(&p, 1);
	for (uint64_t n = 1; n <= ROUNDS; n++)
		send_one(p.pub[0], 'x', n, &p.st[0]);
	assert_int_equal(atomic_load(&p.st[0].got), ROUNDS);
	c = pair_close(&p, 1);
	printf("%u messages one at a time: %" PRIu64 " compact BATCH frames\n", ROUNDS, c);
	/* the first is a full BATCH; a failover would start another */
	if (c < ROUNDS - 5)
		fail_msg("%" PRIu64 " compact BATCH frames for %u messages in a row", c, ROUNDS);
}

static void test_streams_interleaved(void **state)
{
	struct pair p;
	vb_stats_t sa, sb;
	uint64_t c0, c1, c2;

	(void)state;
	pair_open(&p, 2);
	c0 = compact_now(&p);
	for (uint64_t n = 1; n <= RUN; n++) {
		send_one(p.pub[0], 'x', n, &p.st[0]);
		send_one(p.pub[1], 'y', n, &p.st[1]);
	}
	c1 = compact_now(&p);
	for (uint64_t n = RUN + 1; n <= 2 * RUN; n++)
		send_one(p.pub[0], 'x', n, &p.st[0]);
	for (uint64_t n = RUN + 1; n <= 2 * RUN; n++)
		send_one(p.pub[1], 'y', n, &p.st[1]);
	c2 = compact_now(&p);
	vb_ctx_stats(p.ca, &sa);
	vb_ctx_stats(p.cb, &sb);
	printf("publisher: failovers %" PRIu64 ", lanes created %" PRIu64 ", standbys warmed %" PRIu64
	       ", frames %" PRIu64 ", SENDs %" PRIu64 "; subscriber: lanes created %" PRIu64
	       ", handshakes dropped %" PRIu64 "\n",
	       sa.failovers, sa.lanes_created, sa.standbys_warmed, sa.frames_sent, sa.sends_posted,
	       sb.lanes_created, sb.pending_dropped);
	assert_int_equal(atomic_load(&p.st[0].got), 2 * RUN);
	assert_int_equal(atomic_load(&p.st[1].got), 2 * RUN);
	pair_close(&p, 2);
	printf("in turns: %" PRIu64 " compact of %u; in runs: %" PRIu64 " of %u\n", c1 - c0,
	       2 * RUN, c2 - c1, 2 * RUN);
	assert_int_equal(c1 - c0, 0);
	if (c2 - c1 < 2 * (RUN - 1))
		fail_msg("%" PRIu64 " compact BATCH frames in two runs of %u", c2 - c1, RUN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_stream),
		cmocka_unit_test(test_streams_interleaved),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
