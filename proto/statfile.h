/* SPDX-License-Identifier: MIT */
/*
 * The context's counters file and its stat thread (proto/statfile.c;
 * layout: core/statfile.h).
 */
#ifndef VBI_PROTO_STATFILE_H
#define VBI_PROTO_STATFILE_H

struct vb_ctx;
struct vb_pub;
struct vb_sub;
struct vbi_statfile;

/* Creates and maps <VERBUS_STAT_DIR>/verbus-<pid>-<n>.stat for @ctx, and
 * points ctx->st and ctx->qp_timing into it: call it before anything of
 * the context counts (before its devices open). *out = NULL and 0 when
 * VERBUS_STAT_MS is 0 (the counters stay in the context). Returns 0, or
 * -errno of the file (the message names it). The creating thread. */
int vbi_statfile_open(struct vb_ctx *ctx, struct vbi_statfile **out);
/* Names the devices in the header and starts the stat thread, which
 * samples the rest every VERBUS_STAT_MS: once the context is set up.
 * 0, or -errno of pthread_create (the file stays, with its in-place
 * counters). The creating thread. */
int vbi_statfile_start(struct vbi_statfile *sf);
/* A new subscriber takes a slot of the file's subscriber section
 * (sub->c points into it; none free: the file says truncated and its
 * counters stay in it); detach gives it back, when @sub is freed (nothing
 * counts on it any more). @sf NULL: nothing. Any thread; they take the
 * file's own lock only. */
void vbi_statfile_sub_attach(struct vbi_statfile *sf, struct vb_sub *sub);
void vbi_statfile_sub_detach(struct vbi_statfile *sf, struct vb_sub *sub);
/* The same for a publisher: its backpressure counter goes in place, the
 * stat thread samples its window into the slot. */
void vbi_statfile_pub_attach(struct vbi_statfile *sf, struct vb_pub *pub);
void vbi_statfile_pub_detach(struct vbi_statfile *sf, struct vb_pub *pub);
/* Stops the stat thread (when it runs), marks the file closing and
 * removes it; the mapping stays (the counters still land in it). Before
 * the context's nodes, devices or pools are freed. NULL: nothing. */
void vbi_statfile_stop(struct vbi_statfile *sf);
/* Stops (if not yet), moves the counters back into the context, unmaps
 * and frees @sf. Once no other thread of the context runs. NULL: nothing. */
void vbi_statfile_unmap(struct vbi_statfile *sf);

#endif
