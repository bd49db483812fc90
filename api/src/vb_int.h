/* SPDX-License-Identifier: MIT */
/*
 * Internals of the pub/sub layer (the api/src C files only).
 *
 * Objects and who touches them:
 *   vb_ctx     device, PD, registered pool, one CQ for every QP, the UD
 *              endpoint (FANOUT), the progress engine.
 *   vb_node    listeners + up to 4 accept threads, the maintenance
 *              thread, its peers, publishers, subscribers. node->lock
 *              (rwlock) guards the lists; the progress thread takes it
 *              for reading in each per-peer round and per receive.
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
 *              it has been unlinked under node->lock held for writing).
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
 * lock of the node's held (cbq.c); evq_lock is a leaf.
 */
#ifndef VERBUS_API_VB_INT_H
#define VERBUS_API_VB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <verbus/verbus.h>

#include <sys/socket.h>

#include "core/errpolicy.h"
#include "core/mempool.h"
#include "core/path.h"
#include "core/sizing.h"
#include "core/stream.h"
#include "core/wire.h"
#include "core/wire_msg.h"
#include "engine/qpool.h"
#include "engine/sring.h"
#include "transport/transport.h"
#include "api/src/auth.h"

#define VBI_TOPIC_MAX VBI_WIRE_TOPIC_MAX
#define VBI_NAME_MAX VBI_WIRE_NAME_MAX
/* bytes of reason a refusal (BYE before HELLO) carries */
#define VBI_REFUSE_MAX VBI_WIRE_REFUSE_MAX
/* 2: lanes (node uid, lane id, role, standby address);
 * 3: + lane mode, UC/UD listener ports (degradation) */
#define VBI_HELLO_VERSION VBI_WIRE_HELLO_VERSION
#define VBI_RTO_MS_DEFAULT 100 /* unreliable lanes: retransmission timeout [VERBUS_RTO_MS] */
#define VBI_NAK_RETRY_MS 20    /* a NAK for the same hole is repeated at most this often */
#define VBI_UD_GRH VBI_WIRE_UD_GRH
#define VBI_MAX_STREAMS_PER_SUB 1024 /* publisher sessions per subscriber */

struct vbi_peer;
struct vbi_lane;
struct vbi_devres;
struct vb_pub;
struct vb_sub;

/* The most peers a context accepts (vb_ctx_attr_t.max_peers): every
 * per-publish or per-round array of peers is this long. */
#define VBI_MAX_PEERS 1024u

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

/* A publisher's view of one subscriber peer. */
struct vbi_pubpeer {
	struct vbi_pubpeer *next_in_pub;
	struct vbi_pubpeer *next_in_peer;
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
	atomic_bool in_dirty;     /* on that list: written under the peer's txlock, read
				  * without it (sub.c stream reuse) */
};

/* Lane roles (HELLO): what a new connection is for. */
enum vbi_lane_role {
	VBI_LANE_PRIMARY = 0,    /* the first connection between two nodes */
	VBI_LANE_STANDBY = 1,    /* pre-warmed in RTS, takes over on a failure */
	VBI_LANE_REPLACE = 2,    /* built after a failure with no standby left */
	VBI_LANE_PROBE = 3,      /* degraded path: an RC lane probing whether RC works
				  * again; promoted to active when the policy says so */
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
	pthread_mutex_t *lk;
	pthread_mutex_t own_lock;
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
	atomic_bool dead;        /* failed or being retired: no more posts */
	atomic_bool draining;    /* we moved it to ERR: flushes are expected */
	atomic_bool rx_lost;     /* a received SEND could not be dispatched (no
				  * memory to queue its deliveries): nothing
				  * later on it is, the lane fails over and the
				  * peer sends again what we did not acknowledge
				  * (progress thread) */
	atomic_bool retiring;    /* on node->retire (once) */
	atomic_bool in_setup;    /* the thread accepting or connecting it still
				  * uses it (the peer's HELLO can bind it before
				  * that returns): maint_retire leaves it alone */
	atomic_bool hello_rcvd;
	atomic_bool hello_sent;
	atomic_bool hello_claim; /* our HELLO is being / was sent (once) */
	atomic_int fail_act;     /* worst disruptive enum vbi_err_action reported
				  * by completions/events, not yet handled (0 none) */
	_Atomic(const char *) fail_why; /* reason of the first one (static) */

