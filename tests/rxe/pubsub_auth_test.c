/* SPDX-License-Identifier: MIT */
/*
 * Peer authentication and lane/epoch rules, against a raw-verbs client
 * (issue 14 item 5).
 *
 * test_rules: an unkeyed victim node (ORDERED subscriber). A raw RC client
 * sends a valid HELLO, then LANE frames that break the rules of
 * docs/wire.md ("Rules"): an arbitrary lane number, one above 32 bits, an
 * epoch that goes back; then a second and a third raw connection announce
 * standby lanes of its node with numbers that are not newer / far beyond
 * the ones it has. Each must be counted (malformed), reported
 * (VB_EV_PROTOCOL) and not acted on: no lane renumbered, no
 * LOC_QP_OP_ERR -> RESET_QP (err_by_action). Then a probe lane and a
 * standby numbered after the one the probe is promoted to (its HELLO
 * first, as when a connector promotes and builds a standby at once): the
 * promotion's LANE is accepted and switched to. A real publisher then
 * delivers every message once and in order.
 *
 * test_auth: a keyed victim (VERBUS auth_key). A raw client without the key
 * sends a valid old-style HELLO and fabricated DATA: nothing is delivered,
 * the connection is refused and counted (auth_refused). A raw client with
 * the key answers the victim's challenge (HMAC-SHA512-256 over its nonce)
 * and is let in; replaying that answer on a new connection is refused.
 * A real publisher with a wrong key, and one with no key, are refused
 * with the reason in vb_errmsg() (-ECONNREFUSED), counted at the victim;
 * one with the right key connects and delivers exactly once, in order.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
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
#include <sodium.h>

#include <verbus/verbus.h>

#include "core/wire.h"
#include "core/wire_msg.h"
#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"
#include "tests/common/rawpeer.h"
#include "transport/transport.h"

#define WT_AUTH 12 /* AUTH frame: frag_off 0 proof, 1 answer, 2 refusal (seq: reason) */

#define T_ORDERED "good.ordered"
#define ST_ORDERED 5u
#define MAX_DETAILS 128
#define RESET_QP_IDX 6 /* vb_stats_t.err_by_action[]: RESET_QP */

static const uint8_t KEY[32] = "verbus-test-key-0123456789abcdef";
static const uint8_t BADKEY[32] = "verbus-test-key-0123456789abcdeX";

/* ---- shared with the victim (mapped before fork) -------------------------------- */

struct shared {
	uint64_t malformed, auth_refused, reset_qp, failovers;
	uint64_t protocol, down, up, auth_ev;
	char detail[MAX_DETAILS][160];
	uint64_t n_good;
	uint64_t ord_got, ord_err, ord_delivered;
	int keyed;
	int finish;
};
static struct shared *sh;
static int port_pipe[2];
static pid_t child = -1;

static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static size_t ord_len(uint64_t i)
{
	return i % 100 == 42 ? vbt_msg_len(ST_ORDERED, i, 20000, 70000)
			     : vbt_msg_len(ST_ORDERED, i, 1, 2048);
}

/* ---- the victim ------------------------------------------------------------------------ */

static void on_event(const vb_event_t *ev, void *arg)
{
	if (ev->type == VB_EV_PROTOCOL || ev->type == VB_EV_AUTH_REFUSED) {
		uint64_t n = __atomic_load_n(&sh->protocol, __ATOMIC_RELAXED);

		snprintf(sh->detail[n % MAX_DETAILS], sizeof(sh->detail[0]), "%s%s",
			 ev->type == VB_EV_AUTH_REFUSED ? "[auth] " : "", ev->detail);
		if (ev->type == VB_EV_AUTH_REFUSED)
			__atomic_fetch_add(&sh->auth_ev, 1, __ATOMIC_RELEASE);
		else
			__atomic_store_n(&sh->protocol, n + 1, __ATOMIC_RELEASE);
		fprintf(stderr, "victim: event %d: %s\n", (int)ev->type, ev->detail);
	} else if (ev->type == VB_EV_PEER_DOWN) {
		__atomic_fetch_add(&sh->down, 1, __ATOMIC_RELEASE);
	} else if (ev->type == VB_EV_PEER_UP) {
		__atomic_fetch_add(&sh->up, 1, __ATOMIC_RELEASE);
	}
}

