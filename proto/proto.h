/* SPDX-License-Identifier: MIT */
/*
 * Internals of the protocol layer (proto/; the api/src facade calls the
 * functions at the end of this header). The publisher, subscriber and
 * callback objects are defined here; vb_ctx, vb_node, vbi_peer, vbi_lane
 * and vbi_devres in engine/engine.h. The engine's functions (lanes,
 * failover, maintenance thread, progress loop, UD endpoint, multicast) are
 * declared in the engine/ headers included below; it calls the protocol back
 * through the upcall table (engine/upcalls.h, proto/upcalls.c).
 *
 * Objects and who touches them:
 *   vb_ctx     device, PD, registered pool, one CQ for every QP, the UD
 *              endpoint (FANOUT), the progress engine.
 *   vb_node    listeners, the conductor thread (engine/maint.c:
 *              accepting, maintenance), its peers, publishers, subscribers. node->lock
 *              (rwlock) guards the lists; the progress thread takes it
 *              for reading per received SEND, and walks the lists in its
 *              rounds (per peer, failures, slow subscribers, FANOUT) in an
 *              RCU read-side section instead: their writers link and
 *              unlink with vbi_rcu_assign and free after a grace period.
 *   vbi_peer   one RC connection to another node: recv slots, send
 *              contexts (a ring the size of the SQ), credits, the remote
 *              node's UD address and subscriptions.
 *              peer->txlock serializes everything that posts sends on it.
 *   vb_pub     ORDERED: a retransmit window (core/stream) shared by its
 *              subscriber peers, each with a cursor (vbi_pubpeer).
 *              FANOUT: a sequence and the list of subscriber peers.
 *              pub->lock guards the window and the cursors.
 *   vb_sub     per publisher session: sequence tracking + reassembly.
 *              Touched only by the progress context (and destroy, after
 *              it has been unlinked under node->lock held for writing and
 *              a grace period; and the reaper, which unlinks a reaped
 *              peer's ORDERED streams under the write lock).
 *
 *   vbi_peer lifetime: created by a connect or an accepted HELLO, given up
 *              or closed (dead), then reaped by the node's maintenance
 *              thread (vbi_node_reap) once it has no lane left; freed after
 *              an RCU grace period (publishing threads hold peer pointers
 *              they read under pub->lock inside a read-side section).
 *
 * Lock order (in short; every lock, every nesting pair found and the RCU
 * sections: docs/architecture.md "Lock order (complete)"):
 * ctx->ud_lock -> pub->lock; node->lock -> peer->txlock -> pub->lock. A
 * publisher thread takes pub->lock, drops it, then peer->txlock (never
 * pub->lock first while holding it). Application callbacks run with no
 * lock of the node's held (cbq.c); events are queued with no lock
 * (engine/events.c).
 */
#ifndef VERBUS_PROTO_PROTO_H
#define VERBUS_PROTO_PROTO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <verbus/verbus.h>

#include <sys/socket.h>

#include "core/errpolicy.h"
#include "core/mempool.h"
#include "core/path.h"
#include "core/sizing.h"
#include "core/stream.h"
#include "core/wire.h"
#include "core/wire_msg.h"
#include "engine/accept.h"
#include "engine/engine.h"
#include "engine/events.h"
#include "engine/lane.h"
#include "engine/lanepool.h"
#include "engine/mcast.h"
#include "engine/progress.h"
#include "engine/qpool.h"
#include "engine/sring.h"
#include "engine/ud.h"
#include "engine/upcalls.h"
#include "transport/transport.h"
#include "proto/auth.h"

#define VBI_TOPIC_MAX VBI_WIRE_TOPIC_MAX
/* 2: lanes (node uid, lane id, role, standby address);
 * 3: + lane mode, UC/UD listener ports (degradation) */
#define VBI_HELLO_VERSION VBI_WIRE_HELLO_VERSION
#define VBI_NAK_RETRY_MS 20    /* a NAK for the same hole is repeated at most this often */
#define VBI_MAX_STREAMS_PER_SUB 1024 /* publisher sessions per subscriber */

