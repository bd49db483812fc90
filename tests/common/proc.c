/* SPDX-License-Identifier: MIT */
#include "tests/common/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

pid_t vbt_spawn(int (*fn)(void *arg), void *arg)
{
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

uint64_t vbt_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int vbt_wait(pid_t pid, int timeout_s)
{
	uint64_t end = vbt_now_ms() + (uint64_t)timeout_s * 1000;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (vbt_now_ms() > end) {
			fprintf(stderr, "child %d still running after %d s: killing it\n", (int)pid,
				timeout_s);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(10000);
	}
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -1;
}

const char *vbt_test_ip(void)
{
	const char *ip = getenv("VERBUS_TEST_IP");

	return ip && *ip ? ip : "10.77.0.1";
}