static uint64_t ord_next = 1;
static uint32_t ord_session;

static void on_ordered(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	const char *why = "length";
	uint64_t i = m->seq - 1;

	if (ord_session && m->publisher != ord_session) {
		if (__atomic_fetch_add(&sh->ord_err, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "victim: ORDERED from another session %08x\n", m->publisher);
		return;
	}
	ord_session = m->publisher;
	if (m->seq != ord_next || m->len != ord_len(i) ||
	    vbt_msg_verify(m->data, m->len, ST_ORDERED, i, &why)) {
		if (__atomic_fetch_add(&sh->ord_err, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "victim: ORDERED seq %" PRIu64 " (want %" PRIu64 ") len %zu "
				"session %08x: %s\n", m->seq, ord_next, m->len, m->publisher,
				m->seq != ord_next ? "out of order" : why);
		ord_next = m->seq + 1;
		return;
	}
	ord_next++;
	__atomic_fetch_add(&sh->ord_got, 1, __ATOMIC_RELEASE);
}

static int victim(void *unused)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_sub_t *ord;
	vb_sub_stats_t so;
	vb_stats_t s;
	uint16_t port;
	uint64_t t0 = vbt_now_ms();

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.on_event = on_event;
	ca.progress_spin = 200;
	if (sh->keyed) {
		ca.auth_key = KEY;
		ca.auth_key_len = sizeof(KEY);
	}
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "victim: ctx: %s\n", vb_errmsg());
		return 10;
	}
	vb_node_attr_init(&na);
	na.name = "victim";
	na.listen_ip = vbt_test_ip();
	if (vb_node_create(ctx, &na, &node))
		return 11;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_ordered;
	if (vb_sub_create(node, T_ORDERED, VB_ORDERED, &sa, &ord))
		return 12;
	port = vb_node_port(node);
	if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port))
		return 14;
	while (!__atomic_load_n(&sh->finish, __ATOMIC_ACQUIRE) && vbt_now_ms() - t0 < 400000) {
		vb_ctx_stats(ctx, &s);
		__atomic_store_n(&sh->malformed, s.malformed, __ATOMIC_RELEASE);
		__atomic_store_n(&sh->auth_refused, s.auth_refused, __ATOMIC_RELEASE);
		__atomic_store_n(&sh->reset_qp, s.err_by_action[RESET_QP_IDX], __ATOMIC_RELEASE);
		__atomic_store_n(&sh->failovers, s.failovers, __ATOMIC_RELEASE);
		vb_sub_stats(ord, &so);
		__atomic_store_n(&sh->ord_delivered, so.delivered, __ATOMIC_RELEASE);
		usleep(2000);
	}
	vb_ctx_stats(ctx, &s);
	printf("victim: malformed %" PRIu64 ", auth_refused %" PRIu64 ", RESET_QP %" PRIu64
	       ", failovers %" PRIu64 ", peers up %" PRIu64 " down %" PRIu64 "\n", s.malformed,
	       s.auth_refused, s.err_by_action[RESET_QP_IDX], s.failovers, ld(&sh->up),
	       ld(&sh->down));
	vb_sub_destroy(ord);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	fflush(stdout);
	return 0;
}

/* ---- the raw sender -------------------------------------------------------------------- */

/* ---- frames ---------------------------------------------------------------------------- */

static uint32_t frame(uint8_t *buf, const struct vbi_wire_hdr *h, uint32_t payload)
{
	vbi_wire_put(buf, h);
	memset(buf + VBI_WIRE_HDR_LEN, 0xa5, payload);
	return VBI_WIRE_HDR_LEN + payload;
}