struct vbi_peer;
struct vbi_lane;
struct vbi_devres;
struct vb_pub;
struct vb_sub;



/* A publisher's view of one subscriber peer. */
struct vbi_pubpeer {
	/* the publisher's list: linked with vbi_rcu_assign (slow_send_ends
	 * walks it with no lock); unlinked by the reaper, freed after a grace
	 * period (gone_next) */
	struct vbi_pubpeer *next_in_pub;
	struct vbi_pubpeer *next_in_peer;
	struct vbi_pubpeer *gone_next;
	struct vb_pub *pub;
	struct vbi_peer *peer;
	uint64_t sent;           /* ORDERED: highest seq framed to this peer (rewound to
				  * acked on failover: retransmission) */
	uint64_t high;           /* ORDERED: highest seq ever framed (ACK validation) */
	uint64_t acked;          /* ORDERED: highest seq it acknowledged */
	uint64_t joined;         /* seq before its first message */
	uint32_t frag_sent;      /* ORDERED: bytes of message sent+1 already framed */
	uint64_t progress_ns;    /* unreliable lanes: last ACK progress, rewind, or start
				  * of unacknowledged data (the RTO runs from it) */
	unsigned rto_shift;      /* consecutive RTOs without progress: the next waits
				  * RTO << rto_shift (up to 16 x) */
	uint64_t nak_seq;        /* last NAK acted upon (seq) ... */
	uint64_t nak_ns;         /* ... and when */
	/* ORDERED, slow subscribers (vb_slow_policy_t; pub->lock): since when
	 * it has held unacknowledged messages without acknowledging anything
	 * new (0: it holds none); restarted while it has no connection */
	uint64_t stall_ns;
	/* pub->lock (read and written under it; the peer's txlock is held too
	 * by every writer but slow_cut) */
	bool dead;
	bool cut;                /* VB_SLOW_CUT cut its stream (dead is set too) */
	bool end_pending;        /* ... and the END frame telling it so is still to go */
	bool mcast;              /* FANOUT: reached through the publisher's group */
};

/* A remote subscription (what a peer asked us for). */
struct vbi_rsub {
	struct vbi_rsub *next;
	uint32_t topic;
	uint8_t cls;
	uint32_t mcast_group;    /* FANOUT: group it joined (SUB's epoch), 0 = none */
};

/* Per-(publisher session) receive state inside a subscriber. */
struct vbi_rxs {
	struct vbi_rxs *next;
	struct vbi_peer *peer;   /* ORDERED: the connection it arrives on */
	uint32_t session;
	uint32_t topic;
	struct vbi_rxstream rx;
	struct vbi_reasm reasm;
	struct vb_sub *sub;      /* whose stream it is */
	uint64_t acked_sent;     /* ORDERED: highest seq we acknowledged (txlock) */
	/* ORDERED: rx.next as of the last ack_owed (txlock): what the ACKs and
	 * NAKs carry. rx.next itself belongs to the progress thread, and ACKs
	 * are also built on publishing threads (piggybacked on DATA). */
	uint64_t ack_next;
	/* ORDERED: the seq after the last message whose callback returned
	 * (progress thread); ack_next is taken from it, never from rx.next,
	 * so an ACK covers only what the application has seen (0: none yet) */
	uint64_t dlv_next;
	uint64_t last_ms;        /* last message (stream reuse at the bound) */
	bool ack_urgent;
	bool nak_pending;        /* unreliable lane: a NAK for rx.next rides the next ACKs */
	uint64_t nak_seq;        /* last NAK sent (first missing seq) ... */
	uint64_t nak_ms;         /* ... and when */
	struct vbi_rxs *next_dirty; /* peer's list of streams to acknowledge */
	struct vbi_rxs *gone_next;  /* unlinked, to be freed after a grace period
				     * (vbi_sub_drop_peer; the reaping thread) */
	atomic_bool in_dirty;     /* on that list: written under the peer's txlock, read
				  * without it (sub.c stream reuse) */
};





/* A sealed FANOUT datagram: the message block holding it, its length and
 * how many messages it carries. */
