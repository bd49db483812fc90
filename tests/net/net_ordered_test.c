/* SPDX-License-Identifier: MIT */
/*
 * ORDERED across a real (virtual) link between two hosts, under netem:
 * a clean link, then 1% loss, then 5 ms +- 2 ms delay with reordering, then
 * 0.1% duplication and 0.1% corruption, each on link 1 in both directions,
 * with link 2 (clean) as standby. One stream of VERBUS_TEST_SCALE x 200,000
 * messages per phase (24 B..2 KiB, self-checking), publisher on host a,
 * subscriber on host b; each phase on a new connection (the subscriber's
 * node is created anew and joins the stream where it is), so each starts
 * on link 1 even when the one before failed over to link 2. Passes when, in every phase, the subscriber got
 * every message exactly once, in order, byte-exact, the publisher's window
 * drained (the last message acknowledged), and in every impaired phase
 * the rxe devices saw the impairment (retries, out-of-sequence or
 * duplicate packets: else the phase tested nothing). Prints per phase:
 * throughput, the RC retries the rxe devices of both links counted
 * (completer retries, NAKs received, retries exhausted) on each side, and
 * the library's failovers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <verbus/verbus.h>

#include "tests/common/msgcheck.h"
#include "tests/common/netpair.h"
#include "tests/common/proc.h"

struct phase {
	const char *name;
	const char *netem; /* NULL: the clean link */
};

static const struct phase phases[] = {
	{ "clean", NULL },
	{ "loss 1%", "loss 1%" },
	{ "delay 5ms+-2ms, reorder", "delay 5ms 2ms reorder 25% 50%" },
	{ "dup 0.1% + corrupt 0.1%", "duplicate 0.1% corrupt 0.1%" },
};
#define NPHASES (sizeof(phases) / sizeof(phases[0]))

/* rxe counters reported per phase (requester: retries; responder: what it
 * saw out of order / twice) */
static const char *const hwc[] = { "completer_retry_err", "rcvd_seq_err", "retry_exceeded_err",
				   "out_of_seq_request", "duplicate_request" };
#define NHWC (sizeof(hwc) / sizeof(hwc[0]))

#define PHASE_TIMEOUT_S 300
#define MEET_S 400

static uint64_t n_phase;

static size_t msg_len(uint64_t seq)
{
	return vbt_msg_len(0, seq, 24, 2048);
}

/* both links' devices: the stream is on either */
static void hw_snap(uint64_t *v)
{
	for (unsigned i = 0; i < NHWC; i++)
		v[i] = vbn_hw_counter(1, hwc[i]) + vbn_hw_counter(2, hwc[i]);
}

static int impair(const char *spec)
{
	return vbn_netem(1, spec);
}

/* ---- subscriber (b) ------------------------------------------------------ */

struct rx {
	uint64_t next, got, errors;
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why = "length";

	(void)sub;
	if (m->seq != r->next) {
		if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) < 10)
			fprintf(stderr, "[b] seq %" PRIu64 ", expected %" PRIu64 "%s\n", m->seq,
				r->next, m->seq < r->next ? " (duplicate)" : " (gap)");
		if (m->seq > r->next)
			r->next = m->seq + 1;
		return;
	}
	r->next++;
	if (m->len != msg_len(m->seq) || vbt_msg_verify(m->data, m->len, 0, m->seq, &why)) {
		if (__atomic_fetch_add(&r->errors, 1, __ATOMIC_RELAXED) < 10)
			fprintf(stderr, "[b] seq %" PRIu64 ": %s\n", m->seq, why);
		return;
	}
	__atomic_fetch_add(&r->got, 1, __ATOMIC_RELEASE);
}

