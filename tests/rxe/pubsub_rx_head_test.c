/* SPDX-License-Identifier: MIT */
/*
 * A received SEND lands in two places: its first VBI_RX_HEAD (256) bytes
 * in the receive slot's head, the rest in the slot's own buffer after its
 * first 256 bytes (engine/sring.h, struct vbi_slot), and the receiver sees
 * one run of bytes again (vbi_slot_data). A lone small message is built in
 * the lane's tx_hot and posted inline (proto/pub_frame.c, frame_batch).
 * Every SEND size on either side of those limits must arrive intact.
 *
 * test_lone_sizes: every message length from 24 to 600 bytes, one at a
 * time (each waits for its delivery, so each is its own SEND: a BATCH
 * header, 40 or 4 bytes, a 4-byte record header, the message padded to 4,
 * and the ACKs that ride along), so the SENDs take every size from under
 * the head to well past it. test_burst: 3000 messages of 24-600 bytes
 * published without waiting, so SENDs carry batches of mixed sizes, most
 * of them longer than the head. test_large: messages of 1, 4, 8 and 15
 * KiB (one SEND each, up to nearly the 16 KiB slot) and 40 KiB
 * (fragments). Each delivery is checked byte for byte (tests/common/
 * msgcheck.h), in order, once.
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

#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define WAIT_MS 20000
#define STREAM 7u
#define LO 24u
#define HI 600u

/* The subscriber's check: message n (from 1) of STREAM, whatever its
 * length (msgcheck's header carries it). */
struct check {
	atomic_uint_fast64_t got, bad;
	char why[160];
};

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct check *c = arg;
	uint64_t n = atomic_load(&c->got) + 1;
	const char *why = NULL;

	(void)sub;
	if (vbt_msg_verify(m->data, m->len, STREAM, n, &why)) {
		if (!atomic_load(&c->bad))
			snprintf(c->why, sizeof(c->why), "message %" PRIu64 " (%zu bytes): %s", n,
				 m->len, why);
		atomic_fetch_add(&c->bad, 1);
	}
	atomic_store(&c->got, n);
}

struct pair {
	vb_ctx_t *ca, *cb;
	vb_node_t *na, *nb;
	vb_pub_t *pub;
	vb_sub_t *sub;
	struct check chk;
	uint8_t *buf;
};

static void pair_open(struct pair *p)
{
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;

	memset(p, 0, sizeof(*p));
	p->buf = malloc(64 * 1024);
	assert_non_null(p->buf);
	p->ca = vbt_ctx_open(NULL);
	p->cb = vbt_ctx_open(NULL);
	p->na = vbt_node_open(p->ca, "head-a", true);
	p->nb = vbt_node_open(p->cb, "head-b", false);
	vb_pub_attr_init(&pa);
	pa.linger_ms = WAIT_MS;
	assert_int_equal(vb_pub_create(p->na, "head.t", VB_ORDERED, &pa, &p->pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &p->chk;
	assert_int_equal(vb_sub_create(p->nb, "head.t", VB_ORDERED, &sa, &p->sub), 0);
	if (vb_node_connect(p->nb, vbt_test_ip(), vb_node_port(p->na)))
		fail_msg("connect: %s", vb_errmsg());
	if (!vbt_wait_subscribers(p->pub, 1, WAIT_MS))
		fail_msg("no subscriber after %d ms", WAIT_MS);
}

/* Message @n of the stream, @len bytes; -EAGAIN (window full) retried
 * for up to WAIT_MS. */
static void publish(struct pair *p, uint64_t n, size_t len)
{
	uint64_t deadline = vbt_now_ms() + WAIT_MS;
	int rc;

	vbt_msg_fill(p->buf, len, STREAM, n);
	while ((rc = vb_publish(p->pub, p->buf, len, NULL)) == -EAGAIN && vbt_now_ms() < deadline)
		sched_yield();
	if (rc)
		fail_msg("publish %" PRIu64 " (%zu bytes): %s", n, len, vb_errmsg());
}

static void wait_got(struct pair *p, uint64_t n)
{
	uint64_t deadline = vbt_now_ms() + WAIT_MS;

	while (atomic_load(&p->chk.got) < n && vbt_now_ms() < deadline)
		usleep(100);
	if (atomic_load(&p->chk.got) < n)
		fail_msg("%" PRIu64 " of %" PRIu64 " messages delivered in %d ms",
			 (uint64_t)atomic_load(&p->chk.got), n, WAIT_MS);
}

/* Everything acknowledged, nothing bad, all of it closed. */
static void pair_close(struct pair *p, uint64_t sent)
{
	vb_stats_t st;

	assert_int_equal(vb_pub_destroy(p->pub), 0);
	vb_ctx_stats(p->ca, &st);
	assert_int_equal(st.unacked_on_close, 0);
	if (atomic_load(&p->chk.bad))
		fail_msg("%" PRIu64 " bad deliveries; the first: %s",
			 (uint64_t)atomic_load(&p->chk.bad), p->chk.why);
	assert_int_equal(atomic_load(&p->chk.got), sent);
	assert_int_equal(vb_sub_destroy(p->sub), 0);
	assert_int_equal(vb_node_destroy(p->nb), 0);
	assert_int_equal(vb_node_destroy(p->na), 0);
	assert_int_equal(vb_ctx_destroy(p->cb), 0);
	assert_int_equal(vb_ctx_destroy(p->ca), 0);
	free(p->buf);
}

static void test_lone_sizes(void **state)
{
	struct pair p;
	uint64_t n = 0;

	(void)state;
	pair_open(&p);
	for (size_t len = LO; len <= HI; len++) {
		publish(&p, ++n, len);
		wait_got(&p, n);
	}
	pair_close(&p, n);
	printf("%" PRIu64 " messages of %u-%u bytes, one at a time: intact\n", n, LO, HI);
}

static void test_burst(void **state)
{
	uint64_t total = vbt_scaled(3000);
	struct pair p;

	(void)state;
	pair_open(&p);
	for (uint64_t n = 1; n <= total; n++)
		publish(&p, n, vbt_msg_len(STREAM, n, LO, HI));
	wait_got(&p, total);
	pair_close(&p, total);
	printf("%" PRIu64 " messages of %u-%u bytes in a burst: intact\n", total, LO, HI);
}

static void test_large(void **state)
{
	static const size_t lens[] = { 1024, 4096, 8192, 15 * 1024, 40 * 1024 };
	struct pair p;
	uint64_t n = 0;

	(void)state;
	pair_open(&p);
	for (unsigned r = 0; r < 4; r++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			publish(&p, ++n, lens[i]);
			if (r % 2 == 0) /* alone, then back to back */
				wait_got(&p, n);
		}
	wait_got(&p, n);
	pair_close(&p, n);
	printf("%" PRIu64 " messages of 1-40 KiB: intact\n", n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lone_sizes),
		cmocka_unit_test(test_burst),
		cmocka_unit_test(test_large),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
