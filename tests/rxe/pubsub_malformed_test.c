/* SPDX-License-Identifier: MIT */
/*
 * Malformed frames from a raw-verbs sender.
 *
 * A "victim" process runs a verbus node (listening, an ORDERED and a FANOUT
 * subscriber, an ORDERED publisher). The test process connects to it with
 * bare RC QPs through the transport ops (ops->connect: the same rdma_cm
 * private data every verbus peer sends) and sends it hand-made frames one
 * SEND at a time, then datagrams to the victim context's UD QP (whose
 * address the victim's HELLO carries). After each injection the test waits
 * for the victim's vb_ctx_stats().malformed to move by exactly the expected
 * amount, and checks the VB_EV_PROTOCOL events reported with it:
 *   bad magic, bad version, unknown type, unknown flags, reserved bits,
 *   an empty SEND, a runt SEND, len beyond the bytes received (also an overflowing len),
 *   msg_len above max_msg, a compact BATCH with no BATCH before it,
 *   inconsistent fragment fields (offset past the
 *   end, FIRST/LAST wrong, seq 0, flags on a control frame), a good frame
 *   followed by a bad one, stray fragments of an ORDERED message, a repeated
 *   HELLO, malformed SUBs, an ACK for a sequence never sent, an ACK
 *   returning credits never used, HELLOs with impossible geometry (each on
 *   its own connection: the victim drops that connection), a short HELLO,
 *   and the same kinds of garbage as datagrams.
 * Then a real verbus publisher connects and sends ORDERED and FANOUT
 * self-checking messages (some fragmented): the victim delivers every
 * ORDERED one intact and in order, accounts for every FANOUT one
 * (delivered + lost == published), delivers nothing that was injected, and
 * exits normally. Run it under ASan as well.
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

#include <verbus/verbus.h>

#include "core/wire.h"
#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"
#include "tests/common/rawpeer.h"
#include "transport/transport.h"

#define T_ORDERED "good.ordered"
#define T_FANOUT "good.fanout"
#define T_VICTIM "victim.out"
#define ST_ORDERED 5u
#define ST_FANOUT 6u
#define MAX_DETAILS 128

/* ---- shared with the victim (mapped before fork) -------------------------------- */

struct shared {
	uint64_t malformed;          /* victim's vb_ctx_stats().malformed, mirrored */
	uint64_t protocol, down, up; /* events seen by on_event */
	char detail[MAX_DETAILS][160];
	uint64_t n_good;             /* messages the real publisher sends per topic */
	uint64_t ord_got, ord_err, fan_got, fan_err, fan_lost, fan_delivered, ord_delivered;
	int finish;
};
static struct shared *sh;
static int port_pipe[2];
static pid_t child = -1; /* killed by teardown if a check failed */

static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static size_t ord_len(uint64_t i)
{
	return i % 100 == 42 ? vbt_msg_len(ST_ORDERED, i, 20000, 70000) /* fragmented */
			     : vbt_msg_len(ST_ORDERED, i, 1, 2048);
}

static size_t fan_len(uint64_t i)
{
	return i % 10 == 3 ? vbt_msg_len(ST_FANOUT, i, 1, 3000) : vbt_msg_len(ST_FANOUT, i, 1, 600);
}

/* ---- the victim ------------------------------------------------------------------------ */

static void on_event(const vb_event_t *ev, void *arg)
{
	if (ev->type == VB_EV_PROTOCOL) {
		uint64_t n = __atomic_load_n(&sh->protocol, __ATOMIC_RELAXED);

		snprintf(sh->detail[n % MAX_DETAILS], sizeof(sh->detail[0]), "%s", ev->detail);
		__atomic_store_n(&sh->protocol, n + 1, __ATOMIC_RELEASE);
	} else if (ev->type == VB_EV_PEER_DOWN) {
		__atomic_fetch_add(&sh->down, 1, __ATOMIC_RELEASE);
	} else if (ev->type == VB_EV_PEER_UP) {
		__atomic_fetch_add(&sh->up, 1, __ATOMIC_RELEASE);
	}
}