	struct vbi_sring sr;
	uint64_t sends_total;    /* SENDs posted (each consumes a remote slot) */
	uint64_t returned_total; /* slots the remote gave back */
	uint32_t remote_slots;   /* from HELLO */
	uint32_t to_return;      /* slots reposted, not yet returned in an ACK */
	uint64_t ka_sends;       /* keepalive: sends_total when last looked at */
	uint64_t ka_ms;          /* ... and when (coarse ms) */

	struct vbi_slot *slots;  /* the progress context's */
	uint32_t nslots;
	atomic_uint posted_recvs; /* outstanding receive WRs */
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
	struct vbi_lane_auth auth; /* handshake authentication (auth.c) */
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
	/* The active connection failed (fail_watch) when last_rx_ms was
	 * rx_ms_at_fail: the peer was heard from since iff last_rx_ms moved
	 * (txlock; the maintenance thread reads them for the dead-peer rule) */
	bool fail_watch;
	uint64_t rx_ms_at_fail;
	/* when it last returned receive credits (an ACK with some): its
	 * process is alive and consuming, whatever it acknowledges (a large
	 * message arrives fragment by fragment); the slow-subscriber check
	 * restarts its clocks from it. Progress thread writes, atomic. */
	atomic_uint_fast64_t credit_rx_ns;
	char refused[VBI_REFUSE_MAX + 1]; /* connector: the node refused us, why (txlock) */
	unsigned warm_failures;  /* connector: consecutive lane-building failures
				  * (maintenance thread only) */
	uint64_t warm_after_ns;  /* ... next attempt not before */
	uint8_t mode;            /* mode of the last active lane (enum vb_qp_type) */
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

	pthread_mutex_t txlock;
	uint32_t remote_slot_size;
	struct vbi_pubpeer *pubs; /* ORDERED publishers this peer subscribes to */
	struct vbi_pubpeer *rr;   /* round-robin cursor */
	atomic_bool corked;       /* data queued behind a SEND in flight: the
				   * progress thread flushes it when that SEND
				   * completes (vbi_peer_after_poll) */
	atomic_bool subs_pending; /* our SUBs still to be (re)sent */
	atomic_bool ud_announce;  /* our UD endpoint moved: send it a UDADDR frame */
	atomic_bool ack_all;      /* a lane switch: acknowledge every stream from
				   * it again (progress thread, after_poll) */

	/* receive side: dirty, delivered_since_ack and last_rx_ms are under
	 * txlock, because any SEND to this peer may carry the ACKs */
	struct vbi_rxs *dirty;   /* streams with acknowledgements to send */
	uint64_t delivered_since_ack;
	uint64_t last_rx_ms;     /* when data last arrived (idle ACK timer) */

	/* the remote node */
	struct vbt_peer ud;      /* its UD endpoint (qpn, qkey, gid) (FANOUT) */
	struct vbt_ah *ah;       /* towards its UD QP */
	struct vbi_rsub *rsubs;  /* its subscriptions (node->lock) */

	/* protocol rules (auth.c; progress context) */
	uint32_t max_lane_id;    /* accepting side: highest lane number it announced */
	uint32_t lane_epoch_rx;  /* highest epoch of its LANE frames (they only grow) */
};

struct vb_pub {
	struct vb_pub *next;
	struct vb_node *node;
	char topic[VBI_TOPIC_MAX + 1];
	uint32_t topic_id;
	vb_class_t cls;
	uint32_t session;
	vb_pub_attr_t attr;

