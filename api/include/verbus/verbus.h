/* SPDX-License-Identifier: MIT */
/*
 * verbus — messaging middleware on RDMA verbs. The one public header.
 *
 * Conventions (every function in this header):
 *  - Returns 0 or a non-negative count on success, a negative errno-style
 *    code on failure. -EAGAIN means back-pressure (retry later): nothing was
 *    sent and nothing was lost; vb_errmsg() says which resource is short.
 *  - On failure, vb_errmsg() returns a message for the calling thread that
 *    says what went wrong and where.
 *  - Handles are opaque. A constructor takes an attribute struct that
 *    vb_*_attr_init() fills with defaults and then with the VERBUS_*
 *    environment overrides named next to each field; set fields after
 *    calling it. Attribute structs start with `size` (set by attr_init) so
 *    they can grow without breaking callers built against an older header;
 *    the stats structs are versioned by size too (vb_ctx_stats()).
 *  - A *_destroy() that returned 0 (or -ETIMEDOUT from vb_pub_destroy)
 *    freed its handle: using the handle afterwards, or destroying it a
 *    second time, is undefined behaviour, as with free(). A destroy that
 *    failed (-EBUSY, -EDEADLK) changed nothing.
 *
 * Model:
 *  - A context (vb_ctx_t) owns one RDMA device, its registered memory pool
 *    and the progress engine (a library thread, or vb_progress() called by
 *    the application from its own spinning thread).
 *  - A node (vb_node_t) is an endpoint: it may listen on ip:port and may
 *    connect to other nodes. Every connection carries both directions.
 *  - A publisher (vb_pub_t) sends to every connected node that subscribes to
 *    its topic; a subscriber (vb_sub_t) receives a topic from every
 *    connected publisher of it. Topics are names; the class fixes the
 *    transport:
 *      VB_ORDERED  RC: exactly-once, in order per publisher, up to
 *                  vb_ctx_attr_t.max_msg bytes, credit flow control,
 *                  optional k-of-n delivery acknowledgements.
 *      VB_FANOUT   UD: one publish reaches every subscriber; at most once;
 *                  every gap is detected and reported; late joiners start
 *                  at the next message. Over an IB multicast group per
 *                  topic when the device joins one (one datagram per
 *                  fragment, whatever the number of subscribers), else
 *                  one datagram per subscriber (vb_ctx_attr_t.mcast).
 *
 * Synchronization table:
 *   vb_publish / vb_pub_claim / vb_pub_commit / vb_pub_abort
 *       any thread, concurrently, on the same or different publishers
 *       (a claim must be committed or aborted by the thread that made it).
 *   vb_pub_wait_acked   any thread; blocks (bounded by its timeout).
 *   vb_progress         one thread at a time per context, and only in
 *                       VB_PROGRESS_APP mode.
 *   callbacks (vb_msg_fn, vb_gap_fn, vb_end_fn, vb_ack_fn, vb_event_fn)
 *       run on the progress thread (or inside vb_progress, on the thread
 *       calling it), one at a time per context, in order, never with a
 *       verbus lock held: a callback may publish, create and destroy
 *       publishers and subscribers (not the one it was called for), read
 *       stats, and call any non-blocking function. Functions that wait for
 *       work this same thread does return -EDEADLK from a callback instead
 *       of hanging: vb_node_connect(), vb_node_connect_backup(),
 *       vb_pub_wait_acked(), vb_node_destroy(), vb_ctx_destroy();
 *       vb_pub_destroy() from a callback does not linger. Message data is
 *       valid only during vb_msg_fn. An ORDERED message is acknowledged to
 *       its publisher (and counts for k-of-n) only after its vb_msg_fn
 *       returned. Events raised on other library threads are queued and
 *       reported by the progress thread within one of its rounds (<= 20
 *       ms when idle); in VB_PROGRESS_APP mode, inside vb_progress().
 *   *_create / *_destroy / vb_node_connect
 *       any thread; not concurrently with other calls on the object being
 *       destroyed. Destroy publishers and subscribers before their node,
 *       nodes before their context.
 *   vb_errmsg, vb_strerror, vb_version, *_attr_init: any thread, any time.
 *   fork(): a child process (without exec) must not use its parent's
 *       contexts or anything made from them; it may create its own (what
 *       the library tracks per thread is reset for it at the fork).
 */
#ifndef VERBUS_VERBUS_H
#define VERBUS_VERBUS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VERBUS_BUILDING)
#define VB_EXPORT __attribute__((visibility("default")))
#else
#define VB_EXPORT
#endif

#define VB_VERSION_MAJOR 0
#define VB_VERSION_MINOR 1
#define VB_VERSION_PATCH 0
/* The same as a string literal, "MAJOR.MINOR.PATCH": the header's version
 * (vb_version() is the running library's). */
#define VB_VERSION_STR_(x) #x
#define VB_VERSION_XSTR_(x) VB_VERSION_STR_(x)
#define VB_VERSION_STRING                                                                  \
	VB_VERSION_XSTR_(VB_VERSION_MAJOR) "." VB_VERSION_XSTR_(VB_VERSION_MINOR) "."      \
	VB_VERSION_XSTR_(VB_VERSION_PATCH)

/* ---- errors and version ------------------------------------------------ */

/**
 * vb_version() - library version as "MAJOR.MINOR.PATCH".
 * Thread-safe; the string is static and owned by the library.
 */
VB_EXPORT const char *vb_version(void);

/**
 * vb_errmsg() - what the last failing verbus call on this thread said.
 * Thread-safe: the message is per thread. The pointer stays valid until the
 * next verbus call on the same thread fails. Never NULL ("" when none).
 */