static uint64_t ord_next = 1, fan_last;

static void on_ordered(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	const char *why = "length";
	uint64_t i = m->seq - 1;

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

static void on_fanout(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	const char *why = "length";
	uint64_t i = m->seq - 1;

	if (m->seq <= fan_last || m->len != fan_len(i) ||
	    vbt_msg_verify(m->data, m->len, ST_FANOUT, i, &why)) {
		if (__atomic_fetch_add(&sh->fan_err, 1, __ATOMIC_RELAXED) < 5)
			fprintf(stderr, "victim: FANOUT seq %" PRIu64 " len %zu: %s\n", m->seq,
				m->len, m->seq <= fan_last ? "not increasing" : why);
	}
	fan_last = m->seq;
	__atomic_fetch_add(&sh->fan_got, 1, __ATOMIC_RELEASE);
}

static int victim(void *unused)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *out;
	vb_sub_t *ord, *fan;
	vb_sub_stats_t so, sf;
	vb_stats_t s;
	bool published = false;
	uint16_t port;
	uint64_t t0 = vbt_now_ms();
	int ok;

	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.on_event = on_event;
	ca.progress_spin = 200;
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "victim: ctx: %s\n", vb_errmsg());
		return 10;
	}
	vb_node_attr_init(&na);
	na.name = "victim";
	na.listen_ip = vbt_test_ip();
	if (vb_node_create(ctx, &na, &node) || vb_pub_create(node, T_VICTIM, VB_ORDERED, NULL, &out))
		return 11;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_ordered;
	if (vb_sub_create(node, T_ORDERED, VB_ORDERED, &sa, &ord))
		return 12;
	sa.on_msg = on_fanout;
	if (vb_sub_create(node, T_FANOUT, VB_FANOUT, &sa, &fan))
		return 13;
	port = vb_node_port(node);
	if (write(port_pipe[1], &port, sizeof(port)) != sizeof(port))
		return 14;
	while (!__atomic_load_n(&sh->finish, __ATOMIC_ACQUIRE) && vbt_now_ms() - t0 < 240000) {
		vb_ctx_stats(ctx, &s);
		__atomic_store_n(&sh->malformed, s.malformed, __ATOMIC_RELEASE);
		/* one message for whoever subscribes to our topic (the raw peer
		 * learns our session from it) */
		if (!published && vb_pub_subscribers(out) > 0) {
			static const char hello[] = "a message from the victim";

			published = vb_publish(out, hello, sizeof(hello), NULL) == 0;
		}
		vb_sub_stats(ord, &so);
		vb_sub_stats(fan, &sf);
		__atomic_store_n(&sh->ord_delivered, so.delivered, __ATOMIC_RELEASE);
		__atomic_store_n(&sh->fan_delivered, sf.delivered, __ATOMIC_RELEASE);
		__atomic_store_n(&sh->fan_lost, sf.lost, __ATOMIC_RELEASE);
		usleep(2000);
	}
	vb_ctx_stats(ctx, &s);
	vb_sub_stats(ord, &so);
	vb_sub_stats(fan, &sf);
	printf("victim: malformed %" PRIu64 ", protocol events %" PRIu64 ", peers up %" PRIu64
	       " down %" PRIu64 "; ORDERED %" PRIu64 " intact of %" PRIu64 " (delivered %" PRIu64
	       ", %" PRIu64 " bad); FANOUT delivered %" PRIu64 " + lost %" PRIu64 " of %" PRIu64
	       " (%" PRIu64 " bad)\n", s.malformed, ld(&sh->protocol), ld(&sh->up), ld(&sh->down),
	       ld(&sh->ord_got), sh->n_good, so.delivered, ld(&sh->ord_err), sf.delivered, sf.lost,
	       sh->n_good, ld(&sh->fan_err));
	ok = ld(&sh->ord_got) == sh->n_good && so.delivered == sh->n_good && !ld(&sh->ord_err) &&
	     sf.delivered + sf.lost == sh->n_good && sf.delivered > 0 && !ld(&sh->fan_err);
	vb_sub_destroy(ord);
	vb_sub_destroy(fan);
	vb_pub_destroy(out);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	fflush(stdout); /* vbt_spawn's _exit() does not flush stdio */
	return ok ? 0 : 1;
}