static uint32_t hello(uint8_t *buf, uint64_t uid, uint32_t lane, uint32_t role,
		      const uint8_t *nonce)
{
	return raw_hello(buf, uid, lane, role, nonce);
}

/* The MACs of docs/wire.md ("Authentication"), with libsodium. */
static void mac(uint8_t out[32], const uint8_t *key, const char *label, const uint8_t *a,
		size_t alen, const uint8_t *b, size_t blen)
{
	crypto_auth_hmacsha512256_state st;

	crypto_auth_hmacsha512256_init(&st, key, 32);
	crypto_auth_hmacsha512256_update(&st, (const uint8_t *)label, strlen(label) + 1);
	crypto_auth_hmacsha512256_update(&st, a, alen);
	crypto_auth_hmacsha512256_update(&st, b, blen);
	crypto_auth_hmacsha512256_final(&st, out);
}

/* ---- the checks -------------------------------------------------------------------------- */

static uint64_t want_malformed, want_protocol, want_down, want_refused;

static void expect(const char *what, unsigned dm, unsigned dp, unsigned dd, unsigned dr)
{
	uint64_t t0 = vbt_now_ms();

	want_malformed += dm;
	want_protocol += dp;
	want_down += dd;
	want_refused += dr;
	while ((ld(&sh->malformed) < want_malformed || ld(&sh->protocol) < want_protocol ||
		ld(&sh->down) < want_down || ld(&sh->auth_refused) < want_refused) &&
	       vbt_now_ms() - t0 < 10000)
		usleep(1000);
	usleep(20000); /* a double count would show up here */
	printf("  %-48s malformed %2" PRIu64 " events %2" PRIu64 " down %" PRIu64 " refused %"
	       PRIu64 " RESET_QP %" PRIu64 "  '%s'\n", what, ld(&sh->malformed), ld(&sh->protocol),
	       ld(&sh->down), ld(&sh->auth_refused), ld(&sh->reset_qp),
	       (dp || dr) ? sh->detail[(ld(&sh->protocol) + ld(&sh->auth_ev) - 1) % MAX_DETAILS]
			  : "");
	fflush(stdout);
	assert_int_equal(ld(&sh->malformed), want_malformed);
	assert_int_equal(ld(&sh->protocol), want_protocol);
	assert_int_equal(ld(&sh->down), want_down);
	assert_int_equal(ld(&sh->auth_refused), want_refused);
	assert_int_equal(ld(&sh->reset_qp), 0);
	assert_int_equal(waitpid(-1, NULL, WNOHANG), 0); /* the victim is alive */
}

static void poll_for(struct rawqp *q, bool *flag, uint64_t ms)
{
	for (uint64_t t0 = vbt_now_ms(); !*flag && vbt_now_ms() - t0 < ms;)
		raw_poll(q);
}

/* ---- a real publisher ---------------------------------------------------------------- */

/* Connect with @key (NULL: none); 0 or the connect error. With @n, publish
 * n ORDERED messages and check the victim got each once, in order. */
