/* SPDX-License-Identifier: MIT */
/*
 * The upcall table: how the engine (lanes, progress loop, UD endpoint,
 * maintenance thread, multicast QP) reaches the protocol above it. The
 * layer check (scripts/check-layers.sh) forbids a direct call upward; a
 * call through a function pointer is the intended way up. The protocol
 * defines one table (proto/upcalls.c: vbi_proto_upcalls) and
 * vbi_ctx_open() sets ctx->up to it right after the context is allocated,
 * before anything of the engine can run on it. Every entry is the real
 * protocol function (none is optional; none is NULL).
 *
 * Each entry says on which thread it is called, with which locks held,
 * and what it returns. "Progress context": the progress thread, or in
 * VB_PROGRESS_APP mode the thread running vb_progress().
 */
#ifndef VERBUS_ENGINE_UPCALLS_H
#define VERBUS_ENGINE_UPCALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

struct vbi_upcalls {
	/* ---- the callback queue (proto/cbq.c) ---- */
	/* Room for @more queued callbacks, made before a receive buffer is
	 * dispatched so that queuing its deliveries cannot fail in the
	 * dispatch (VBI_CB_FOR_BYTES; a datagram's walk reserves before each
	 * delivery). Progress context, no lock held. 0 or -ENOMEM (the buffer
	 * is then not dispatched). vbi_cb_reserve. */
	int (*cb_reserve)(struct vb_ctx *ctx, size_t more);
	/* Run the queued callbacks and events. Progress context, no lock
	 * held. vbi_cb_flush. */
	void (*cb_flush)(struct vb_ctx *ctx);

	/* ---- receiving ---- */
	/* The frames of one SEND received on lane @l (@len > 0 bytes at
	 * @buf). Progress context, in an RCU read-side section, no lock
	 * held: each frame takes the node->lock it needs.
	 * vbi_dispatch_frames (proto/peer_frames.c). */
	void (*dispatch_frames)(struct vb_ctx *ctx, struct vbi_lane *l, const uint8_t *buf,
				uint32_t len);
	/* The frames of one datagram received on the UD endpoint or the
	 * multicast QP (@len bytes after the GRH, maybe 0): walked and
	 * delivered to the FANOUT subscribers of every node. Progress context,
	 * no lock held (it reads the nodes and subscribers in an RCU read-side
	 * section, and reserves callback room before each delivery).
	 * vbi_sub_datagram (proto/sub.c). */
	void (*datagram)(struct vb_ctx *ctx, const uint8_t *buf, uint32_t len);

	/* ---- peers ---- */
	/* Give @p up (no lane can be had; @why: static or copied). Progress
	 * context (the dispatch of a BYE or a refusal: node->lock held for
	 * reading; the failure round: an RCU read-side section) or the
	 * maintenance thread (no lock held). vbi_peer_failed (proto/node.c). */
	void (*peer_failed)(struct vbi_peer *p, const char *why);
	/* Unreliable (UC/UD) active lane: retransmit to @p what had no ACK
	 * progress for @rto_ns; returns how many messages were sent again.
	 * Progress context, p->txlock held. vbi_pub_rto_peer. */
	uint64_t (*peer_rto)(struct vbi_peer *p, uint64_t now_ns, uint64_t rto_ns);
	/* @p switched lanes: every publisher's cursor to it is rewound to what
	 * it acknowledged; returns the messages to retransmit. p->txlock held
	 * (progress context or maintenance thread). vbi_pub_rewind_peer. */
	uint64_t (*peer_rewind)(struct vbi_peer *p);
	/* @p's UD endpoint, its address handle rebuilt on our UD device
	 * (the endpoint moved off a removed device). Progress context,
	 * ctx->lock and node->lock (reading) held (vbi_ud_move). vbi_peer_set_ud
	 * (proto/lane_hello.c). */
	void (*peer_set_ud)(struct vbi_peer *p, uint32_t qpn, uint32_t qkey, const uint8_t *gid);