VB_EXPORT const char *vb_errmsg(void);

/**
 * vb_strerror() - the name and meaning of a verbus return code: every
 * negative errno value has one (e.g. -EAGAIN -> "EAGAIN: back-pressure,
 * retry later ..."; -EADDRNOTAVAIL -> "EADDRNOTAVAIL: ..."); 0 -> "OK", a
 * positive count -> "a count (success)". Thread-safe; a static string,
 * owned by the library.
 */
VB_EXPORT const char *vb_strerror(int rc);


/* ---- context ------------------------------------------------------------- */

typedef struct vb_ctx vb_ctx_t;
typedef struct vb_node vb_node_t;
typedef struct vb_pub vb_pub_t;
typedef struct vb_sub vb_sub_t;

typedef enum vb_class {
	VB_ORDERED = 0,     /* RC: exactly-once, in order per publisher */
	VB_FANOUT = 1,      /* UD: at most once, every gap reported */
} vb_class_t;

typedef enum vb_progress_mode {
	VB_PROGRESS_THREAD = 0, /* a library thread polls (spins, then blocks) */
	VB_PROGRESS_APP = 1,    /* the application calls vb_progress() */
} vb_progress_mode_t;

/* What the progress thread does after a poll that completed nothing
 * (vb_ctx_attr_t.idle; the strategies of Aeron's agents). */
typedef enum vb_idle {
	VB_IDLE_BACKOFF = 0, /* spin idle_spin_us (and at least progress_spin
			      * polls, with a sched_yield() every 64), then
			      * block on the completion channel until
			      * something completes (default) */
	VB_IDLE_SPIN = 1,    /* poll without pause: lowest latency, one core
			      * busy all the time */
	VB_IDLE_YIELD = 2,   /* sched_yield() after every empty poll: busy,
			      * but gives the core to any other runnable thread */
	VB_IDLE_BLOCK = 3,   /* block on the completion channel after every
			      * empty poll: least CPU, a wake-up per burst */
} vb_idle_t;

/* Events reported to vb_ctx_attr_t.on_event (on the progress thread, or
 * inside vb_progress(): see the synchronization table). */
typedef enum vb_event_type {
	VB_EV_PEER_UP = 1,    /* a connection completed its handshake */
	VB_EV_PEER_DOWN = 2,  /* a connection failed or closed */
	VB_EV_PROTOCOL = 3,   /* a malformed frame was dropped (counted) */
	VB_EV_FAILOVER = 4,   /* a connection failed and its pre-warmed standby
			       * took over (unacknowledged messages are resent) */
	VB_EV_RECOVERED = 5,  /* a peer's path carries traffic again after a
			       * failure (detail: the outage in ms) */
	VB_EV_PATH_DOWN = 6,  /* no connection to the peer could be had: it is
			       * given up (VB_EV_PEER_DOWN follows) */
	VB_EV_DEGRADED = 7,   /* the connection to the peer kept failing: it now
			       * runs in a lower mode (detail: "degraded from RC
			       * to UC"; RC -> UC -> UD). ORDERED stays exactly-once
			       * and in order (software reliability: NAK,
			       * retransmission timer); expect more latency */
	VB_EV_PROMOTED = 8,   /* the better mode was probed healthy for its hold:
			       * the peer's connection is back in it (detail:
			       * "promoted from UD to RC") */
	VB_EV_PEER_SWITCHED = 9, /* a peer connected with vb_node_connect_backup()
				  * was given up and its alternative (the backup,
				  * or the primary again) is connected instead
				  * (detail: both addresses, the time taken) */
	VB_EV_SLOW_SUBSCRIBER = 10, /* publisher side, VB_SLOW_CUT: an ORDERED
				  * subscriber acknowledged nothing new for
				  * slow_sub_ms while it had unacknowledged
				  * messages: its stream of the topic was cut
				  * (peer: the subscriber's node; detail: topic,
				  * how long, messages and bytes unacknowledged).
				  * Its retention is freed; it is told (on_end) */
	VB_EV_AUTH_REFUSED = 11, /* a connection was refused by peer
				  * authentication (vb_ctx_attr_t.auth_key): the
				  * peer has no key, a different one, or failed
				  * the challenge (detail: which). Either end
				  * reports it; counted in vb_stats_t.auth_refused */
} vb_event_type_t;

typedef struct vb_event {
	vb_event_type_t type;
	const char *peer;     /* remote node name ("" when unknown) */
	const char *detail;   /* human text; valid during the callback */
} vb_event_t;

typedef void (*vb_event_fn)(const vb_event_t *ev, void *arg);