	pthread_mutex_t lock;
	pthread_cond_t acked_cv;
	struct vbi_txwin win;      /* ORDERED */
	atomic_bool win_full;      /* ORDERED: the last push found the window
				    * full (a hint; vb_publish checks under lock) */
	uint64_t fanout_seq;       /* FANOUT: last sequence used */
	uint64_t last_pub_ms;      /* FANOUT: when it last published */
	struct vbi_msg *batch;     /* FANOUT: datagram being filled (ud_lock) */
	uint32_t batch_off, batch_frames;
	uint64_t hb_seq;           /* FANOUT: seq the last heartbeats announced */
	unsigned hb_sent;          /* ... and how many times */
	struct vbi_pubpeer *peers; /* subscriber peers */
	unsigned npeers;
	uint64_t quorum_seq;       /* k-of-n acknowledged */
	size_t retained;           /* ORDERED: payload bytes in the window (retain_bytes) */
	unsigned ends_pending;     /* ORDERED: cut cursors whose END is still to go */
	struct vbt_mcast *mcast;   /* FANOUT: the topic's group, NULL = unicast only */
	uint32_t mcast_group;      /* FANOUT: its IPv4 address (host order) */
	atomic_uint cb_pending;    /* on_ack callbacks queued (cbq.c) */
	atomic_bool dead;          /* being destroyed: queued callbacks are skipped */
};

struct vb_sub {
	struct vb_sub *next;
	struct vb_node *node;
	char topic[VBI_TOPIC_MAX + 1];
	uint32_t topic_id;
	vb_class_t cls;
	vb_sub_attr_t attr;
	struct vbi_rxs *streams;   /* progress context only */
	atomic_uint_fast64_t delivered, duplicates, gaps, lost, publishers, ends;
	unsigned nstreams;         /* progress context only */
	uint32_t mcast_group;      /* FANOUT: group this context joined for it, 0 = none */
	atomic_uint cb_pending;    /* deliveries and gaps queued (cbq.c) */
	atomic_bool dead;          /* being destroyed: queued callbacks are skipped */
	bool streams_freed;        /* destroyed from a callback (of another
				    * subscriber): its streams are gone; written
				    * and read by the flushing thread (cbq.c) */
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

	/* listeners: [0] RC on the primary device, [1] RC on the standby
	 * device, [2] UC and [3] UD on the primary device (degraded lanes) */
	struct vbt_listener *listener[4];
	atomic_ushort lport[4];    /* their ports, 0 once closed (HELLO reads them) */
	pthread_t accept_thread[4];
	bool accepting[4];
	atomic_bool stop;
	uint16_t port;
	struct sockaddr_storage sb_listen; /* advertised in HELLO (family 0: none) */

	/* maintenance thread: retires lanes, warms standbys, rebuilds */
	pthread_t maint_thread;
	bool maint_running;
	pthread_mutex_t maint_lock;
	pthread_cond_t maint_cv;
	unsigned retiring;         /* lanes marked for retirement, not yet freed */
};

struct vb_ctx {
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

	/* UD endpoint (FANOUT), on ud_dr (dr[0]; dr[1] after dr[0] was removed:
	 * dev_reap (progress.c) moves it, under ud_lock) */
	struct vbi_devres *_Atomic ud_dr;
	struct vbt_qp *ud_qp;
	struct vbt_peer ud_local;  /* its address (ud_addr_lock: a leaf lock) */
	pthread_mutex_t ud_addr_lock;
	pthread_mutex_t ud_lock;   /* posting on the UD QP */
	struct vbi_sring ud_sr;
	struct vbi_slot *ud_slots;
	uint32_t ud_nslots;
	uint32_t ud_sq_depth;      /* sizing's, at least max_peers + 2 (vb_ctx_create) */
	uint32_t ud_posted;

	/* progress */
	pthread_t thread;
	bool thread_running;
	atomic_bool stop;
	pthread_mutex_t progress_lock;
	atomic_uint idle_polls;       /* APP mode: empty polls (vb_progress yields every 64th) */

	uint64_t last_hb_ms;       /* progress: last heartbeat round */
	uint64_t hb_check_ns;      /* progress: last look at last_hb_ms (vbi_now_ns) */
	atomic_bool fanout_pending; /* a FANOUT batch waits for a datagram to
				     * complete (or for ring space) */
	bool cork;                  /* attr.batch: cork batching on */
	atomic_bool kick;           /* another thread left the peers work: the
				     * next progress round visits them */
	/* The progress thread about to block, or blocked, in its CQ wait
	 * (written by it; read by every thread that leaves it work, which
	 * then writes wake_fd: vbi_ctx_wake). Seq_cst on both sides: the
	 * thread sets it and then looks for work (kick, fail_pending); the
	 * other sets its flag and then reads this. */
	atomic_bool sleeping;
	int wake_fd;                /* eventfd in that wait (-1 before vb_ctx_create made it) */
	uint64_t after_poll_ns;     /* progress: last per-peer round */
	/* Bumped (release) after a thread other than the progress thread has
	 * built objects that completions will point at, before their first
	 * post; the progress thread reads it (acquire) before dispatching.
	 * The device orders this for real; this makes it visible to TSan. */
	atomic_uint init_gen;