static int subscriber(void)
{
	static struct rx r = { .next = 1 };
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	vb_sub_attr_t sa;
	uint64_t port, hw0[NHWC], hw1[NHWC];
	int rc, bad = 0;

	if (vbn_ctx(1, true, NULL, &ctx))
		return 2;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &r;
	if (vbn_get_u64('a', "port", &port, 120)) {
		fprintf(stderr, "[b] no port from a\n");
		return 4;
	}
	for (unsigned p = 0; p < NPHASES; p++) {
		char pt[32];
		uint64_t want = (p + 1) * n_phase, t0, last = 0, seen = 0;

		snprintf(pt, sizeof(pt), "p%u-ready", p);
		if (vbn_meet(pt, MEET_S))
			return 6;
		/* a new connection (on link 1) per phase, on the clean link */
		if (vbn_node(ctx, 1, "sub", false, &node) ||
		    vb_sub_create(node, "net.orders", VB_ORDERED, &sa, &sub))
			return 3;
		if ((rc = vb_node_connect(node, vbn_ip('a', 1), (uint16_t)port))) {
			fprintf(stderr, "[b] connect: %s (%s)\n", vb_strerror(rc), vb_errmsg());
			return 5;
		}
		r.next = p * n_phase + 1; /* a late joiner: the stream goes on from there */
		snprintf(pt, sizeof(pt), "p%u-conn", p);
		vbn_put(pt, "1");
		if (phases[p].netem && impair(phases[p].netem))
			return 7;
		hw_snap(hw0);
		snprintf(pt, sizeof(pt), "p%u-go", p);
		if (vbn_meet(pt, MEET_S))
			return 6;
		t0 = vbt_now_ms();
		while (__atomic_load_n(&r.got, __ATOMIC_ACQUIRE) + r.errors < want) {
			uint64_t g = __atomic_load_n(&r.got, __ATOMIC_ACQUIRE);

			if (g != seen) {
				seen = g;
				last = vbt_now_ms();
			}
			if (vbt_now_ms() - (last ? last : t0) > 120000) {
				fprintf(stderr, "[b] phase '%s': stuck at %" PRIu64 " of %" PRIu64
						" for 120 s\n", phases[p].name, g, want);
				vb_node_dump(node, stderr);
				bad = 1;
				break;
			}
			usleep(20000);
		}
		hw_snap(hw1);
		impair(NULL);
		snprintf(pt, sizeof(pt), "p%u-result", p);
		vbn_put(pt, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, r.got, r.errors,
			hw1[3] - hw0[3], hw1[4] - hw0[4]);
		sleep(1); /* late duplicates would show here */
		vb_sub_destroy(sub);
		vb_node_destroy(node);
		snprintf(pt, sizeof(pt), "p%u-done", p);
		if (vbn_meet(pt, MEET_S) || bad)
			return 8;
	}
	vbn_put("final", "%" PRIu64 " %" PRIu64, r.got, r.errors);
	vbn_meet("end", MEET_S);
	vb_ctx_destroy(ctx);
	return r.errors || r.got != NPHASES * n_phase ? 9 : 0;
}

/* ---- publisher (a) ------------------------------------------------------- */

struct result {
	double secs, msgs_s;
	uint64_t hw[NHWC], b_hw[2], failovers, retransmits, b_got, b_err;
	int drained;
};

