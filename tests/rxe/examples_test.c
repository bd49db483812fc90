/* SPDX-License-Identifier: MIT */
/*
 * The examples, end to end: runs the built orders, md and replica binaries
 * in --demo mode (each forks its own roles: gateway + matching engine; a
 * feed + 3 subscribers; a writer + 3 replicas), and checks their exit
 * status and the summary lines they print:
 *   orders   every order acknowledged and filled exactly once, in order;
 *   md       for each subscriber delivered + lost (+ sent before it joined)
 *            == published, no corrupt quote;
 *   replica  every replica's log has all records and the writer's checksum.
 * Also: a bad command line is refused with exit status 2.
 * The binaries' paths come from examples/CMakeLists.txt (VBT_EXAMPLE_*).
 * Volumes scale with VERBUS_TEST_SCALE.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/common/msgcheck.h"
#include "tests/common/proc.h"
#include "tests/common/rxe_env.h"

#if !defined(VBT_EXAMPLE_ORDERS) || !defined(VBT_EXAMPLE_MD) || !defined(VBT_EXAMPLE_REPLICA)
#define VBT_NO_EXAMPLES 1
#define VBT_EXAMPLE_ORDERS ""
#define VBT_EXAMPLE_MD ""
#define VBT_EXAMPLE_REPLICA ""
#endif

/* Run @argv with stdout captured (stderr passes through), at most
 * @timeout_s. Returns the exit status (128 + signal; -1 on timeout) and the
 * output in *@out (malloc'd, NUL-terminated; also echoed). */
