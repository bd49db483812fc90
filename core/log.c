/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE /* pthread_setname_np */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "core/config.h"
#include "core/err.h" /* VBI_ERRMSG_MAX */

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

/* The default sink: one line on stderr, with the monotonic time (the same
 * clock in every process of the machine, so the lines of a publisher and a
 * subscriber make one timeline) and the calling thread's name. */
static void stderr_sink(int level, const char *func, int line, const char *msg, void *arg)
{
	struct timespec ts;
	char thr[16];

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (pthread_getname_np(pthread_self(), thr, sizeof(thr)))
		thr[0] = 0;
	fprintf(stderr, "verbus %ld.%06ld %s %s %s:%d: %s\n", (long)ts.tv_sec,
		(long)(ts.tv_nsec / 1000), thr, vbi_log_level_name(level), func, line, msg);
}

struct log_sink {
	vbi_log_sink_fn fn;
	void *arg;
};

static struct log_sink sink_default = { stderr_sink, NULL };
static struct log_sink sink_user;
/* plain objects accessed only through the __atomic builtins (clang refuses
 * those on _Atomic-qualified objects) */
static struct log_sink *sink = &sink_default;
static int cur_level = -1;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;

/* VERBUS_LOG_LEVEL (the table's enum: its index is the level). The log
 * cannot fail: a malformed value is warned about and the default (warn)
 * kept; written straight to the sink, as vbi_warn() would wait for this
 * very once. vb_ctx_create() refuses the value (vbi_cfg_check_env()). */
static void level_from_env(void)
{
	union vbi_cfg_val v = { .u = VBI_LOG_WARN };
	char why[VBI_ERRMSG_MAX];
	int rc = vbi_cfg_read(VBI_CFG_LOG_LEVEL, &v, why, sizeof(why));
	int expect = -1, lvl = rc ? VBI_LOG_WARN : (int)v.u;

	__atomic_compare_exchange_n(&cur_level, &expect, lvl, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	if (rc < 0 && __atomic_load_n(&cur_level, __ATOMIC_RELAXED) >= VBI_LOG_WARN)
		vbi_log_write(VBI_LOG_WARN, __func__, __LINE__, "%s; the default (warn) is used", why);
}

const char *vbi_log_level_name(int level)
{
	if (level < 0 || level > VBI_LOG_TRACE)
		return "?";
	return level_names[level];
}

int vbi_log_level(void)
{
	int l = __atomic_load_n(&cur_level, __ATOMIC_RELAXED);

	if (l < 0) {
		pthread_once(&level_once, level_from_env);
		l = __atomic_load_n(&cur_level, __ATOMIC_RELAXED);
	}
	return l;
}

void vbi_log_set_level(int level)
{
	__atomic_store_n(&cur_level, level, __ATOMIC_RELAXED);
}

void vbi_log_set_sink(vbi_log_sink_fn fn, void *arg)
{
	if (!fn) {
		__atomic_store_n(&sink, &sink_default, __ATOMIC_RELEASE);
		return;
	}
	/* One user sink at a time; readers see the old or the new one. */
	sink_user.fn = fn;
	sink_user.arg = arg;
	__atomic_store_n(&sink, &sink_user, __ATOMIC_RELEASE);
}

void vbi_log_write(int level, const char *func, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	struct log_sink *s = __atomic_load_n(&sink, __ATOMIC_ACQUIRE);

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->fn(level, func, line, msg, s->arg);
}

void vbi_thread_name(pthread_t t, const char *name)
{
	(void)pthread_setname_np(t, name); /* 15 characters at most */
}
