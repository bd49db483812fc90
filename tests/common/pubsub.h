/* SPDX-License-Identifier: MIT */
/*
 * Set-up shared by the pub/sub tests (tests/common/pubsub.c): a context and
 * a node on the test device, and bounded waits for a publisher's
 * subscribers. The failing ones fail the calling cmocka test with
 * vb_errmsg(); they are for the test's own thread (or a child process's
 * main, where a failure exits the child).
 */
#ifndef VERBUS_TESTS_PUBSUB_H
#define VERBUS_TESTS_PUBSUB_H

#include <stdatomic.h>
#include <stdbool.h>

#include <verbus/verbus.h>

/* vb_ctx_create(@ca) with ca->ip set to the test IP (vbt_test_ip); @ca may
 * be NULL (defaults). Fails the test on error. */
vb_ctx_t *vbt_ctx_open(vb_ctx_attr_t *ca);

/* A node named @name on @ctx, listening on the test IP when @listen.
 * Fails the test on error. */
vb_node_t *vbt_node_open(vb_ctx_t *ctx, const char *name, bool listen);

/* Wait up to @timeout_ms until @pub has at least @n subscribers: true if
 * it has them. */
bool vbt_wait_subscribers(vb_pub_t *pub, int n, unsigned timeout_ms);

/* A ping-pong's answering side: vbt_echo_cb (arg: a struct vbt_echo)
 * publishes every message it gets back on @pub, -EAGAIN retried, on the
 * thread delivering it; @got counts them, @failed the failed publishes. */
struct vbt_echo {
	vb_pub_t *pub;
	atomic_uint_fast64_t got, failed;
};
void vbt_echo_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg);

/* A counting subscriber: vbt_count_cb (arg: a struct vbt_count) wants
 * message n (from 1) to start with n (a uint64_t); @bad counts those that
 * do not (out of order, lost, duplicated, too short). */
struct vbt_count {
	atomic_uint_fast64_t got, bad;
};
void vbt_count_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg);

#endif
