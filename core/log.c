/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE /* pthread_setname_np */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "core/config.h"
#include "core/err.h" /* VBI_ERRMSG_MAX */

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

/* ---- deferred output (vbi_log_defer_begin) -------------------------------------------- */

#define LOGQ_LINES 128
#define LOGQ_LINE 768 /* a formatted line: the 512-byte message and its prefix */

/* The queue: filled by deferring threads, emptied by the log thread (or
 * vbi_log_flush), all under logq.mu; the write itself is done outside it. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t more;    /* a line was queued: the log thread */
	pthread_cond_t written; /* the queue emptied: vbi_log_flush */
	char line[LOGQ_LINES][LOGQ_LINE];
	unsigned head, n;
	unsigned writing;       /* lines popped, being written */
	bool thread;            /* the log thread runs (in this process) */
	bool atfork;            /* the fork handlers are registered */
} logq = { .mu = PTHREAD_MUTEX_INITIALIZER,
	   .more = PTHREAD_COND_INITIALIZER,
	   .written = PTHREAD_COND_INITIALIZER };

_Thread_local unsigned vbi_log_defer_depth_;

static void *log_main(void *arg)
{
	char out[LOGQ_LINE];

	(void)arg;
	/* Background output: the lowest priority (nice 19, this thread
	 * alone on Linux), so the line a failover logs is written when a CPU
	 * is free rather than beside the failover's own threads. It still
	 * gets its share when every CPU is busy; a queue it leaves full is
	 * written by the logging thread itself (logq_push), so nothing waits
	 * on it for long and nothing is lost. Best effort. */
	(void)!setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
	pthread_mutex_lock(&logq.mu);
	for (;;) {
		while (!logq.n)
			pthread_cond_wait(&logq.more, &logq.mu);
		memcpy(out, logq.line[logq.head], sizeof(out));
		logq.head = (logq.head + 1) % LOGQ_LINES;
		logq.n--;
		logq.writing++;
		pthread_mutex_unlock(&logq.mu);
		fputs(out, stderr);
		pthread_mutex_lock(&logq.mu);
		logq.writing--;
		if (!logq.n && !logq.writing)
			pthread_cond_broadcast(&logq.written);
	}
	return NULL;
}

/* fork: the forking thread holds mu across it, so the child's copy is
 * consistent; the child has no log thread, and its parent's lines are the
 * parent's to write. */
static void logq_prepare(void)
{
	pthread_mutex_lock(&logq.mu);
}

static void logq_parent(void)
{
	pthread_mutex_unlock(&logq.mu);
}

static void logq_child(void)
{
	logq.head = logq.n = logq.writing = 0;
	logq.thread = false;
	pthread_cond_init(&logq.more, NULL);
	pthread_cond_init(&logq.written, NULL);
	pthread_mutex_unlock(&logq.mu);
}

/* Process exit: what is queued goes out, but a stderr that blocks for good
 * (a pipe nobody reads) does not hold the exit for more than a second. */
static void logq_exit(void)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 1;
	pthread_mutex_lock(&logq.mu);
	while (logq.thread && (logq.n || logq.writing))
		if (pthread_cond_timedwait(&logq.written, &logq.mu, &dl))
			break;
	pthread_mutex_unlock(&logq.mu);
}

/* Queue @text for the log thread (started here the first time). False
 * when it cannot take it: the caller writes it itself. logq.mu held. */
static bool logq_push(const char *text)
{
	if (!logq.thread) {
		pthread_attr_t a;
		pthread_t t;
		int rc;

		if (!logq.atfork) {
			if (pthread_atfork(logq_prepare, logq_parent, logq_child) || atexit(logq_exit))
				return false;
			logq.atfork = true;
		}
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&t, &a, log_main, NULL);
		pthread_attr_destroy(&a);
		if (rc)
			return false;
		vbi_thread_name(t, "vb-log");
		logq.thread = true;
	}
	if (logq.n == LOGQ_LINES)
		return false;
	snprintf(logq.line[(logq.head + logq.n) % LOGQ_LINES], LOGQ_LINE, "%s", text);
	logq.n++;
	pthread_cond_signal(&logq.more);
	return true;
}

void vbi_log_flush(void)
{
	pthread_mutex_lock(&logq.mu);
	while (logq.thread && (logq.n || logq.writing))
		pthread_cond_wait(&logq.written, &logq.mu);
	pthread_mutex_unlock(&logq.mu);
}

/* The default sink: one line on stderr, with the monotonic time (the same
 * clock in every process of the machine, so the lines of a publisher and a
 * subscriber make one timeline) and the calling thread's name. Written
 * now, or queued for the log thread when the caller defers its output;
 * either way in the order they were logged (a line written now waits for
 * the queued ones: vbi_log_flush). */
static void stderr_sink(int level, const char *func, int line, const char *msg, void *arg)
{
	char text[LOGQ_LINE];
	struct timespec ts;
	char thr[16];
	bool queued = false;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (pthread_getname_np(pthread_self(), thr, sizeof(thr)))
		thr[0] = 0;
	snprintf(text, sizeof(text), "verbus %ld.%06ld %s %s %s:%d: %s\n", (long)ts.tv_sec,
		 (long)(ts.tv_nsec / 1000), thr, vbi_log_level_name(level), func, line, msg);
	if (vbi_log_defer_depth_) {
		pthread_mutex_lock(&logq.mu);
		queued = logq_push(text);
		pthread_mutex_unlock(&logq.mu);
	}
	if (!queued) {
		vbi_log_flush();
		fputs(text, stderr);
	}
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
