/* SPDX-License-Identifier: MIT */
/*
 * A connection handshake that stops half-way must not hold up the node's
 * listener.
 *
 * A raw rdma_cm client sends a valid connection request (the verbus wire
 * parameters in its private data, a real QP's number) to a listening
 * verbus node, the "victim", takes its reply and never sends the RTU that
 * completes the handshake. The victim used to wait for that RTU on its
 * listener's only accept thread, up to its cm_timeout_ms, taking no other
 * request meanwhile.
 *
 * 1. With the victim's cm_timeout_ms at 60 s, a verbus node (cm_timeout_ms
 *    10 s) connects while the stalled handshake is pending, and its ORDERED
 *    messages are delivered.
 * 2. With the victim's cm_timeout_ms at 3 s, the stalled handshake is
 *    given up and counted (vb_stats_t.pending_dropped), and a verbus node
 *    connects afterwards.
 * 4. A requester that withdraws its request (destroys its rdma_cm id
 *    before the handshake completes: a peer closing while it connects)
 *    is counted as withdrawn (vb_stats_t.handshakes_withdrawn), not as a
 *    failed accept. test_withdrawn: after the victim answered; its lane
 *    is freed at once (not after cm_timeout_ms), nothing is counted as
 *    dropped, and a verbus node connects and delivers afterwards.
 *    test_withdrawn_before_answer (the transport's accept, which the node
 *    runs): withdrawn once the request reached the victim, before it is
 *    accepted; the accept reports it as withdrawn (-ECONNABORTED),
 *    whether the REJ or the accept came first.
 * 3. A node in VB_PROGRESS_APP mode whose failed lane is being retired
 *    answers a request while the application does not call vb_progress():
 *    the lane's drain (its last completions, which only vb_progress()
 *    reaps there) must not hold up the conductor, which used to wait in
 *    it until the application's next vb_progress().
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/err.h"
#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rawpeer.h"
#include "tests/common/rxe_env.h"

#define TOPIC "stall.orders"
#define NMSG 200u
#define WAIT_MS 20000

/* The half-open client: its own event channel and id, and a real QP. */
struct stall {
	struct raw r;
	struct rawqp q;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
};