	struct vbi_mcast_ctx *mc;  /* FANOUT multicast (mcast.c); NULL when off */

	/* Callbacks, run with no verbus lock held (cbq.c). cbq, cbq_n/cap,
	 * cb_depth, cb_zombies: the thread running progress. evq: evq_lock. */
	struct vbi_cb *cbq;
	unsigned cbq_n, cbq_cap, cb_depth;
	struct vbi_zombie *cb_zombies;
	pthread_mutex_t evq_lock;
	struct vbi_ev *evq, **evq_tail;
	unsigned evq_n;
	atomic_bool evq_any;

	pthread_mutex_t lock;      /* node list */
	struct vb_node *nodes;
	atomic_uint npeers;        /* vbi_ctx_take_peer / _put_peer (no lock: it is
				    * taken under node->lock, which ctx->lock precedes) */

	struct {
		atomic_uint_fast64_t published, delivered, duplicates, gaps, lost, malformed;
		atomic_uint_fast64_t sends_posted, frames_sent, batched_frames, inline_sends;
		atomic_uint_fast64_t backpressure, acks_sent, acks_received;
		atomic_uint_fast64_t failovers, rebuilds, path_downs, retransmits, stale_frames;
		atomic_uint_fast64_t lanes_created, lanes_retired, standbys_warmed;
		atomic_uint_fast64_t degrades, promotions, naks_sent, naks_received;
		atomic_uint_fast64_t rto_retransmits, credit_resyncs, probes;
		atomic_uint_fast64_t recover_last_ns, recover_max_ns;
		atomic_uint_fast64_t unacked_on_close, peer_switches, keepalives, events_dropped;
		atomic_uint_fast64_t peers_reaped, pending_dropped, refused;
		atomic_uint_fast64_t devices_removed, devices_released;
		atomic_uint_fast64_t slow_cuts, slow_cut_msgs, streams_ended, retain_full;
		atomic_uint_fast64_t auth_refused;
	} st;
	uint64_t slow_check_ns;    /* progress: last vbi_pub_slow_check() round */
	atomic_bool dev_removing;  /* some device is removed and not yet closed */
	uint64_t reap_ns;          /* progress: last dev_reap try */
	uint8_t auth_key[VBI_AUTH_KEY_MAX]; /* peer authentication (auth.c) */
	size_t auth_key_len;       /* 0: no key */
};

/* progress.c */
int vbi_progress_once(struct vb_ctx *ctx);
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
/* Room for @more entries, made before a receive buffer is dispatched so
 * that queuing its deliveries cannot fail under the locks (progress
 * thread). 0 or -ENOMEM. At most 2 entries per 4 bytes of frames (a
 * record and a gap), per node the buffer reaches: VBI_CB_FOR_BYTES. */
int vbi_cb_reserve(struct vb_ctx *ctx, size_t more);
#define VBI_CB_FOR_BYTES(len) ((size_t)(len) / 2 + 2)
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

