/* SPDX-License-Identifier: MIT */
/*
 * A progress round never waits for the log's output (core/log.h,
 * vbi_log_defer_begin): a line logged there goes to stderr from the
 * library's log thread, and none is lost.
 *
 * Found in the failover benchmark: the subscriber's progress thread logs
 * one warning per failed connection ("lane N failed ... switched to
 * standby") before it sends the LANE frame. With stderr on a slow file
 * (the main job's results sit on the VM's 9p share) the fault -> first
 * delivery median was 6.45 ms against 4.88 ms with stderr on tmpfs, five
 * runs of 20 faults each in one boot.
 *
 * test_hot_thread_not_blocked: stderr is a pipe whose buffer is full and
 * that nobody reads, so a write to it blocks. A thread inside
 * vbi_log_defer_begin/end logs LINES warnings and must return from each
 * (it would block in write() before); then the pipe is read and every
 * line arrives, in order. vbi_log_flush() returns once they are written.
 *
 * test_after_fork: a child forked after the log thread started logs from
 * a deferred section, flushes and leaves with _exit(): its line arrives
 * (the child has no log thread of its parent's). Not under TSan, which
 * makes a child that starts a thread after a multi-threaded fork die.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/log.h"

#define LINES 20
#define WAIT_MS 10000

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static atomic_int logged;

static void *hot_thread(void *arg)
{
	(void)arg;
	vbi_log_defer_begin();
	for (int i = 0; i < LINES; i++) {
		vbi_warn("deferred line %d", i);
		atomic_fetch_add(&logged, 1);
	}
	vbi_log_defer_end();
	return NULL;
}

/* Read @fd until @want lines with @tag came, or WAIT_MS passed; their
 * numbers must come in order (0, 1, ...). Returns how many came. */
static int read_lines(int fd, int want, const char *tag)
{
	static char buf[1 << 18];
	size_t have = 0;
	int got = 0;
	uint64_t t0 = now_ms();

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	while (got < want && now_ms() - t0 < WAIT_MS && have < sizeof(buf) - 1) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);

		if (n <= 0) {
			usleep(1000);
			continue;
		}
		have += (size_t)n;
		buf[have] = 0;
		got = 0;
		for (char *p = buf; (p = strstr(p, tag)); p += strlen(tag)) {
			if (atoi(p + strlen(tag)) != got)
				fail_msg("line %d came where line %d was due", atoi(p + strlen(tag)),
					 got);
			got++;
		}
	}
	return got;
}

static void test_hot_thread_not_blocked(void **state)
{
	int pfd[2], saved = dup(2);
	char fill[4096];
	pthread_t t;
	uint64_t t0;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	assert_true(saved >= 0);
	/* fill the pipe: a blocking write to it would now wait for a reader */
	fcntl(pfd[1], F_SETFL, fcntl(pfd[1], F_GETFL) | O_NONBLOCK);
	memset(fill, '.', sizeof(fill));
	while (write(pfd[1], fill, sizeof(fill)) > 0)
		;
	fcntl(pfd[1], F_SETFL, fcntl(pfd[1], F_GETFL) & ~O_NONBLOCK);
	assert_int_equal(dup2(pfd[1], 2), 2);

	atomic_store(&logged, 0);
	assert_int_equal(pthread_create(&t, NULL, hot_thread, NULL), 0);
	for (t0 = now_ms(); atomic_load(&logged) < LINES && now_ms() - t0 < WAIT_MS;)
		usleep(1000);
	if (atomic_load(&logged) < LINES) {
		/* unblock it (it holds stderr's lock, which cmocka's report
		 * needs), then report */
		int n = atomic_load(&logged);

		read_lines(pfd[0], LINES, "deferred line ");
		dup2(saved, 2);
		pthread_join(t, NULL);
		atomic_store(&logged, n);
		fail_msg("the deferred thread logged %d of %d lines in %d ms with stderr blocked: "
			 "it waits for the output", atomic_load(&logged), LINES, WAIT_MS);
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	/* now read: the log thread's writes go through, every line, in order */
	{
		int got = read_lines(pfd[0], LINES, "deferred line ");

		vbi_log_flush();
		dup2(saved, 2);
		close(saved);
		if (got != LINES)
			fail_msg("%d of %d deferred lines reached stderr", got, LINES);
	}
	close(pfd[0]);
	close(pfd[1]);
}

#if !defined(__SANITIZE_THREAD__)
static void test_after_fork(void **state)
{
	int pfd[2], status = 0;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	/* the log thread runs in this process (the test above started it) */
	vbi_log_defer_begin();
	vbi_warn("parent, before the fork");
	vbi_log_defer_end();
	vbi_log_flush();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 2);
		vbi_log_defer_begin();
		vbi_warn("child line 0");
		vbi_log_defer_end();
		vbi_log_flush();
		_exit(0);
	}
	close(pfd[1]);
	assert_int_equal(read_lines(pfd[0], 1, "child line "), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(pfd[0]);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hot_thread_not_blocked),
#if !defined(__SANITIZE_THREAD__)
		/* ThreadSanitizer does not support threads started after a
		 * multi-threaded fork (the child dies): not run under it */
		cmocka_unit_test(test_after_fork),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
