/* SPDX-License-Identifier: MIT */
/*
 * Small helpers shared by the verbus examples (not part of verbus): address
 * parsing, a bounded retry around vb_publish() for back-pressure, and the
 * process handling of the --demo modes. Header-only so each example stays
 * one file plus this one.
 */
#ifndef VERBUS_EXAMPLES_COMMON_H
#define VERBUS_EXAMPLES_COMMON_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <verbus/verbus.h>

#define EX_DEFAULT_IP "10.77.0.1" /* rxe0 in the project's Soft-RoCE VM */

static inline uint64_t ex_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static inline uint64_t ex_now_ms(void)
{
	return ex_now_us() / 1000;
}

static inline void ex_sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

/* "ip:port" -> @ip (at most @len bytes with the NUL) and *@port. 0 or -1. */
static inline int ex_parse_addr(const char *s, char *ip, size_t len, uint16_t *port)
{
	const char *colon = s ? strrchr(s, ':') : NULL;
	char *end;
	unsigned long p;

	if (!colon || colon == s || (size_t)(colon - s) >= len)
		return -1;
	p = strtoul(colon + 1, &end, 10);
	if (*end || p > 65535)
		return -1;
	memcpy(ip, s, (size_t)(colon - s));
	ip[colon - s] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* vb_publish, retried while it reports back-pressure (-EAGAIN), for at
 * most @timeout_ms. *@retries (may be NULL) counts the retries. */
static inline int ex_publish(vb_pub_t *pub, const void *data, size_t len, uint64_t *seq,
			     int timeout_ms, uint64_t *retries)
{
	uint64_t t0 = ex_now_ms();
	int rc;

	while ((rc = vb_publish(pub, data, len, seq)) == -EAGAIN) {
		if (retries)
			(*retries)++;
		if (ex_now_ms() - t0 > (uint64_t)timeout_ms)
			break;
		ex_sleep_us(50);
	}
	return rc;
}

/* Wait until @cond_fn(@arg) is true, polling every millisecond, for at
 * most @timeout_ms. Returns 1 when it became true, 0 on timeout. */
static inline int ex_wait_for(int (*cond_fn)(void *arg), void *arg, int timeout_ms)
{
	uint64_t t0 = ex_now_ms();

	while (!cond_fn(arg)) {
		if (ex_now_ms() - t0 > (uint64_t)timeout_ms)
			return 0;
		ex_sleep_us(1000);
	}
	return 1;
}

/* --demo: run @fn(@arg) in a child process (before the parent creates any
 * RDMA resource: it never does). Returns the pid or -1. */
static inline pid_t ex_spawn(int (*fn)(void *arg), void *arg)
{
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		int rc = fn(arg);

		fflush(stdout); /* _exit() does not flush stdio */
		fflush(stderr);
		_exit(rc);
	}
	return pid;
}

/* Wait for @pid at most @timeout_s: its exit status, 128 + signal, or -1
 * after killing it on timeout. */
static inline int ex_wait_child(pid_t pid, int timeout_s)
{
	uint64_t end = ex_now_ms() + (uint64_t)timeout_s * 1000;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (ex_now_ms() > end) {
			fprintf(stderr, "process %d still running after %d s: killing it\n",
				(int)pid, timeout_s);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		ex_sleep_us(10000);
	}
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

/*
 * Before tearing down: vb_sub_destroy()/vb_node_destroy() do not wait for
 * the acknowledgements this process still owes its publishers (the progress
 * thread sends them right after each delivery), so a publisher waiting in
 * vb_pub_wait_acked() for our last message could miss it. Give them time.
 */
static inline void ex_linger(void)
{
	ex_sleep_us(300000);
}

/* A context on the RDMA device that owns @ip (defaults + VERBUS_* env);
 * NULL after printing why. */
static inline vb_ctx_t *ex_open_ctx(const char *ip)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *ctx;

	vb_ctx_attr_init(&ca);
	ca.ip = ip;
	if (vb_ctx_create(&ca, &ctx)) {
		fprintf(stderr, "vb_ctx_create: %s\n", vb_errmsg());
		return NULL;
	}
	return ctx;
}

/* FNV-1a 64, folded over several buffers by passing the previous value. */
static inline uint64_t ex_fnv64(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}
#define EX_FNV64_INIT 14695981039346656037ull

#endif
