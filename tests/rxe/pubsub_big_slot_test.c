/* SPDX-License-Identifier: MIT */
/*
 * The largest receive slot a context accepts (vb_ctx_attr_t.slot_size,
 * 1 MiB): a connection comes up and carries ORDERED messages of 64 B,
 * 512 KiB and 1 MiB (the largest, max_msg's default), each delivered once,
 * in order and byte-exact.
 *
 * A connection's receive slots and send buffers are carved from blocks of
 * up to 16 (vbi_buf_block, engine/sring.c). At 16 KiB, the default, a
 * block is 256 KiB; 16 slots of 1 MiB would be one 16 MiB allocation,
 * past what the pool hands out at once (VBI_MEMPOOL_MAX_ALLOC), and the
 * connection would fail: a block holds at most 256 KiB, and a larger
 * slot is an allocation of its own. The queues are kept at the sizing
 * floor (msg_rate 1000: 16 entries), so each lane needs 32 MiB of the
 * pool, not 512.
 */
#include <errno.h>
#include <inttypes.h>
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

#define WAIT_MS 20000
#define SLOT ((size_t)1 << 20)

static const size_t sizes[] = { 64, SLOT / 2, SLOT };
#define NMSG (sizeof(sizes) / sizeof(sizes[0]))

/* Message i (from 0) is sizes[i] bytes of (uint8_t)(i * 31 + offset). */
struct rx {
	atomic_uint got, bad;
};

static void fill(uint8_t *p, size_t len, unsigned i)
{
	for (size_t k = 0; k < len; k++)
		p[k] = (uint8_t)(i * 31 + k);
}

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct rx *r = arg;
	unsigned i = atomic_fetch_add(&r->got, 1);
	bool ok = i < NMSG && m->len == sizes[i];

	(void)sub;
	for (size_t k = 0; ok && k < m->len; k++)
		ok = ((const uint8_t *)m->data)[k] == (uint8_t)(i * 31 + k);
	if (!ok)
		atomic_fetch_add(&r->bad, 1);
}

static vb_ctx_t *ctx_big(void)
{
	vb_ctx_attr_t ca;

	vb_ctx_attr_init(&ca);
	ca.slot_size = SLOT;
	ca.msg_rate = 1000;
	return vbt_ctx_open(&ca);
}

static void test_big_slots(void **state)
{
	vb_ctx_t *cp = ctx_big(), *cs = ctx_big();
	vb_node_t *np = vbt_node_open(cp, "big-pub", true), *ns = vbt_node_open(cs, "big-sub", false);
	static struct rx r;
	vb_sub_attr_t sa;
	vb_pub_t *pub;
	vb_sub_t *sub;
	vb_stats_t st;
	uint8_t *buf = malloc(SLOT);
	uint64_t t0;

	(void)state;
	assert_non_null(buf);
	memset(&r, 0, sizeof(r));
	assert_int_equal(vb_pub_create(np, "big", VB_ORDERED, NULL, &pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	sa.arg = &r;
	assert_int_equal(vb_sub_create(ns, "big", VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(ns, vbt_test_ip(), vb_node_port(np)))
		fail_msg("connect with %zu-byte slots: %s", SLOT, vb_errmsg());
	if (!vbt_wait_subscribers(pub, 1, WAIT_MS))
		fail_msg("no subscriber after %d ms", WAIT_MS);
	for (unsigned i = 0; i < NMSG; i++) {
		int rc;

		fill(buf, sizes[i], i);
		for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, sizes[i], NULL)) == -EAGAIN;
		     usleep(1000))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("message %u: -EAGAIN for %d ms", i, WAIT_MS);
		if (rc)
			fail_msg("message %u (%zu bytes): %s", i, sizes[i], vb_errmsg());
	}
	for (t0 = vbt_now_ms(); atomic_load(&r.got) < NMSG; usleep(1000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%u of %zu delivered after %d ms", atomic_load(&r.got), NMSG, WAIT_MS);
	assert_int_equal(vb_ctx_stats(cs, &st), 0);
	printf("%zu-byte slots: %zu messages (up to %zu bytes) delivered, %u bad; receive queue "
	       "%u, send queue %u, pool in use %zu bytes\n",
	       SLOT, NMSG, sizes[NMSG - 1], atomic_load(&r.bad), st.rq_depth, st.sq_depth,
	       st.pool_in_use);
	assert_int_equal(atomic_load(&r.bad), 0);
	assert_int_equal(atomic_load(&r.got), NMSG);

	free(buf);
	assert_int_equal(vb_pub_destroy(pub), 0);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_node_destroy(ns), 0);
	assert_int_equal(vb_node_destroy(np), 0);
	assert_int_equal(vb_ctx_destroy(cs), 0);
	assert_int_equal(vb_ctx_destroy(cp), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_big_slots),
	};

	vbt_require_device();
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