static int run(char *const argv[], int timeout_s, char **out)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	uint64_t t0 = vbt_now_ms();
	int fds[2], st = -1;
	pid_t pid;

	assert_non_null(buf);
	assert_int_equal(pipe(fds), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	for (;;) {
		struct pollfd pfd = { .fd = fds[0], .events = POLLIN };
		ssize_t n;

		if (vbt_now_ms() - t0 > (uint64_t)timeout_s * 1000) {
			fprintf(stderr, "%s: no end of output after %d s: killing it\n", argv[0],
				timeout_s);
			kill(pid, SIGKILL);
			break;
		}
		if (poll(&pfd, 1, 1000) == 0)
			continue;

		if (len + 4096 + 1 > cap) {
			buf = realloc(buf, cap *= 2);
			assert_non_null(buf);
		}
		n = read(fds[0], buf + len, 4096);
		if (n > 0) {
			len += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break; /* EOF: the demo and its children closed stdout */
	}
	close(fds[0]);
	buf[len] = '\0';
	st = vbt_wait(pid, timeout_s - (int)((vbt_now_ms() - t0) / 1000) > 1
			   ? timeout_s - (int)((vbt_now_ms() - t0) / 1000) : 1);
	printf("---- %s (exit %d) ----\n%s", argv[0], st, buf);
	*out = buf;
	return st;
}

/* The line starting with @prefix after @from, or NULL. */
static const char *line(const char *text, const char *prefix, const char **from)
{
	const char *p = from && *from ? *from : text;

	while (p && *p) {
		if (!strncmp(p, prefix, strlen(prefix))) {
			if (from)
				*from = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p);
			return p;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return NULL;
}

static void require_examples(void)
{
#ifdef VBT_NO_EXAMPLES
	skip(); /* built without VERBUS_EXAMPLES */
#endif
}

static void test_usage(void **state)
{
	char *out;
	char *bad[] = { VBT_EXAMPLE_ORDERS, "--gateway", NULL };
	char *help[] = { VBT_EXAMPLE_REPLICA, "--help", NULL };
	char *addr[] = { VBT_EXAMPLE_MD, "--sub", "--connect", "10.77.0.1", NULL };

	require_examples();
	assert_int_equal(run(bad, 10, &out), 2);
	free(out);
	assert_int_equal(run(help, 10, &out), 0);
	free(out);
	assert_int_equal(run(addr, 10, &out), 2);
	free(out);
}

static void test_orders(void **state)
{
	char count[32], *out;
	uint64_t n = vbt_scaled(2000), orders, acked, fills, in_order, ooo, dup, missing, bad;
	char *argv[] = { VBT_EXAMPLE_ORDERS, "--demo", "--ip", (char *)vbt_test_ip(), "--count",
			 count, NULL };
	const char *l;

	require_examples();
	snprintf(count, sizeof(count), "%" PRIu64, n);
	assert_int_equal(run(argv, 240, &out), 0);
	assert_non_null(line(out, "orders demo: OK", NULL));
	l = line(out, "gateway: orders=", NULL);
	assert_non_null(l);
	assert_int_equal(sscanf(l, "gateway: orders=%" SCNu64 " acked=%" SCNu64 " fills=%" SCNu64
				" in_order=%" SCNu64 " out_of_order=%" SCNu64 " duplicates=%"
				SCNu64 " missing=%" SCNu64 " bad=%" SCNu64, &orders, &acked, &fills,
				&in_order, &ooo, &dup, &missing, &bad), 8);
	assert_int_equal(orders, n);
	assert_int_equal(acked, n);
	assert_int_equal(fills, n);
	assert_int_equal(in_order, n);
	assert_int_equal(ooo + dup + missing + bad, 0);
	assert_non_null(line(out, "engine: orders=", NULL));
	free(out);
}

static void test_md(void **state)
{
	char count[32], *out;
	uint64_t n = vbt_scaled(5000), total_delivered = 0;
	char *argv[] = { VBT_EXAMPLE_MD, "--demo", "--ip", (char *)vbt_test_ip(), "--subs", "3",
			 "--count", count, NULL };
	const char *l, *from = NULL;
	int subs = 0;

	require_examples();
	snprintf(count, sizeof(count), "%" PRIu64, n);
	assert_int_equal(run(argv, 240, &out), 0);
	assert_non_null(line(out, "md demo: OK", NULL));
	l = line(out, "feed: published=", NULL);
	assert_non_null(l);
	while ((l = line(out, "md-sub ", &from))) {
		char name[32];
		uint64_t pub, del, lost, gaps, before, bad;

		assert_int_equal(sscanf(l, "md-sub %31[^:]: published=%" SCNu64 " delivered=%" SCNu64
					" lost=%" SCNu64 " gaps=%" SCNu64 " before_join=%" SCNu64
					" bad=%" SCNu64, name, &pub, &del, &lost, &gaps, &before, &bad),
				 7);
		assert_int_equal(pub, n);
		assert_int_equal(del + lost + before, n);
		assert_true(del > 0);
		assert_int_equal(bad, 0);
		total_delivered += del;
		subs++;
	}
	assert_int_equal(subs, 3);
	printf("md: 3 subscribers delivered %.2f%% of %" PRIu64 " quotes\n",
	       100.0 * (double)total_delivered / (double)(3 * n), n);
	free(out);
}

static void test_replica(void **state)
{
	char count[32], *out;
	uint64_t n = vbt_scaled(500), records, bytes, sum;
	char *argv[] = { VBT_EXAMPLE_REPLICA, "--demo", "--ip", (char *)vbt_test_ip(), "--count",
			 count, NULL };
	const char *l, *from = NULL;
	unsigned quorum, replicas;
	int equal = 0;

	require_examples();
	snprintf(count, sizeof(count), "%" PRIu64, n);
	assert_int_equal(run(argv, 240, &out), 0);
	assert_non_null(line(out, "replica demo: OK", NULL));
	l = line(out, "writer: records=", NULL);
	assert_non_null(l);
	assert_int_equal(sscanf(l, "writer: records=%" SCNu64 " bytes=%" SCNu64 " quorum=%u/%u "
				"checksum=%" SCNx64, &records, &bytes, &quorum, &replicas, &sum), 5);
	assert_int_equal(records, n);
	assert_int_equal(quorum, 2);
	assert_int_equal(replicas, 3);
	while ((l = line(out, "replica r", &from))) {
		char name[32], match[8];
		uint64_t r, b, s;

		assert_int_equal(sscanf(l, "replica %31[^:]: records=%" SCNu64 " bytes=%" SCNu64
					" checksum=%" SCNx64 " match=%7s", name, &r, &b, &s, match), 5);
		assert_int_equal(r, n);
		assert_int_equal(b, bytes);
		assert_int_equal(s, sum);
		assert_string_equal(match, "yes");
		equal++;
	}
	assert_int_equal(equal, 3);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_orders),
		cmocka_unit_test(test_md),
		cmocka_unit_test(test_replica),
	};

#ifdef VBT_NO_EXAMPLES
	/* ctest shows "Skipped" rather than a pass that ran nothing */
	fprintf(stderr, "examples not built (VERBUS_EXAMPLES=OFF): skipping\n");
	return VBT_SKIP;
#endif
	vbt_require_device();
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
