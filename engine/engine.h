/* SPDX-License-Identifier: MIT */
/*
 * The objects the library runs on, below the protocol: a context's device
 * resources (vbi_devres), its lanes (vbi_lane: one connection, with its QP,
 * receive slots, send ring and credits), the peers they connect to
 * (vbi_peer), the nodes (vb_node) and the context itself (vb_ctx). The
 * protocol's own objects (publishers, subscribers, their cursors and
 * streams, the callback queue) are proto/proto.h's; these hold pointers to
 * them, never their contents. Who owns which field (thread or lock) is in
 * each comment and in docs/architecture.md, "Who owns which state"; the
 * object and lock map is at the top of proto/proto.h.
 *
 * The public header's types (attributes, statistics, events) are the
 * contract these objects implement: the layer check lets engine/ include
 * it, not below; its functions are the facade's.
 */
#ifndef VERBUS_ENGINE_ENGINE_H
#define VERBUS_ENGINE_ENGINE_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <verbus/verbus.h>

#include "core/err.h"
#include "core/errpolicy.h"
#include "core/llist.h"
#include "core/lock.h"
#include "core/mempool.h"
#include "core/path.h"
#include "core/sizing.h"
#include "core/wire.h"
#include "core/wire_msg.h" /* VBI_WIRE_NAME_MAX, VBI_WIRE_REFUSE_MAX */
#include "engine/counters.h"
#include "engine/qpool.h"
#include "engine/sring.h"
#include "transport/transport.h"

#define VBI_NAME_MAX VBI_WIRE_NAME_MAX
/* bytes of reason a refusal (BYE before HELLO) carries */
#define VBI_REFUSE_MAX VBI_WIRE_REFUSE_MAX
/* The longest peer authentication key (vb_ctx_attr_t.auth_key; proto/auth.c) */
#define VBI_AUTH_KEY_MAX 256

struct vbi_peer;
struct vbi_lane;
struct vbi_devres;
struct vb_pub;
struct vb_sub;
/* the protocol's, pointed to from here (proto/) */
struct vbi_lane_auth;
struct vbi_pubpeer;
struct vbi_rxs;
struct vbi_rsub;
struct vbi_mcast_ctx;
struct vbi_cb;
struct vbi_zombie;
struct vbi_ev; /* engine/events.c */
struct vbi_upcalls; /* engine/upcalls.h */

/* The most peers a context accepts (vb_ctx_attr_t.max_peers): every
 * per-publish or per-round array of peers is this long. */
#define VBI_MAX_PEERS 1024u
/* How often a progress round runs the slow-subscriber check (upcall
 * slow_check: vbi_pub_slow_check). */
#define VBI_SLOW_CHECK_NS 10000000ull
/* The largest SEND built in a lane's tx_hot (struct vbi_lane). */
#define VBI_TX_HOT 256u

/* One RDMA device the context uses: the primary, and optionally a second
 * one for standby lanes (vb_ctx_attr_t.standby_ip / standby_device). */
struct vbi_devres {
	struct vb_ctx *ctx;
	unsigned idx;            /* 0 primary, 1 standby device */
	struct vbt_dev *dev;
	struct vbt_pd *pd;
	struct vbi_mempool *pool;
	struct vbt_cq *cq;
	struct vbi_qpool *qpool; /* the lanes' pre-warmed, recycled QPs (lanepool.c) */
	atomic_bool fatal;       /* DEVICE_FATAL: nothing on it completes any more */
	/* Polls of @cq that emptied it (the poller's: the progress thread,
	 * or vb_progress()). A lane whose QP went to RESET waits for a sweep
	 * begun after that: the completions it had made before are consumed
	 * by then (vbi_lane_retire_drained). */
	atomic_uint_fast64_t cq_sweeps;
	atomic_bool port_down;   /* PORT_ERR seen, no PORT_ACTIVE since */
	atomic_bool failed;      /* a port/device event failed every lane on it:
				  * the progress thread fails them over */
	/* Hot removal (rdma link delete, unplug; docs/recovery.md section 6):
	 * @removed is set with @fatal by the event thread; from then on no
	 * lane is created on the device, and once none is left (@nlanes) and
	 * no listener is bound to it (@nlisteners), the progress thread
	 * closes everything on it (@closed), so the kernel can finish. */
	atomic_bool removed;
	atomic_int nlanes;       /* lanes whose QP is on this device */
	atomic_int nlisteners;   /* node listeners bound to this device */
	bool closed;             /* progress thread: all objects on it closed */
	bool ud_closed;          /* the UD endpoint (FANOUT) moved off it, or closed */
	bool mc_warned;
	uint64_t removed_ns;
	uint64_t wait_log_ns;     /* progress: last 'still waiting' message */
	char name[64];           /* the device's name (dev is NULL once closed) */
};