/* ---- the raw sender -------------------------------------------------------------------- */

/* ---- frames ---------------------------------------------------------------------------- */

/* A valid whole-message DATA header for @topic (callers then break it). */
static struct vbi_wire_hdr data_hdr(const char *topic, uint32_t len)
{
	return (struct vbi_wire_hdr){ .type = VBI_WT_DATA, .flags = VBI_WF_FIRST | VBI_WF_LAST,
				      .session = 0xbad0001, .topic = topic_id(topic), .seq = 1,
				      .len = len, .msg_len = len };
}

static uint32_t frame(uint8_t *buf, const struct vbi_wire_hdr *h, uint32_t payload)
{
	vbi_wire_put(buf, h);
	memset(buf + VBI_WIRE_HDR_LEN, 0xa5, payload);
	return VBI_WIRE_HDR_LEN + payload;
}

static uint32_t hello(uint8_t *buf, uint32_t slots, uint32_t slot_size, uint32_t len)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_HELLO, .len = len };
	uint8_t *pl = buf + VBI_WIRE_HDR_LEN;

	vbi_wire_put(buf, &h);
	memset(pl, 0, HELLO_LEN);
	put32le(pl + HELLO_VERSION, 3);
	put32le(pl + HELLO_UID, 0x5a5a0001u);
	put32le(pl + HELLO_UID + 4, (uint32_t)getpid());
	put32le(pl + HELLO_LANE, 1);
	put32le(pl + HELLO_ROLE, 0); /* primary */
	put32le(pl + HELLO_SLOTS, slots);
	put32le(pl + HELLO_SLOT_SIZE, slot_size);
	put32le(pl + HELLO_MAX_MSG, 1u << 20);
	memcpy(pl + HELLO_NAME, "raw-sender", 10);
	return VBI_WIRE_HDR_LEN + len;
}

static uint32_t sub(uint8_t *buf, uint32_t id, uint8_t cls, const char *name, uint32_t len)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_SUB, .topic = id, .len = len };

	vbi_wire_put(buf, &h);
	memset(buf + VBI_WIRE_HDR_LEN, 0, len);
	if (len) {
		buf[VBI_WIRE_HDR_LEN] = cls;
		memcpy(buf + VBI_WIRE_HDR_LEN + 1, name, strnlen(name, len - 1));
	}
	return (uint32_t)vbi_wire_frame_size(len);
}

/* ---- the checks -------------------------------------------------------------------------- */

static uint64_t want_malformed, want_protocol, want_down;

/*
 * The victim must count exactly @dm more malformed frames, @dp more
 * protocol events and @dd more dropped connections; wait for it (bounded).
 */
static void expect(const char *what, unsigned dm, unsigned dp, unsigned dd)
{
	uint64_t t0 = vbt_now_ms();

	want_malformed += dm;
	want_protocol += dp;
	want_down += dd;
	while ((ld(&sh->malformed) < want_malformed || ld(&sh->protocol) < want_protocol ||
		ld(&sh->down) < want_down) && vbt_now_ms() - t0 < 10000)
		usleep(1000);
	usleep(5000); /* a double count would show up here */
	printf("  %-44s malformed %3" PRIu64 " events %3" PRIu64 " down %" PRIu64 "  '%s'\n", what,
	       ld(&sh->malformed), ld(&sh->protocol), ld(&sh->down),
	       dp ? sh->detail[(ld(&sh->protocol) - 1) % MAX_DETAILS] : "");
	assert_int_equal(ld(&sh->malformed), want_malformed);
	assert_int_equal(ld(&sh->protocol), want_protocol);
	assert_int_equal(ld(&sh->down), want_down);
	assert_int_equal(waitpid(-1, NULL, WNOHANG), 0); /* the victim is alive */
}

