/* SPDX-License-Identifier: MIT */
#include "tests/common/held.h"

#include <unistd.h>

#include "tests/common/proc.h"

int vbt_held_now(vb_ctx_t *ctx, struct vbt_held *h)
{
	vb_stats_t st;
	int rc = vb_ctx_stats(ctx, &st);

	h->fds = vbt_open_fds();
	h->threads = vbt_threads();
	h->live_lanes = rc ? 0 : st.lanes_created - st.lanes_retired;
	return rc;
}

int vbt_held_stable(vb_ctx_t *ctx, struct vbt_held *h)
{
	struct vbt_held prev;
	int rc = vbt_held_now(ctx, h);

	for (int i = 0; i < 10 && !rc; i++) {
		usleep(10000);
		prev = *h;
		rc = vbt_held_now(ctx, h);
		if (h->fds == prev.fds && h->threads == prev.threads &&
		    h->live_lanes == prev.live_lanes)
			break;
	}
	return rc;
}