/* Lane roles (HELLO): what a new connection is for. */
enum vbi_lane_role {
	VBI_LANE_PRIMARY = 0,    /* the first connection between two nodes */
	VBI_LANE_STANDBY = 1,    /* pre-warmed in RTS, takes over on a failure */
	VBI_LANE_REPLACE = 2,    /* built after a failure with no standby left */
	VBI_LANE_PROBE = 3,      /* degraded path: an RC lane probing whether RC works
				  * again; promoted to active when the policy says so */
};

/* A new peer's primary lane being connected by the conductor (vbi_peer.setup). */
enum vbi_setup {
	VBI_SETUP_NONE = 0,       /* not the conductor's (connected on its own thread) */
	VBI_SETUP_QUEUED,         /* handed to the conductor (node->connects) */
	VBI_SETUP_CONNECTING,     /* the conductor is connecting it */
	VBI_SETUP_CONNECTED,      /* its HELLO went: the lane is the handing thread's again */
	VBI_SETUP_FAILED,         /* the lane is gone, the peer dead (setup_rc, setup_err) */
};

/*
 * A lane's life, one way only (vbi_lane_life_raise): every thread reads
 * it, any thread may raise it, none lowers it.
 *   LIVE      posts go to it
 *   RETIRING  failed or replaced, and handed to the conductor for
 *             retirement (once): no more posts (vbi_lane_retire, and
 *             maint_retire for a pending lane that failed)
 *   DRAINING  its QP was moved to ERR: the flushes are expected
 *             (maint_retire, vbi_lane_retire_start; vbi_lane_destroy_now
 *             goes there from either state before)
 */
enum vbi_lane_life {
	VBI_LANE_LIVE = 0, /* a new lane is zeroed */
	VBI_LANE_RETIRING,
	VBI_LANE_DRAINING,
};

/*
 * A lane: one connection between two nodes (QP, CM state, receive
 * slots, a send ring, credits). A peer has one active lane (published
 * through its core/path, RCU-protected), at most one standby, and lanes
 * being retired. Lanes pair up 1:1 with the remote's (one connection);
 * the connecting side numbers them (@id, increasing).
 * A lane has a mode: RC normally; UC or UD when the path is degraded
 * (lane_failover.c, "degradation"): those carry ORDERED data with software
 * reliability on top (go-back-N on NAK, a retransmission timeout, credit
 * resynchronisation), see docs/recovery.md.
 * Everything except the atomics is under *@lk: the peer's txlock once the
 * lane is bound to a peer, its own lock before (an accepted connection
 * whose HELLO has not arrived yet).
 */
