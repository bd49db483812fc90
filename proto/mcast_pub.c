/* SPDX-License-Identifier: MIT */
/*
 * FANOUT over multicast, the publisher's side of it (docs/transport.md,
 * "FANOUT and multicast"; the mapping, the subscribers' QP and memberships
 * are the engine's: engine/mcast.c). A FANOUT publisher joins its topic's
 * group without attaching a QP; a subscriber whose SUB names that same
 * group is reached through it (vbi_pubpeer.mcast), every other one by
 * unicast.
 */
#include "engine/mcast.h"
#include "proto/proto.h"

/* Join @pub's group to send to it (no QP attached). On failure the
 * publisher stays unicast-only. Blocking; any thread, before the
 * publisher is linked (nothing else sees pub->mcast yet). */
void vbi_mcast_pub_open(struct vb_pub *pub)
{
	vbi_mcast_pub_join(pub->node->ctx, pub->topic_id, pub->topic, &pub->mcast_group,
			   &pub->mcast);
}

/* @pub is unlinked: retire its membership (left when no send can use it). */
void vbi_mcast_pub_close(struct vb_pub *pub)
{
	vbi_mcast_pub_retire(pub->node->ctx, &pub->mcast, pub->topic);
}

/* Does @peer's subscription to @pub's topic name the publisher's group?
 * node->lock held (rsubs). */
bool vbi_mcast_peer_joined(struct vb_pub *pub, struct vbi_peer *peer)
{
	if (!pub->mcast)
		return false;
	for (struct vbi_rsub *r = peer->rsubs; r; r = r->next)
		if (r->topic == pub->topic_id)
			return r->mcast_group && r->mcast_group == pub->mcast_group;
	return false;
}

/* The group to post @pub's datagrams to, or NULL when no live subscriber
 * is reached through it. pub->lock held. */
const struct vbt_mcast *vbi_mcast_pub_group(struct vb_pub *pub)
{
	if (!pub->mcast)
		return NULL;
	for (struct vbi_pubpeer *pp = pub->peers; pp; pp = pp->next_in_pub)
		if (pp->mcast && !pp->dead && !pp->peer->dead)
			return pub->mcast;
	return NULL;
}
