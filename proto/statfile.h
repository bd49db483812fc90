/* SPDX-License-Identifier: MIT */
/*
 * The context's counters file and its stat thread (proto/statfile.c;
 * layout: core/statfile.h).
 */
#ifndef VBI_PROTO_STATFILE_H
#define VBI_PROTO_STATFILE_H

#include <stdbool.h>

struct vb_ctx;
struct vbi_statfile;

/* Creates <VERBUS_STAT_DIR>/verbus-<pid>-<n>.stat for @ctx (its devices
 * open, its nodes not yet) and starts the thread that rewrites it every
 * VERBUS_STAT_MS. *out = NULL and 0 when VERBUS_STAT_MS is 0. Returns 0,
 * or -errno of the file (the message names it) or of the thread. */
int vbi_statfile_open(struct vb_ctx *ctx, struct vbi_statfile **out);
/* Stops the thread (@thread: it was started), removes the file, frees
 * @sf (NULL: nothing). Before the context's devices close. */
void vbi_statfile_close(struct vbi_statfile *sf, bool thread);

#endif