static void put32be(uint8_t *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

static void cm_wait(struct stall *s, enum rdma_cm_event_type want)
{
	struct pollfd pfd = { .fd = s->ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, WAIT_MS) != 1)
		fail_msg("no %s within %d ms", rdma_event_str(want), WAIT_MS);
	if (rdma_get_cm_event(s->ch, &ev))
		fail_msg("rdma_get_cm_event: %s", strerror(errno));
	if (ev->event != want)
		fail_msg("expected %s, got %s (status %d)", rdma_event_str(want),
			 rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
}

/* Request a connection to @port (the victim's answer not taken). */
static void stall_request(struct stall *s, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct rdma_conn_param cp;
	struct vbt_peer local;
	uint8_t w[36];

	memset(s, 0, sizeof(*s));
	raw_open(&s->r);
	raw_qp(&s->r, &s->q, VB_QPT_RC);
	assert_int_equal(vbt_qp_local_peer(s->q.qp, 0, &local), 0);
	/* transport/verbs/verbs_cm.c's private data: "VBUS", version 1, type,
	 * mtu, 0, qpn, psn, qkey, gid (big endian) */
	memcpy(w, "VBUS", 4);
	w[4] = 1;
	w[5] = VB_QPT_RC;
	w[6] = local.mtu;
	w[7] = 0;
	put32be(w + 8, local.qpn);
	put32be(w + 12, local.psn);
	put32be(w + 16, local.qkey);
	memcpy(w + 20, local.gid, 16);

	assert_int_equal(inet_pton(AF_INET, vbt_test_ip(), &sa.sin_addr), 1);
	s->ch = rdma_create_event_channel();
	assert_non_null(s->ch);
	assert_int_equal(rdma_create_id(s->ch, &s->id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(s->id, NULL, (struct sockaddr *)&sa, 5000), 0);
	cm_wait(s, RDMA_CM_EVENT_ADDR_RESOLVED);
	assert_int_equal(rdma_resolve_route(s->id, 5000), 0);
	cm_wait(s, RDMA_CM_EVENT_ROUTE_RESOLVED);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = w;
	cp.private_data_len = sizeof(w);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.flow_control = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	cp.qp_num = local.qpn;
	assert_int_equal(rdma_connect(s->id, &cp), 0);
}

/* Request a connection to @port and take the victim's reply (it has
 * accepted: it now waits for our RTU, which never comes). */
static void stall_open(struct stall *s, uint16_t port)
{
	stall_request(s, port);
	/* no QP on the id: librdmacm leaves the RTU to rdma_establish() */
	cm_wait(s, RDMA_CM_EVENT_CONNECT_RESPONSE);
	printf("half-open: the victim answered our request; we send no RTU\n");
}

static void stall_close(struct stall *s)
{
	rdma_destroy_id(s->id);
	rdma_destroy_event_channel(s->ch);
	raw_close(&s->q);
	raw_fini(&s->r);
}

static unsigned got;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	(void)arg;
	__atomic_fetch_add(&got, 1, __ATOMIC_ACQ_REL);
}

/* A node on its own context (cm_timeout_ms 10 s) connects to @port and
 * publishes NMSG ORDERED messages; the victim's subscriber gets them all. */
static void connect_and_deliver(uint16_t port)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	uint64_t t0;
	int rc;

	vb_ctx_attr_init(&ca);
	ca.cm_timeout_ms = 10000;
	ctx = vbt_ctx_open(&ca);
	node = vbt_node_open(ctx, "late", false);
	t0 = vbt_now_ms();
	rc = vb_node_connect(node, vbt_test_ip(), port);
	if (rc)
		fail_msg("connecting while a handshake is stalled: %s", vb_errmsg());
	printf("connected in %llu ms\n", (unsigned long long)(vbt_now_ms() - t0));
	assert_int_equal(vb_pub_create(node, TOPIC, VB_ORDERED, NULL, &pub), 0);
	assert_true(vbt_wait_subscribers(pub, 1, WAIT_MS));
	for (uint64_t i = 0; i < NMSG; i++)
		assert_int_equal(vb_publish(pub, &i, sizeof(i), NULL), 0);
	for (t0 = vbt_now_ms(); __atomic_load_n(&got, __ATOMIC_ACQUIRE) < NMSG &&
	     vbt_now_ms() - t0 < WAIT_MS;)
		usleep(2000);
	assert_int_equal(__atomic_load_n(&got, __ATOMIC_ACQUIRE), NMSG);
	vb_pub_destroy(pub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
}

static void run(int victim_cm_ms, bool wait_dropped)
{
	vb_ctx_attr_t ca;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	struct stall s;
	vb_stats_t st;

	got = 0;
	vb_ctx_attr_init(&ca);
	ca.cm_timeout_ms = victim_cm_ms;
	ctx = vbt_ctx_open(&ca);
	node = vbt_node_open(ctx, "victim", true);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(node, TOPIC, VB_ORDERED, &sa, &sub), 0);

	stall_open(&s, vb_node_port(node));
	if (wait_dropped) {
		uint64_t t0 = vbt_now_ms();

		do {
			usleep(20000);
			vb_ctx_stats(ctx, &st);
		} while (!st.pending_dropped && vbt_now_ms() - t0 < WAIT_MS);
		if (!st.pending_dropped)
			fail_msg("the stalled handshake was not given up within %d ms "
				 "(cm_timeout_ms %d)", WAIT_MS, victim_cm_ms);
		printf("the stalled handshake was given up and counted\n");
	}
	connect_and_deliver(vb_node_port(node));
	printf("%u of %u delivered\n", got, NMSG);
	stall_close(&s);
	vb_sub_destroy(sub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
}

static void test_connect_during_stall(void **state)
{
	(void)state;
	run(60000, false);
}

static void test_stall_given_up(void **state)
{
	(void)state;
	run(3000, true);
}

/* Item 4 at the node: a request answered, then withdrawn. */
static void test_withdrawn(void **state)
{
	vb_ctx_attr_t ca;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *sub;
	vb_stats_t st0, st;
	struct stall s;
	uint64_t t0;

	(void)state;
	got = 0;
	vb_ctx_attr_init(&ca);
	ca.cm_timeout_ms = 60000; /* no handshake is given up by the clock here */
	ctx = vbt_ctx_open(&ca);
	node = vbt_node_open(ctx, "victim", true);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(node, TOPIC, VB_ORDERED, &sa, &sub), 0);
	vb_ctx_stats(ctx, &st0);
	stall_open(&s, vb_node_port(node));
	stall_close(&s); /* destroys the id: the victim gets a REJ */
	printf("withdrawn: the victim answered our request; we withdrew it\n");
	t0 = vbt_now_ms();
	do {
		usleep(5000);
		vb_ctx_stats(ctx, &st);
	} while ((!st.handshakes_withdrawn || st.lanes_retired == st0.lanes_retired) &&
		 vbt_now_ms() - t0 < WAIT_MS);
	printf("withdrawn: %llu counted, %llu dropped, lanes freed %llu\n",
	       (unsigned long long)st.handshakes_withdrawn, (unsigned long long)st.pending_dropped,
	       (unsigned long long)(st.lanes_retired - st0.lanes_retired));
	if (st.handshakes_withdrawn != 1)
		fail_msg("%llu withdrawn requests counted after %d ms (1 made)",
			 (unsigned long long)st.handshakes_withdrawn, WAIT_MS);
	/* the request's lane and no other (this node has no peer) */
	assert_int_equal(st.lanes_retired - st0.lanes_retired, 1);
	assert_int_equal(st.pending_dropped, 0);
	connect_and_deliver(vb_node_port(node));
	vb_sub_destroy(sub);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
}

