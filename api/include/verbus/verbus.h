/* SPDX-License-Identifier: MIT */
/*
 * verbus — messaging middleware on RDMA verbs. The one public header.
 *
 * Conventions (every function in this header):
 *  - Returns 0 or a non-negative count on success, a negative errno-style
 *    code on failure; -EAGAIN means back-pressure (retry later), never loss.
 *  - On failure, vb_errmsg() returns a message for the calling thread that
 *    says what went wrong and where.
 *  - Handles are opaque; a constructor takes an attribute struct that
 *    vb_*_attr_init() fills with defaults (each field documents its
 *    VERBUS_* environment override).
 */
#ifndef VERBUS_VERBUS_H
#define VERBUS_VERBUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VERBUS_BUILDING)
#define VB_EXPORT __attribute__((visibility("default")))
#else
#define VB_EXPORT
#endif

#define VB_VERSION_MAJOR 0
#define VB_VERSION_MINOR 1
#define VB_VERSION_PATCH 0

/**
 * vb_version() - library version as "MAJOR.MINOR.PATCH".
 * Thread-safe; the string is static and owned by the library.
 */
VB_EXPORT const char *vb_version(void);

/**
 * vb_errmsg() - what the last failing verbus call on this thread said.
 * Thread-safe: the message is per thread. The pointer stays valid until the
 * next verbus call on the same thread fails. Never NULL ("" when none).
 */
VB_EXPORT const char *vb_errmsg(void);

/**
 * vb_strerror() - short name of a verbus return code (e.g. -EAGAIN ->
 * "EAGAIN: back-pressure"). Thread-safe; static string.
 */
VB_EXPORT const char *vb_strerror(int rc);

#ifdef __cplusplus
}
#endif
#endif /* VERBUS_VERBUS_H */