typedef struct vb_ctx_attr {
	size_t size;            /* sizeof(vb_ctx_attr_t); set by attr_init */
	const char *device;     /* RDMA device name; NULL = by ip, else first [VERBUS_DEVICE] */
	const char *ip;         /* local address choosing the device [VERBUS_IP] */
	vb_progress_mode_t progress; /* [VERBUS_PROGRESS=thread|app] */
	unsigned progress_spin; /* empty polls before the thread blocks, 64
				 * [VERBUS_PROGRESS_SPIN]; raise it for lower
				 * latency on cores of its own */
	double msg_rate;        /* expected peak messages/s per connection, 100000 [VERBUS_MSG_RATE] */
	double latency_ms;      /* expected completion latency, 1.0 [VERBUS_LATENCY_MS];
				 * queues are sized rate x latency x 1.5 */
	size_t max_msg;         /* largest ORDERED message, 1 MiB [VERBUS_MAX_MSG] */
	size_t slot_size;       /* receive slot (and batch) size, 16 KiB [VERBUS_SLOT_SIZE] */
	size_t pool_cap;        /* cap on registered bytes, 256 MiB [VERBUS_POOL_CAP] */
	unsigned max_peers;     /* connections per context, 1..1024, 16
				 * [VERBUS_MAX_PEERS]; the CQ must hold them
				 * (vb_ctx_create says when the device's does not) */
	unsigned window;        /* unacknowledged ORDERED messages per publisher,
				 * 4096 [VERBUS_WINDOW] */
	int cm_timeout_ms;      /* bound on each connection step, 5000 [VERBUS_CM_TIMEOUT_MS] */
	vb_event_fn on_event;   /* may be NULL */
	void *event_arg;
	unsigned batch;         /* cork batching, 1 (default): a publish made
				 * while a SEND (or datagram) is in flight on
				 * its connection (or datagram endpoint) is
				 * queued, and everything queued goes, packed
				 * into as few SENDs as fit, the moment that
				 * SEND completes; a publish to an idle
				 * connection is posted at once. No timer holds
				 * a message. 0 = every publish is posted on its
				 * own [VERBUS_BATCH] */
	/* Failover. Every connection to a peer keeps a pre-warmed standby
	 * connection (already in RTS) that takes over when the active one
	 * fails; with a second device it goes there. */
	int standby;            /* 1: warm standbys (default); 0: rebuild after a
				 * failure instead [VERBUS_STANDBY] */
	const char *standby_device; /* second device for standby connections
				 * [VERBUS_STANDBY_DEVICE] */
	const char *standby_ip; /* ... chosen by a local address on it; nodes that
				 * listen also listen there [VERBUS_STANDBY_IP] */
	int mcast;              /* FANOUT over IB multicast: a publisher posts one
				 * datagram per fragment to the topic's group
				 * instead of one per subscriber, wherever the
				 * device joins groups (rdma_join_multicast);
				 * else, and for subscribers that did not join,
				 * per-subscriber unicast. 1 [VERBUS_MCAST=0|1] */
	const char *mcast_prefix; /* IPv4 block the groups come from, "A.B.C.D/N"
				 * (N 4..28): a topic's group is the block's
				 * network part with the topic id's low 32-N bits
				 * as host part. Every process of a topic must use
				 * the same. "239.192.0.0/14" [VERBUS_MCAST_PREFIX] */
	unsigned keepalive_ms;  /* a connection that sent nothing for this long
				 * sends a keepalive (credits-only ACK frame), so a
				 * peer that died silently (killed, host gone) is
				 * found by the send's failure even when no
				 * traffic flows our way; 0 = off. 100
				 * [VERBUS_KEEPALIVE_MS] */
	/* Accepted connections whose HELLO has not arrived yet, per
	 * listening node: each holds a QP, 2 receive slots and 2 send
	 * buffers (no more memory is committed before a valid HELLO and, with
	 * authentication, a valid proof of the key) for at most
	 * cm_timeout_ms. When a new one would pass this cap the oldest is
	 * dropped, so a flood of half-open connections cannot keep a real
	 * peer out. Handshakes still in progress (no RTU yet) have a cap of
	 * the same size of their own. 1..1024, 32 [VERBUS_MAX_PENDING]
	 * (appended) */
	unsigned max_pending;
	/* Peer authentication (optional; appended). With a key, every
	 * connection's handshake is a challenge-response MAC (HMAC-SHA512-256,
	 * libsodium crypto_auth) over a fresh nonce of each side: a peer that
	 * cannot prove the same key is refused before anything it sends is
	 * acted on (docs/wire.md, "Authentication"). Both ends must have the
	 * same key, or neither: a keyed node refuses an unkeyed peer and an
	 * unkeyed node a keyed one. It authenticates peers; it does not
	 * encrypt or sign the frames that follow. The key is copied at
	 * vb_ctx_create(); the caller may wipe its copy then. */
	const void *auth_key;   /* key bytes (16..256), NULL = none; the
				 * environment's VERBUS_AUTH_KEY (hex) when set */
	size_t auth_key_len;
	const char *auth_key_file; /* or: a file holding the key in hex
				 * (whitespace ignored), read at vb_ctx_create;
				 * used when auth_key is NULL [VERBUS_AUTH_KEY_FILE] */
	/* The progress thread's idle strategy (appended; VB_PROGRESS_THREAD
	 * only: in VB_PROGRESS_APP the caller of vb_progress() decides). */
	vb_idle_t idle;         /* VB_IDLE_BACKOFF
				 * [VERBUS_IDLE=backoff|spin|yield|block] */
	unsigned idle_spin_us;  /* VB_IDLE_BACKOFF: how long it spins before
				 * it blocks; VB_PROGRESS_APP: how long the
				 * context completes nothing before
				 * vb_progress() yields the CPU (on every 64th
				 * empty call); 0..1000000 us, 200
				 * [VERBUS_IDLE_SPIN_US] */
} vb_ctx_attr_t;

/**
 * vb_ctx_attr_init() - defaults, then VERBUS_* environment overrides (every
 * variable, its type, range and default: README.md, "Environment
 * variables"; `vb_bench config` prints them with the values in force).
 * Thread-safe (not against a concurrent setenv()). It cannot fail: a
 * malformed or out-of-range value keeps the field's default and is logged,
 * and vb_ctx_create() then refuses it (-EINVAL), so a bad value is an
 * error, not a silent fallback. The same holds for vb_pub_attr_init() and
 * vb_pub_create() (VERBUS_SLOW_SUB, VERBUS_SLOW_SUB_MS, VERBUS_RETAIN_BYTES);
 * VERBUS_NODE_NAME is any text.
 */
