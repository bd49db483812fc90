/* SPDX-License-Identifier: MIT */
/*
 * Smoke exchange on raw verbs: two RC QPs on one device, taken
 * RESET->INIT->RTR->RTS against each other, one message sent and received
 * and its payload checked. Proves the chain (device, driver, libibverbs) is
 * real; used by `vb_bench smoke` and by tests/rxe/smoke_rc_test.
 */
#ifndef VERBUS_BENCH_SMOKE_H
#define VERBUS_BENCH_SMOKE_H

#include <stdio.h>

struct vb_smoke_result {
	char device[64];
	int gid_index;
	unsigned qpn[2];
	unsigned path_mtu;
	double us_create, us_init, us_rtr, us_rts, us_exchange;
	unsigned bytes;
};

/*
 * Run the exchange on @device (NULL: first device). @before_teardown, when
 * set, is called with all resources still alive (to audit `rdma res`); its
 * non-zero return fails the run. Progress goes to @log (may be NULL).
 * Returns 0, or a negative errno with vb_errmsg() set.
 */
int vb_smoke_rc(const char *device, FILE *log, struct vb_smoke_result *res,
		int (*before_teardown)(const struct vb_smoke_result *, void *), void *arg);

#endif