struct vbi_lane {
	struct vbi_lane *next;   /* peer->lanes, node->pending or node->retire */
	struct vb_node *node;
	struct vbi_peer *peer;   /* NULL until bound */
	vbi_mutex_t *lk;
	vbi_mutex_t own_lock;
	struct vbi_devres *dr;
	struct vbt_qp *qp;
	struct vbt_conn *conn;
	uint32_t id;             /* connector-assigned lane number */
	uint8_t role;            /* enum vbi_lane_role */
	uint8_t mode;            /* enum vb_qp_type: RC, or UC/UD when degraded */
	uint32_t max_send;       /* largest SEND / datagram payload we may post */
	atomic_bool conn_ready;  /* @conn is set (UD sends need its address) */
	atomic_bool hello_deferred; /* our HELLO waits for conn_ready (UD, accepted) */
	uint64_t last_returned;  /* unreliable: returned_total at the last check ... */
	uint64_t credit_ns;      /* ... and when it last moved (credit resync) */
	uint32_t epoch;          /* path epoch it was published with */
	_Atomic uint8_t life;    /* enum vbi_lane_life: any thread reads and raises it */
	atomic_bool rx_lost;     /* a received SEND could not be dispatched (no
				  * memory to queue its deliveries): nothing
				  * later on it is, the lane fails over and the
				  * peer sends again what we did not acknowledge
				  * (progress thread) */
	atomic_bool in_setup;    /* the thread accepting or connecting it still
				  * uses it (the peer's HELLO can bind it before
				  * that returns): maint_retire leaves it alone */
	atomic_bool hello_rcvd;
	atomic_bool hello_claim; /* our HELLO is being / was sent (once) */
	atomic_int fail_act;     /* worst disruptive enum vbi_err_action reported
				  * by completions/events, not yet handled (0 none) */
	_Atomic(const char *) fail_why; /* reason of the first one (static) */

	struct vbi_sring sr;
	/* Where a lone small SEND is built (frame_batch), under *lk as the
	 * ring: it goes inline (the post copies it into the work request), so
	 * it needs no registered buffer, and this one stays in the caches and
	 * the TLB where the ring's buffers are a new page each SEND (struct
	 * vbi_slot says what that costs). */
	uint8_t tx_hot[VBI_TX_HOT];
	/* A SEND with frames came in since our last post (set by the
	 * progress thread before the callbacks run, cleared by the next
	 * post under *lk): that post answers it, and goes unsignaled
	 * (vbi_lane_post). Relaxed: a hint; a stale read costs one
	 * completion more or one cork fewer, never a stall. */
	atomic_bool rx_since_post;
	/* The stream a compact BATCH continues (core/wire.h), RC only: what
	 * the last BATCH we posted here carried (under *lk, as the posts),
	 * and what the last one we received did (progress thread). */
	struct vbi_wire_bctx tx_bctx, rx_bctx;
	/* Credits. sends_total is written by the posters (under *lk), read
	 * by the progress thread without it (on_ack); returned_total is
	 * written by the progress thread alone (ACKs, the credit resync), no
	 * lock, and read by the posters; to_return is added to by the progress
	 * thread (a slot reposted, no lock) and taken down by whoever sends it
	 * back in an ACK (under *lk). Relaxed: a poster that reads a stale
	 * returned_total sees fewer credits, and the progress thread's next
	 * round flushes what that left. */
	_Atomic uint64_t sends_total;    /* SENDs posted (each consumes a remote slot) */
	_Atomic uint64_t returned_total; /* slots the remote gave back */
	uint32_t remote_slots;   /* from HELLO */
	atomic_uint to_return;   /* slots reposted, not yet returned in an ACK */
	uint32_t credits_built;  /* to_return in the ACKs built, not yet sent
				  * (vbi_peer_build_acks -> vbi_peer_acks_sent) */
	uint64_t ka_sends;       /* keepalive: sends_total when last looked at */
	uint64_t ka_ms;          /* ... and when (coarse ms) */

