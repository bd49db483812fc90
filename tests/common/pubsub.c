/* SPDX-License-Identifier: MIT */
#include "tests/common/pubsub.h"

#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/common/proc.h"

vb_ctx_t *vbt_ctx_open(vb_ctx_attr_t *ca)
{
	vb_ctx_attr_t def;
	vb_ctx_t *ctx = NULL;

	if (!ca) {
		vb_ctx_attr_init(&def);
		ca = &def;
	}
	ca->ip = vbt_test_ip();
	if (vb_ctx_create(ca, &ctx))
		fail_msg("ctx on %s: %s", ca->ip, vb_errmsg());
	return ctx;
}

vb_node_t *vbt_node_open(vb_ctx_t *ctx, const char *name, bool listen)
{
	vb_node_attr_t na;
	vb_node_t *node = NULL;

	vb_node_attr_init(&na);
	na.name = name;
	if (listen)
		na.listen_ip = vbt_test_ip();
	if (vb_node_create(ctx, &na, &node))
		fail_msg("node '%s': %s", name, vb_errmsg());
	return node;
}

bool vbt_wait_subscribers(vb_pub_t *pub, int n, unsigned timeout_ms)
{
	uint64_t t0 = vbt_now_ms();

	while (vb_pub_subscribers(pub) < n && vbt_now_ms() - t0 < timeout_ms)
		usleep(5000);
	return vb_pub_subscribers(pub) >= n;
}

void vbt_echo_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct vbt_echo *e = arg;
	int rc;

	(void)sub;
	atomic_fetch_add(&e->got, 1);
	while ((rc = vb_publish(e->pub, m->data, m->len, NULL)) == -EAGAIN)
		sched_yield();
	if (rc)
		atomic_fetch_add(&e->failed, 1);
}

void vbt_count_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct vbt_count *c = arg;
	uint64_t n = atomic_fetch_add(&c->got, 1) + 1;

	(void)sub;
	if (m->len < sizeof(n) || memcmp(m->data, &n, sizeof(n)))
		atomic_fetch_add(&c->bad, 1);
}