VB_EXPORT void vb_ctx_attr_init(vb_ctx_attr_t *attr);

/**
 * vb_ctx_create() - open the device, the registered pool, the completion
 * queue, the datagram endpoint for FANOUT, and (VB_PROGRESS_THREAD) start
 * the progress thread.
 * First it checks the environment: a VERBUS_* variable of the library set
 * to a malformed or out-of-range value fails it with -EINVAL before
 * anything is opened, vb_errmsg() naming the variable, its value (never a
 * secret's) and what is allowed; a VERBUS_* name the library does not know
 * is logged as a warning (a typo), and creation goes on.
 * Returns 0; -EINVAL (a malformed VERBUS_* value, or a bad attribute: the
 * message names it); -ENODEV (no such device; the message lists those
 * present); -ENOMEM; other negative errno from the device. On success
 * *@out is owned by the caller.
 */
VB_EXPORT int vb_ctx_create(const vb_ctx_attr_t *attr, vb_ctx_t **out);

/**
 * vb_ctx_destroy() - stop progress, free everything. Nodes must be destroyed
 * first (-EBUSY otherwise, nothing changed); -EDEADLK from one of its
 * callbacks. Events still queued are reported on the calling thread before
 * it returns. NULL is a no-op (returns 0).
 */
VB_EXPORT int vb_ctx_destroy(vb_ctx_t *ctx);

/**
 * vb_progress() - VB_PROGRESS_APP: poll completions, deliver messages
 * (callbacks run inside), return credits and acknowledgements, flush queued
 * sends. Never blocks. Returns the number of completions handled (0 when
 * idle), -EINVAL in VB_PROGRESS_THREAD mode. One thread at a time: a
 * concurrent call returns 0 without doing anything. A call that handled
 * completions returns right after their callbacks; the credits,
 * acknowledgements and queued sends they made due go out at the start of
 * the next call (a publish in between carries the acknowledgements
 * itself): keep calling it, as the mode requires. Once the context has
 * completed nothing for vb_ctx_attr_t.idle_spin_us, every 64th empty call
 * also yields the CPU (sched_yield()); a busy context's caller keeps it.
 */
VB_EXPORT int vb_progress(vb_ctx_t *ctx);

/*
 * Counters (monotonic since vb_ctx_create). Versioning: fields are only
 * ever appended, and vb_ctx_stats() is a macro that passes the size of the
 * struct as the caller's header declares it: the library writes that many
 * bytes, never more, so a program built against an older header keeps
 * working (it sees the fields it knows of).
 */