static void inject_rc(struct rawqp *q, const char *what, const struct vbi_wire_hdr *h,
		      uint32_t payload, uint32_t send_len)
{
	uint8_t buf[RAW_SLOT];
	uint32_t len = frame(buf, h, payload);

	raw_send(q, buf, send_len ? send_len : len, NULL, NULL);
	expect(what, 1, 1, 0);
}

/* Overwrite raw header bytes the encoder would never produce. */
static void inject_raw_bytes(struct rawqp *q, const char *what, unsigned off, const void *bytes,
			     unsigned n)
{
	uint8_t buf[VBI_WIRE_HDR_LEN + 64];
	struct vbi_wire_hdr h = data_hdr(T_ORDERED, 64);

	frame(buf, &h, 64);
	memcpy(buf + off, bytes, n);
	raw_send(q, buf, sizeof(buf), NULL, NULL);
	expect(what, 1, 1, 0);
}

static void rc_header_garbage(struct rawqp *a)
{
	static const uint8_t magic[2] = { 0x34, 0x12 }, ver = 1, type = 10, zero = 0,
			     flags[2] = { 0x80, 0 }, rsvd[2] = { 1, 0 };
	uint8_t buf[RAW_SLOT];
	struct vbi_wire_hdr h;
	uint32_t len;

	printf("RC, before HELLO:\n");
	inject_raw_bytes(a, "bad magic", 0, magic, 2);
	inject_raw_bytes(a, "version 1 (a peer of an older release)", 2, &ver, 1);
	inject_raw_bytes(a, "unknown type 10", 3, &type, 1);
	inject_raw_bytes(a, "unknown type 0", 3, &zero, 1);
	inject_raw_bytes(a, "unknown flag bit 7", 4, flags, 2);
	inject_raw_bytes(a, "reserved field set", 6, rsvd, 2);

	/* an empty SEND carries no frame: counted and dropped */
	raw_send(a, buf, 0, NULL, NULL);
	expect("empty SEND", 1, 1, 0);
	h = data_hdr(T_ORDERED, 64);
	frame(buf, &h, 64);
	raw_send(a, buf, 12, NULL, NULL);
	expect("runt SEND (12 bytes)", 1, 1, 0);

	h = data_hdr(T_ORDERED, 1000);
	inject_rc(a, "len 1000, 100 bytes arrived", &h, 100, 0);
	h = data_hdr(T_ORDERED, 64);
	h.len = 0xfffffff8u;
	inject_rc(a, "len 0xfffffff8 (overflow)", &h, 64, 0);

	h = data_hdr(T_ORDERED, 64);
	h.flags = VBI_WF_FIRST;
	h.msg_len = (1u << 20) + 1;
	inject_rc(a, "msg_len max_msg + 1", &h, 64, 0);
	h.msg_len = 0xffffffffu;
	inject_rc(a, "msg_len 4 GiB - 1", &h, 64, 0);

	h = data_hdr(T_ORDERED, 100);
	h.flags = 0;
	h.frag_off = 100;
	h.msg_len = 150;
	inject_rc(a, "fragment past the message end", &h, 100, 0);
	h = data_hdr(T_ORDERED, 64);
	h.frag_off = 64;
	h.msg_len = 256;
	h.flags = VBI_WF_FIRST;
	inject_rc(a, "FIRST at offset 64", &h, 64, 0);
	h = data_hdr(T_ORDERED, 64);
	h.msg_len = 256;
	h.flags = VBI_WF_FIRST | VBI_WF_LAST;
	inject_rc(a, "LAST before the message end", &h, 64, 0);
	h = data_hdr(T_ORDERED, 0);
	h.msg_len = 64;
	h.flags = VBI_WF_FIRST;
	inject_rc(a, "empty non-final fragment", &h, 0, 0);
	h = data_hdr(T_ORDERED, 64);
	h.seq = 0;
	inject_rc(a, "DATA seq 0", &h, 64, 0);
	h = (struct vbi_wire_hdr){ .type = VBI_WT_ACK, .flags = VBI_WF_LAST };
	inject_rc(a, "ACK with LAST set", &h, 0, 0);

	/* BATCH: header rules, then records that do not fit their frame */
	h = (struct vbi_wire_hdr){ .type = VBI_WT_BATCH, .flags = VBI_WF_FIRST | VBI_WF_LAST,
				   .session = 0xbad0001, .topic = topic_id(T_ORDERED), .seq = 1,
				   .len = 8, .msg_len = 0 };
	inject_rc(a, "BATCH of 0 records", &h, 8, 0);
	h.msg_len = 1;
	h.seq = UINT64_MAX;
	inject_rc(a, "BATCH at seq 2^64 - 1", &h, 8, 0);
	h.seq = 1;
	h.msg_len = 3; /* 3 records need 12 bytes at least */
	inject_rc(a, "BATCH of 3 records in 8 bytes", &h, 8, 0);
	{
		uint8_t b[VBI_WIRE_HDR_LEN + 16];

		/* one record each (a good record before a bad one would be
		 * delivered, here dropped as DATA before HELLO: another event) */
		h.msg_len = 1;
		h.len = 16;
		vbi_wire_put(b, &h);
		put32le(b + VBI_WIRE_HDR_LEN, 200);   /* 200 bytes in 12 */
		memset(b + VBI_WIRE_HDR_LEN + 4, 0x11, 12);
		raw_send(a, b, sizeof(b), NULL, NULL);
		expect("BATCH record runs past the frame", 1, 1, 0);
		put32le(b + VBI_WIRE_HDR_LEN, 4);     /* 8 bytes of record, 8 left over */
		raw_send(a, b, sizeof(b), NULL, NULL);
		expect("BATCH record leaves 8 bytes over", 1, 1, 0);
	}
	{
		uint8_t b[VBI_WIRE_CHDR_LEN + 4 + 64];

		/* a compact BATCH continues the BATCH before it on the
		 * connection: the bad ones above left none to continue */
		vbi_wire_cput(b, 0);
		put32le(b + VBI_WIRE_CHDR_LEN, 64);
		memset(b + VBI_WIRE_CHDR_LEN + 4, 0x22, 64);
		raw_send(a, b, sizeof(b), NULL, NULL);
		expect("compact BATCH with no stream to continue", 1, 1, 0);
	}

	/* a harmless frame, then garbage: the garbage still counts once */
	h = (struct vbi_wire_hdr){ .type = VBI_WT_HEARTBEAT, .session = 7, .topic = 7, .seq = 1 };
	len = frame(buf, &h, 0);
	memset(buf + len, 0xee, 64);
	raw_send(a, buf, len + 64, NULL, NULL);
	expect("heartbeat + 64 bytes of 0xee", 1, 1, 0);
}