	struct vbi_slot *slots;  /* the progress context's */
	uint32_t nslots;
	atomic_uint posted_recvs; /* outstanding receive WRs */
	/* Receive slots consumed and not yet posted again (progress context):
	 * they go back in one list, off the delivery's path, once
	 * vbi_repost_batch() wait or at the next timed or idle per-peer round
	 * (vbi_lane_repost_held). Neither posted nor returned as credits
	 * meanwhile. */
	struct vbi_slot *held[VBI_REPOST_BATCH];
	uint32_t nheld;
	uint64_t created_ns;
	/* A newer standby's HELLO replaced it (hello_lane_up), 0: not. The
	 * peer may have switched to it (a LANE on its way, racing that HELLO
	 * on another connection): kept for VBI_REPLACED_KEEP_NS, then retired
	 * (maint_peer) unless it became the active lane. Under the peer's
	 * txlock. */
	uint64_t replaced_ns;
	uint64_t accepted_ns;    /* accepted, waiting for the HELLO (node->pending) */
	uint64_t refused_ns;     /* refused (vbi_lane_refuse): dropped after its BYE */
	bool lean;               /* accepted, HELLO not yet valid: VBI_LEAN_SLOTS slots
				  * posted, no send ring (vbi_lane_commit) */
	uint64_t rx_count;       /* receives (progress context): test loss injection */
	/* its retirement in steps (vbi_lane_retire_start): the retiring
	 * thread's (the conductor's, for node->drain) */
	struct vbi_lane *drain_next; /* node->drain */
	uint64_t retire_ns;      /* when it began (0: not begun) */
	uint64_t retire_sweep;   /* its QP in RESET: the dr->cq_sweeps count to reach
				  * before it is freed (0: not yet) */
	bool retire_reuse;       /* drained without error: its QP goes back to the pool */
	/* handshake authentication (proto/auth.c): allocated with the lane, in
	 * the same block (vbi_lane_new) */
	struct vbi_lane_auth *auth;
};

/* A path event recorded under txlock, reported after it is dropped. */
struct vbi_pev {
	uint8_t type;            /* enum vbi_path_ev_type */
	uint8_t from, to;        /* DEGRADE / PROMOTE: lane modes */
	uint64_t outage_ns;
	const char *reason;
};

struct vbi_peer {
	struct vbi_peer *next;
	struct vb_node *node;
	char name[VBI_NAME_MAX];
	uint64_t uid;            /* the remote node's random id (HELLO) */
	bool connector;          /* we connected: we build its lanes */
	struct sockaddr_storage addr;    /* connector: where we connected */
	struct sockaddr_storage sb_addr; /* its standby listener (family 0: none) */
	struct sockaddr_storage alt_addr; /* connector: the backup node to connect to
					   * when this peer is given up (family 0:
					   * none; vb_node_connect_backup) */
	atomic_bool alt_pending;  /* given up: the maintenance thread connects to
				   * alt_addr */

	struct vbi_path path;    /* active lane (RCU), standby, failover policy */
	struct vbi_lane *lanes;  /* every lane bound to the peer (txlock) */
	uint32_t next_lane_id;   /* connector: id of the next lane */
	uint32_t rx_lane_id;     /* data from lanes numbered below is stale
				  * (progress context) */
	uint64_t recover_since_ns; /* recovering with no lane since (0: not) */
	/* The active connection failed (fail_watch) when last_rx_ns was
	 * rx_ns_at_fail: the peer was heard from since iff last_rx_ns moved
	 * (txlock; the maintenance thread reads them for the dead-peer rule) */
	bool fail_watch;
	uint64_t rx_ns_at_fail;
	/* when it last returned receive credits (an ACK with some): its
	 * process is alive and consuming, whatever it acknowledges (a large
	 * message arrives fragment by fragment); the slow-subscriber check
	 * restarts its clocks from it. Progress thread writes, atomic. */
	atomic_uint_fast64_t credit_rx_ns;
	char refused[VBI_REFUSE_MAX + 1]; /* connector: the node refused us, why (txlock) */
	unsigned warm_failures;  /* connector: consecutive lane-building failures
				  * (maintenance thread only) */
	uint64_t warm_after_ns;  /* ... next attempt not before */
	/* connector: the lane whose connection is being set up, in steps
	 * (bound, in_setup), its role and the deadline of the attempt
	 * (conductor thread only) */
	struct vbi_lane *building;
	uint8_t build_role;
	uint64_t build_deadline_ns;
	/* a new peer's primary lane, connected by the conductor
	 * (vbi_maint_connect, vbi_maint_connect_queue): where it stands
	 * (enum vbi_setup, release/acquire), and once VBI_SETUP_FAILED the
	 * error (written before the state). setup_lane and connect_node: the
	 * conductor's connect queue (node->connects): written by the thread
	 * that queues it, read by the conductor once it took the node. */
	atomic_int setup;
	int setup_rc;
	char setup_err[VBI_ERRMSG_MAX];
	struct vbi_lane *setup_lane;
	struct vbi_llnode connect_node;
	uint8_t mode;            /* mode of the last active lane (enum vb_qp_type) */
	/* its last lane failure: the reason (static), the recovery action
	 * (enum vbi_err_action), the lane, when (vbi_mono_ns; 0: none). txlock
	 * (lane_failover.c writes, the stat thread reads) */
	const char *last_fail_why;
	uint8_t last_fail_act;
	uint32_t last_fail_lane;
	uint64_t last_fail_ns;
	atomic_uint_fast64_t retransmits; /* messages resent to it: after a lane
					   * switch, a NAK or a timeout */
	bool rx_unreliable;      /* DATA currently arrives on a UC/UD lane (progress) */
	struct vbi_lane *probe;  /* connector, degraded: the RC probe lane (txlock) */
	uint64_t probe_ns;       /* last probe reported (maintenance thread) */
	uint16_t uc_port, ud_port; /* its UC / UD listeners (HELLO; 0: none) */
	struct vbi_pev pev[8];   /* path events to report (txlock) */
	unsigned npev;