typedef struct vb_stats {
	uint64_t published, delivered, duplicates_dropped;
	uint64_t gaps, lost;                /* FANOUT: gap events, messages lost */
	uint64_t malformed;                 /* frames dropped as malformed */
	uint64_t sends_posted, frames_sent, batched_frames, inline_sends;
	uint64_t backpressure;              /* -EAGAIN returned to publishers */
	uint64_t acks_sent, acks_received;
	unsigned peers;
	/* sizing (rate x latency x 1.5, clamped to the device) */
	uint32_t sq_depth, rq_depth, cq_depth, max_inline;
	int sizing_clamped;
	/* registered memory */
	unsigned pool_chunks;
	size_t pool_registered, pool_in_use;
	uint64_t pool_registrations;
	/* recovery (docs/recovery.md) */
	uint64_t failovers;      /* switches to a standby connection (either end's) */
	uint64_t rebuilds;       /* failures with no standby: a new connection built */
	uint64_t path_downs;     /* peers given up: no connection could be had */
	uint64_t retransmits;    /* messages resent after a switch (dropped by seq
				  * at the receiver when it had them) */
	uint64_t stale_frames;   /* DATA that arrived on a connection already replaced */
	uint64_t lanes_created, lanes_retired, standbys_warmed;
	uint64_t recover_last_ns, recover_max_ns; /* failure -> traffic again */
	uint64_t err_by_action[16]; /* completions + async events per recovery
				     * action (vb_recovery_action_name) */
	/* FANOUT multicast (appended: older fields keep their offsets) */
	uint64_t mcast_datagrams;    /* data datagrams posted to a group (each one
				      * reaches every joined subscriber) */
	uint64_t mcast_joins;        /* groups joined (subscriber and publisher side) */
	uint64_t mcast_join_failures; /* failed joins: those topics use unicast */
	unsigned mcast_groups;       /* memberships held now */
	/* degradation (docs/recovery.md section 7; appended) */
	uint64_t degrades;           /* a peer's connection moved to a worse mode
				      * (RC -> UC, UC -> UD; either end counts it) */
	uint64_t promotions;         /* ... back to a better mode */
	uint64_t naks_sent;          /* ORDERED over UC/UD: holes reported (go-back-N) */
	uint64_t naks_received;      /* ... and received (the publisher resends) */
	uint64_t rto_retransmits;    /* messages resent because nothing was
				      * acknowledged for a retransmission timeout */
	uint64_t credit_resyncs;     /* UC/UD: receive credits taken as lost */
	uint64_t probes;             /* degraded: RC probes reported healthy */
	unsigned peers_degraded;     /* peers whose connection is UC or UD now */
	/* (appended) */
	uint64_t unacked_on_close;   /* ORDERED messages still unacknowledged when
				      * vb_pub_destroy()'s linger ran out */
	uint64_t peer_switches;      /* connections moved to a backup node
				      * (VB_EV_PEER_SWITCHED) */
	uint64_t keepalives;         /* keepalive frames sent (keepalive_ms) */
	uint64_t devices_removed;    /* devices seen going away (rdma link delete,
				      * hot-unplug): their paths fail over */
	uint64_t devices_released;   /* ... and everything on them closed, so the
				      * kernel could finish the removal */
	uint64_t events_dropped;     /* events not reported: 4096 were already
				      * queued (the application does not run
				      * progress, or its callbacks block) */
	uint64_t peers_reaped;       /* peers given up or closed and freed with
				      * everything they held (docs/recovery.md) */
	/* slow subscribers (vb_pub_attr_t.slow_policy; appended) */
	uint64_t slow_cuts;          /* ORDERED subscriber streams cut by a
				      * publisher of this context (VB_SLOW_CUT,
				      * VB_EV_SLOW_SUBSCRIBER) */
	uint64_t slow_cut_msgs;      /* ... messages they left unacknowledged
				      * (released without their acknowledgement) */
	uint64_t streams_ended;      /* subscriber side: ORDERED streams a
				      * publisher reported cut (vb_sub_attr_t.on_end) */
	uint64_t retain_full;        /* -EAGAIN because the publisher's retained
				      * bytes reached retain_bytes (also counted
				      * in backpressure) */
	uint64_t pending_dropped;    /* accepted connections dropped before a valid
				      * HELLO: their handshake or their HELLO not
				      * done within cm_timeout_ms, or past
				      * max_pending (vb_ctx_attr_t) */
	uint64_t refused;            /* connections refused (max_peers reached),
				      * the reason sent to the connecting side */
	/* peer authentication (vb_ctx_attr_t.auth_key; appended) */
	uint64_t auth_refused;       /* connections refused by authentication
				      * (either end: no key, another key, a
				      * failed or replayed proof; VB_EV_AUTH_REFUSED) */
	/* QP lifecycle (docs/lifecycle.md; appended): every connection's QP
	 * comes from its device's pre-warmed pool and a healthy retired one
	 * goes back to it through RESET; summed over the context's devices */
	uint64_t qp_pool_hits;       /* connections that got a QP parked in INIT */
	uint64_t qp_pool_misses;     /* ... that found the pool empty: a QP was
				      * created on their path */
	uint64_t qps_recycled;       /* QPs of retired connections (drained, no
				      * error) reset and parked for reuse: same QP
				      * number, no create */
	uint64_t qps_destroyed;      /* QPs destroyed: errored, the pool full, or
				      * their device going away */
	uint64_t qps_created;        /* QPs created (ahead of demand by the
				      * maintenance thread, and misses) */
	unsigned qp_pool_parked;     /* QPs parked in the pools now (they show in
				      * `rdma res show qp`) */
	/* Registered-memory chunks (pool_registrations) registered by the
	 * thread running progress, inside a round: each stalls every delivery
	 * of the context for the registration's length. The library grows its
	 * pools on other threads ahead of need (docs/mempool.md), so this
	 * stays 0 unless the pool is short of memory. */
	uint64_t pool_registrations_progress;
	/* FANOUT tail announcements (appended): HEARTBEAT datagrams posted,
	 * one per subscriber (or group) each time. A quiet FANOUT publisher
	 * announces its last sequence 50 ms after its last publish, then
	 * again at growing intervals up to one a second for as long as it
	 * stays quiet, so a subscriber that lost the tail and the first
	 * announcements still reports the loss (vb_gap_fn). */
	uint64_t heartbeats_sent;
	/* retired connections (appended): a retired lane's QP goes to ERR and
	 * its work requests flush before anything of it is freed or its QP
	 * recycled (docs/lifecycle.md) */
	uint64_t lanes_drained;      /* retired lanes whose flushes all came back */
	uint64_t drain_last_ns, drain_max_ns; /* retirement -> drained */
	/* wire (appended) */
	uint64_t compact_batches;    /* ORDERED batches sent as compact BATCH
				      * frames (RC: a 4-byte header where the
				      * batch continues the stream of the one
				      * before on its connection; docs/wire.md) */
	/* accepting (appended) */
	uint64_t handshakes_withdrawn; /* connection requests their sender gave
					* up before the handshake completed (a
					* peer that closed while connecting):
					* freed, logged as info, not counted in
					* pending_dropped */
	/* completions (appended) */
	uint64_t signaled_sends;     /* of sends_posted, those that asked for a
				      * completion: a stream's first SEND,
				      * then every quarter send ring (a SEND
				      * that answers one received goes
				      * unsignaled; docs/architecture.md) */
	/* cork batching (appended) */
	uint64_t cork_holds;         /* ORDERED publishes left queued behind a
				      * SEND in flight on their connection (one
				      * per connection), for the progress
				      * thread to post, packed, when it
				      * completes; a publish that answers a
				      * SEND received since the connection's
				      * last post is never held */
} vb_stats_t;

/**
 * vb_ctx_stats() - a snapshot of @ctx's counters into *@st. Thread-safe (no
 * lock a publisher waits on is held for long). Returns 0, -EINVAL (NULL).
 * vb_ctx_stats_size() is the function behind it: it fills the first @size
 * bytes (at most sizeof(vb_stats_t) of this library); call it through the
 * macro.
 */
VB_EXPORT int vb_ctx_stats_size(vb_ctx_t *ctx, vb_stats_t *st, size_t size);
#define vb_ctx_stats(ctx, st) vb_ctx_stats_size((ctx), (st), sizeof(*(st)))

/** vb_recovery_action_name() - name of vb_stats_t.err_by_action[@i] ("?"
 * past the last one). */