static void rc_protocol_garbage(struct rawqp *a)
{
	uint8_t buf[RAW_SLOT];
	struct vbi_wire_hdr h;
	uint64_t t0;

	printf("RC, after HELLO:\n");
	raw_send(a, buf, hello(buf, RAW_SLOTS, RAW_SLOT, HELLO_LEN), NULL, NULL);
	for (t0 = vbt_now_ms(); (ld(&sh->up) < 1 || !a->got_hello) && vbt_now_ms() - t0 < 10000;)
		raw_poll(a);
	assert_int_equal(ld(&sh->up), 1);
	assert_true(a->got_hello);
	raw_send(a, buf, hello(buf, RAW_SLOTS, RAW_SLOT, HELLO_LEN), NULL, NULL);
	expect("HELLO again", 1, 1, 0);

	raw_send(a, buf, sub(buf, topic_id(T_VICTIM), 7, T_VICTIM, 1 + strlen(T_VICTIM)), NULL,
		 NULL);
	expect("SUB with class 7", 1, 1, 0);
	raw_send(a, buf, sub(buf, topic_id(T_VICTIM) + 1, 0, T_VICTIM, 1 + strlen(T_VICTIM)),
		 NULL, NULL);
	expect("SUB whose id is not its name's", 1, 1, 0);
	raw_send(a, buf, sub(buf, topic_id(T_VICTIM), 0, "", 1), NULL, NULL);
	expect("SUB without a name", 1, 1, 0);
	raw_send(a, buf, sub(buf, topic_id(T_VICTIM), 0, T_VICTIM, 200), NULL, NULL);
	expect("SUB with a 199-byte name", 1, 1, 0);

	/* a real subscription: the victim publishes to us, we learn its session */
	raw_send(a, buf, sub(buf, topic_id(T_VICTIM), 0, T_VICTIM, 1 + strlen(T_VICTIM)), NULL,
		 NULL);
	for (t0 = vbt_now_ms(); !a->got_data && vbt_now_ms() - t0 < 10000;)
		raw_poll(a);
	assert_true(a->got_data);
	assert_int_equal(a->data_topic, topic_id(T_VICTIM));
	printf("  (victim's publisher session %08x sent us seq %" PRIu64 "; %u SUB frames from "
	       "it)\n", a->data_session, a->data_seq, a->subs_seen);
	h = (struct vbi_wire_hdr){ .type = VBI_WT_ACK, .session = a->data_session,
				   .topic = a->data_topic, .seq = a->data_seq + 1000 };
	inject_rc(a, "ACK for a seq never sent", &h, 0, 0);
	h = (struct vbi_wire_hdr){ .type = VBI_WT_ACK, .frag_off = 100000 };
	inject_rc(a, "ACK returning 100000 unused credits", &h, 0, 0);

	/* fragments of an ORDERED message that do not continue each other */
	h = data_hdr(T_ORDERED, 64);
	h.session = 0xbad0002;
	h.flags = VBI_WF_FIRST;
	h.msg_len = 256;
	raw_send(a, buf, frame(buf, &h, 64), NULL, NULL);
	h.flags = 0;
	h.frag_off = 128;
	inject_rc(a, "ORDERED fragment skipping 64 bytes", &h, 64, 0);
	h = data_hdr(T_ORDERED, 64);
	h.session = 0xbad0003;
	h.flags = VBI_WF_LAST;
	h.seq = 2;
	h.frag_off = 192;
	h.msg_len = 256;
	inject_rc(a, "ORDERED last fragment of nothing", &h, 64, 0);
}

