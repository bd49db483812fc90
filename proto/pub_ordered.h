/* SPDX-License-Identifier: MIT */
/*
 * ORDERED publishers' window and cursors (pub_ordered.c), for the entry
 * points in pub.c (commit, destroy).
 */
#ifndef VERBUS_API_PUB_ORDERED_H
#define VERBUS_API_PUB_ORDERED_H

#include <stdint.h>

struct vb_pub;
struct vbi_pubpeer;

/* A message leaves the window (vbi_txwin_ack/drain callback; @c the
 * message, @arg the publisher). pub->lock held. */
void vbi_pub_release_msg(void *c, uint64_t seq, void *arg);
/* Drop from the window what every live subscriber has acknowledged;
 * returns the new k-of-n sequence. pub->lock held. */
uint64_t vbi_pub_release(struct vb_pub *pub);
/* Cursor @pp's record goes (its peer reaped, or it subscribes again):
 * what it acknowledged is kept for the k-of-n sequence (it delivered
 * pp->joined+1..pp->acked, and k-of-n never goes back). pub->lock held. */
void vbi_pub_keep_acked(struct vb_pub *pub, const struct vbi_pubpeer *pp);
/* Unlink cursor @pp from its peer's list (takes the peer's txlock). */
void vbi_pub_detach_pp(struct vbi_pubpeer *pp);

#endif