	/* ---- HELLO (proto/lane_hello.c) ---- */
	/* Send our HELLO on @l (once; a deferred one when its connection is
	 * ready). The maintenance thread after a connect (no lock held), or
	 * the progress context's per-peer round (inside an RCU read-side
	 * section, no lock held). vbi_lane_send_hello. */
	void (*lane_send_hello)(struct vbi_lane *l);
	/* A UDADDR frame (our UD endpoint's address) into @buf (room for
	 * VBI_WIRE_HDR_LEN + VBI_UDADDR_LEN bytes); returns its length. Any
	 * thread (called with p->txlock held). vbi_udaddr_frame. */
	uint32_t (*udaddr_frame)(struct vb_ctx *ctx, uint8_t *buf);

	/* ---- the per-peer round of the progress loop (no ctx->lock or
	 * node->lock: an RCU read-side section; nodes, peers, subscribers
	 * and streams are freed after a grace period) ---- */
	/* Send our SUB frames to @p (@only NULL: every subscription): 0 when
	 * sent, else the round tries again. No txlock held.
	 * vbi_peer_send_subs (proto/peer_frames.c). */
	int (*peer_send_subs)(struct vbi_peer *p, struct vb_sub *only);
	/* Send the data queued for @p as credits and ring space allow. No
	 * txlock held. vbi_peer_flush (proto/pub_frame.c). */
	void (*peer_flush)(struct vbi_peer *p);
	/* A lane switch: acknowledge every stream from @p again (urgent).
	 * p->txlock held. vbi_sub_peer_ack_all (proto/sub.c). */
	void (*peer_ack_all)(struct vb_node *node, struct vbi_peer *p);
	/* A switch this end starts, from the progress context: the ACKs of
	 * every stream from @p and then @tail (the LANE frame) in one SEND
	 * on @l. p->txlock held, and node->lock (read: the dispatch) or an
	 * RCU read-side section (the failure round).
	 * vbi_peer_send_switch (proto/peer_frames.c). */
	int (*peer_send_switch)(struct vbi_peer *p, struct vbi_lane *l, const void *tail,
				uint32_t tail_len);
	/* Send a standalone ACK on active lane @l (its HELLO received) if one
	 * is due (the protocol decides: urgent streams, slots to return,
	 * messages unacknowledged, idle time), built in @buf of @cap bytes.
	 * p->txlock held. vbi_peer_acks_due (proto/peer_frames.c). */
	void (*peer_acks)(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
			  bool idle);

	/* ---- the context's round of the progress loop (no lock held) ---- */
	/* FANOUT batches waiting for a datagram: sent (@idle: the poll found
	 * nothing). vbi_pub_fanout_flush (proto/pub_fanout.c). */
	void (*fanout_flush)(struct vb_ctx *ctx, bool idle);
	/* VB_SLOW_CUT publishers: stalled subscribers cut (@now_ns:
	 * vbi_now_ns()). vbi_pub_slow_check (proto/pub_ordered.c). */
	void (*slow_check)(struct vb_ctx *ctx, uint64_t now_ns);
	/* FANOUT heartbeats, every 20 ms (@now_ms: vbi_now_ms()).
	 * vbi_pub_heartbeats (proto/pub_fanout.c). */
	void (*heartbeats)(struct vb_ctx *ctx, uint64_t now_ms);

	/* ---- the maintenance thread's round (no lock held; proto/node.c) ---- */
	/* Drop accepted connections with no HELLO for cm_timeout_ms.
	 * vbi_node_pending_expire. */
	void (*node_pending_expire)(struct vb_node *node);
	/* Given-up peers with a backup address: connect to it.
	 * vbi_node_backup_step. */
	void (*node_backup_step)(struct vb_node *node);
	/* Free the peers given up or closed with no lane left. vbi_node_reap. */
	void (*node_reap)(struct vb_node *node);

	/* ---- sizes ---- */
	/* Bytes of a lane's handshake authentication state (struct
	 * vbi_lane_auth, proto/auth.h), allocated right after the lane, in the
	 * same block (vbi_lane_new); proto/upcalls.c checks that the lane's
	 * size keeps it aligned. */
	size_t lane_auth_size;
};

#endif