VB_EXPORT const char *vb_recovery_action_name(unsigned i);

/* ---- nodes --------------------------------------------------------------- */

typedef struct vb_node_attr {
	size_t size;
	const char *name;       /* shown to peers, default "verbus" [VERBUS_NODE_NAME] */
	const char *listen_ip;  /* NULL: do not listen */
	uint16_t listen_port;   /* 0 with listen_ip: any free port (vb_node_port) */
	uint16_t standby_port;  /* port on the context's standby_ip (0: any); peers
				 * learn it in the handshake */
} vb_node_attr_t;

VB_EXPORT void vb_node_attr_init(vb_node_attr_t *attr);

/**
 * vb_node_create() - an endpoint; with listen_ip it accepts connections on
 * a library thread. Returns 0, -EINVAL, -EADDRINUSE, -ENODEV (address not on
 * the context's device), other negative errno.
 */
VB_EXPORT int vb_node_create(vb_ctx_t *ctx, const vb_node_attr_t *attr, vb_node_t **out);

/** vb_node_port() - the port the node listens on (0 when not listening). */
VB_EXPORT uint16_t vb_node_port(const vb_node_t *node);

/**
 * vb_node_connect() - connect to the node listening at @ip:@port and wait
 * (bounded by cm_timeout_ms) for the handshake. Subscriptions and
 * publishers on both sides are matched up automatically, now and later.
 * Returns 0; -ETIMEDOUT; -ECONNREFUSED (no node listens there, or it
 * refused us: vb_errmsg() gives its reason, e.g. its max_peers reached, or
 * "authentication: ..." when peer authentication refused either end);
 * -EHOSTUNREACH; -ENOSPC (our max_peers reached); -EDEADLK (called from a
 * callback); other negative errno.
 */
VB_EXPORT int vb_node_connect(vb_node_t *node, const char *ip, uint16_t port);

/**
 * vb_node_connect_backup() - vb_node_connect() to a primary node with a
 * backup: typically two publisher processes of the same topics. Connects
 * to the primary, or, when it cannot be reached, to the backup. When the
 * connected one is later given up (closed, or no connection to it could be
 * rebuilt: VB_EV_PEER_DOWN), the node's conductor thread connects to the
 * other one (then back, up to 8 attempts 250 ms apart) and reports
 * VB_EV_PEER_SWITCHED; subscriptions follow the new connection. The backup
 * is another publisher: its ORDERED streams are new sessions (vb_msg_t
 * publisher changes) with their own sequence numbers; verbus does not merge
 * two publishers' streams. Returns 0 (either is connected), -EINVAL (a
 * bad or identical address), or the error of the backup's attempt with
 * both reasons in vb_errmsg(). Thread-safety as vb_node_connect().
 */
VB_EXPORT int vb_node_connect_backup(vb_node_t *node, const char *ip, uint16_t port,
				     const char *backup_ip, uint16_t backup_port);

/**
 * vb_node_peers() - connections that completed the handshake and are up.
 */
VB_EXPORT int vb_node_peers(vb_node_t *node);

/* Faults a test or a drill can cause on a live connection, for real. */
typedef enum vb_fault {
	VB_FAULT_QP_ERR = 1,    /* move the active connection's QP to ERR from the
				 * calling thread (as another thread's
				 * ibv_modify_qp would): its WRs flush */
	VB_FAULT_LOC_PROT = 2,  /* post a SEND whose lkey is wrong: the device
				 * completes it with LOC_PROT_ERR */
	VB_FAULT_REM_ACCESS = 3, /* post an RDMA WRITE with a bogus rkey: the peer
				 * refuses it, REM_ACCESS_ERR */
} vb_fault_t;

/**
 * vb_node_inject_fault() - cause @fault on the active connection to the
 * peer named @peer (NULL: the first peer that is up). The library then
 * recovers as from any real failure (VB_EV_FAILOVER, ...). Any thread.
 * Returns 0; -ENOENT (no such peer up); -ENOTCONN (it has no active
 * connection right now: recovering); -EINVAL; other negative errno from
 * the device.
 */
VB_EXPORT int vb_node_inject_fault(vb_node_t *node, const char *peer, vb_fault_t fault);

/**
 * vb_node_peer_mode() - the mode of the active connection to the peer
 * named @peer (NULL: the first peer that is up): 0 RC, 1 UC, 2 UD (see
 * VB_EV_DEGRADED); -ENOENT (no such peer up), -ENOTCONN (recovering: no
 * active connection right now), -EINVAL. Any thread.
 */
VB_EXPORT int vb_node_peer_mode(vb_node_t *node, const char *peer);

/**
 * vb_node_dump() - describe @node's connections to @f (peers, their
 * connections with credits, send queue use and receive slots posted,
 * publishers' cursors, and the context's FANOUT endpoint): for diagnosing
 * a stall. The text is for people and may change. Any thread. Returns 0
 * or -EINVAL.
 */
VB_EXPORT int vb_node_dump(vb_node_t *node, FILE *f);

/**
 * vb_node_destroy() - close every connection (outstanding work requests are
 * flushed and their buffers returned), stop listening, free. Publishers and
 * subscribers must be destroyed first (-EBUSY otherwise); -EDEADLK from a
 * callback (nothing changed).
 */
VB_EXPORT int vb_node_destroy(vb_node_t *node);

/* ---- publishers ------------------------------------------------------------ */

/* Called when the k-of-n acknowledged sequence advances (progress thread). */
typedef void (*vb_ack_fn)(vb_pub_t *pub, uint64_t acked_seq, void *arg);