static int real_publisher(uint16_t port, const uint8_t *key, uint64_t n)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *ord;
	uint8_t *buf = malloc(70000);
	uint64_t seq = 0, t0, got0 = ld(&sh->ord_got), eagain = 0;
	int rc;

	assert_non_null(buf);
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200;
	if (key) {
		ca.auth_key = key;
		ca.auth_key_len = 32;
	}
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	na.name = "real-publisher";
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	{
		vb_pub_attr_t pa;

		vb_pub_attr_init(&pa);
		pa.ack_quorum = 1;
		assert_int_equal(vb_pub_create(node, T_ORDERED, VB_ORDERED, &pa, &ord), 0);
	}
	rc = vb_node_connect(node, vbt_test_ip(), port);
	printf("  real publisher (%s): vb_node_connect = %d%s%s\n",
	       !key ? "no key" : key == KEY ? "the key" : "a wrong key", rc, rc ? ": " : "",
	       rc ? vb_errmsg() : "");
	fflush(stdout);
	if (!rc && n) {
		for (t0 = vbt_now_ms(); vb_pub_subscribers(ord) < 1 && vbt_now_ms() - t0 < 10000;)
			usleep(5000);
		assert_int_equal(vb_pub_subscribers(ord), 1);
		for (uint64_t i = 0; i < n; i++) {
			size_t ol = ord_len(i);
			int r;

			vbt_msg_fill(buf, ol, ST_ORDERED, i);
			while ((r = vb_publish(ord, buf, ol, &seq)) == -EAGAIN && ++eagain)
				usleep(50);
			if (r)
				fail_msg("ORDERED publish %" PRIu64 ": %s", i, vb_errmsg());
		}
		if (vb_pub_wait_acked(ord, seq, 60000))
			fail_msg("ORDERED not acknowledged: %s", vb_errmsg());
		for (t0 = vbt_now_ms(); ld(&sh->ord_got) + ld(&sh->ord_err) < got0 + n &&
					vbt_now_ms() - t0 < 30000;)
			usleep(5000);
		printf("  real publisher: %" PRIu64 " ORDERED published (%" PRIu64 " retries); "
		       "victim: %" PRIu64 " intact, %" PRIu64 " bad\n", n, eagain,
		       ld(&sh->ord_got) - got0, ld(&sh->ord_err));
		assert_int_equal(ld(&sh->ord_got), got0 + n);
		assert_int_equal(ld(&sh->ord_err), 0);
	}
	assert_int_equal(vb_pub_destroy(ord), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	free(buf);
	return rc;
}

static uint16_t start_victim(int keyed)
{
	uint16_t port;

	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	sh->n_good = vbt_scaled(2000);
	sh->keyed = keyed;
	want_malformed = want_protocol = want_down = want_refused = 0;
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(victim, NULL);
	assert_true(child > 0);
	assert_int_equal(read(port_pipe[0], &port, sizeof(port)), sizeof(port));
	return port;
}

static void stop_victim(void)
{
	int st;

	__atomic_store_n(&sh->finish, 1, __ATOMIC_RELEASE);
	st = vbt_wait(child, 60);
	child = -1;
	assert_int_equal(st, 0);
	close(port_pipe[0]);
	close(port_pipe[1]);
	munmap(sh, sizeof(*sh));
}

static void send_lane(struct rawqp *q, uint64_t seq, uint32_t epoch)
{
	uint8_t buf[VBI_WIRE_HDR_LEN];
	struct vbi_wire_hdr h = { .type = VBI_WT_LANE, .seq = seq, .epoch = epoch };

	raw_send(q, buf, frame(buf, &h, 0), NULL, NULL);
}

