/* SPDX-License-Identifier: MIT */
/*
 * Helpers for tests that run against a real RDMA device (label rxe).
 * With no device they exit 77 (ctest: skipped), unless VERBUS_IN_VM or
 * VERBUS_REQUIRE_RDMA is set, where a missing device is a failure.
 */
#ifndef VERBUS_TESTS_RXE_ENV_H
#define VERBUS_TESTS_RXE_ENV_H

#include <sys/types.h>

#define VBT_SKIP 77

/* vb_pub_attr_t.slow_sub_ms for tests that are not about the slow-
 * subscriber cut (that is pubsub_slow_sub_test's): under sanitizers in
 * TCG a subscriber starved of CPU went 2.5-3 s without an ACK, and the
 * default 2 s cut would end its stream and lose the rest. */
#define VBT_NO_SLOW_CUT_MS 60000

/* Device to use: $VERBUS_DEVICE, else "rxe0" when present, else the first.
 * Exits 77 (skip) or 1 (required but absent) when there is none. */
const char *vbt_require_device(void);

/* How many `rdma res show @kind` entries (qp, cq, mr, pd) belong to @pid
 * (0: every user-space object on the machine, also those whose creating
 * thread has exited and which rdma res lists without a pid; rdma res names
 * the thread that created an object, so a multithreaded process's objects
 * are not all under its pid); negative when the rdma tool cannot be run or
 * its output not read. */
int vbt_res_count(const char *kind, pid_t pid);

#endif