/*
 * What an ORDERED publisher does about a subscriber that stops
 * acknowledging (stopped, starved of CPU, blocked in its callback). Every
 * message stays retained until each subscriber the publisher waits for has
 * acknowledged it; the retention is bounded (vb_ctx_attr_t.window messages,
 * vb_pub_attr_t.retain_bytes bytes), and when it is full vb_publish()
 * returns -EAGAIN to everybody.
 *   VB_SLOW_CUT    (default) a subscriber that has unacknowledged messages
 *                  and acknowledged nothing new for slow_sub_ms is cut: the
 *                  publisher stops its stream of this topic, releases what
 *                  only it still needed, reports VB_EV_SLOW_SUBSCRIBER and
 *                  sends it an end of stream (its vb_sub_attr_t.on_end runs
 *                  with VB_END_SLOW once it reads again). The others go on;
 *                  back-pressure caused by the laggard lasts at most about
 *                  slow_sub_ms. Exactly-once in order holds for the others;
 *                  the cut one got a prefix of the stream, in order.
 *   VB_SLOW_BLOCK  never cut: the slowest subscriber holds everybody back
 *                  (-EAGAIN once the retention is full), and every
 *                  subscriber gets every message exactly once, in order.
 * A subscriber whose connection is recovering (failover, rebuild) is not
 * slow: its clock restarts once it has a connection again. Except with
 * ack_quorum k while k other subscribers are connected: a k-of-n writer
 * does not wait the recovery timeout (3 x cm_timeout_ms) for a replica
 * that is gone; it is cut after slow_sub_ms like a slow one.
 */
typedef enum vb_slow_policy {
	VB_SLOW_CUT = 0,
	VB_SLOW_BLOCK = 1,
} vb_slow_policy_t;

typedef struct vb_pub_attr {
	size_t size;
	unsigned ack_quorum;    /* ORDERED: k for k-of-n acknowledgements (0 = off, at
				 * most 1024: a node's peers) */
	vb_ack_fn on_ack;       /* may be NULL */
	void *arg;
	unsigned linger_ms;     /* ORDERED: vb_pub_destroy() waits up to this long
				 * for every connected subscriber to acknowledge
				 * what was published (default 2000; 0 = no wait) */
	/* (appended; see vb_slow_policy_t) */
	vb_slow_policy_t slow_policy; /* ORDERED: VB_SLOW_CUT (default) or
				 * VB_SLOW_BLOCK [VERBUS_SLOW_SUB=cut|block] */
	unsigned slow_sub_ms;   /* VB_SLOW_CUT: how long a subscriber may hold
				 * unacknowledged messages without acknowledging
				 * anything new before it is cut; 10..3600000,
				 * 2000 [VERBUS_SLOW_SUB_MS] */
	size_t retain_bytes;    /* ORDERED: payload bytes of unacknowledged
				 * messages the publisher keeps (besides the
				 * window's count); past it vb_publish() returns
				 * -EAGAIN. 0 = no byte bound (the window and
				 * pool_cap bound it). 64 MiB [VERBUS_RETAIN_BYTES] */
} vb_pub_attr_t;

VB_EXPORT void vb_pub_attr_init(vb_pub_attr_t *attr);

/**
 * vb_pub_create() - a publisher of @topic (1..63 bytes) with @cls on @node.
 * Returns 0, -EINVAL (also slow_policy unknown, slow_sub_ms out of range,
 * ack_quorum above 1024 or without VB_ORDERED), -EEXIST (this node already
 * publishes @topic), -ENOMEM. An attr from an older header (smaller size)
 * gets the defaults for the fields it lacks.
 */
VB_EXPORT int vb_pub_create(vb_node_t *node, const char *topic, vb_class_t cls,
			    const vb_pub_attr_t *attr, vb_pub_t **out);

/**
 * vb_publish() - copy @len bytes and send them to every current subscriber.
 * ORDERED: up to max_msg bytes; FANOUT: up to max_msg bytes (fragmented into
 * datagrams). *@seq (may be NULL) receives the message's sequence number.
 * Returns 0; -EAGAIN (back-pressure: retransmit window full, retained bytes
 * at retain_bytes, send queue full, or registered memory at its cap —
 * vb_errmsg() says which, and which subscriber holds the oldest message;
 * nothing was sent); -EMSGSIZE; -EINVAL. Publishing with no subscriber succeeds (the
 * message is numbered and dropped: late joiners start after it).
 */
VB_EXPORT int vb_publish(vb_pub_t *pub, const void *data, size_t len, uint64_t *seq);

/* A claimed, registered buffer to write a message into (zero copy). */
typedef struct vb_claim {
	void *data;             /* write up to len bytes here */
	size_t len;
	void *priv_;            /* library use */
} vb_claim_t;

/**
 * vb_pub_claim() - reserve a registered buffer for a message of up to @len
 * bytes; fill claim->data, then vb_pub_commit() (sends) or vb_pub_abort().
 * Returns 0, -EAGAIN (back-pressure), -EMSGSIZE, -EINVAL.
 */
VB_EXPORT int vb_pub_claim(vb_pub_t *pub, size_t len, vb_claim_t *claim);
/** vb_pub_commit() - send the first @len bytes of the claim (<= claimed). */
VB_EXPORT int vb_pub_commit(vb_pub_t *pub, vb_claim_t *claim, size_t len, uint64_t *seq);
/** vb_pub_abort() - give a claim back without sending. Returns 0. */
VB_EXPORT int vb_pub_abort(vb_pub_t *pub, vb_claim_t *claim);