static void rc_bad_hellos(struct raw *r, uint16_t port)
{
	struct rawqp b, c, d;
	uint8_t buf[RAW_SLOT];

	printf("RC, HELLO geometry (one connection each):\n");
	raw_connect(r, &b, port);
	raw_send(&b, buf, hello(buf, 0, RAW_SLOT, HELLO_LEN), NULL, NULL);
	expect("HELLO with 0 slots", 1, 0, 1);
	raw_connect(r, &c, port);
	raw_send(&c, buf, hello(buf, RAW_SLOTS, 64u << 20, HELLO_LEN), NULL, NULL);
	expect("HELLO with 64 MiB slots", 1, 0, 1);
	raw_connect(r, &d, port);
	raw_send(&d, buf, hello(buf, RAW_SLOTS, RAW_SLOT, 8), NULL, NULL);
	expect("HELLO of 8 bytes", 1, 1, 0);
	raw_close(&b);
	raw_close(&c);
	raw_close(&d);
}

static void ud_garbage(struct raw *r, const struct rawqp *a)
{
	struct rawqp u;
	struct vbt_ah_attr aa;
	struct vbt_ah *ah;
	uint8_t buf[1024];
	struct vbi_wire_hdr h;

	printf("UD, to the victim's datagram QP %u:\n", a->victim_ud.qpn);
	raw_qp(r, &u, VB_QPT_UD);
	vbt_ah_attr_from_peer(r->dev, &a->victim_ud, &aa);
	if (r->ops->ah_create(r->pd, &aa, &ah))
		fail_msg("ah_create: %s", vb_errmsg());

	h = data_hdr(T_FANOUT, 64);
	frame(buf, &h, 64);
	buf[0] ^= 0xff;
	raw_send(&u, buf, 104, ah, &a->victim_ud);
	expect("datagram: bad magic", 1, 1, 0);
	raw_send(&u, buf, 10, ah, &a->victim_ud);
	expect("datagram: 10 bytes", 1, 1, 0);
	h.msg_len = 64u << 20;
	h.flags = VBI_WF_FIRST;
	raw_send(&u, buf, frame(buf, &h, 64), ah, &a->victim_ud);
	expect("datagram: msg_len 64 MiB", 1, 1, 0);
	h = data_hdr(T_FANOUT, 64);
	h.frag_off = 900;
	h.msg_len = 901;
	h.flags = VBI_WF_LAST;
	raw_send(&u, buf, frame(buf, &h, 64), ah, &a->victim_ud);
	expect("datagram: fragment past the end", 1, 1, 0);
	h = data_hdr(T_FANOUT, 64);
	h.type = 200;
	raw_send(&u, buf, frame(buf, &h, 64), ah, &a->victim_ud);
	expect("datagram: type 200", 1, 1, 0);
	h = data_hdr(T_FANOUT, 900);
	frame(buf, &h, 100);
	raw_send(&u, buf, VBI_WIRE_HDR_LEN + 100, ah, &a->victim_ud);
	expect("datagram: len 900, 100 arrived", 1, 1, 0);
	assert_int_equal(r->ops->ah_destroy(ah), 0);
	raw_close(&u);
}

