/* SPDX-License-Identifier: MIT */
/*
 * vb_strerror() names every code a verbus call can return: each negative
 * errno value gets its own name (the C library's) and a meaning, never a
 * catch-all; the codes verbus.h documents get verbus's own words.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <verbus/verbus.h>

static void test_every_errno_named(void **state)
{
	unsigned named = 0;

	(void)state;
	for (int e = 1; e < 134; e++) {
		const char *name = strerrorname_np(e), *s = vb_strerror(-e);
		size_t n;

		if (!name) /* not an errno value on this system */
			continue;
		n = strlen(name);
		if (strncmp(s, name, n) || strncmp(s + n, ": ", 2) || strlen(s) < n + 4)
			fail_msg("vb_strerror(-%s) = \"%s\"", name, s);
		named++;
	}
	printf("%u errno values named\n", named);
	assert_true(named > 100);
}

static void test_documented_codes_in_own_words(void **state)
{
	static const int codes[] = { EAGAIN, EINVAL, ENOMEM, ENODEV, ETIMEDOUT, ENOTCONN,
				     ECONNRESET, ECONNREFUSED, EHOSTUNREACH, EADDRNOTAVAIL,
				     EADDRINUSE, ENOSPC, EEXIST, EPROTO, EMSGSIZE, EOPNOTSUPP,
				     EBUSY, ENOENT, EIO, EDEADLK };

	(void)state;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		const char *s = vb_strerror(-codes[i]);

		/* verbus's text, not the C library's description */
		assert_null(strstr(s, strerrordesc_np(codes[i])));
	}
	assert_non_null(strstr(vb_strerror(-EAGAIN), "back-pressure"));
	assert_non_null(strstr(vb_strerror(-EADDRNOTAVAIL), "EADDRNOTAVAIL"));
	assert_string_equal(vb_strerror(0), "OK");
	assert_non_null(strstr(vb_strerror(5), "count"));
	assert_non_null(strstr(vb_strerror(-100000), "not an errno"));
	/* the same static string every time (thread-safe, owned by verbus) */
	assert_ptr_equal(vb_strerror(-EIO), vb_strerror(-EIO));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_errno_named),
		cmocka_unit_test(test_documented_codes_in_own_words),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