struct vbi_fdgram {
	struct vbi_msg *m;
	uint32_t len, frames;
};
#define VBI_FANOUT_READY 8 /* sealed datagrams a publisher queues at most */

struct vb_pub {
	struct vb_pub *next;
	struct vb_node *node;
	char topic[VBI_TOPIC_MAX + 1];
	uint32_t topic_id;
	vb_class_t cls;
	uint32_t session;
	vb_pub_attr_t attr;

	vbi_mutex_t lock;
	vbi_cond_t acked_cv;        /* broadcast under lock when acknowledgements move */
	struct vbi_txwin win;      /* ORDERED */
	atomic_bool win_full;      /* ORDERED: the last push found the window
				    * full (a hint; vb_publish checks under lock) */
	uint64_t fanout_seq;       /* FANOUT: last sequence used */
	uint64_t last_pub_ms;      /* FANOUT: when it last published */
	struct vbi_msg *batch;     /* FANOUT: datagram being filled (pub->lock) */
	uint32_t batch_off, batch_frames;
	/* FANOUT: sealed datagrams waiting to be posted, oldest first (pub->lock;
	 * taken by whoever holds ud_lock: pub_fanout.c) */
	struct vbi_fdgram ready[VBI_FANOUT_READY];
	unsigned ready_head, ready_n;
	uint64_t hb_seq;           /* FANOUT: seq the last heartbeats announced */
	unsigned hb_sent;          /* ... and how many times */
	uint64_t hb_due_ms;        /* ... and when the next one is due */
	struct vbi_pubpeer *peers; /* subscriber peers */
	unsigned npeers;
	uint64_t quorum_seq;       /* k-of-n acknowledged */
	size_t retained;           /* ORDERED: payload bytes in the window (retain_bytes) */
	unsigned ends_pending;     /* ORDERED: cut cursors whose END is still to go */
	struct vbt_mcast *mcast;   /* FANOUT: the topic's group, NULL = unicast only */
	uint32_t mcast_group;      /* FANOUT: its IPv4 address (host order) */
	atomic_uint cb_pending;    /* on_ack callbacks queued (cbq.c) */
	atomic_bool dead;          /* being destroyed: queued callbacks are skipped */
	/* -EAGAIN returned (vbi_pub_refused): in its slot of the counters
	 * file, else bp_own; stat_slot -1: no slot (statfile.c) */
	atomic_uint_fast64_t *backpressure, bp_own;
	int stat_slot;
	/* ORDERED with ack_quorum k: what subscribers whose records went
	 * (reaped, or subscribed again) acknowledged, the highest k at most:
	 * it still counts towards quorum_seq. pub->lock. */
	unsigned nleft;
	struct vbi_left_ack {
		uint64_t joined, acked;
	} left[];                  /* ack_quorum entries */
};

struct vb_sub {
	struct vb_sub *next;
	struct vb_node *node;
	char topic[VBI_TOPIC_MAX + 1];
	uint32_t topic_id;
	vb_class_t cls;
	vb_sub_attr_t attr;
	struct vbi_rxs *streams;   /* progress context only */
	/* its counters (vb_sub_stats_t): in its slot of the counters file,
	 * else c_own; written in place by the threads that count, atomic */
	struct vbi_sub_ctr {
		atomic_uint_fast64_t delivered, duplicates, gaps, lost, publishers, ends;
		atomic_uint_fast64_t acked; /* the latest ACK's sequence (txlock) */
	} *c, c_own;
	int stat_slot;             /* its slot in the file, -1: none (statfile.c) */
	unsigned nstreams;         /* progress context only */
	uint32_t mcast_group;      /* FANOUT: group this context joined for it, 0 = none */
	atomic_uint cb_pending;    /* deliveries and gaps queued (cbq.c) */
	atomic_bool dead;          /* being destroyed: queued callbacks are skipped */
	bool streams_freed;        /* destroyed from a callback (of another
				    * subscriber): its streams are gone; written
				    * and read by the flushing thread (cbq.c) */
};



