/* SPDX-License-Identifier: MIT */
/*
 * FANOUT across a real (virtual) link with 2% loss (netem on link 1, both
 * directions): a publisher on host a, two subscriber processes on host b.
 * After a warm-up on the clean link (until each subscriber has a message),
 * VERBUS_TEST_SCALE x 100,000 messages (24..1024 B, paced) go out under the
 * loss. For every subscriber: each delivered message byte-exact, sequence
 * numbers strictly increasing (no duplicate, nothing out of order),
 * delivered + reported lost == published since its first message, the
 * on_gap callback's counts equal the subscriber's counters, and some loss
 * was seen and reported (else the impairment did not act).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <verbus/verbus.h>

#include "tests/common/msgcheck.h"
#include "tests/common/netpair.h"
#include "tests/common/proc.h"

#define NSUBS 2
#define MEET_S 300
#define LOSS "loss 2%"

static uint64_t n_msgs;

static size_t msg_len(uint64_t seq)
{
	return vbt_msg_len(0, seq, 24, 1024);
}

/* ---- subscribers (b) ----------------------------------------------------- */

struct rx {
	uint64_t first, last, got, errors, gap_events, gap_lost;
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why = "length";

	(void)sub;
	if (r->first && m->seq <= r->last) {
		if (r->errors++ < 10)
			fprintf(stderr, "[b] seq %" PRIu64 " after %" PRIu64 " (%s)\n", m->seq, r->last,
				m->seq == r->last ? "duplicate" : "out of order");
		return;
	}
	if (m->len != msg_len(m->seq) || vbt_msg_verify(m->data, m->len, 0, m->seq, &why)) {
		if (r->errors++ < 10)
			fprintf(stderr, "[b] seq %" PRIu64 ": %s\n", m->seq, why);
	}
	if (!r->first)
		r->first = m->seq;
	r->last = m->seq;
	__atomic_fetch_add(&r->got, 1, __ATOMIC_RELEASE);
}

static void on_gap(vb_sub_t *sub, uint32_t publisher, uint64_t lost, uint64_t next_seq, void *arg)
{
	struct rx *r = arg;

	(void)sub;
	(void)publisher;
	(void)next_seq;
	__atomic_fetch_add(&r->gap_events, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&r->gap_lost, lost, __ATOMIC_RELAXED);
}

static int subscriber(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;
	static struct rx r;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	vb_sub_attr_t sa;
	vb_sub_stats_t ss;
	char key[32];
	uint64_t port, final, t0;
	int rc;

	if (vbn_ctx(1, false, NULL, &ctx) || vbn_node(ctx, 1, i ? "sub1" : "sub0", false, &node))
		return 2;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.on_gap = on_gap;
	sa.arg = &r;
	if (vb_sub_create(node, "net.md", VB_FANOUT, &sa, &sub))
		return 3;
	if (vbn_get_u64('a', "port", &port, 120))
		return 4;
	if ((rc = vb_node_connect(node, vbn_ip('a', 1), (uint16_t)port))) {
		fprintf(stderr, "[b] sub%u connect: %s (%s)\n", i, vb_strerror(rc), vb_errmsg());
		return 5;
	}
	/* warm-up: until the first message */
	t0 = vbt_now_ms();
	while (!__atomic_load_n(&r.got, __ATOMIC_ACQUIRE)) {
		if (vbt_now_ms() - t0 > 120000) {
			fprintf(stderr, "[b] sub%u: no message in 120 s\n", i);
			return 6;
		}
		usleep(10000);
	}
	snprintf(key, sizeof(key), "warm%u", i);
	vbn_put(key, "1");
	if (vbn_get_u64('a', "final", &final, MEET_S)) {
		fprintf(stderr, "[b] sub%u: publisher never finished\n", i);
		return 7;
	}
	/* the publisher's heartbeat reports the tail: until all is accounted
	 * and the callbacks have caught up with the counters (delivered is
	 * counted before on_msg runs, a gap when it is found: on_gap after) */
	t0 = vbt_now_ms();
	for (;;) {
		vb_sub_stats(sub, &ss);
		if ((ss.delivered + ss.lost >= final - r.first + 1 &&
		     ss.delivered == __atomic_load_n(&r.got, __ATOMIC_ACQUIRE) &&
		     ss.lost == __atomic_load_n(&r.gap_lost, __ATOMIC_RELAXED) &&
		     ss.gaps == __atomic_load_n(&r.gap_events, __ATOMIC_RELAXED)) ||
		    vbt_now_ms() - t0 > 30000)
			break;
		usleep(20000);
	}
	vb_sub_stats(sub, &ss);
	{
		uint64_t want = final - r.first + 1;
		int ok = r.errors == 0 && ss.delivered + ss.lost == want && ss.delivered == r.got &&
			 ss.lost == r.gap_lost && ss.gaps == r.gap_events && ss.duplicates == 0 &&
			 ss.lost > 0;

		printf("[b] sub%u: from seq %" PRIu64 " to %" PRIu64 ": %" PRIu64 " delivered + %" PRIu64
		       " lost = %" PRIu64 " (want %" PRIu64 "); %" PRIu64 " gap events; on_gap %" PRIu64
		       " events / %" PRIu64 " lost; %" PRIu64 " duplicates, %" PRIu64 " errors: %s\n",
		       i, r.first, final, ss.delivered, ss.lost, ss.delivered + ss.lost, want, ss.gaps,
		       r.gap_events, r.gap_lost, ss.duplicates, r.errors, ok ? "ok" : "FAILED");
		if (!ss.lost)
			printf("[b] sub%u: no loss seen: the impairment did not act\n", i);
		snprintf(key, sizeof(key), "res%u", i);
		vbn_put(key, "%d %" PRIu64 " %" PRIu64 " %" PRIu64, ok, ss.delivered, ss.lost, ss.gaps);
		vb_sub_destroy(sub);
		vb_node_destroy(node);
		vb_ctx_destroy(ctx);
		return ok ? 0 : 1;
	}
}