static void test_rules(void **state)
{
	struct raw r = { 0 };
	struct rawqp a, b, c, d, e;
	uint8_t buf[RAW_SLOT];
	uint64_t uid = 0x5a5a000100000000ull | (uint32_t)getpid();
	uint16_t port = start_victim(0);

	raw_open(&r);
	raw_connect(&r, &a, port);
	printf("rules: raw RC QP %u connected to an unkeyed victim\n", a.qp->qpn);
	raw_send(&a, buf, hello(buf, uid, 1, 0, NULL), NULL, NULL);
	for (uint64_t t0 = vbt_now_ms(); (!a.got_hello || ld(&sh->up) < 1) &&
					 vbt_now_ms() - t0 < 10000;)
		raw_poll(&a);
	assert_true(a.got_hello);
	assert_int_equal(ld(&sh->up), 1);

	send_lane(&a, 0xdeadbeefu, 1);
	expect("LANE naming lane 0xdeadbeef", 1, 1, 0, 0);
	send_lane(&a, (1ull << 32) + 1, 1);
	expect("LANE naming lane 2^32 + 1", 1, 1, 0, 0);
	send_lane(&a, 2, 1);
	expect("LANE naming lane 2 (no such lane)", 1, 1, 0, 0);
	send_lane(&a, 1, 7);
	expect("LANE for its own lane, epoch 7 (allowed)", 0, 0, 0, 0);
	send_lane(&a, 1, 3);
	expect("LANE with epoch 3 after 7", 1, 1, 0, 0);
	send_lane(&a, 1, 7);
	expect("LANE with epoch 7 again", 1, 1, 0, 0);

	/* standby lanes of the same node whose numbers are not the next ones */
	raw_connect(&r, &b, port);
	raw_send(&b, buf, hello(buf, uid, 1, 1, NULL), NULL, NULL);
	expect("standby HELLO reusing lane number 1", 1, 1, 0, 0);
	raw_connect(&r, &c, port);
	raw_send(&c, buf, hello(buf, uid, 0x7fffffffu, 1, NULL), NULL, NULL);
	expect("standby HELLO with lane number 0x7fffffff", 1, 1, 0, 0);
	assert_int_equal(ld(&sh->failovers), 0);

	/* A promoted probe renumbered below a lane whose HELLO came first: the
	 * connector numbered the probe 3 when it promoted it, then built
	 * standby 4, whose HELLO (another connection: no order between them)
	 * the victim took before the LANE. Allowed: the victim switches. */
	raw_connect(&r, &d, port);
	raw_send(&d, buf, hello(buf, uid, 2, VBI_WIRE_ROLE_MAX, NULL), NULL, NULL);
	poll_for(&d, &d.got_hello, 10000);
	assert_true(d.got_hello);
	raw_connect(&r, &e, port);
	raw_send(&e, buf, hello(buf, uid, 4, 1, NULL), NULL, NULL);
	poll_for(&e, &e.got_hello, 10000);
	assert_true(e.got_hello);
	send_lane(&d, 3, 8);
	for (uint64_t t0 = vbt_now_ms(); ld(&sh->failovers) < 1 && vbt_now_ms() - t0 < 10000;)
		raw_poll(&d);
	expect("LANE renumbering probe 2 to 3 after lane 4's HELLO", 0, 0, 0, 0);
	assert_int_equal(ld(&sh->failovers), 1);

	/* the victim still works: a real publisher, exactly once, in order */
	assert_int_equal(real_publisher(port, NULL, sh->n_good), 0);
	assert_int_equal(ld(&sh->reset_qp), 0);
	assert_int_equal(ld(&sh->malformed), want_malformed);
	raw_close(&a);
	raw_close(&b);
	raw_close(&c);
	raw_close(&d);
	raw_close(&e);
	raw_fini(&r);
	stop_victim();
}

