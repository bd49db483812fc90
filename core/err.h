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

#define VBI_ERRMSG_MAX 512

/* Set this thread's message ("func:line: fmt") and return rc (a negative
 * errno) so callers can write `return vbi_err(-EINVAL, "...")`. */
int vbi_err_at(const char *func, int line, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
#define vbi_err(rc, ...) vbi_err_at(__func__, __LINE__, (rc), __VA_ARGS__)

/* Prepend context to this thread's message; returns rc unchanged. */
int vbi_err_prefix(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clear this thread's message. */
void vbi_err_clear(void);

/* This thread's message ("" when none). */
const char *vbi_errmsg(void);

#endif
