/* SPDX-License-Identifier: MIT */
/*
 * The accept duty of a node's conductor (engine/accept.c): the node's
 * listeners and the handshakes of the connections they accept. Every
 * function is the conductor thread's (vbi_accept_init before it starts,
 * vbi_accept_fini after it was joined), except vbi_listener_drop, which
 * set-up and teardown also call when no conductor runs.
 */
#ifndef VERBUS_ENGINE_ACCEPT_H
#define VERBUS_ENGINE_ACCEPT_H

#include <poll.h>
#include <stdint.h>

#include "engine/engine.h"

/* The longest the conductor waits with handshakes in progress (a removed
 * device is noticed then). */
#define VBI_ACCEPT_IDLE_MS 500

/* The accept state of @node, whose listeners are made: 0 or -ENOMEM. */
int vbi_accept_init(struct vb_node *node);
/* Destroy what was still being accepted and close the listeners.
 * Idempotent; also for a node that never had accept state. */
void vbi_accept_fini(struct vb_node *node);
/* The device listener @idx is on: [1] the standby device, the others the
 * primary one. */
struct vbi_devres *vbi_listener_dev(struct vb_node *node, unsigned idx);
/* Close listener @idx (node->listener[idx] NULL afterwards; no-op if so). */
void vbi_listener_drop(struct vb_node *node, unsigned idx);
/* The most descriptors vbi_accept_pollfds may add. */
unsigned vbi_accept_maxfds(const struct vb_node *node);
/* Add the descriptors the duty waits on (readable: something to do) to
 * @pfd; returns how many. */
unsigned vbi_accept_pollfds(struct vb_node *node, struct pollfd *pfd);
/* Take every waiting request, step every handshake in progress, give up
 * those older than cm_timeout_ms (vb_stats_t.pending_dropped), close a
 * removed device's listeners. Returns the ms until it wants to run again
 * (the next handshake deadline, VBI_ACCEPT_IDLE_MS at most). */
int vbi_accept_duty(struct vb_node *node, uint64_t now_ns);

#endif