static int publisher(void)
{
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	vb_pub_attr_t pa;
	struct result res[NPHASES];
	static uint8_t buf[4096];
	uint64_t seq = 0, t0;
	int bad = 0;

	memset(res, 0, sizeof(res));
	if (vbn_ctx(1, true, NULL, &ctx) || vbn_node(ctx, 1, "pub", true, &node))
		return 2;
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	pa.slow_policy = VB_SLOW_BLOCK; /* a 5 ms link is not a slow subscriber */
	if (vb_pub_create(node, "net.orders", VB_ORDERED, &pa, &pub))
		return 3;
	vbn_put("port", "%u", vb_node_port(node));
	for (unsigned p = 0; p < NPHASES; p++) {
		char pt[32], val[128];
		uint64_t hw0[NHWC], hw1[NHWC], end = (p + 1) * n_phase, tp, next_print;
		vb_stats_t s0, s1;
		int rc;

		snprintf(pt, sizeof(pt), "p%u-ready", p);
		if (vbn_meet(pt, MEET_S))
			return 6;
		/* the phase's subscriber connected (the last one has left) */
		snprintf(pt, sizeof(pt), "p%u-conn", p);
		t0 = vbt_now_ms();
		while (vbn_get('b', pt, val, sizeof(val), 0) || vb_pub_subscribers(pub) != 1) {
			if (vbt_now_ms() - t0 > 120000) {
				fprintf(stderr, "[a] phase '%s': %d subscribers after 120 s\n",
					phases[p].name, vb_pub_subscribers(pub));
				return 4;
			}
			usleep(20000);
		}
		if (phases[p].netem && impair(phases[p].netem))
			return 7;
		hw_snap(hw0);
		vb_ctx_stats(ctx, &s0);
		snprintf(pt, sizeof(pt), "p%u-go", p);
		if (vbn_meet(pt, MEET_S))
			return 6;
		printf("[a] phase '%s': %" PRIu64 " messages\n", phases[p].name, n_phase);
		fflush(stdout);
		tp = vbt_now_ms();
		next_print = tp + 10000;
		while (seq < end) {
			uint64_t s;
			size_t len = msg_len(seq + 1);

			vbt_msg_fill(buf, len, 0, seq + 1);
			rc = vb_publish(pub, buf, len, &s);
			if (rc == -EAGAIN) {
				if (vbt_now_ms() - tp > PHASE_TIMEOUT_S * 1000) {
					fprintf(stderr, "[a] phase '%s': -EAGAIN for %d s at seq %" PRIu64
							": %s\n", phases[p].name, PHASE_TIMEOUT_S, seq,
						vb_errmsg());
					vb_node_dump(node, stderr);
					return 10;
				}
				usleep(50);
				continue;
			}
			if (rc) {
				fprintf(stderr, "[a] publish: %s (%s)\n", vb_strerror(rc), vb_errmsg());
				return 11;
			}
			seq = s;
			if (vbt_now_ms() > next_print) {
				printf("[a]   ... %" PRIu64 " of %" PRIu64 "\n", seq - p * n_phase,
				       n_phase);
				fflush(stdout);
				next_print += 10000;
			}
		}
		rc = vb_pub_wait_acked(pub, seq, PHASE_TIMEOUT_S * 1000);
		res[p].drained = rc == 0;
		res[p].secs = (double)(vbt_now_ms() - tp) / 1000.0;
		res[p].msgs_s = (double)n_phase / res[p].secs;
		hw_snap(hw1);
		vb_ctx_stats(ctx, &s1);
		for (unsigned i = 0; i < NHWC; i++)
			res[p].hw[i] = hw1[i] - hw0[i];
		res[p].failovers = s1.failovers - s0.failovers;
		res[p].retransmits = s1.retransmits - s0.retransmits;
		if (rc)
			fprintf(stderr, "[a] phase '%s': window not drained: %s (%s)\n",
				phases[p].name, vb_strerror(rc), vb_errmsg());
		impair(NULL);
		snprintf(pt, sizeof(pt), "p%u-result", p);
		if (vbn_get('b', pt, val, sizeof(val), MEET_S) ||
		    sscanf(val, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &res[p].b_got,
			   &res[p].b_err, &res[p].b_hw[0], &res[p].b_hw[1]) != 4) {
			fprintf(stderr, "[a] no result from b for phase '%s'\n", phases[p].name);
			return 12;
		}
		snprintf(pt, sizeof(pt), "p%u-done", p);
		if (vbn_meet(pt, MEET_S))
			return 6;
	}
	{
		char val[128];
		uint64_t got = 0, err = 1;

		if (vbn_get('b', "final", val, sizeof(val), MEET_S) == 0)
			sscanf(val, "%" SCNu64 " %" SCNu64, &got, &err);
		vbn_meet("end", MEET_S);
		printf("\nORDERED across the link, %" PRIu64 " messages per phase (24 B..2 KiB):\n",
		       n_phase);
		printf("%-26s %9s %10s %8s %8s %8s %8s %8s %6s %7s %s\n", "phase", "secs", "msg/s",
		       "retries", "NAKs-rx", "exhaust", "b:oos", "b:dup", "fo", "resent",
		       "exactly-once+drained");
		for (unsigned p = 0; p < NPHASES; p++) {
			uint64_t want = (p + 1) * n_phase;
			uint64_t seen = res[p].hw[0] + res[p].hw[1] + res[p].b_hw[0] + res[p].b_hw[1];
			int ok = res[p].drained && res[p].b_got == want && res[p].b_err == 0 &&
				 (!phases[p].netem || seen > 0);

			printf("%-26s %9.1f %10.0f %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64
			       " %8" PRIu64 " %6" PRIu64 " %7" PRIu64 " %s\n",
			       phases[p].name, res[p].secs, res[p].msgs_s, res[p].hw[0], res[p].hw[1],
			       res[p].hw[2], res[p].b_hw[0], res[p].b_hw[1], res[p].failovers,
			       res[p].retransmits, ok ? "yes" : "NO");
			bad |= !ok;
		}
		printf("(a phase with netem whose retries, NAKs, b:oos and b:dup are all 0 fails: the "
		       "impairment did not act)\n");
		printf("subscriber: %" PRIu64 " of %" PRIu64 " delivered, %" PRIu64 " errors\n", got,
		       NPHASES * n_phase, err);
		bad |= got != NPHASES * n_phase || err;
	}
	vb_pub_destroy(pub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return bad ? 1 : 0;
}

int main(void)
{
	char role = vbn_role();

	setvbuf(stdout, NULL, _IOLBF, 0);
	n_phase = vbt_scaled(200000);
	return role == 'a' ? publisher() : subscriber();
}
