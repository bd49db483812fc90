/* SPDX-License-Identifier: MIT */
/* What a process holds, for tests of long-running nodes: a node must gain
 * nothing per connection or failover that came and went. */
#ifndef VERBUS_TESTS_HELD_H
#define VERBUS_TESTS_HELD_H

#include <stdint.h>

#include <verbus/verbus.h>

struct vbt_held {
	int fds, threads;    /* vbt_open_fds(), vbt_threads() (tests/common/proc.h) */
	uint64_t live_lanes; /* @ctx's lanes made and not yet freed */
};

/* Now. 0, or vb_ctx_stats()'s error. */
int vbt_held_now(vb_ctx_t *ctx, struct vbt_held *h);

/* Read until two reads 10 ms apart agree (a thread being started, say the
 * library's log thread before it has its name, is not counted), at most ten
 * times: the last read. 0, or vb_ctx_stats()'s error. */
int vbt_held_stable(vb_ctx_t *ctx, struct vbt_held *h);

#endif