/* An event for vb_ctx_attr_t.on_event: any thread, any lock held (queued). */
void vbi_event(struct vb_ctx *ctx, vb_event_type_t type, const char *peer, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void vbi_ud_repost(struct vb_ctx *ctx, struct vbi_slot *s); /* ud.c */
void vbi_progress_or_nap(struct vb_ctx *ctx); /* progress.c */
/* ctx.c */
bool vbi_ctx_take_peer(struct vb_ctx *ctx); /* false at max_peers */
void vbi_ctx_put_peer(struct vb_ctx *ctx);

/* lane.c, lane_failover.c, lane_hello.c: lanes, failover, HELLO; the
 * maintenance thread */
/* Receive slots an accepted connection has before its HELLO is valid. */
#define VBI_LEAN_SLOTS 2u
/* @lean (accepted connections): VBI_LEAN_SLOTS receive slots and no send
 * ring until vbi_lane_commit() (after a valid HELLO): 0 or negative errno. */
int vbi_lane_commit(struct vbi_lane *l);
int vbi_lane_new(struct vb_node *node, struct vbi_devres *dr, enum vb_qp_type mode, bool lean,
		 struct vbi_lane **out);
int vbi_lane_post_wr(struct vbi_lane *l, struct vbt_send_wr *wr);
void vbi_lane_check_timers(struct vbi_peer *p, struct vbi_lane *l, uint64_t now_ns);
uint64_t vbi_rto_ns(void);
void vbi_lane_bind(struct vbi_lane *l, struct vbi_peer *p);
int vbi_lane_post(struct vbi_lane *l, struct vbi_sctx *s, uint32_t len, bool force);
int vbi_lane_send_ctrl(struct vbi_lane *l, const void *frames, uint32_t len);
uint32_t vbi_lane_credits(const struct vbi_lane *l);
void vbi_lane_send_hello(struct vbi_lane *l);
void vbi_lane_report(struct vbi_lane *l, struct vbi_err_verdict v, const char *why);
void vbi_lane_retire(struct vbi_lane *l);
/* The same, and marked dead now: peer->txlock held (lane_failover.c). */
void vbi_lane_retire_locked(struct vbi_lane *l);
/* Make @s @p's active lane (new epoch, rewind, LANE frame unless @tell is
 * false); returns the lane that was active, for the caller to retire.
 * p->txlock held (lane_failover.c). */
struct vbi_lane *vbi_peer_activate(struct vbi_peer *p, struct vbi_lane *s, bool tell, bool promote);
/* vbi_peer_activate without a promotion (lane_failover.c, lane_hello.c). */
struct vbi_lane *vbi_peer_switch_to(struct vbi_peer *p, struct vbi_lane *s, bool tell);
void vbi_lane_destroy_now(struct vbi_lane *l);
/* A received SEND on lane @l in @slot: dispatched, its callbacks run. True:
 * the slot is to be posted again, by the caller through vbi_lane_repost()
 * (its receive WR stays counted in posted_recvs until then); false: done
 * with it (not to be posted again, or posted already), the caller drops its
 * count. Progress context. */
bool vbi_lane_rc_recv(struct vbi_lane *l, struct vbi_slot *slot, uint32_t byte_len);
/* Completions per CQ poll (progress.c), so the most receive slots of one
 * lane that vbi_lane_repost() posts in one list. */
#define VBI_POLL_BATCH 32
void vbi_lane_repost(struct vbi_lane *l, struct vbi_slot *const *slots, unsigned n);
void vbi_lane_on_hello(struct vbi_lane *l, const struct vbi_wire_hdr *h, const uint8_t *pl);
/* Refuse the connection on accepted lane @l (its HELLO was valid but we
 * cannot take it): a BYE carrying @why instead of our HELLO, then it is
 * dropped. node->lock held for writing; the lane's memory is committed. */
void vbi_lane_refuse(struct vbi_lane *l, const char *why);
void vbi_lane_on_switch(struct vbi_lane *l);
void vbi_peer_handle_failures(struct vb_ctx *ctx);
void vbi_peer_pev_flush(struct vbi_peer *p);
int vbi_peer_init_path(struct vbi_peer *p);
void vbi_peer_allow_degrade(struct vbi_peer *p);
void vbi_dev_event(const struct vbt_event *ev, void *arg);
#define VBI_UDADDR_LEN VBI_WIRE_UDADDR_LEN /* UDADDR payload: qpn, qkey, gid */
/* Our UD endpoint's address (for HELLO and UDADDR frames); any thread. */
void vbi_ud_addr(struct vb_ctx *ctx, struct vbt_peer *out);
/* @p's UD endpoint (HELLO, UDADDR): its address handle is rebuilt on the
 * device of ours; progress context. */
void vbi_peer_set_ud(struct vbi_peer *p, uint32_t qpn, uint32_t qkey, const uint8_t *gid);
/* A UDADDR frame (our UD endpoint's address) into @buf, which has room for
 * VBI_WIRE_HDR_LEN + VBI_UDADDR_LEN bytes; returns its length. Any thread. */
uint32_t vbi_udaddr_frame(struct vb_ctx *ctx, uint8_t *buf);
/* A UDADDR frame from @p (its FANOUT endpoint moved); progress context. */
void vbi_peer_on_udaddr(struct vbi_peer *p, const struct vbi_wire_hdr *h, const uint8_t *pl);
int vbi_maint_start(struct vb_node *node);
void vbi_maint_stop(struct vb_node *node);
void vbi_maint_kick(struct vb_node *node);
/* How long a replaced standby waits for a LANE frame (vbi_lane.replaced_ns). */
#define VBI_REPLACED_KEEP_NS 1000000000ull
/* Inside rcu read lock or txlock: the active lane if it can be posted to. */
static inline struct vbi_lane *vbi_peer_lane(struct vbi_peer *p)
{
	struct vbi_lane *l = vbi_path_lane(&p->path);

	return l && !atomic_load_explicit(&l->dead, memory_order_relaxed) ? l : NULL;
}

/* node.c */
struct vbi_peer *vbi_peer_alloc(struct vb_node *node);
void vbi_peer_free(struct vbi_peer *p);
int vbi_peer_send_ctrl(struct vbi_peer *p, const void *frames, uint32_t len); /* lane.c */
/* peer_frames.c */
int vbi_peer_send_subs(struct vbi_peer *p, struct vb_sub *only);
uint32_t vbi_peer_build_acks(struct vbi_peer *p, struct vbi_lane *l, uint8_t *buf, uint32_t cap,
			     struct vbi_rxs **upto);
void vbi_peer_acks_sent(struct vbi_peer *p, struct vbi_lane *l, struct vbi_rxs *upto);
void vbi_dispatch_frames(struct vb_ctx *ctx, struct vbi_lane *l, const uint8_t *buf, uint32_t len);
void vbi_peer_after_poll(struct vbi_peer *peer, bool idle); /* progress.c */
/* Any thread: have the next progress round visit every peer (work for it
 * was left by a thread other than the progress thread). */
void vbi_ctx_kick(struct vb_ctx *ctx);
/* Wake the progress thread if it blocks in its CQ wait: after a flag it will
 * look at (kick, fail_pending) is set. Any thread; a syscall only when it
 * sleeps. */
void vbi_ctx_wake(struct vb_ctx *ctx);
/* Name a library thread (what ps, top and perf show): "vb-progress",
 * "vb-maint", "vb-accept". Best effort. */
void vbi_thread_name(pthread_t t, const char *name);
void vbi_peer_failed(struct vbi_peer *peer, const char *why);
void vbi_ud_recv(struct vb_ctx *ctx, struct vbi_slot *slot, uint32_t byte_len); /* ud.c */
/* vbi_ud_recv without the repost: the caller posts @slot again
 * (vbi_ud_repost_list for the UD endpoint's slots). Progress context. */
void vbi_ud_dispatch(struct vb_ctx *ctx, struct vbi_slot *slot, uint32_t byte_len);
void vbi_ud_repost_list(struct vb_ctx *ctx, struct vbi_slot *const *slots, unsigned n);
void vbi_node_backup_step(struct vb_node *node);
/* Maintenance thread: free the peers given up or closed (node.c). */
void vbi_node_reap(struct vb_node *node);
/* Maintenance thread: drop accepted connections with no HELLO for cm_timeout_ms. */
void vbi_node_pending_expire(struct vb_node *node);
/* sub.c, node->lock held for writing: drop every ORDERED stream from @p. */
void vbi_sub_drop_peer(struct vb_node *node, struct vbi_peer *p);
/* pub_fanout.c: send FANOUT message @m: 0 (the caller's reference to @m is
 * taken), or -EAGAIN (back-pressure), -ENODEV, another negative errno (the
 * caller keeps its reference). Any thread; takes ud_lock, then pub->lock. */
int vbi_fanout_send(struct vb_pub *pub, struct vbi_msg **mp, uint64_t *seq_out);

/* pub_frame.c, pub_ordered.c (ORDERED), pub_fanout.c (FANOUT), pub.c */
void vbi_peer_flush(struct vbi_peer *peer);
void vbi_pub_on_ack(struct vb_node *node, struct vbi_peer *peer, const struct vbi_wire_hdr *h);
void vbi_pub_on_nak(struct vb_node *node, struct vbi_peer *peer, const struct vbi_wire_hdr *h);
uint64_t vbi_pub_rto_peer(struct vbi_peer *peer, uint64_t now_ns, uint64_t rto_ns);
void vbi_pub_attach(struct vb_pub *pub, struct vbi_peer *peer);
void vbi_pub_detach_peer(struct vbi_peer *peer);
void vbi_pub_drop_peer(struct vb_pub *pub, struct vbi_peer *peer);
uint64_t vbi_pub_rewind_peer(struct vbi_peer *peer);
void vbi_pub_heartbeats(struct vb_ctx *ctx, uint64_t now_ms);
void vbi_pub_fanout_flush(struct vb_ctx *ctx, bool idle);
/* Progress thread, no lock held: VB_SLOW_CUT publishers cut subscribers
 * stalled for their slow_sub_ms and send the END frames owed (every 10 ms). */
void vbi_pub_slow_check(struct vb_ctx *ctx, uint64_t now_ns); /* now_ns: vbi_now_ns() */

int vbi_check_topic(const char *topic);

/* mcast.c (FANOUT over multicast groups; see the header comment there) */
void vbi_mcast_attr_init(vb_ctx_attr_t *a);
int vbi_mcast_ctx_init(struct vb_ctx *ctx);
void vbi_mcast_ctx_fini(struct vb_ctx *ctx);
/* Progress context: the multicast QP, a membership or a retired one still
 * holds the primary device (or it cannot tell now): true. */
bool vbi_mcast_uses_dev(struct vb_ctx *ctx);
void vbi_mcast_recv(struct vb_ctx *ctx, struct vbi_slot *s, const struct vbt_wc *wc);
void vbi_mcast_repost(struct vb_ctx *ctx, struct vbi_slot *s);
void vbi_mcast_stats(struct vb_ctx *ctx, vb_stats_t *st);

/* lanepool.c: the lanes' QPs, from the device's warm pool and back */
int vbi_lanepool_init(struct vb_ctx *ctx, struct vbi_devres *dr);
void vbi_lanepool_refill(struct vb_ctx *ctx); /* maintenance thread */
void vbi_lanepool_close(struct vbi_devres *dr); /* device removed: parked QPs go */
void vbi_lanepool_fini(struct vbi_devres *dr);
void vbi_lanepool_stats(struct vb_ctx *ctx, vb_stats_t *st);
/* l->qp = a QP of @mode in INIT, user_ctx @l. 0 or negative errno. */
int vbi_lane_qp_get(struct vbi_lane *l, enum vb_qp_type mode);
/* Before the drain: no error reported on @l's QP nor found by a query. */
bool vbi_lane_qp_healthy(struct vbi_lane *l);
/* After the drain and a grace period: recycle (@reuse) or destroy l->qp. */
void vbi_lane_qp_put(struct vbi_lane *l, bool reuse);
uint32_t vbi_mcast_sub_join(struct vb_ctx *ctx, uint32_t topic_id);
void vbi_mcast_sub_leave(struct vb_ctx *ctx, uint32_t topic_id);
void vbi_mcast_pub_open(struct vb_pub *pub);
void vbi_mcast_pub_close(struct vb_pub *pub);
bool vbi_mcast_peer_joined(struct vb_pub *pub, struct vbi_peer *peer);
const struct vbt_mcast *vbi_mcast_pub_group(struct vb_pub *pub);
void vbi_mcast_sent(struct vb_ctx *ctx, unsigned datagrams);

/* sub.c */
struct vb_sub *vbi_sub_find(struct vb_node *node, uint32_t topic_id);
void vbi_sub_data(struct vb_sub *sub, struct vbi_peer *peer, const struct vbi_wire_hdr *h,
		  const void *payload);
void vbi_sub_peer_lane_changed(struct vb_node *node, struct vbi_peer *peer);
void vbi_sub_peer_ack_all(struct vb_node *node, struct vbi_peer *peer);
/* An END frame from @peer (a publisher cut our stream); progress context,
 * node->lock held for reading. */
void vbi_sub_on_end(struct vbi_peer *peer, const struct vbi_wire_hdr *h);

#endif
