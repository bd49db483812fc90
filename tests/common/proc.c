/* SPDX-License-Identifier: MIT */
#include "tests/common/proc.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

void *vbt_shared(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0, size);
	return p;
}

void vbt_reap(pid_t *pid)
{
	if (*pid > 0) {
		if (waitpid(*pid, NULL, WNOHANG) == 0) {
			kill(*pid, SIGCONT);
			kill(*pid, SIGKILL);
			waitpid(*pid, NULL, 0);
		}
	}
	*pid = -1;
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

/* Entries of directory @path other than "." and "..", skipping those whose
 * @comm_skip file holds that name (NULL: none skipped); -1 if unreadable. */
static int count_entries(const char *path, const char *comm_skip)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char f[320], comm[32] = "";
		FILE *cf;

		if (e->d_name[0] == '.')
			continue;
		if (comm_skip) {
			snprintf(f, sizeof(f), "%s/%s/comm", path, e->d_name);
			if ((cf = fopen(f, "r"))) {
				if (!fgets(comm, sizeof(comm), cf))
					comm[0] = 0;
				fclose(cf);
			}
			comm[strcspn(comm, "\n")] = 0;
			if (!strcmp(comm, comm_skip))
				continue;
		}
		n++;
	}
	closedir(d);
	return n;
}

int vbt_open_fds(void)
{
	int n = count_entries("/proc/self/fd", NULL);

	return n > 0 ? n - 1 : n; /* not the one opendir holds */
}

int vbt_threads(void)
{
	return count_entries("/proc/self/task", "vb-log");
}
