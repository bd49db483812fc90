/* SPDX-License-Identifier: MIT */
/*
 * k-of-n acknowledged writes across two hosts: a writer on host a publishes
 * VERBUS_TEST_SCALE x 20,000 records (ORDERED, ack_quorum 2), 32 at a time,
 * each batch confirmed with vb_pub_wait_acked(); three replica processes
 * subscribe: r0 on host a, r1 and r2 on host b. Once a third of the records
 * are acknowledged, host b kills r2 (SIGKILL) at the writer's request. The
 * test passes when writes acknowledged by 2 of 3 kept going after the kill
 * (no batch waited past its 30 s bound for its acknowledgements) and each
 * survivor holds every acknowledged record: 1..last, exactly once, in
 * order, byte-exact, and no record was refused (-EAGAIN) for more than
 * slow_sub_ms + 10 s: the dead replica holds the writer's window until it
 * is cut (VB_SLOW_CUT, slow_sub_ms 2 s), not until it is given up (the
 * recovery timeout, 3 x cm_timeout_ms, since the writer accepted its
 * connection: 45 s here, when the window filled 8 s after the kill and
 * vb_publish() refused records until then). The longest stall is printed.
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

#define MEET_S 300
#define BATCH 32
#define ACK_WAIT_MS 30000

/* how long vb_publish() may refuse a record: slow_sub_ms (default) + 10 s */
static uint64_t publish_wait_ms(void)
{
	return 2000 + 10000;
}

static uint64_t n_recs;

static size_t rec_len(uint64_t seq)
{
	return vbt_msg_len(7, seq, 24, 512);
}

/* ---- replicas -------------------------------------------------------------- */

struct rx {
	uint64_t next, got, errors;
};

static void on_rec(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	const char *why = "length";

	(void)sub;
	if (m->seq != r->next) {
		if (r->errors++ < 10)
			fprintf(stderr, "[%c] replica: seq %" PRIu64 ", expected %" PRIu64 "\n",
				vbn_role(), m->seq, r->next);
		if (m->seq > r->next)
			r->next = m->seq + 1;
		return;
	}
	r->next++;
	if (m->len != rec_len(m->seq) || vbt_msg_verify(m->data, m->len, 7, m->seq, &why)) {
		if (r->errors++ < 10)
			fprintf(stderr, "[%c] replica: seq %" PRIu64 ": %s\n", vbn_role(), m->seq, why);
		return;
	}
	__atomic_fetch_add(&r->got, 1, __ATOMIC_RELEASE);
}

