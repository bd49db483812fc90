/* SPDX-License-Identifier: MIT */
/*
 * Per-thread error message (vb_errmsg()). Set at the origin of a failure with
 * vbi_err(), optionally prefixed on the way up with vbi_err_prefix().
 *
 * Thread-safety: all functions act on the calling thread's buffer only; any
 * thread may call any of them at any time.
 */
#ifndef VERBUS_CORE_ERR_H
#define VERBUS_CORE_ERR_H

#include <errno.h>
#include <stddef.h>

#define VBI_ERRMSG_MAX 512

/* Set this thread's message ("func:line: fmt") and return rc (a negative
 * errno) so callers can write `return vbi_err(-EINVAL, "...")`. */
int vbi_err_at(const char *func, int line, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Prepend context to this thread's message; returns rc unchanged. */
int vbi_err_prefix_fn(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The macros evaluate rc once and yield it visibly (not through the
 * functions' return value, which another translation unit defines): the
 * static analyzer (docs/testing.md) then knows that `return vbi_err(rc, ...)`
 * returns rc, instead of exploring a "returned 0" path after every error. */
#define vbi_err(rc, ...)                                                            \
	__extension__({                                                             \
		int vbi_err_rc_ = (rc);                                             \
		(void)vbi_err_at(__func__, __LINE__, vbi_err_rc_, __VA_ARGS__);     \
		vbi_err_rc_;                                                        \
	})
#define vbi_err_prefix(rc, ...)                                                     \
	__extension__({                                                             \
		int vbi_err_rc_ = (rc);                                             \
		(void)vbi_err_prefix_fn(vbi_err_rc_, __VA_ARGS__);                  \
		vbi_err_rc_;                                                        \
	})

/* Clear this thread's message. */
void vbi_err_clear(void);

/* An error whose message is formatted only when it is read (vbi_errmsg()):
 * for refusals a caller may retry at full rate, such as a publisher's
 * -EAGAIN back-pressure, where formatting would cost more than the retry.
 * @data (up to VBI_ERR_LAZY_MAX bytes, copied now) is what @fn formats
 * into the message buffer later; the message reads as if formatted now.
 * Returns @rc. Thread-local, like every error message. */
#define VBI_ERR_LAZY_MAX 256
typedef void (*vbi_err_fmt_fn)(char *buf, size_t len, const void *data);
int vbi_err_lazy(int rc, vbi_err_fmt_fn fn, const void *data, size_t len);

/* This thread's message ("" when none). */
const char *vbi_errmsg(void);

#endif