static void test_auth(void **state)
{
	struct raw r = { 0 };
	struct rawqp a, k, p;
	uint8_t buf[RAW_SLOT], nonce[32], hbuf[VBI_WIRE_HDR_LEN + HELLO_LEN_AUTH], m[32];
	uint8_t answer[VBI_WIRE_HDR_LEN + 32];
	uint64_t uid = 0x5a5a000200000000ull | (uint32_t)getpid();
	struct vbi_wire_hdr h;
	uint16_t port;
	int rc;

	assert_true(sodium_init() >= 0);
	port = start_victim(1);
	raw_open(&r);

	/* 1. no key: a valid HELLO, then fabricated DATA */
	raw_connect(&r, &a, port);
	printf("auth: raw RC QP %u connected to a keyed victim, no key\n", a.qp->qpn);
	{
		/* the HELLO and the DATA in one SEND, as fast as it gets */
		uint32_t n = hello(buf, uid, 1, 0, NULL);

		h = (struct vbi_wire_hdr){ .type = VBI_WT_DATA, .flags = VBI_WF_FIRST | VBI_WF_LAST,
					   .session = 0xbad0001, .topic = topic_id(T_ORDERED),
					   .seq = 1, .len = 64, .msg_len = 64 };
		n = (uint32_t)vbi_wire_frame_size(n - VBI_WIRE_HDR_LEN);
		n += frame(buf + n, &h, 64);
		raw_send(&a, buf, n, NULL, NULL);
	}
	expect("unkeyed HELLO + fabricated DATA (one SEND)", 0, 0, 0, 1);
	usleep(200000);
	printf("  victim delivered %" PRIu64 " messages\n", ld(&sh->ord_delivered));
	assert_int_equal(ld(&sh->ord_delivered), 0);
	assert_int_equal(ld(&sh->up), 0);

	/* 2. a raw client with the key answers the challenge: let in */
	{
		int st = 0;
		pid_t w = waitpid(child, &st, WNOHANG);

		if (w)
			fail_msg("the victim is gone: status %#x", st);
	}
	raw_connect(&r, &k, port);
	randombytes_buf(nonce, sizeof(nonce));
	hello(hbuf, uid + 1, 1, 0, nonce);
	raw_send(&k, hbuf, sizeof(hbuf), NULL, NULL);
	poll_for(&k, &k.got_proof, 10000);
	assert_true(k.got_proof);
	mac(m, KEY, "verbus-auth-1 accept", hbuf + VBI_WIRE_HDR_LEN, HELLO_LEN_AUTH, k.proof, 32);
	assert_memory_equal(m, k.proof + 32, 32); /* the victim proved the key */
	h = (struct vbi_wire_hdr){ .type = WT_AUTH, .frag_off = 1, .len = 32 };
	vbi_wire_put(answer, &h);
	mac(answer + VBI_WIRE_HDR_LEN, KEY, "verbus-auth-1 connect", k.proof, 32,
	    hbuf + VBI_WIRE_HDR_LEN, HELLO_LEN_AUTH);
	raw_send(&k, answer, sizeof(answer), NULL, NULL);
	for (uint64_t t0 = vbt_now_ms(); (!k.got_hello || ld(&sh->up) < 1) &&
					 vbt_now_ms() - t0 < 10000;)
		raw_poll(&k);
	assert_true(k.got_hello);
	expect("keyed raw client answers the challenge", 0, 0, 0, 0);
	assert_int_equal(ld(&sh->up), 1);

	/* 3. the same HELLO and answer replayed on a new connection */
	raw_connect(&r, &p, port);
	raw_send(&p, hbuf, sizeof(hbuf), NULL, NULL);
	poll_for(&p, &p.got_proof, 10000);
	assert_true(p.got_proof);
	assert_memory_not_equal(p.proof, k.proof, 32); /* a fresh nonce */
	raw_send(&p, answer, sizeof(answer), NULL, NULL);
	expect("replayed answer on a new connection", 0, 0, 0, 1);
	assert_false(p.got_hello);
	assert_int_equal(ld(&sh->up), 1);

	/* 4. real publishers: a wrong key, no key, the key */
	rc = real_publisher(port, BADKEY, 0);
	assert_int_equal(rc, -ECONNREFUSED);
	assert_non_null(strstr(vb_errmsg(), "key"));
	expect("real publisher with a wrong key", 0, 0, 0, 1);
	rc = real_publisher(port, NULL, 0);
	assert_int_equal(rc, -ECONNREFUSED);
	assert_non_null(strstr(vb_errmsg(), "key"));
	expect("real publisher without a key", 0, 0, 0, 1);
	assert_int_equal(real_publisher(port, KEY, sh->n_good), 0);
	assert_int_equal(ld(&sh->auth_refused), want_refused);
	assert_int_equal(ld(&sh->reset_qp), 0);

	raw_close(&a);
	raw_close(&k);
	raw_close(&p);
	raw_fini(&r);
	stop_victim();
}

static int teardown(void **state)
{
	vbt_reap(&child);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_rules, teardown),
		cmocka_unit_test_teardown(test_auth, teardown),
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	vbt_require_device();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
