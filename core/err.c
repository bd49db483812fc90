/* SPDX-License-Identifier: MIT */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char vbi_errbuf[VBI_ERRMSG_MAX];

int vbi_err_at(const char *func, int line, int rc, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(vbi_errbuf, sizeof(vbi_errbuf), "%s:%d: ", func, line);

	if (n < 0 || (size_t)n >= sizeof(vbi_errbuf))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(vbi_errbuf + n, sizeof(vbi_errbuf) - (size_t)n, fmt, ap);
	va_end(ap);
	return rc;
}

int vbi_err_prefix(int rc, const char *fmt, ...)
{
	char old[VBI_ERRMSG_MAX];
	va_list ap;
	int n;

	memcpy(old, vbi_errbuf, sizeof(old));
	va_start(ap, fmt);
	n = vsnprintf(vbi_errbuf, sizeof(vbi_errbuf), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(vbi_errbuf))
		snprintf(vbi_errbuf + n, sizeof(vbi_errbuf) - (size_t)n, ": %s", old);
	return rc;
}

void vbi_err_clear(void)
{
	vbi_errbuf[0] = '\0';
}

const char *vbi_errmsg(void)
{
	return vbi_errbuf;
}