	/* state flags: read without locks from several threads */
	atomic_bool up;          /* first HELLO received */
	atomic_bool dead;        /* given up (no lane can be had) or closed */
	atomic_bool closing;
	atomic_bool remote_closed; /* the peer said BYE */

	vbi_mutex_t txlock;
	uint32_t remote_slot_size;
	struct vbi_pubpeer *pubs; /* ORDERED publishers this peer subscribes to */
	struct vbi_pubpeer *rr;   /* round-robin cursor */
	atomic_bool corked;       /* data queued behind a SEND in flight: the
				   * progress thread flushes it when that SEND
				   * completes (vbi_peer_after_poll) */
	atomic_bool tx_pending;   /* hint: ORDERED data may wait to be framed.
				   * Set (seq_cst) after whatever makes data
				   * sendable: a push (vb_pub_commit), a rewind
				   * (lane switch, NAK, RTO); cleared by
				   * vbi_peer_flush (txlock) before it looks,
				   * and set again when it stops with data
				   * left. The per-peer round skips the flush
				   * while it is clear, except in its full
				   * (kicked or timed) rounds */
	atomic_bool subs_pending; /* our SUBs still to be (re)sent */
	atomic_bool ud_announce;  /* our UD endpoint moved: send it a UDADDR frame */
	atomic_bool ack_all;      /* a lane switch: acknowledge every stream from
				   * it again (progress thread, after_poll) */
	atomic_bool ack_due;      /* hint: a standalone ACK may be due before the
				   * next timed round (an urgent ACK or a NAK
				   * owed, or VBI_ACK_ALONE_AFTER deliveries
				   * unacknowledged). Set (relaxed) under txlock
				   * with what makes it due, cleared when the
				   * ACKs are sent; the round for completions
				   * alone skips the peer while it and the
				   * other hints are clear (vbi_peer_after_poll) */

	/* receive side: dirty and delivered_since_ack are under txlock,
	 * because any SEND to this peer may carry the ACKs */
	struct vbi_rxs *dirty;   /* streams with acknowledgements to send */
	uint64_t delivered_since_ack;
	uint64_t ack_owed_ns;    /* when dirty last became non-empty (vbi_now_ns:
				  * vbi_ack_rides, vbi_ack_alone) */
	_Atomic uint64_t last_rx_ns; /* when data last arrived, vbi_now_ns (idle ACK timer,
				      * dead-peer rule): written by the progress
				      * thread, no lock; relaxed */

	/* the remote node */
	struct vbt_peer ud;      /* its UD endpoint (qpn, qkey, gid) (FANOUT) */
	struct vbt_ah *ah;       /* towards its UD QP */
	struct vbi_rsub *rsubs;  /* its subscriptions (node->lock) */