/* A publish of @pub refused with -EAGAIN: counted for the context and
 * for the publisher (the counters file's publisher section). Any thread. */
static inline void vbi_pub_refused(struct vb_pub *pub)
{
	atomic_fetch_add_explicit(&pub->node->ctx->st->backpressure, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(pub->backpressure, 1, memory_order_relaxed);
}

/* ---- callbacks (cbq.c): queued under locks, run with none held ---- */
enum vbi_cb_kind { VBI_CB_MSG, VBI_CB_GAP, VBI_CB_ACK, VBI_CB_END };
struct vbi_cb {
	enum vbi_cb_kind kind;
	bool ack_req;              /* MSG, ORDERED: the publisher asked for an ACK */
	struct vb_sub *sub;        /* MSG, GAP */
	struct vbi_rxs *r;         /* MSG, ORDERED: acknowledged after the callback */
	struct vb_pub *pub;        /* ACK */
	vb_msg_t msg;              /* MSG: data points into the receive buffer ... */
	void *owned;               /* ... or here (a reassembled message), freed after */
	struct { uint32_t session; uint64_t lost, next; } gap;
	struct { uint32_t session; uint32_t reason; uint64_t last; } end; /* END */
	uint64_t acked;            /* ACK */
};
struct vbi_zombie { struct vbi_zombie *next; void *obj; void (*free)(void *); };
struct vbi_ev;
void vbi_cb_init(struct vb_ctx *ctx);
void vbi_cb_fini(struct vb_ctx *ctx);
/* Queue (progress thread, node lock held): 0 or -ENOMEM (then the caller
 * runs nothing: counted as dropped by it). */
int vbi_cb_queue_msg(struct vb_sub *sub, struct vbi_rxs *r, const vb_msg_t *m, void *owned,
		     bool ack_req);
int vbi_cb_queue_gap(struct vb_sub *sub, uint32_t session, uint64_t lost, uint64_t next);
int vbi_cb_queue_ack(struct vb_pub *pub, uint64_t acked);
int vbi_cb_queue_end(struct vb_sub *sub, uint32_t session, uint32_t reason, uint64_t last);
/* Room for @more entries, made before a received SEND is dispatched so
 * that queuing its deliveries cannot fail in the dispatch (progress
 * thread). 0 or -ENOMEM. At most 2 entries per 4 bytes of frames (a
 * record and a gap): VBI_CB_FOR_BYTES (engine/lane.h); a datagram's walk
 * reserves 2 before each delivery (vbi_sub_datagram). Upcall cb_reserve. */
int vbi_cb_reserve(struct vb_ctx *ctx, size_t more);
/* Run what is queued, and the events: the progress thread, no lock held. */
void vbi_cb_flush(struct vb_ctx *ctx);
/* True on the thread running @ctx's callbacks (inside one of them). */
bool vbi_in_callback(const struct vb_ctx *ctx);
/* Destroy from a callback: @fn(@obj) runs at the flush's end. 0/-ENOMEM. */
int vbi_cb_defer_free(struct vb_ctx *ctx, void *obj, void (*fn)(void *));
/* Until *@pending is 0 (callbacks queued for an object; another thread). */
void vbi_cb_wait_idle(atomic_uint *pending);
/* sub.c, from the flush: message @seq of @r was delivered: ACK owed. */
void vbi_sub_delivered(struct vbi_rxs *r, uint64_t seq, bool ack_req);

/* upcalls.c: the table vbi_ctx_open() sets ctx->up to (engine/upcalls.h) */
extern const struct vbi_upcalls vbi_proto_upcalls;
/* ctx.c */
bool vbi_ctx_take_peer(struct vb_ctx *ctx); /* false at max_peers */
void vbi_ctx_put_peer(struct vb_ctx *ctx);

/* lane_hello.c: HELLO (the lanes, failover and the maintenance thread are
 * the engine's: engine/lane.h) */
void vbi_lane_send_hello(struct vbi_lane *l);
void vbi_lane_on_hello(struct vbi_lane *l, const struct vbi_wire_hdr *h, const uint8_t *pl);
/* Refuse the connection on accepted lane @l (its HELLO was valid but we
 * cannot take it): a BYE carrying @why instead of our HELLO, then it is
 * dropped. node->lock held for writing; the lane's memory is committed. */
void vbi_lane_refuse(struct vbi_lane *l, const char *why);
/* @p's UD endpoint (HELLO, UDADDR): its address handle is rebuilt on the
 * device of ours; progress context. */
void vbi_peer_set_ud(struct vbi_peer *p, uint32_t qpn, uint32_t qkey, const uint8_t *gid);
/* A UDADDR frame (our UD endpoint's address) into @buf, which has room for
 * VBI_WIRE_HDR_LEN + VBI_UDADDR_LEN bytes; returns its length. Any thread. */
uint32_t vbi_udaddr_frame(struct vb_ctx *ctx, uint8_t *buf);
/* A UDADDR frame from @p (its FANOUT endpoint moved); progress context. */
void vbi_peer_on_udaddr(struct vbi_peer *p, const struct vbi_wire_hdr *h, const uint8_t *pl);

/* node.c */
struct vbi_peer *vbi_peer_alloc(struct vb_node *node);
void vbi_peer_free(struct vbi_peer *p);
/* peer_frames.c */
int vbi_peer_send_subs(struct vbi_peer *p, struct vb_sub *only);
uint32_t vbi_peer_build_acks(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
			     struct vbi_rxs **upto);
/* The ACK-carrying SEND built by vbi_peer_build_acks() (the streams before
 * @upto) counted in acks_sent and naks_sent before it is posted (@dir 1),
 * or taken back when the post failed (@dir -1): a vb_ctx_stats() snapshot
 * taken once the peer has applied the ACK includes it. txlock held. */
void vbi_peer_acks_count(struct vbi_peer *p, struct vbi_rxs *upto, int dir);
void vbi_peer_acks_sent(struct vbi_peer *p, struct vbi_lane *l, struct vbi_rxs *upto);
/* A lane switch this end starts (vbi_peer_activate, tell): one SEND on @l
 * with an ACK of every stream from @p (urgent: the ACKs in flight on the
 * old lane are lost), then @tail (the LANE frame). The peer applies the
 * ACKs before the LANE frame rewinds its cursors, so it resends only what
 * this end lacks. ACKs that do not fit stay owed (urgent). Progress
 * context, p->txlock held, and node->lock (read) or an RCU read-side
 * section (upcall peer_send_switch).
 * Returns vbi_lane_send_ctrl()'s result, -EMSGSIZE when @tail does not
 * fit the lane's SEND. */
int vbi_peer_send_switch(struct vbi_peer *p, struct vbi_lane *l, const void *tail,
			 uint32_t tail_len);
/* Whether a DATA SEND to @p on @l carries the ACKs and credits owed now
 * (core/stream.h vbi_ack_rides: coalesced on RC). txlock held. */
bool vbi_peer_acks_ride(struct vbi_peer *p, struct vbi_lane *l);
/* Build the ACKs @p owes into @buf (@cap bytes, at most @l's max_send),
 * send them on @l and mark them sent: 0 (*@more, when not NULL: some did
 * not fit), -ENODATA (nothing owed) or vbi_lane_send_ctrl()'s error
 * (nothing marked: they are built again next time). txlock held. */
int vbi_peer_send_acks(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
		       bool *more);
void vbi_dispatch_frames(struct vb_ctx *ctx, struct vbi_lane *l, const uint8_t *buf, uint32_t len);
/* The per-peer round's standalone ACK, when one is due (upcall peer_acks). */
void vbi_peer_acks_due(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
		       bool idle);
void vbi_peer_failed(struct vbi_peer *peer, const char *why);
void vbi_node_backup_step(struct vb_node *node);
/* Maintenance thread: free the peers given up or closed (node.c). */
void vbi_node_reap(struct vb_node *node);
/* Maintenance thread: drop accepted connections with no HELLO for cm_timeout_ms. */
void vbi_node_pending_expire(struct vb_node *node);
/* Listener @idx of @node ([0] RC on the primary device, [1] RC on the
 * standby device, [2] UC and [3] UD on the primary device) on @ip:@port
 * (0: any): 0 or a negative errno (node set-up, before the conductor
 * starts). */
int vbi_node_listen(struct vb_node *node, unsigned idx, const char *ip, uint16_t port);
/* sub.c, node->lock held for writing: unlink every ORDERED stream from
 * @p, onto *@gone (through gone_next), to be freed by
 * vbi_sub_free_streams() after an RCU grace period (the per-peer round
 * walks them with no node->lock). */
void vbi_sub_drop_peer(struct vb_node *node, struct vbi_peer *p, struct vbi_rxs **gone);
void vbi_sub_free_streams(struct vbi_rxs *gone);
/* pub_fanout.c: send FANOUT message @m: 0 (the caller's reference to @m is
 * taken), or -EAGAIN (back-pressure), -ENODEV, another negative errno (the
 * caller keeps its reference). Any thread; takes ud_lock, then pub->lock. */
int vbi_fanout_send(struct vb_pub *pub, struct vbi_msg **mp, uint64_t *seq_out);

/* pub_frame.c, pub_ordered.c (ORDERED), pub_fanout.c (FANOUT), pub.c */
void vbi_peer_flush(struct vbi_peer *peer);
/* The cork (vbi_pub_commit, and vbi_peer_flush after a burst): true when
 * @p's queued data is left behind the signaled SEND in flight on its lane
 * @l; false when none is (post it now). It sets @p->tx_pending, then
 * @p->corked, then looks at the count again; the progress thread clears
 * the count before it looks at the flag (all seq_cst): either this sees
 * the SEND completed, or the progress round that reaped it sees the flag
 * and flushes (vbi_peer_after_poll). Any thread, inside an RCU read-side
 * section (@l). */
static inline bool vbi_peer_cork(struct vbi_peer *p, struct vbi_lane *l)
{
	if (!atomic_load(&l->sr.sig_inflight))
		return false;
	atomic_store(&p->tx_pending, true);
	atomic_store(&p->corked, true);
	return atomic_load(&l->sr.sig_inflight) != 0;
}
void vbi_pub_on_ack(struct vb_node *node, struct vbi_peer *peer, const struct vbi_wire_hdr *h);
void vbi_pub_on_nak(struct vb_node *node, struct vbi_peer *peer, const struct vbi_wire_hdr *h);
uint64_t vbi_pub_rto_peer(struct vbi_peer *peer, uint64_t now_ns, uint64_t rto_ns);
void vbi_pub_attach(struct vb_pub *pub, struct vbi_peer *peer);
void vbi_pub_detach_peer(struct vbi_peer *peer);
void vbi_pub_drop_peer(struct vb_pub *pub, struct vbi_peer *peer);
uint64_t vbi_pub_rewind_peer(struct vbi_peer *peer);
void vbi_pub_heartbeats(struct vb_ctx *ctx, uint64_t now_ms);
void vbi_pub_fanout_flush(struct vb_ctx *ctx, bool idle);
/* pub_fanout.c: before a FANOUT publisher goes, post what it batched (what
 * finds no room within a second is counted lost). Application thread. */
void vbi_pub_fanout_close(struct vb_pub *pub);
/* Progress thread, no lock held: VB_SLOW_CUT publishers cut subscribers
 * stalled for their slow_sub_ms and send the END frames owed (every 10 ms). */
void vbi_pub_slow_check(struct vb_ctx *ctx, uint64_t now_ns); /* now_ns: vbi_now_ns() */

int vbi_check_topic(const char *topic);

/* mcast_pub.c: a FANOUT publisher's multicast group (the engine's part:
 * engine/mcast.h) */
void vbi_mcast_pub_open(struct vb_pub *pub);
void vbi_mcast_pub_close(struct vb_pub *pub);
bool vbi_mcast_peer_joined(struct vb_pub *pub, struct vbi_peer *peer);
const struct vbt_mcast *vbi_mcast_pub_group(struct vb_pub *pub);

/* sub.c */
struct vb_sub *vbi_sub_find(struct vb_node *node, uint32_t topic_id);
void vbi_sub_data(struct vb_sub *sub, struct vbi_peer *peer, const struct vbi_wire_hdr *h,
		  const void *payload);
/* One datagram's frames to the FANOUT subscribers (upcall datagram). */
void vbi_sub_datagram(struct vb_ctx *ctx, const uint8_t *buf, uint32_t len);
void vbi_sub_peer_lane_changed(struct vb_node *node, struct vbi_peer *peer);
void vbi_sub_peer_ack_all(struct vb_node *node, struct vbi_peer *peer);
/* An END frame from @peer (a publisher cut our stream); progress context,
 * an RCU read-side section (no node->lock). */
void vbi_sub_on_end(struct vbi_peer *peer, const struct vbi_wire_hdr *h);

/* ---- what the public functions call (api/src: the facade) ----------------
 * The facade has checked the arguments (non-NULL handles, initialized and
 * versioned attribute structs, topic and class); these return 0 or a
 * negative errno with vbi_errmsg() set, as the vb_* function they serve
 * documents in verbus.h. Thread-safety and ownership: as there. */
/* ctx.c: open everything vb_ctx_create() promises (@attr complete and
 * checked); close it all (not from a callback: -EDEADLK; nodes left: -EBUSY) */
int vbi_ctx_open(const vb_ctx_attr_t *attr, struct vb_ctx **out);
int vbi_ctx_close(struct vb_ctx *ctx);
/* The whole current vb_stats_t (vb_ctx_stats_size copies out a prefix). */
void vbi_ctx_stats(struct vb_ctx *ctx, vb_stats_t *st);
/* vbi_progress_app (VB_PROGRESS_APP: vb_progress()) is the engine's:
 * engine/progress.h */
/* node.c */
int vbi_node_create(struct vb_ctx *ctx, const vb_node_attr_t *attr, struct vb_node **out);
int vbi_node_destroy(struct vb_node *node); /* not from a callback (the facade checks) */
/* An IPv4 or IPv6 address string and a port: 0 or -EINVAL. */
int vbi_make_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss);
/* Connect to @addr, wait for the handshake; @alt (NULL: none) is where the
 * maintenance thread goes when this peer is given up. */