/* ---- a real publisher afterwards ------------------------------------------------------- */

static void good_traffic(uint16_t port)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *ord, *fan;
	uint8_t *buf = malloc(70000);
	uint64_t seq = 0, t0, n = sh->n_good, eagain = 0;

	assert_non_null(buf);
	vb_ctx_attr_init(&ca);
	ca.ip = vbt_test_ip();
	ca.progress_spin = 200;
	if (vb_ctx_create(&ca, &ctx))
		fail_msg("ctx: %s", vb_errmsg());
	vb_node_attr_init(&na);
	na.name = "real-publisher";
	assert_int_equal(vb_node_create(ctx, &na, &node), 0);
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	assert_int_equal(vb_pub_create(node, T_ORDERED, VB_ORDERED, &pa, &ord), 0);
	assert_int_equal(vb_pub_create(node, T_FANOUT, VB_FANOUT, NULL, &fan), 0);
	if (vb_node_connect(node, vbt_test_ip(), port))
		fail_msg("connect: %s", vb_errmsg());
	for (t0 = vbt_now_ms(); (vb_pub_subscribers(ord) < 1 || vb_pub_subscribers(fan) < 1) &&
				vbt_now_ms() - t0 < 10000;)
		usleep(5000);
	assert_int_equal(vb_pub_subscribers(ord), 1);
	assert_int_equal(vb_pub_subscribers(fan), 1);
	for (uint64_t i = 0; i < n; i++) {
		size_t ol = ord_len(i), fl = fan_len(i);
		int rc;

		vbt_msg_fill(buf, ol, ST_ORDERED, i);
		while ((rc = vb_publish(ord, buf, ol, &seq)) == -EAGAIN && ++eagain)
			usleep(50);
		if (rc)
			fail_msg("ORDERED publish %" PRIu64 ": %s", i, vb_errmsg());
		vbt_msg_fill(buf, fl, ST_FANOUT, i);
		while ((rc = vb_publish(fan, buf, fl, NULL)) == -EAGAIN && ++eagain)
			usleep(50);
		if (rc)
			fail_msg("FANOUT publish %" PRIu64 ": %s", i, vb_errmsg());
	}
	if (vb_pub_wait_acked(ord, seq, 60000))
		fail_msg("ORDERED not acknowledged: %s", vb_errmsg());
	/* the victim copies its subscribers' stats here every 2 ms: wait for
	 * them too, not only for its callbacks' counts */
	for (t0 = vbt_now_ms(); (ld(&sh->ord_got) + ld(&sh->ord_err) < n ||
				 ld(&sh->ord_delivered) < n ||
				 ld(&sh->fan_delivered) + ld(&sh->fan_lost) < n) &&
				vbt_now_ms() - t0 < 30000;)
		usleep(5000);
	printf("real publisher: %" PRIu64 " ORDERED + %" PRIu64 " FANOUT published (%" PRIu64
	       " retries); victim: ORDERED %" PRIu64 " intact, FANOUT %" PRIu64 " delivered + %"
	       PRIu64 " lost\n", n, n, eagain, ld(&sh->ord_got), ld(&sh->fan_delivered),
	       ld(&sh->fan_lost));
	assert_int_equal(ld(&sh->ord_got), n);
	assert_int_equal(ld(&sh->ord_delivered), n);
	assert_int_equal(ld(&sh->ord_err), 0);
	assert_int_equal(ld(&sh->fan_delivered) + ld(&sh->fan_lost), n);
	assert_int_equal(ld(&sh->fan_err), 0);
	assert_int_equal(vb_pub_destroy(ord), 0);
	assert_int_equal(vb_pub_destroy(fan), 0);
	assert_int_equal(vb_node_destroy(node), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	free(buf);
}