	/* protocol rules (auth.c; progress context) */
	uint32_t max_lane_id;    /* accepting side: highest lane number it announced */
	uint32_t lane_epoch_rx;  /* highest epoch of its LANE frames (they only grow) */
};

struct vb_node {
	struct vb_node *next;
	struct vb_ctx *ctx;
	char name[VBI_NAME_MAX];
	uint64_t uid;              /* random: lets a peer match our lanes */
	pthread_rwlock_t lock;
	struct vbi_peer *peers;
	struct vbi_lane *pending;  /* accepted lanes waiting for their HELLO (lock) */
	struct vb_pub *pubs;
	struct vb_sub *subs;
	unsigned npeers_up;
	/* Subscribers being destroyed now (vbi_sub_destroy: any thread). Off
	 * node->subs while they wait for their callbacks and final ACKs,
	 * their streams still point to peers, so vbi_node_reap (vb-maint)
	 * frees no peer meanwhile: it reaps in a later round. (vbi_pub_destroy
	 * needs no count: it drops its peer attachments in the same critical
	 * section as its unlink.) Read under node->lock held for writing. */
	atomic_uint closing_objs;

	/* listeners: [0] RC on the primary device, [1] RC on the standby
	 * device, [2] UC and [3] UD on the primary device (degraded lanes) */
	struct vbt_listener *listener[4];
	atomic_ushort lport[4];    /* their ports, 0 once closed (HELLO reads them) */
	struct vbi_accept *accept; /* the conductor's accept duty (accept.c;
				    * NULL: not listening) */
	struct vbi_switch *switches; /* switches to a backup node in progress
				      * (proto/node.c; conductor thread) */
	/* the conductor's connect queue: new peers whose primary lane it is
	 * to connect (vbi_maint_connect_queue, from any thread; taken by
	 * connects_take, conductor thread). Lock-free (core/llist.h). */
	struct vbi_llist connects;
	atomic_bool stop;
	uint16_t port;
	struct sockaddr_storage sb_listen; /* advertised in HELLO (family 0: none) */

	/* the conductor thread (maint.c, vb-maint): accepts, retires lanes,
	 * warms standbys, rebuilds, reaps */
	pthread_t maint_thread;
	bool maint_running;
	int wake_fd;               /* eventfd: vbi_maint_kick wakes it (-1: none) */
	int timer_fd;              /* timerfd: vbi_maint_kick_unless_quiet arms it
				    * for the quiet time's end (-1: none) */
	_Atomic uint64_t wake_at_ns; /* when timer_fd is armed for (CLOCK_MONOTONIC;
				    * 0: not armed, or fired and taken): any
				    * thread lowers it, the conductor clears it */
	struct pollfd *maint_pfd;  /* its poll set (conductor thread) */
	atomic_uint retiring;      /* lanes marked for retirement since the
				    * conductor's last round (vbi_lane_retire
				    * adds, maint_round clears): while not 0 the
				    * conductor does not sleep */
	struct vbi_lane *drain;    /* lanes it retires, waiting for their WRs to
				    * complete (conductor thread; maint_retire) */
};

struct vb_ctx {
	/* the protocol's functions the engine calls (engine/upcalls.h): set by
	 * vbi_ctx_open() first, never changed */
	const struct vbi_upcalls *up;
	vb_ctx_attr_t attr;
	const struct vbt_ops *ops;
	struct vbi_devres dr[2];   /* [0] primary; [1] standby device (ndev == 2) */
	unsigned ndev;
	/* aliases of dr[0] */
	struct vbt_dev *dev;
	struct vbt_pd *pd;
	struct vbi_mempool *pool;
	struct vbt_cq *cq;
	struct vbt_conn_param cp;
	struct vbi_sizing_out sz;
	uint32_t ud_mtu;           /* datagram payload bytes (path MTU) */
	struct vbi_errpol errpol;  /* every error completion / async event classified */
	atomic_bool fail_pending;  /* some lane or device failed: progress handles it */
	/* After a switch of connection (vbi_peer_activate: progress, or the
	 * conductor promoting a probe) the conductors leave the work that can
	 * wait until quiet_until_ns, so the switch and its retransmission
	 * have the CPU (maint.c, maint_quiet). quiet_ns:
	 * VERBUS_FAILOVER_QUIET_MS, set at create. */
	uint64_t quiet_ns;
	_Atomic uint64_t quiet_until_ns;
	/* What one ORDERED flush posts beyond a signaled SEND still in flight
	 * (vbi_peer_flush): VERBUS_FLUSH_BURST bytes, set at create; 0: no
	 * bound */
	uint64_t flush_burst;

