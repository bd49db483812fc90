/* SPDX-License-Identifier: MIT */
/*
 * The far host powered off mid-stream (its qemu killed: nothing is sent,
 * nothing closes). Host a has two peers on host b, both streaming ORDERED
 * messages both ways: one a connected to (a's node "near" -> b's "far"), one
 * that connected to a (b's "back" -> a's "near-acc"). Once both directions
 * flow, a asks the runner to power b off. Passes when a reports both peers
 * down (VB_EV_PEER_DOWN) within the documented bound (docs/recovery.md: a
 * host that powers off answers nothing, so it is the recovery timeout,
 * 3 x cm_timeout_ms, after the active connection fails: keepalive_ms +
 * the RC retry time; plus 5 s of slack for emulation), then frees
 * everything for them: both reaped, no peer left, its QPs (less those
 * parked in the warm pool) and registered
 * memory in use back to what they were before the peers connected.
 * Runs last: guest b does not come back.
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
#include "tests/common/rxe_env.h"

#define MEET_S 300

struct rx {
	uint64_t got;
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;

	(void)sub;
	(void)m;
	__atomic_fetch_add(&r->got, 1, __ATOMIC_RELEASE);
}

static uint64_t down_ms[2]; /* a: when each peer was reported down */
static const char *const peer_names[2] = { "b-far", "b-back" };

static void on_event(const vb_event_t *ev, void *arg)
{
	(void)arg;
	printf("[%c] event %d peer '%s': %s\n", vbn_role(), (int)ev->type, ev->peer, ev->detail);
	if (ev->type != VB_EV_PEER_DOWN)
		return;
	for (int i = 0; i < 2; i++)
		if (!strcmp(ev->peer, peer_names[i]) && !down_ms[i])
			__atomic_store_n(&down_ms[i], vbt_now_ms(), __ATOMIC_RELEASE);
}

static void tweak(vb_ctx_attr_t *a)
{
	a->on_event = on_event;
}

static int publish_some(vb_pub_t *pub, uint64_t *n)
{
	static uint8_t buf[256];
	int rc;

	for (int k = 0; k < 16; k++) {
		size_t len = vbt_msg_len(3, *n + 1, 24, 256);

		vbt_msg_fill(buf, len, 3, *n + 1);
		rc = vb_publish(pub, buf, len, NULL);
		if (rc == -EAGAIN)
			return 0;
		if (rc)
			return rc;
		(*n)++;
	}
	return 0;
}

/* ---- far host (b): streams until it loses power -------------------------- */

static int far_host(void)
{
	vb_ctx_t *ctx;
	vb_node_t *far, *back;
	vb_pub_t *pub, *pub2;
	vb_sub_t *sub, *sub2;
	vb_sub_attr_t sa;
	static struct rx r1, r2;
	uint64_t port, n1 = 0, n2 = 0, t0;
	int rc;

	if (vbn_ctx(1, false, NULL, &ctx) || vbn_node(ctx, 1, "far", true, &far) ||
	    vbn_node(ctx, 1, "back", false, &back))
		return 2;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &r1;
	if (vb_pub_create(far, "po.b2a", VB_ORDERED, NULL, &pub) ||
	    vb_sub_create(far, "po.a2b", VB_ORDERED, &sa, &sub))
		return 3;
	sa.arg = &r2;
	if (vb_pub_create(back, "po.b2a.back", VB_ORDERED, NULL, &pub2) ||
	    vb_sub_create(back, "po.a2b.acc", VB_ORDERED, &sa, &sub2))
		return 3;
	vbn_put("port", "%u", vb_node_port(far));
	if (vbn_get_u64('a', "port", &port, 120) ||
	    (rc = vb_node_connect(back, vbn_ip('a', 1), (uint16_t)port))) {
		fprintf(stderr, "[b] cannot connect back to a: %s\n", vb_errmsg());
		return 4;
	}
	/* until the power goes (bounded: the runner kills this guest) */
	t0 = vbt_now_ms();
	while (vbt_now_ms() - t0 < 600000) {
		if (publish_some(pub, &n1) || publish_some(pub2, &n2))
			return 5;
		if (r1.got && r2.got)
			vbn_put("flowing", "1");
		usleep(2000);
	}
	fprintf(stderr, "[b] still running after 600 s: the power-off never came\n");
	return 6;
}

/* ---- near host (a) ------------------------------------------------------- */