int vbi_node_connect_addr(struct vb_node *node, const struct sockaddr_storage *addr,
			  const struct sockaddr_storage *alt);
/* @a, or @b when @a cannot be reached (each the other's alternative). */
int vbi_node_connect_backup(struct vb_node *node, const struct sockaddr_storage *a,
			    const struct sockaddr_storage *b);
/* node_diag.c */
int vbi_node_inject_fault(struct vb_node *node, const char *peer, vb_fault_t fault);
int vbi_node_peer_mode(struct vb_node *node, const char *peer);
int vbi_node_dump(struct vb_node *node, FILE *f);
/* pub.c (@attr complete and checked) */
int vbi_pub_create(struct vb_node *node, const char *topic, vb_class_t cls,
		   const vb_pub_attr_t *attr, struct vb_pub **out);
int vbi_pub_destroy(struct vb_pub *pub);
int vbi_pub_claim(struct vb_pub *pub, size_t len, vb_claim_t *claim);
/* @claim is @pub's (the facade checked its owner and length). */
int vbi_pub_commit(struct vb_pub *pub, vb_claim_t *claim, size_t len, uint64_t *seq_out);
int vbi_publish(struct vb_pub *pub, const void *data, size_t len, uint64_t *seq);
int vbi_pub_wait_acked(struct vb_pub *pub, uint64_t seq, int timeout_ms);
int vbi_pub_subscribers(struct vb_pub *pub);
/* sub.c (@attr complete: on_msg set) */
int vbi_sub_create(struct vb_node *node, const char *topic, vb_class_t cls,
		   const vb_sub_attr_t *attr, struct vb_sub **out);
int vbi_sub_destroy(struct vb_sub *sub);

#endif