	/* UD endpoint (FANOUT), on ud_dr (dr[0]; dr[1] after dr[0] was removed:
	 * dev_reap (progress.c) moves it, under ud_lock) */
	struct vbi_devres *_Atomic ud_dr;
	struct vbt_qp *ud_qp;
	struct vbt_peer ud_local;  /* its address (ud_addr_lock: a leaf lock) */
	pthread_mutex_t ud_addr_lock;
	pthread_mutex_t ud_lock;   /* posting on the UD QP */
	struct vbi_sring ud_sr;    /* ud_lock; its completions are marked by
				    * progress without it (vbi_sring_complete) */
	bool ud_reclaim_due;       /* progress: UD sends completed that no
				    * vbi_sring_reclaim has released yet */
	struct vbi_slot *ud_slots;
	uint32_t ud_nslots;
	uint32_t ud_sq_depth;      /* sizing's, at least max_peers + 2 (vb_ctx_create) */
	atomic_uint ud_posted;     /* receives posted (progress; read by vb_node_dump) */
	/* UD receive slots consumed, not yet posted again (progress): in one
	 * list at the start of the next round, or once enough wait
	 * (vbi_ud_repost_held); dropped by vbi_ud_teardown */
	struct vbi_slot *ud_held[VBI_REPOST_BATCH];
	uint32_t ud_nheld;
	bool mc_held; /* the multicast QP's likewise (mcast.c; progress): the
		       * round calls vbi_mcast_repost_held only then */

	/* progress */
	pthread_t thread;
	bool thread_running;
	atomic_bool stop;
	vbi_mutex_t progress_lock; /* APP mode: one thread at a time runs progress
					* (trylock only; the progress thread of
					* THREAD mode takes none) */
	/* APP mode, progress_lock (vbi_progress_app): empty vb_progress()
	 * calls (it yields on every 64th once idle for idle_spin_us), and
	 * whether the context is idle, since when (vbi_now_ns) */
	unsigned app_empty;
	bool app_idle;
	uint64_t app_idle_ns;

	uint64_t last_hb_ms;       /* progress: last heartbeat round */
	uint64_t hb_check_ns;      /* progress: last look at last_hb_ms (vbi_now_ns) */
	atomic_bool fanout_pending; /* a FANOUT publisher has datagrams to post:
				     * sealed, or a batch corked behind the
				     * datagram in flight (pub_fanout.c) */
	atomic_bool fanout_sealed;  /* ... and some are sealed (posted even with
				     * a datagram in flight) */
	atomic_bool ud_gone;        /* the UD endpoint's device went and no
				     * other took it (vbi_ud_move): FANOUT
				     * publishes fail with -ENODEV */
	bool cork;                  /* attr.batch: cork batching on */
	atomic_bool kick;           /* another thread left the peers work: the
				     * next progress round visits them */
	atomic_bool hellos_deferred; /* a lane's HELLO waits for its accept()
				      * (vbi_lane_send_hello): the full rounds
				      * look for it until it is sent */
	/* The progress thread about to block, or blocked, in its CQ wait
	 * (written by it; read by every thread that leaves it work, which
	 * then writes wake_fd: vbi_ctx_wake). Seq_cst on both sides: the
	 * thread sets it and then looks for work (kick, fail_pending); the
	 * other sets its flag and then reads this. */
	atomic_bool sleeping;
	int wake_fd;                /* eventfd in that wait (-1 before vb_ctx_create made it) */
	uint64_t after_poll_ns;     /* progress: last full per-peer round */
	bool peer_round_due;        /* progress: the last round polled
				     * completions; the next one begins with
				     * their per-peer round */
	/* Bumped (release) after a thread other than the progress thread has
	 * built objects that completions will point at, before their first
	 * post; the progress thread reads it (acquire) before dispatching.
	 * The device orders this for real; this makes it visible to TSan. */
	atomic_uint init_gen;

