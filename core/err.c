/* SPDX-License-Identifier: MIT */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char vbi_errbuf[VBI_ERRMSG_MAX];
static _Thread_local vbi_err_fmt_fn lazy_fn; /* set: vbi_errbuf is not written yet */
static _Thread_local _Alignas(16) unsigned char lazy_data[VBI_ERR_LAZY_MAX];

/* Write a pending lazy message into vbi_errbuf. */
static void lazy_format(void)
{
	vbi_err_fmt_fn fn = lazy_fn;

	if (fn) {
		lazy_fn = NULL;
		fn(vbi_errbuf, sizeof(vbi_errbuf), lazy_data);
	}
}

int vbi_err_lazy(int rc, vbi_err_fmt_fn fn, const void *data, size_t len)
{
	if (len > sizeof(lazy_data))
		len = sizeof(lazy_data);
	memcpy(lazy_data, data, len);
	lazy_fn = fn;
	return rc;
}

int vbi_err_at(const char *func, int line, int rc, const char *fmt, ...)
{
	va_list ap;
	int n;

	lazy_fn = NULL;
	n = snprintf(vbi_errbuf, sizeof(vbi_errbuf), "%s:%d: ", func, line);

	if (n < 0 || (size_t)n >= sizeof(vbi_errbuf))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(vbi_errbuf + n, sizeof(vbi_errbuf) - (size_t)n, fmt, ap);
	va_end(ap);
	return rc;
}

int vbi_err_prefix_fn(int rc, const char *fmt, ...)
{
	char old[VBI_ERRMSG_MAX];
	size_t n, olen;
	va_list ap;
	int w;

	lazy_format();
	memcpy(old, vbi_errbuf, sizeof(old));
	va_start(ap, fmt);
	w = vsnprintf(vbi_errbuf, sizeof(vbi_errbuf), fmt, ap);
	va_end(ap);
	if (w < 0)
		return rc;
	/* Append ": <old>", truncating the old message to what still fits. */
	n = strnlen(vbi_errbuf, sizeof(vbi_errbuf) - 1);
	if (n + 3 >= sizeof(vbi_errbuf))
		return rc;
	vbi_errbuf[n++] = ':';
	vbi_errbuf[n++] = ' ';
	olen = strnlen(old, sizeof(old) - 1);
	if (olen > sizeof(vbi_errbuf) - 1 - n)
		olen = sizeof(vbi_errbuf) - 1 - n;
	memcpy(vbi_errbuf + n, old, olen);
	vbi_errbuf[n + olen] = '\0';
	return rc;
}

void vbi_err_clear(void)
{
	lazy_fn = NULL;
	vbi_errbuf[0] = '\0';
}

const char *vbi_errmsg(void)
{
	lazy_format();
	return vbi_errbuf;
}
