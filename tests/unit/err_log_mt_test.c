/* SPDX-License-Identifier: MIT */
/* Per-thread error messages and the log sink/level plumbing. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/err.h"
#include "core/log.h"

static void test_err_returns_code_and_formats(void **state)
{
	int rc = vbi_err(-EINVAL, "bad depth %d", 7);

	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(vb_errmsg(), "bad depth 7"));
	assert_non_null(strstr(vb_errmsg(), "test_err_returns_code_and_formats:"));
	assert_int_equal(vbi_err_prefix(rc, "opening %s", "rxe0"), -EINVAL);
	assert_int_equal(strncmp(vb_errmsg(), "opening rxe0: ", 14), 0);
	assert_non_null(strstr(vb_errmsg(), "bad depth 7"));
	vbi_err_clear();
	assert_string_equal(vb_errmsg(), "");
}

static void *other_thread(void *arg)
{
	vbi_err(-EIO, "from the other thread");
	return (void *)(uintptr_t)(strstr(vb_errmsg(), "other thread") != NULL);
}

static void test_err_is_per_thread(void **state)
{
	pthread_t t;
	void *ok;

	vbi_err(-ENOMEM, "main thread message");
	assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
	assert_int_equal(pthread_join(t, &ok), 0);
	assert_true(ok != NULL);
	assert_non_null(strstr(vb_errmsg(), "main thread message"));
	assert_null(strstr(vb_errmsg(), "other thread"));
}

static void test_long_message_truncates_safely(void **state)
{
	char big[2 * VBI_ERRMSG_MAX];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	vbi_err(-E2BIG, "%s", big);
	assert_int_equal(strlen(vb_errmsg()), VBI_ERRMSG_MAX - 1);
	vbi_err_prefix(-E2BIG, "ctx");
	assert_true(strlen(vb_errmsg()) < VBI_ERRMSG_MAX);
}

struct captured {
	int calls, level, line;
	char msg[128];
};

static void capture(int level, const char *func, int line, const char *msg, void *arg)
{
	struct captured *c = arg;

	c->calls++;
	c->level = level;
	c->line = line;
	snprintf(c->msg, sizeof(c->msg), "%s", msg);
}

static void test_log_level_filters_and_sink_receives(void **state)
{
	struct captured c = { 0 };

	vbi_log_set_sink(capture, &c);
	vbi_log_set_level(VBI_LOG_WARN);
	vbi_info("hidden %d", 1);
	assert_int_equal(c.calls, 0);
	vbi_warn("shown %d", 2);
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.level, VBI_LOG_WARN);
	assert_string_equal(c.msg, "shown 2");
	vbi_log_set_level(VBI_LOG_DEBUG);
	vbi_debug("now shown");
	assert_int_equal(c.calls, 2);
	vbi_log_set_sink(NULL, NULL);
	assert_string_equal(vbi_log_level_name(VBI_LOG_ERROR), "error");
	assert_string_equal(vbi_log_level_name(42), "?");
}

static void test_strerror_names_backpressure(void **state)
{
	assert_non_null(strstr(vb_strerror(-EAGAIN), "back-pressure"));
	assert_string_equal(vb_strerror(0), "OK");
	assert_non_null(strchr(vb_version(), '.'));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_err_returns_code_and_formats),
		cmocka_unit_test(test_err_is_per_thread),
		cmocka_unit_test(test_long_message_truncates_safely),
		cmocka_unit_test(test_log_level_filters_and_sink_receives),
		cmocka_unit_test(test_strerror_names_backpressure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
