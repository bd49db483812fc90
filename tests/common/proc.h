/* SPDX-License-Identifier: MIT */
/* Child processes for multi-process RDMA tests: every wait is bounded. */
#ifndef VERBUS_TESTS_PROC_H
#define VERBUS_TESTS_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Run @fn(@arg) in a child process that exits with its return value. Fork
 * before creating any RDMA resource in the parent. Returns the pid. */
pid_t vbt_spawn(int (*fn)(void *arg), void *arg);

/* Wait up to @timeout_s for @pid: its exit code, 128+signal if killed by
 * one, or -1 after killing it on timeout. */
int vbt_wait(pid_t pid, int timeout_s);

/* @size bytes of zeroed memory shared with the children forked after it
 * (MAP_SHARED | MAP_ANONYMOUS); NULL on failure. Never unmapped. */
void *vbt_shared(size_t size);

/* Teardown: if *@pid (> 0) still runs, SIGCONT (it may be stopped) and
 * SIGKILL it; reap it in any case; *@pid = -1. */
void vbt_reap(pid_t *pid);

/* Milliseconds on the monotonic clock. */
uint64_t vbt_now_ms(void);

/* The IPv4 address of the test device (VERBUS_TEST_IP, default 10.77.0.1:
 * rxe0 in the Soft-RoCE VM). */
const char *vbt_test_ip(void);

/* This process's open file descriptors, and its threads other than the
 * library's log thread (vb-log: started by the first line a progress round
 * logs, whenever that is): what a long-running process must not gain per
 * connection that came and went. -1 when /proc cannot be read. */
int vbt_open_fds(void);
int vbt_threads(void);

#endif