/* Replica @arg (0, 1, 2): connect, hold the log, report. r2 is killed. */
static int replica(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;
	static struct rx r = { .next = 1 };
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	vb_sub_attr_t sa;
	char name[16], key[32];
	uint64_t port, final = 0, t0;
	int rc;

	snprintf(name, sizeof(name), "r%u", i);
	if (vbn_ctx(1, false, NULL, &ctx) || vbn_node(ctx, 1, name, false, &node))
		return 2;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_rec;
	sa.arg = &r;
	if (vb_sub_create(node, "net.log", VB_ORDERED, &sa, &sub))
		return 3;
	if (vbn_get_u64('a', "port", &port, 120))
		return 4;
	if ((rc = vb_node_connect(node, vbn_ip('a', 1), (uint16_t)port))) {
		fprintf(stderr, "[%c] %s: connect: %s (%s)\n", vbn_role(), name, vb_strerror(rc),
			vb_errmsg());
		return 5;
	}
	snprintf(key, sizeof(key), "%s-up", name);
	vbn_put(key, "1");
	if (vbn_get_u64('a', "final", &final, 600)) {
		fprintf(stderr, "[%c] %s: the writer never finished\n", vbn_role(), name);
		return 6;
	}
	t0 = vbt_now_ms();
	while (__atomic_load_n(&r.got, __ATOMIC_ACQUIRE) + r.errors < final &&
	       vbt_now_ms() - t0 < 60000)
		usleep(10000);
	printf("[%c] %s: holds %" PRIu64 " records (acknowledged: 1..%" PRIu64 "), %" PRIu64
	       " errors\n", vbn_role(), name, r.got, final, r.errors);
	snprintf(key, sizeof(key), "%s-res", name);
	vbn_put(key, "%" PRIu64 " %" PRIu64, r.got, r.errors);
	vb_sub_destroy(sub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return r.got >= final && r.errors == 0 ? 0 : 1;
}

/* host b: r1 and r2; kills r2 when the writer asks */
static int host_b(void)
{
	pid_t r1, r2;
	char val[16];
	int rc1, rc2;

	if (vbn_meet("start", MEET_S))
		return 2;
	r1 = vbt_spawn(replica, (void *)(uintptr_t)1);
	r2 = vbt_spawn(replica, (void *)(uintptr_t)2);
	if (vbn_get('a', "kill", val, sizeof(val), 600)) {
		fprintf(stderr, "[b] no kill request\n");
		kill(r2, SIGKILL);
	} else {
		kill(r2, SIGKILL);
		printf("[b] killed replica r2 (SIGKILL)\n");
	}
	vbn_put("killed", "1");
	rc2 = vbt_wait(r2, 30);
	rc1 = vbt_wait(r1, 700);
	vbn_meet("end", MEET_S);
	return rc1 == 0 && rc2 == 128 + SIGKILL ? 0 : 1;
}

/* ---- writer (a) ------------------------------------------------------------- */

static int host_a(void)
{
	pid_t r0;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	vb_pub_attr_t pa;
	static uint8_t buf[512];
	uint64_t seq = 0, acked = 0, t0, at_kill = 0, max_wait = 0, max_wait_after = 0, max_stall = 0;
	char val[64];
	int bad = 0, killed = 0;

	if (vbn_meet("start", MEET_S))
		return 2;
	r0 = vbt_spawn(replica, (void *)(uintptr_t)0);
	if (vbn_ctx(1, false, NULL, &ctx) || vbn_node(ctx, 1, "writer", true, &node))
		return 3;
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 2;
	if (vb_pub_create(node, "net.log", VB_ORDERED, &pa, &pub))
		return 4;
	vbn_put("port", "%u", vb_node_port(node));
	t0 = vbt_now_ms();
	while (vb_pub_subscribers(pub) < 3) {
		if (vbt_now_ms() - t0 > 180000) {
			fprintf(stderr, "[a] %d of 3 replicas in 180 s\n", vb_pub_subscribers(pub));
			return 5;
		}
		usleep(20000);
	}
	printf("[a] 3 replicas; %" PRIu64 " records, %d at a time, each batch acknowledged by 2\n",
	       n_recs, BATCH);
	t0 = vbt_now_ms();
	while (seq < n_recs) {
		uint64_t tw, waited;
		int rc;

		for (int k = 0; k < BATCH && seq < n_recs; k++) {
			size_t len = rec_len(seq + 1);
			uint64_t s, tp = vbt_now_ms();
			int told = 0;

			vbt_msg_fill(buf, len, 7, seq + 1);
			while ((rc = vb_publish(pub, buf, len, &s)) == -EAGAIN) {
				if (vbt_now_ms() - tp > publish_wait_ms()) {
					fprintf(stderr, "[a] -EAGAIN for %.0f s at record %" PRIu64 ": %s\n",
						(double)publish_wait_ms() / 1000.0, seq + 1, vb_errmsg());
					bad = 1;
					goto done;
				}
				if (!told && vbt_now_ms() - tp > 5000) {
					told = 1;
					printf("[a] record %" PRIu64 " refused for 5 s: %s\n", seq + 1,
					       vb_errmsg());
				}
				usleep(200);
			}
			if (vbt_now_ms() - tp > max_stall)
				max_stall = vbt_now_ms() - tp;
			if (rc) {
				fprintf(stderr, "[a] publish: %s (%s)\n", vb_strerror(rc), vb_errmsg());
				bad = 1;
				goto done;
			}
			seq = s;
		}
		tw = vbt_now_ms();
		rc = vb_pub_wait_acked(pub, seq, ACK_WAIT_MS);
		waited = vbt_now_ms() - tw;
		if (rc) {
			fprintf(stderr, "[a] record %" PRIu64 " not acknowledged by 2 in %d s: %s (%s)\n",
				seq, ACK_WAIT_MS / 1000, vb_strerror(rc), vb_errmsg());
			bad = 1;
			break;
		}
		acked = seq;
		if (waited > max_wait)
			max_wait = waited;
		if (killed && waited > max_wait_after)
			max_wait_after = waited;
		if (!killed && acked >= n_recs / 3) {
			vbn_put("kill", "1");
			if (vbn_get('b', "killed", val, sizeof(val), 60) == 0) {
				killed = 1;
				at_kill = acked;
				printf("[a] r2 killed after record %" PRIu64 "\n", acked);
			}
		}
	}
done:
	printf("[a] %" PRIu64 " records acknowledged by 2 of 3 in %.1f s (%" PRIu64
	       " after the kill); longest wait for a batch's acknowledgements %.2f s (%.2f s after "
	       "the kill); longest -EAGAIN stall of a record %.1f s\n",
	       acked, (double)(vbt_now_ms() - t0) / 1000.0, acked - at_kill,
	       (double)max_wait / 1000.0, (double)max_wait_after / 1000.0,
	       (double)max_stall / 1000.0);
	vbn_put("final", "%" PRIu64, acked);
	if (!killed || acked <= at_kill) {
		fprintf(stderr, "[a] writes did not go on after the kill\n");
		bad = 1;
	}
	for (unsigned i = 0; i < 2; i++) {
		char key[16];
		uint64_t got = 0, err = 1;

		snprintf(key, sizeof(key), "r%u-res", i);
		if (vbn_get(i ? 'b' : 'a', key, val, sizeof(val), 120) == 0)
			sscanf(val, "%" SCNu64 " %" SCNu64, &got, &err);
		printf("survivor r%u: %" PRIu64 " records held of %" PRIu64 " acknowledged, %" PRIu64
		       " errors: %s\n", i, got, acked, err, got >= acked && !err ? "ok" : "FAILED");
		bad |= got < acked || err;
	}
	bad |= vbt_wait(r0, 120) != 0;
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
	n_recs = vbt_scaled(20000);
	return role == 'a' ? host_a() : host_b();
}