static void test_malformed(void **state)
{
	struct raw r = { 0 };
	struct rawqp a;
	uint16_t port;

	assert_non_null(sh = vbt_shared(sizeof(*sh)));
	sh->n_good = vbt_scaled(2000);
	assert_int_equal(pipe(port_pipe), 0);
	child = vbt_spawn(victim, NULL);
	assert_true(child > 0);
	assert_int_equal(read(port_pipe[0], &port, sizeof(port)), sizeof(port));

	raw_open(&r);
	raw_connect(&r, &a, port);
	printf("raw RC QP %u connected to the victim (its UD QP %u, Q_Key %#x)\n", a.qp->qpn,
	       a.victim_ud.qpn, a.victim_ud.qkey);
	rc_header_garbage(&a);
	rc_protocol_garbage(&a);
	rc_bad_hellos(&r, port);
	ud_garbage(&r, &a);

	/* the raw connection stays up while the real publisher works */
	good_traffic(port);
	assert_int_equal(ld(&sh->malformed), want_malformed);
	assert_int_equal(ld(&sh->protocol), want_protocol);

	raw_close(&a);
	raw_fini(&r);
	__atomic_store_n(&sh->finish, 1, __ATOMIC_RELEASE);
	{
		int st = vbt_wait(child, 60);

		child = -1;
		assert_int_equal(st, 0);
	}
	printf("malformed frames injected and counted: %" PRIu64 ", protocol events %" PRIu64
	       ", connections dropped %" PRIu64 "\n", want_malformed, want_protocol, want_down);
	munmap(sh, sizeof(*sh));
}

/* A failed check leaves the other process running (or stopped): end it. */
static int teardown(void **state)
{
	(void)state;
	vbt_reap(&child);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_malformed),
	};

	vbt_require_device();
	return cmocka_run_group_tests(tests, NULL, teardown);
}
