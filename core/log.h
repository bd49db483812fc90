/* SPDX-License-Identifier: MIT */
/*
 * Leveled logging with func:line. Levels below VBI_LOG_COMPILE_LEVEL compile
 * to nothing; the runtime level comes from VERBUS_LOG_LEVEL (error, warn,
 * info, debug, trace; default warn). The sink is pluggable (default: stderr,
 * one line: CLOCK_MONOTONIC seconds, thread name, level, func:line, message).
 * Never log on the hot path at a level that is on by default.
 *
 * Thread-safety: vbi_log_* may be called from any thread. vbi_log_set_sink()
 * and vbi_log_set_level() may race with logging threads; a logging thread
 * sees either the old or the new sink/level.
 */
#ifndef VERBUS_CORE_LOG_H
#define VERBUS_CORE_LOG_H

#include <pthread.h>

enum vbi_log_level {
	VBI_LOG_ERROR = 0,
	VBI_LOG_WARN = 1,
	VBI_LOG_INFO = 2,
	VBI_LOG_DEBUG = 3,
	VBI_LOG_TRACE = 4,
};

#ifndef VBI_LOG_COMPILE_LEVEL
#define VBI_LOG_COMPILE_LEVEL VBI_LOG_DEBUG
#endif

typedef void (*vbi_log_sink_fn)(int level, const char *func, int line, const char *msg, void *arg);

void vbi_log_set_sink(vbi_log_sink_fn fn, void *arg);
void vbi_log_set_level(int level);
int vbi_log_level(void);
const char *vbi_log_level_name(int level);
void vbi_log_write(int level, const char *func, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/*
 * Deferred output, for the threads that must not wait for it (a progress
 * round: vbi_progress_once). Between vbi_log_defer_begin() and
 * vbi_log_defer_end() (they nest; per thread), a line for the default sink
 * is formatted at once (time, thread name) and queued; the library's log
 * thread ("vb-log", started at the first such line) writes it to stderr.
 * So a slow stderr (a full pipe, a network file system) never holds the
 * data path. Nothing is lost: with the queue full, or no log thread, the
 * line is written by the caller as before; the queue is written out by
 * vbi_log_flush() (vb_ctx_destroy, process exit). A user sink
 * (vbi_log_set_sink) is always called by the logging thread itself.
 * A forked child starts with an empty queue and no log thread (its
 * parent's queued lines are the parent's to write).
 */
extern _Thread_local unsigned vbi_log_defer_depth_; /* log.c; inline: every round */
static inline void vbi_log_defer_begin(void)
{
	vbi_log_defer_depth_++;
}
static inline void vbi_log_defer_end(void)
{
	if (vbi_log_defer_depth_)
		vbi_log_defer_depth_--;
}
/* Wait until every line queued so far is written. Any thread but the log
 * thread; blocks as long as stderr does. */
void vbi_log_flush(void);
/* Name a library thread (what ps, top, perf and the logs' readers see):
 * "vb-progress", "vb-maint" (the node's conductor). Best effort; any thread. */
void vbi_thread_name(pthread_t t, const char *name);

#define vbi_log(lvl, ...)                                                         \
	do {                                                                     \
		if ((lvl) <= VBI_LOG_COMPILE_LEVEL && (lvl) <= vbi_log_level())  \
			vbi_log_write((lvl), __func__, __LINE__, __VA_ARGS__);    \
	} while (0)
#define vbi_error(...) vbi_log(VBI_LOG_ERROR, __VA_ARGS__)
#define vbi_warn(...)  vbi_log(VBI_LOG_WARN, __VA_ARGS__)
#define vbi_info(...)  vbi_log(VBI_LOG_INFO, __VA_ARGS__)
#define vbi_debug(...) vbi_log(VBI_LOG_DEBUG, __VA_ARGS__)

#endif