	struct vbi_mcast_ctx *mc;  /* FANOUT multicast (mcast.c); NULL when off */

	/* Callbacks, run with no verbus lock held (cbq.c). cbq, cbq_n/cap,
	 * cb_depth, cb_zombies: the thread running progress. evq: any thread
	 * adds (vbi_event), whoever runs the events takes (events.c); lock-free
	 * (core/llist.h), evq_n counts what it holds. */
	struct vbi_cb *cbq;
	unsigned cbq_n, cbq_cap, cb_depth;
	struct vbi_zombie *cb_zombies;
	struct vbi_llist evq;
	atomic_uint evq_n;

	pthread_mutex_t lock;      /* node list: its writers, ctx_stats, the counters file */
	/* linked with vbi_rcu_assign: the progress thread's rounds and the
	 * FANOUT delivery read it with no lock, in an RCU read-side section
	 * (vb_node_destroy waits a grace period before it frees a node) */
	struct vb_node *nodes;
	atomic_uint npeers;        /* vbi_ctx_take_peer / _put_peer (no lock: it is
				    * taken under node->lock, which ctx->lock precedes) */

	/* the counters (engine/counters.h): in the counters file when there
	 * is one (proto/statfile.c points this there before anything counts
	 * and back here after everything stopped), else st_own. Written by
	 * the counting threads, atomic. */
	struct vbi_ctx_counters *st;
	struct vbi_ctx_counters st_own;
	/* how long the state changes of its QPs took, on every device (each
	 * device's qp_timing is this; written by the modifying threads,
	 * atomic): in the counters file like st, else qp_timing_own */
	struct vbi_qp_timing *qp_timing;
	struct vbi_qp_timing qp_timing_own;
	struct vbi_statfile *statf; /* the counters file and its stat thread
				     * (proto/statfile.c); NULL: off */
	uint64_t slow_check_ns;    /* progress: last vbi_pub_slow_check() round (its
				    * upcall runs every VBI_SLOW_CHECK_NS) */
	atomic_bool dev_removing;  /* some device is removed and not yet closed */
	uint64_t reap_ns;          /* progress: last dev_reap try */
	uint8_t auth_key[VBI_AUTH_KEY_MAX]; /* peer authentication (auth.c) */
	size_t auth_key_len;       /* 0: no key */
};

/* Raise @l's life to @to (enum vbi_lane_life); a lane already there or
 * past it keeps its state. Any thread. Returns the state before. */
static inline enum vbi_lane_life vbi_lane_life_raise(struct vbi_lane *l, enum vbi_lane_life to)
{
	uint8_t cur = atomic_load(&l->life);

	while (cur < to && !atomic_compare_exchange_weak(&l->life, &cur, (uint8_t)to))
		;
	return (enum vbi_lane_life)cur;
}

/* No more posts to @l: it is retiring or draining. Any thread. */
static inline bool vbi_lane_dead(struct vbi_lane *l)
{
	return atomic_load(&l->life) != VBI_LANE_LIVE;
}

/* @l's QP was moved to ERR: its flushes are expected. Any thread. */
static inline bool vbi_lane_draining(struct vbi_lane *l)
{
	return atomic_load(&l->life) == VBI_LANE_DRAINING;
}

/* Inside rcu read lock or txlock: the active lane if it can be posted to. */
static inline struct vbi_lane *vbi_peer_lane(struct vbi_peer *p)
{
	struct vbi_lane *l = vbi_path_lane(&p->path);

	return l && atomic_load_explicit(&l->life, memory_order_relaxed) == VBI_LANE_LIVE ? l :
	       NULL;
}

#endif
