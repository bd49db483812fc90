/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include <verbus/verbus.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "proto/proto.h"
#include "core/err.h"

const char *vb_version(void)
{
	return VB_VERSION_STRING;
}

const char *vb_errmsg(void)
{
	return vbi_errmsg();
}

/*
 * vb_strerror: verbus's own words for the codes its API documents, the
 * C library's name and description for every other errno value. The
 * strings are built once (static storage) so the call is thread-safe.
 */
#define VBI_ERRNO_MAX 160

static char errstr[VBI_ERRNO_MAX][112];
static pthread_once_t errstr_once = PTHREAD_ONCE_INIT;

static const char *own_words(int e)
{
	switch (e) {
	case EAGAIN: return "back-pressure, retry later (nothing was sent)";
	case EINVAL: return "invalid argument";
	case ENOMEM: return "out of memory or over the configured cap";
	case ENODEV: return "no such RDMA device (or it was removed)";
	case ETIMEDOUT: return "timed out";
	case ENOTCONN: return "not connected (recovering: no active connection)";
	case ECONNRESET: return "peer reset the connection";
	case ECONNREFUSED: return "connection refused (vb_errmsg() gives the peer's reason)";
	case EHOSTUNREACH: return "no route to the peer's address";
	case EADDRNOTAVAIL: return "address not on this machine's RDMA devices";
	case EADDRINUSE: return "address (port) already in use";
	case ENOSPC: return "max_peers reached";
	case EEXIST: return "already exists (topic published or subscribed here)";
	case EPROTO: return "protocol error (malformed frame)";
	case EMSGSIZE: return "message too large";
	case EOPNOTSUPP: return "not supported by this transport/device";
	case EBUSY: return "resource busy (destroy its children first)";
	case ENOENT: return "not found";
	case EIO: return "device or transport error";
	case EDEADLK: return "would wait on the calling thread itself (from a callback)";
	default: return NULL;
	}
}

static void errstr_build(void)
{
	for (int e = 1; e < VBI_ERRNO_MAX; e++) {
		const char *name = strerrorname_np(e), *own = own_words(e);

		snprintf(errstr[e], sizeof(errstr[e]), "%s: %s", name ? name : "E?",
			 own ? own : (name ? strerrordesc_np(e) : "unknown error code"));
	}
}

const char *vb_strerror(int rc)
{
	if (rc == 0)
		return "OK";
	if (rc > 0)
		return "a count (success)";
	if (rc <= -VBI_ERRNO_MAX || !strerrorname_np(-rc))
		return "not an errno value";
	pthread_once(&errstr_once, errstr_build);
	return errstr[-rc];
}