/* Item 4 at the transport, withdrawn before the answer: the request has
 * reached the victim's CM (the listener's descriptor is readable), then
 * its requester destroys its id. accept_start returns -ECONNABORTED when
 * the REJ came first (the kernel dropped the request: rdma_accept fails
 * with EINVAL), or accepts, and conn_step then returns -ECONNABORTED
 * when the REJ comes. Either way the same error, whichever came first. */
static void test_withdrawn_before_answer(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct vbt_listener *lis;
	struct vbt_conn *c = NULL;
	struct pollfd pfd;
	struct raw v;
	struct rawqp vq;
	struct stall s;
	uint64_t t0;
	int rc;

	(void)state;
	raw_open(&v);
	raw_qp(&v, &vq, VB_QPT_RC);
	assert_int_equal(inet_pton(AF_INET, vbt_test_ip(), &sa.sin_addr), 1);
	if (v.ops->listen(v.dev, VB_QPT_RC, (struct sockaddr *)&sa, &lis))
		fail_msg("listen: %s", vbi_errmsg());
	stall_request(&s, lis->port);
	pfd = (struct pollfd){ .fd = v.ops->listener_fd(lis), .events = POLLIN };
	if (poll(&pfd, 1, WAIT_MS) != 1)
		fail_msg("no request at the listener within %d ms", WAIT_MS);
	stall_close(&s);
	rc = v.ops->accept_start(lis, vq.qp, &v.cp, &c);
	printf("withdrawn before the answer: accept_start %d (%s)\n", rc,
	       rc ? vbi_errmsg() : "");
	for (t0 = vbt_now_ms(); rc == -EINPROGRESS && vbt_now_ms() - t0 < WAIT_MS;) {
		pfd = (struct pollfd){ .fd = v.ops->conn_fd(c), .events = POLLIN };
		poll(&pfd, 1, 100);
		if ((rc = v.ops->conn_step(c)) != -EINPROGRESS)
			printf("withdrawn before the answer: conn_step %d (%s)\n", rc,
			       rc ? vbi_errmsg() : "");
	}
	assert_int_equal(rc, -ECONNABORTED);
	if (c)
		v.ops->conn_close(c);
	v.ops->listener_close(lis);
	raw_close(&vq);
	raw_fini(&v);
}

/* vb_progress() on @ctx until @done says so (bounded): its stats. */
static vb_stats_t progress_until(vb_ctx_t *ctx, bool (*done)(const vb_stats_t *, uint64_t),
				 uint64_t arg, const char *what)
{
	uint64_t t0 = vbt_now_ms();
	vb_stats_t st;

	for (;;) {
		vb_progress(ctx);
		vb_ctx_stats(ctx, &st);
		if (done(&st, arg))
			return st;
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%s: not within %d ms", what, WAIT_MS);
		usleep(1000);
	}
}

static bool standby_warm(const vb_stats_t *st, uint64_t n)
{
	return st->standbys_warmed >= n;
}

static bool failed_over(const vb_stats_t *st, uint64_t before)
{
	return st->failovers > before;
}

static void test_answer_while_draining(void **state)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *actx, *bctx;
	vb_node_t *a, *b;
	vb_stats_t st;
	struct stall s;

	(void)state;
	vb_ctx_attr_init(&ca);
	bctx = vbt_ctx_open(&ca);
	b = vbt_node_open(bctx, "peer", true);
	vb_ctx_attr_init(&ca);
	ca.progress = VB_PROGRESS_APP;
	actx = vbt_ctx_open(&ca);
	a = vbt_node_open(actx, "app-mode", true);
	assert_int_equal(vb_node_connect(a, vbt_test_ip(), vb_node_port(b)), 0);
	st = progress_until(actx, standby_warm, 1, "a warm standby");
	assert_int_equal(vb_node_inject_fault(a, NULL, VB_FAULT_QP_ERR), 0);
	st = progress_until(actx, failed_over, st.failovers, "the switch to the standby");
	printf("switched to the standby; no vb_progress() from here: the failed lane's "
	       "drain waits\n");
	stall_open(&s, vb_node_port(a)); /* fails unless the conductor answers */
	vb_ctx_stats(actx, &st);
	printf("answered while the failed lane was retired: lanes created %llu, retired %llu\n",
	       (unsigned long long)st.lanes_created, (unsigned long long)st.lanes_retired);
	stall_close(&s);
	vb_node_destroy(a); /* runs vb_progress() itself while it waits */
	vb_ctx_destroy(actx);
	vb_node_destroy(b);
	vb_ctx_destroy(bctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect_during_stall),
		cmocka_unit_test(test_stall_given_up),
		cmocka_unit_test(test_withdrawn),
		cmocka_unit_test(test_withdrawn_before_answer),
		cmocka_unit_test(test_answer_while_draining),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
