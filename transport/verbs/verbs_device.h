/* SPDX-License-Identifier: MIT */
/*
 * Device selection for the verbs transport.
 * Thread-safety: both functions may be called from any thread concurrently
 * (ibv_get_device_list is thread-safe).
 */
#ifndef VERBUS_TRANSPORT_VERBS_DEVICE_H
#define VERBUS_TRANSPORT_VERBS_DEVICE_H

#include <infiniband/verbs.h>

/*
 * Open the RDMA device called @name, or the first one when @name is NULL or
 * "". On success *@out owns the context (close with ibv_close_device) and 0 is
 * returned; -ENODEV when no such device exists (the message lists the devices
 * that do), or another negative errno from the open.
 */
int vbi_verbs_open_device(const char *name, struct ibv_context **out);

/*
 * Write the names of the RDMA devices present, separated by spaces, into
 * @buf (always NUL-terminated). Returns how many devices there are (0 when
 * none), or a negative errno when the list cannot be read.
 */
int vbi_verbs_list_devices(char *buf, size_t len);

#endif
