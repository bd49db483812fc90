/* SPDX-License-Identifier: MIT */
#include "transport/verbs/verbs_device.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"

int vbi_verbs_list_devices(char *buf, size_t len)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	size_t off = 0;

	if (len)
		buf[0] = '\0';
	if (!list)
		return vbi_err(-errno, "ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; i < n && off < len; i++) {
		int w = snprintf(buf + off, len - off, "%s%s", i ? " " : "",
				 ibv_get_device_name(list[i]));
		if (w < 0)
			break;
		off += (size_t)w;
	}
	ibv_free_device_list(list);
	return n;
}

int vbi_verbs_open_device(const char *name, struct ibv_context **out)
{
	int n = 0, rc;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *dev = NULL;
	struct ibv_context *ctx;

	*out = NULL;
	if (!list)
		return vbi_err(-errno, "ibv_get_device_list: %s (is ib_uverbs loaded?)",
			       strerror(errno));
	for (int i = 0; i < n && !dev; i++)
		if (!name || !*name || !strcmp(ibv_get_device_name(list[i]), name))
			dev = list[i];
	if (!dev) {
		char names[256];

		ibv_free_device_list(list);
		vbi_verbs_list_devices(names, sizeof(names));
		return vbi_err(-ENODEV, "no RDMA device %s%s%s (present: %s)",
			       name && *name ? "named '" : "at all", name && *name ? name : "",
			       name && *name ? "'" : "", n ? names : "none");
	}
	ctx = ibv_open_device(dev);
	rc = ctx ? 0 : -(errno ? errno : ENODEV);
	if (rc)
		vbi_err(rc, "ibv_open_device(%s): %s", ibv_get_device_name(dev), strerror(-rc));
	ibv_free_device_list(list);
	*out = ctx;
	return rc;
}
