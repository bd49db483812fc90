/* SPDX-License-Identifier: MIT */
#include <verbus/verbus.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"

const char *vb_version(void)
{
#define VB_STR2(x) #x
#define VB_STR(x) VB_STR2(x)
	return VB_STR(VB_VERSION_MAJOR) "." VB_STR(VB_VERSION_MINOR) "." VB_STR(VB_VERSION_PATCH);
}

const char *vb_errmsg(void)
{
	return vbi_errmsg();
}

const char *vb_strerror(int rc)
{
	switch (rc) {
	case 0: return "OK";
	case -EAGAIN: return "EAGAIN: back-pressure, retry later";
	case -EINVAL: return "EINVAL: invalid argument";
	case -ENOMEM: return "ENOMEM: out of memory or over the configured cap";
	case -ENODEV: return "ENODEV: no such RDMA device";
	case -ETIMEDOUT: return "ETIMEDOUT: timed out";
	case -ENOTCONN: return "ENOTCONN: not connected";
	case -ECONNRESET: return "ECONNRESET: peer reset the connection";
	case -EPROTO: return "EPROTO: protocol error (malformed frame)";
	case -EMSGSIZE: return "EMSGSIZE: message too large";
	case -EOPNOTSUPP: return "EOPNOTSUPP: not supported by this transport/device";
	case -EBUSY: return "EBUSY: resource busy";
	case -ENOENT: return "ENOENT: not found";
	case -EIO: return "EIO: device or transport error";
	default: return rc < 0 ? "negative errno (see strerror)" : "positive count";
	}
}