static int near_host(void)
{
	vb_ctx_t *ctx;
	vb_node_t *near, *acc;
	vb_pub_t *pub, *pub2;
	vb_sub_t *sub, *sub2;
	vb_sub_attr_t sa;
	vb_stats_t s0, s1;
	static struct rx r1, r2;
	char val[8];
	uint64_t port, n1 = 0, n2 = 0, t0, cut, bound;
	int qp0, qp1 = -1, rc, bad = 0;

	if (vbn_ctx(1, false, tweak, &ctx) || vbn_node(ctx, 1, "near", false, &near) ||
	    vbn_node(ctx, 1, "near-acc", true, &acc))
		return 2;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &r1;
	if (vb_pub_create(near, "po.a2b", VB_ORDERED, NULL, &pub) ||
	    vb_sub_create(near, "po.b2a", VB_ORDERED, &sa, &sub))
		return 3;
	sa.arg = &r2;
	if (vb_pub_create(acc, "po.a2b.acc", VB_ORDERED, NULL, &pub2) ||
	    vb_sub_create(acc, "po.b2a.back", VB_ORDERED, &sa, &sub2))
		return 3;
	/* before any peer: what must come back, once the listening node has
	 * prepared its connections (its accept thread does that after
	 * vb_node_create returns): unchanged for 1 s */
	vb_ctx_stats(ctx, &s0);
	t0 = vbt_now_ms();
	for (uint64_t since = t0; vbt_now_ms() - since < 1000 && vbt_now_ms() - t0 < 15000;) {
		usleep(100000);
		vb_ctx_stats(ctx, &s1);
		if (s1.pool_in_use != s0.pool_in_use) {
			s0 = s1;
			since = vbt_now_ms();
		}
	}
	/* QPs parked in the warm pool are the library's, not a peer's (a
	 * healthy retired lane's QP is recycled there): they are left out */
	qp0 = vbt_res_count("qp", 0) - (int)s0.qp_pool_parked;
	printf("[a] before the peers: %zu bytes of registered memory in use, %d QPs\n",
	       s0.pool_in_use, qp0);
	vbn_put("port", "%u", vb_node_port(acc));
	if (vbn_get_u64('b', "port", &port, 120) ||
	    (rc = vb_node_connect(near, vbn_ip('b', 1), (uint16_t)port))) {
		fprintf(stderr, "[a] cannot connect to b: %s\n", vb_errmsg());
		return 4;
	}
	t0 = vbt_now_ms();
	while (!(r1.got > 100 && r2.got > 100 && vbn_get('b', "flowing", val, sizeof(val), 0) == 0)) {
		if (vbt_now_ms() - t0 > 120000) {
			fprintf(stderr, "[a] streams not flowing both ways in 120 s (%" PRIu64 ", %" PRIu64
					")\n", r1.got, r2.got);
			return 5;
		}
		if (publish_some(pub, &n1) || publish_some(pub2, &n2))
			return 6;
		usleep(2000);
	}
	printf("[a] both ways flowing (%" PRIu64 " and %" PRIu64 " received): powering b off\n",
	       r1.got, r2.got);
	vbn_poweroff('b');
	cut = vbt_now_ms();
	bound = vbn_recovery_ms() + 100 + 5000 + 5000;
	while ((!down_ms[0] || !down_ms[1]) && vbt_now_ms() - cut < bound + 30000) {
		publish_some(pub, &n1);
		publish_some(pub2, &n2);
		usleep(5000);
	}
	for (int i = 0; i < 2; i++) {
		uint64_t d = down_ms[i] ? down_ms[i] - cut : 0;
		int ok = down_ms[i] && d <= bound;

		printf("power-off: peer '%s' (%s) reported down %s%.1f s after the power-off "
		       "(bound %.1f s): %s\n", peer_names[i], i ? "it connected to us" : "we connected",
		       down_ms[i] ? "" : "never; waited ", (double)(down_ms[i] ? d : vbt_now_ms() - cut) / 1000.0,
		       (double)bound / 1000.0, ok ? "ok" : "FAILED");
		bad |= !ok;
	}
	/* everything for those peers freed (the maintenance thread reaps) */
	t0 = vbt_now_ms();
	for (;;) {
		vb_ctx_stats(ctx, &s1);
		qp1 = vbt_res_count("qp", 0) - (int)s1.qp_pool_parked;
		if ((s1.peers_reaped - s0.peers_reaped >= 2 && s1.peers == 0 && qp1 <= qp0 &&
		     s1.pool_in_use <= s0.pool_in_use) || vbt_now_ms() - t0 > 20000)
			break;
		usleep(100000);
	}
	{
		int ok = s1.peers_reaped - s0.peers_reaped >= 2 && s1.peers == 0 && qp1 <= qp0 &&
			 s1.pool_in_use <= s0.pool_in_use;

		printf("power-off: peers reaped %" PRIu64 ", peers left %u, QPs %d (before the peers %d), "
		       "registered memory in use %zu (before %zu): %s\n",
		       s1.peers_reaped - s0.peers_reaped, s1.peers, qp1, qp0, s1.pool_in_use,
		       s0.pool_in_use, ok ? "all freed" : "FAILED");
		bad |= !ok;
	}
	vb_pub_destroy(pub);
	vb_pub_destroy(pub2);
	vb_sub_destroy(sub);
	vb_sub_destroy(sub2);
	vb_node_destroy(near);
	vb_node_destroy(acc);
	vb_ctx_destroy(ctx);
	return bad;
}

int main(void)
{
	char role = vbn_role();

	setvbuf(stdout, NULL, _IOLBF, 0);
	return role == 'a' ? near_host() : far_host();
}