static int subscribers(void)
{
	pid_t pid[NSUBS];
	int bad = 0;

	if (vbn_meet("start", MEET_S))
		return 2;
	if (vbn_netem(1, LOSS))
		return 3;
	for (unsigned i = 0; i < NSUBS; i++)
		pid[i] = vbt_spawn(subscriber, (void *)(uintptr_t)i);
	for (unsigned i = 0; i < NSUBS; i++) {
		int rc = vbt_wait(pid[i], MEET_S + 120);

		if (rc)
			fprintf(stderr, "[b] sub%u exited %d\n", i, rc);
		bad |= rc != 0;
	}
	vbn_netem(1, NULL);
	vbn_meet("end", MEET_S);
	return bad;
}

/* ---- publisher (a) ------------------------------------------------------- */

static int publish_one(vb_pub_t *pub, uint64_t *seq)
{
	static uint8_t buf[1024];
	size_t len = msg_len(*seq + 1);
	uint64_t t0 = vbt_now_ms(), s;
	int rc;

	vbt_msg_fill(buf, len, 0, *seq + 1);
	while ((rc = vb_publish(pub, buf, len, &s)) == -EAGAIN) {
		if (vbt_now_ms() - t0 > 60000) {
			fprintf(stderr, "[a] -EAGAIN for 60 s: %s\n", vb_errmsg());
			return rc;
		}
		usleep(100);
	}
	if (rc) {
		fprintf(stderr, "[a] publish: %s (%s)\n", vb_strerror(rc), vb_errmsg());
		return rc;
	}
	*seq = s;
	return 0;
}

static int publisher(void)
{
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	vb_stats_t st;
	uint64_t seq = 0, t0, first, warm;
	char val[128];
	int bad = 0;

	if (vbn_ctx(1, false, NULL, &ctx) || vbn_node(ctx, 1, "pub", true, &node))
		return 2;
	if (vb_pub_create(node, "net.md", VB_FANOUT, NULL, &pub))
		return 3;
	vbn_put("port", "%u", vb_node_port(node));
	if (vbn_meet("start", MEET_S) || vbn_netem(1, LOSS))
		return 4;
	/* warm-up: a message every 10 ms until both subscribers have one */
	t0 = vbt_now_ms();
	for (unsigned i = 0; i < NSUBS; i++) {
		char key[32];

		snprintf(key, sizeof(key), "warm%u", i);
		while (vbn_get('b', key, val, sizeof(val), 0)) {
			if (vbt_now_ms() - t0 > 180000) {
				fprintf(stderr, "[a] subscribers not warm in 180 s\n");
				return 5;
			}
			if (vb_pub_subscribers(pub) > 0 && publish_one(pub, &seq))
				return 6;
			usleep(10000);
		}
	}
	warm = seq;
	first = seq + 1;
	printf("[a] %u subscribers warm after %" PRIu64 " messages; %" PRIu64 " messages under %s\n",
	       NSUBS, warm, n_msgs, LOSS);
	t0 = vbt_now_ms();
	for (uint64_t i = 0; i < n_msgs; i++) {
		if (publish_one(pub, &seq))
			return 7;
		if (i % 64 == 63)
			usleep(5000); /* ~10k msg/s: what the subscribers' queues absorb */
		if (i % 20000 == 19999)
			printf("[a]   ... %" PRIu64 " of %" PRIu64 "\n", i + 1, n_msgs);
	}
	printf("[a] published seq %" PRIu64 "..%" PRIu64 " in %.1f s\n", first, seq,
	       (double)(vbt_now_ms() - t0) / 1000.0);
	vbn_put("final", "%" PRIu64, seq);
	for (unsigned i = 0; i < NSUBS; i++) {
		char key[32];
		int ok = 0;
		uint64_t d = 0, l = 0, g = 0;

		snprintf(key, sizeof(key), "res%u", i);
		if (vbn_get('b', key, val, sizeof(val), 120) == 0)
			sscanf(val, "%d %" SCNu64 " %" SCNu64 " %" SCNu64, &ok, &d, &l, &g);
		printf("subscriber %u: %" PRIu64 " delivered + %" PRIu64 " lost in %" PRIu64
		       " gaps (%.2f%% lost): %s\n", i, d, l, g, d + l ? 100.0 * (double)l / (double)(d + l) : 0,
		       ok ? "ok" : "FAILED");
		bad |= !ok;
	}
	vb_ctx_stats(ctx, &st);
	printf("publisher: %" PRIu64 " published, %" PRIu64 " multicast datagrams, %u groups\n",
	       st.published, st.mcast_datagrams, st.mcast_groups);
	vbn_netem(1, NULL);
	vbn_meet("end", MEET_S);
	vb_pub_destroy(pub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return bad;
}

int main(void)
{
	char role = vbn_role();

	setvbuf(stdout, NULL, _IOLBF, 0);
	n_msgs = vbt_scaled(100000);
	return role == 'a' ? publisher() : subscribers();
}
