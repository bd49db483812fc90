/* SPDX-License-Identifier: MIT */
/*
 * The protocol's upcall table (engine/upcalls.h): the functions of proto/
 * the engine calls, through ctx->up (vbi_ctx_open sets it first). Each
 * entry is the protocol function itself.
 */
#include "engine/upcalls.h"
#include "proto/proto.h"

/* the authentication state follows the lane in its block (vbi_lane_new) */
_Static_assert(sizeof(struct vbi_lane) % _Alignof(struct vbi_lane_auth) == 0,
	       "the authentication state follows the lane, aligned");

const struct vbi_upcalls vbi_proto_upcalls = {
	.cb_reserve = vbi_cb_reserve,
	.cb_flush = vbi_cb_flush,
	.dispatch_frames = vbi_dispatch_frames,
	.datagram = vbi_sub_datagram,
	.peer_failed = vbi_peer_failed,
	.peer_rto = vbi_pub_rto_peer,
	.peer_rewind = vbi_pub_rewind_peer,
	.peer_set_ud = vbi_peer_set_ud,
	.lane_send_hello = vbi_lane_send_hello,
	.udaddr_frame = vbi_udaddr_frame,
	.peer_send_subs = vbi_peer_send_subs,
	.peer_flush = vbi_peer_flush,
	.peer_ack_all = vbi_sub_peer_ack_all,
	.peer_send_switch = vbi_peer_send_switch,
	.peer_acks = vbi_peer_acks_due,
	.fanout_flush = vbi_pub_fanout_flush,
	.slow_check = vbi_pub_slow_check,
	.heartbeats = vbi_pub_heartbeats,
	.node_pending_expire = vbi_node_pending_expire,
	.node_backup_step = vbi_node_backup_step,
	.node_reap = vbi_node_reap,
	.lane_auth_size = sizeof(struct vbi_lane_auth),
};