/**
 * vb_pub_wait_acked() - ORDERED with ack_quorum k: wait until k subscribers
 * have delivered message @seq to their application (a subscriber that did
 * and left since, e.g. destroyed right after its last delivery, still
 * counts: the k-of-n acknowledged sequence never goes back). Returns 0,
 * -ETIMEDOUT (also when fewer than k subscribers are connected and @seq
 * was not acknowledged by k before), -EINVAL (no quorum configured),
 * -EDEADLK (from a callback). In VB_PROGRESS_APP mode the waiting thread
 * drives progress.
 */
VB_EXPORT int vb_pub_wait_acked(vb_pub_t *pub, uint64_t seq, int timeout_ms);

/** vb_pub_subscribers() - current subscriber connections of this publisher. */
VB_EXPORT int vb_pub_subscribers(vb_pub_t *pub);

/**
 * vb_pub_destroy() - stop publishing and free @pub.
 *
 * ORDERED: first waits, up to attr.linger_ms, until every connected
 * subscriber has acknowledged every message published (subscribers whose
 * connection is given up meanwhile are not waited for); in VB_PROGRESS_APP
 * mode the calling thread drives progress while it waits. What is still
 * unacknowledged then is released and counted (vb_stats_t.unacked_on_close).
 * FANOUT: the messages it still holds batched are sent first (waiting up to
 * a second for room in the datagram queue; what finds none is counted in
 * vb_stats_t.lost and logged).
 * Returns 0 (nothing was left unacknowledged; also FANOUT and NULL), or
 * -ETIMEDOUT: @pub is destroyed all the same, and vb_errmsg() says how many
 * messages were not acknowledged. Not concurrently with other calls on @pub.
 */
VB_EXPORT int vb_pub_destroy(vb_pub_t *pub);

/* ---- subscribers ----------------------------------------------------------- */

typedef struct vb_msg {
	const void *data;       /* valid only during the callback */
	size_t len;
	uint64_t seq;           /* per publisher */
	uint32_t publisher;     /* publisher session id */
	uint32_t epoch;
	const char *topic;
} vb_msg_t;

typedef void (*vb_msg_fn)(vb_sub_t *sub, const vb_msg_t *msg, void *arg);
/* FANOUT: @lost messages from publisher @publisher never arrived; the next
 * delivered one has sequence @next_seq. */
typedef void (*vb_gap_fn)(vb_sub_t *sub, uint32_t publisher, uint64_t lost, uint64_t next_seq,
			  void *arg);

/* Why an ORDERED stream ended (vb_end_fn). */
typedef enum vb_end_reason {
	VB_END_SLOW = 1,        /* the publisher cut us: we acknowledged nothing for
				 * its slow_sub_ms (VB_SLOW_CUT) */
} vb_end_reason_t;

/* ORDERED: publisher session @publisher ended this subscriber's stream
 * (@reason); @last_seq is the last message it sent us (what was delivered
 * before this callback is all we get of that stream; messages after it
 * were not sent). The subscription stays; to receive the topic from that
 * publisher again, destroy the subscriber and create it anew (from another
 * thread, or from a callback of another subscriber): the new subscription
 * starts with the publisher's next message, like a late joiner. Runs like
 * the other callbacks (no verbus lock held). */
typedef void (*vb_end_fn)(vb_sub_t *sub, uint32_t publisher, vb_end_reason_t reason,
			  uint64_t last_seq, void *arg);

typedef struct vb_sub_attr {
	size_t size;
	vb_msg_fn on_msg;       /* required */
	vb_gap_fn on_gap;       /* FANOUT; may be NULL (gaps are still counted) */
	void *arg;
	vb_end_fn on_end;       /* ORDERED; may be NULL (ends are still counted);
				 * appended */
} vb_sub_attr_t;

VB_EXPORT void vb_sub_attr_init(vb_sub_attr_t *attr);

/**
 * vb_sub_create() - subscribe @node to @topic with class @cls (must match
 * the publishers'). Returns 0, -EINVAL, -EEXIST (already subscribed here).
 * An attr from an older header (smaller size) gets the defaults for the
 * fields it lacks.
 */
VB_EXPORT int vb_sub_create(vb_node_t *node, const char *topic, vb_class_t cls,
			    const vb_sub_attr_t *attr, vb_sub_t **out);

typedef struct vb_sub_stats {
	uint64_t delivered, duplicates, gaps, lost, publishers;
	uint64_t ends;          /* ORDERED streams a publisher ended (on_end);
				 * appended */
	uint64_t acked;         /* ORDERED: the sequence number the latest ACK
				 * it sent acknowledged up to (with several
				 * publishers: the one acknowledged last); 0:
				 * none yet (appended) */
} vb_sub_stats_t;

/**
 * vb_sub_stats() - this subscriber's counters (appended to only, versioned
 * like vb_ctx_stats()). Any thread. Returns 0, -EINVAL.
 */
VB_EXPORT int vb_sub_stats_size(vb_sub_t *sub, vb_sub_stats_t *st, size_t size);
#define vb_sub_stats(sub, st) vb_sub_stats_size((sub), (st), sizeof(*(st)))

/**
 * vb_sub_destroy() - unsubscribe and free @sub. No callback of @sub runs
 * after it returns (from another thread it waits for one that is running);
 * from a callback of another subscriber, queued deliveries of @sub are
 * dropped. Returns 0 (also for NULL).
 */
VB_EXPORT int vb_sub_destroy(vb_sub_t *sub);

#ifdef __cplusplus
}
#endif
#endif /* VERBUS_VERBUS_H */
