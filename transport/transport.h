/* SPDX-License-Identifier: MIT */
/*
 * The transport ops table: everything the layers above (engine/, api/) need
 * from an RDMA-like backend, at verbs granularity (device, PD, MR, CQ, QP, AH,
 * post, poll, async events, connection set-up). transport/verbs implements it
 * with libibverbs + librdmacm (`vbt_verbs_ops`); a later transport/shm
 * implements the same ops and the same QP state machine. The layers above
 * include this header, never <infiniband/verbs.h>: every type here is
 * backend-neutral and converted at the backend boundary. core/ sits below and
 * never includes it (docs/architecture.md); the types core shares with it
 * live in core/qp_types.h.
 *
 * Model (rdma-core providers, nng transports):
 *  - Each backend is one `static const struct vbt_ops` with designated
 *    initializers. Ops a backend lacks point at stubs returning -EOPNOTSUPP,
 *    so callers never test for NULL.
 *  - Objects are opaque to users beyond the read-only fields below. A backend
 *    allocates a private struct that embeds the core struct FIRST and converts
 *    back with container_of(). Every object carries its `ops`, so the hot
 *    path (post_send, post_recv, cq_poll) is one indirect call.
 *  - One error convention: 0 (or a count) on success, negative errno on
 *    failure with the per-thread message set by vbi_err() (core/err.h).
 *    Backends convert their native conventions (verbs: NULL+errno, positive
 *    errno from ibv_post_*, -1+errno from rdma_*) here. -EAGAIN means
 *    back-pressure (a full work queue), never a broken object.
 *
 * QP state machine: every qp_modify is validated first against the QP's
 * mirrored state with vbi_qp_fsm_check() (core/qp_fsm.h); an illegal
 * transition or attribute mask is refused with the validator's message
 * before the device sees it. Each successful transition is recorded with its
 * duration in the QP's struct vbi_qp_mirror (vbt_qp.mirror).
 *
 * Synchronization table (same object = same QP / CQ / device):
 *   call                     may run concurrently with
 *   post_send, post_recv     each other and themselves on the same QP; cq_poll
 *                            of any CQ; qp_modify/qp_query of the same QP.
 *                            NOT with qp_destroy of that QP (callers fence
 *                            destroy, e.g. with RCU: core/path, the lifecycle
 *                            engine).
 *   cq_poll                  everything except cq_destroy of that CQ and
 *                            qp_destroy of a QP whose WRs it may return.
 *                            Several pollers of one CQ are safe but pointless.
 *   cq_arm, cq_wait,         cq_poll; one waiter per CQ.
 *   cq_wait_any
 *   qp_modify                serialized per QP by the backend (a mutex);
 *                            safe against qp_query and posting.
 *   *_create / *_destroy     any other object's calls; never with calls on the
 *                            object being destroyed. Destroy children (QP, AH,
 *                            MR, CQ) before their PD / device.
 *   event callback           runs on the device's async-event thread, with
 *                            no backend lock held; it may call any op except
 *                            dev_close of its device and qp_destroy of the QP
 *                            the event names (the event is acknowledged after
 *                            the callback returns and the destroy waits for
 *                            that acknowledgement: it would deadlock).
 *   listen/accept/connect    blocking (bounded by vbt_conn_param.cm_timeout_ms);
 *                            different listeners/connections are independent.
 *   mcast_join/mcast_leave   blocking (join bounded by cm_timeout_ms); different
 *                            memberships are independent, also on one QP.
 *                            post_send to a membership's AH may run
 *                            concurrently with anything but its mcast_leave.
 */
#ifndef VERBUS_TRANSPORT_TRANSPORT_H
#define VERBUS_TRANSPORT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/qp_fsm.h"
#include "core/qp_types.h"

struct vbt_ops;
struct vbi_qp_mirror; /* core/qp_fsm.h */

/* ---- constants (numerically equal to libibverbs'; the verbs backend
 * _Static_asserts that, so they cross the boundary unconverted) ---------- */

/* == enum ibv_access_flags (the subset verbus uses). Minimal by policy:
 * SEND/RECV buffers are LOCAL_WRITE only. */
enum vbt_access {
	VBT_ACCESS_LOCAL_WRITE = 1 << 0,
	VBT_ACCESS_REMOTE_WRITE = 1 << 1,
	VBT_ACCESS_REMOTE_READ = 1 << 2,
	VBT_ACCESS_REMOTE_ATOMIC = 1 << 3,
};

/* == enum ibv_mtu. Bytes = 128 << value. */
enum vbt_mtu {
	VBT_MTU_256 = 1,
	VBT_MTU_512 = 2,
	VBT_MTU_1024 = 3,
	VBT_MTU_2048 = 4,
	VBT_MTU_4096 = 5,
};

/* == enum ibv_port_state */
enum vbt_port_state {
	VBT_PORT_NOP = 0,
	VBT_PORT_DOWN = 1,
	VBT_PORT_INIT = 2,
	VBT_PORT_ARMED = 3,
	VBT_PORT_ACTIVE = 4,
	VBT_PORT_ACTIVE_DEFER = 5,
};

/* enum vbt_wc_status (== enum ibv_wc_status) and enum vbt_event_type (async
 * events): core/qp_types.h, where core's error policy reads them. */

/* Completion opcodes (core-side, converted). */
enum vbt_wc_opcode {
	VBT_WC_OP_SEND = 0,
	VBT_WC_OP_RDMA_WRITE,
	VBT_WC_OP_RDMA_READ,
	VBT_WC_OP_RECV,
	VBT_WC_OP_RECV_RDMA_WITH_IMM,
	VBT_WC_OP_OTHER,
};

/* vbt_wc.flags */
enum {
	VBT_WC_F_GRH = 1 << 0,      /* UD receive: first 40 bytes are a GRH */
	VBT_WC_F_WITH_IMM = 1 << 1, /* imm_data is valid */
};

/* Work request opcodes (core-side, converted). */
enum vbt_wr_opcode {
	VBT_WR_SEND = 0,
	VBT_WR_SEND_WITH_IMM,
	VBT_WR_RDMA_WRITE,
	VBT_WR_RDMA_WRITE_WITH_IMM,
};

/* vbt_send_wr.flags (== enum ibv_send_flags) */
enum {
	VBT_SEND_FENCE = 1 << 0,
	VBT_SEND_SIGNALED = 1 << 1,
	VBT_SEND_SOLICITED = 1 << 2,
	VBT_SEND_INLINE = 1 << 3,
};

/* ---- objects (fields are written by the backend, read-only for users) --- */

struct vbt_dev_caps {
	char name[64];           /* device name (e.g. "rxe0") */
	uint32_t max_qp, max_qp_wr, max_cq, max_cqe, max_mr, max_pd, max_ah;
	uint32_t max_sge;        /* per WR, send and receive */
	uint32_t max_inline_data; /* probed: largest inline send a QP accepted */
	uint64_t max_mr_size;
	uint8_t port;            /* the port this handle uses (1-based) */
	uint8_t port_state;      /* enum vbt_port_state, as of the query */
	uint8_t active_mtu;      /* enum vbt_mtu */
	uint8_t is_roce;         /* link layer Ethernet */
	int gid_index;           /* GID used as source (RoCE v2 IPv4 when present) */
	uint8_t gid[16];
};

/* Async event delivered to vbt_dev_attr.event_cb. */
struct vbt_event {
	enum vbt_event_type type;
	int raw;                 /* backend's own code (enum ibv_event_type) */
	struct vbt_dev *dev;
	struct vbt_qp *qp;       /* QP events: the QP, else NULL */
	void *qp_ctx;            /* QP events: vbt_qp_init_attr.user_ctx */
	struct vbt_cq *cq;       /* CQ events: the CQ, else NULL */
	uint8_t port;            /* port events: the port, else 0 */
};

/* Called on the device's async-event thread (see the synchronization table).
 * Must not block for long: events of the whole device queue behind it. */
typedef void (*vbt_event_fn)(const struct vbt_event *ev, void *arg);

struct vbt_dev_attr {
	const char *name;        /* device name; NULL or "" = first device */
	const char *ip;          /* local IPv4/IPv6 address: the device and port
				  * rdma_cm binds it to (wins over name) */
	uint8_t port;            /* 0 = port 1, or the port of @ip */
	int gid_index;           /* < 0 = pick (RoCE v2 IPv4-mapped, else 0) */
	vbt_event_fn event_cb;   /* may be NULL: events are then logged + acked */
	void *event_arg;
	/* Non-zero: learn of the device's removal (VBT_EV_DEVICE_REMOVAL) by
	 * binding an rdma_cm id to its address (@ip, else its IPv4 GID); while
	 * the handle is open, librdmacm then holds a PD of its own on the
	 * device (`rdma res show pd` counts it). */
	int watch_removal;
};

struct vbt_dev {
	const struct vbt_ops *ops;
	struct vbt_dev_caps caps; /* filled at open; port_state is not live */
	/* where its QPs' state changes are timed (the transport's qp_modify
	 * records each, on the modifying thread); NULL: nowhere. Set by the
	 * opener right after dev_open; the aggregate is the opener's. */
	struct vbi_qp_timing *qp_timing;
};

struct vbt_pd {
	const struct vbt_ops *ops;
	struct vbt_dev *dev;
};

struct vbt_mr {
	const struct vbt_ops *ops;
	struct vbt_pd *pd;
	void *addr;
	size_t length;
	uint32_t lkey, rkey;
	unsigned access;         /* enum vbt_access */
};

struct vbt_cq_attr {
	int cqe;                 /* minimum entries (the device may round up) */
	int channel;             /* non-zero: completion channel (blocking mode) */
	int comp_vector;
	void *user_ctx;
};

struct vbt_cq {
	const struct vbt_ops *ops;
	struct vbt_dev *dev;
	int cqe;                 /* actual size */
	int has_channel;
	void *user_ctx;
};

struct vbt_qp_cap {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge;
	uint32_t max_inline_data;
};

struct vbt_qp_init_attr {
	enum vb_qp_type type;
	struct vbt_cq *send_cq, *recv_cq;
	struct vbt_qp_cap cap;   /* requested; vbt_qp.cap holds what was granted */
	int sq_sig_all;          /* every send completes (else: SIGNALED flag) */
	void *user_ctx;          /* returned in vbt_event.qp_ctx */
};

struct vbt_qp {
	const struct vbt_ops *ops;
	struct vbt_pd *pd;
	enum vb_qp_type type;
	uint32_t qpn;
	struct vbt_cq *send_cq, *recv_cq;
	struct vbt_qp_cap cap;   /* granted by the device */
	void *user_ctx;
	/* Mirrored state: updated under the QP's modify lock after each
	 * successful qp_modify (and by qp_query when the device reports a state
	 * the mirror did not record, e.g. ERR after a fatal event). Read it
	 * with vbt_qp_state(). */
	enum vb_qp_state state;
	/* Transition log with durations (core/qp_fsm.h). Owned by the QP. */
	struct vbi_qp_mirror *mirror;
};

/* Address vector (== struct ibv_ah_attr with a GRH, flattened). */
struct vbt_ah_attr {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t is_global;       /* RoCE: always 1 */
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t port_num;
};

struct vbt_ah {
	const struct vbt_ops *ops;
	struct vbt_pd *pd;
};

/* QP attributes for qp_modify / qp_query; which members count is given by
 * the VB_QP_* mask (core/qp_types.h). VB_QP_ALT_PATH, VB_QP_PATH_MIG_STATE
 * and VB_QP_RATE_LIMIT are not carried: -EOPNOTSUPP. */
struct vbt_qp_attr {
	enum vb_qp_state qp_state;     /* VB_QP_STATE */
	enum vb_qp_state cur_qp_state; /* VB_QP_CUR_STATE */
	uint8_t en_sqd_async_notify;   /* VB_QP_EN_SQD_ASYNC_NOTIFY */
	uint8_t sq_draining;           /* query only */
	unsigned access;               /* VB_QP_ACCESS_FLAGS: enum vbt_access */
	uint16_t pkey_index;           /* VB_QP_PKEY_INDEX */
	uint8_t port_num;              /* VB_QP_PORT */
	uint32_t qkey;                 /* VB_QP_QKEY (UD) */
	struct vbt_ah_attr ah;         /* VB_QP_AV */
	uint8_t path_mtu;              /* VB_QP_PATH_MTU: enum vbt_mtu */
	uint8_t timeout;               /* VB_QP_TIMEOUT: 4.096 us x 2^timeout */
	uint8_t retry_cnt;             /* VB_QP_RETRY_CNT: 0..7 (7 = forever) */
	uint8_t rnr_retry;             /* VB_QP_RNR_RETRY: 0..7 (7 = forever) */
	uint32_t rq_psn;               /* VB_QP_RQ_PSN */
	uint8_t max_rd_atomic;         /* VB_QP_MAX_QP_RD_ATOMIC */
	uint8_t min_rnr_timer;         /* VB_QP_MIN_RNR_TIMER (IB code) */
	uint32_t sq_psn;               /* VB_QP_SQ_PSN */
	uint8_t max_dest_rd_atomic;    /* VB_QP_MAX_DEST_RD_ATOMIC */
	struct vbt_qp_cap cap;         /* VB_QP_CAP */
	uint32_t dest_qp_num;          /* VB_QP_DEST_QPN */
};

/* == struct ibv_sge (same layout: passed through without copying) */
struct vbt_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct vbt_send_wr {
	struct vbt_send_wr *next;
	uint64_t wr_id;
	struct vbt_sge *sg_list;
	int num_sge;
	enum vbt_wr_opcode opcode;
	unsigned flags;          /* VBT_SEND_* */
	uint32_t imm_data;       /* host order; *_WITH_IMM only */
	uint64_t remote_addr;    /* RDMA_WRITE* */
	uint32_t rkey;           /* RDMA_WRITE* */
	struct vbt_ah *ah;       /* UD */
	uint32_t remote_qpn;     /* UD */
	uint32_t remote_qkey;    /* UD */
};

struct vbt_recv_wr {
	struct vbt_recv_wr *next;
	uint64_t wr_id;
	struct vbt_sge *sg_list;
	int num_sge;
};

struct vbt_wc {
	uint64_t wr_id;
	enum vbt_wc_status status;
	enum vbt_wc_opcode opcode;
	uint32_t byte_len;
	uint32_t imm_data;       /* host order, when VBT_WC_F_WITH_IMM */
	uint32_t qp_num;         /* local QP */
	uint32_t src_qp;         /* UD receive: sender's QPN */
	uint32_t vendor_err;
	unsigned flags;          /* VBT_WC_F_* */
};

/* What one side of a connection tells the other (carried in rdma_cm
 * private data by the verbs backend, or exchanged by the lifecycle engine
 * for QPs it brings up itself). */
struct vbt_peer {
	uint32_t qpn;            /* 24 bits */
	uint32_t psn;            /* this side's initial send PSN (24 bits, random) */
	uint32_t qkey;           /* UD: this side's QP's Q_Key */
	uint8_t gid[16];         /* this side's source GID */
	uint8_t mtu;             /* enum vbt_mtu: this side's active MTU */
	uint8_t type;            /* enum vb_qp_type */
};

/* Connection knobs. Defaults from vbt_conn_param_init(); environment
 * overrides in brackets. Dead-peer detection on RC takes about
 * 4.096 us x 2^timeout x (retry_cnt + 1) (vbt_conn_param_detect_us()):
 * defaults 4.096 us x 2^14 x 4 = 268 ms on real hardware. */
struct vbt_conn_param {
	uint8_t timeout;         /* local ACK timeout exponent, 14 [VERBUS_QP_TIMEOUT] */
	uint8_t retry_cnt;       /* transport retries, 3 [VERBUS_QP_RETRY_CNT] */
	uint8_t rnr_retry;       /* RNR retries, 3 [VERBUS_QP_RNR_RETRY] */
	uint8_t min_rnr_timer;   /* IB code, 12 = 0.64 ms [VERBUS_QP_MIN_RNR_TIMER] */
	uint8_t max_rd_atomic;   /* 1 */
	uint8_t max_dest_rd_atomic; /* 1 */
	uint8_t mtu;             /* enum vbt_mtu cap; 0 = min(local, remote) */
	unsigned access;         /* RC/UC QP access flags, 0 (SEND/RECV only) */
	uint32_t qkey;           /* UD: our Q_Key; 0 = random [VERBUS_UD_QKEY] */
	int cm_timeout_ms;       /* bound on each blocking CM step, 5000
				  * [VERBUS_CM_TIMEOUT_MS] */
	int accept_wait_ms;      /* accept: bound on the wait for a request;
				  * 0 = cm_timeout_ms (the handshake steps
				  * after it always use cm_timeout_ms) */
	int connect_budget_ms;   /* connect: bound on the whole call (its
				  * steps each wait at most cm_timeout_ms and
				  * at most what is left of this); 0 = none */
};

struct vbt_listener {
	const struct vbt_ops *ops;
	struct vbt_dev *dev;
	enum vb_qp_type type;
	uint16_t port;           /* bound port, host order (useful when asked 0) */
};

struct vbt_conn {
	const struct vbt_ops *ops;
	struct vbt_qp *qp;       /* the caller's QP, now in RTS; NOT owned */
	struct vbt_peer local, remote;
	struct vbt_ah *ah;       /* UD: address handle to the peer (owned by
				  * the conn, freed by conn_close); else NULL */
};

/* A multicast group membership (mcast_join). The AH, remote QPN and Q_Key
 * are what a UD send to the group uses (vbt_send_wr.ah / remote_qpn /
 * remote_qkey). Receivers get the group's datagrams only on a UD QP whose
 * own Q_Key equals @qkey: rdma_cm fixes the group Q_Key (RDMA_UDP_QKEY,
 * 0x01234567, for its UDP port space on RoCE), so a QP that receives
 * multicast is set up with this Q_Key, not a random one. */
struct vbt_mcast {
	const struct vbt_ops *ops;
	struct vbt_dev *dev;
	struct vbt_qp *qp;       /* the attached UD QP (receives), or NULL */
	struct vbt_ah *ah;       /* towards the group; owned by the membership */
	uint32_t remote_qpn;     /* 0xffffff: the multicast QPN */
	uint32_t qkey;           /* the group's Q_Key (from the join) */
	uint8_t mgid[16];        /* the group's GID (RoCE: IPv4-mapped address) */
	uint16_t mlid;
	struct sockaddr_storage group; /* the address joined */
};

/* The multicast QPN (IB spec: all ones). */
#define VBT_MCAST_QPN 0xffffffu

/* ---- the ops table ---------------------------------------------------- */

struct vbt_ops {
	const char *name;

	/* Open a device by attr->ip (rdma_cm address resolution to a device
	 * and port) or attr->name, read its caps into dev->caps (probing
	 * max_inline_data), and start its async-event thread. Blocks briefly.
	 * 0; -ENODEV (no such device / address not on an RDMA device, message
	 * lists what exists); other negative errno. Each handle has its own
	 * device context, so its events are about its own objects only. */
	int (*dev_open)(const struct vbt_dev_attr *attr, struct vbt_dev **out);
	/* Stop the event thread (waits for a running callback), free the
	 * handle. All objects on the device must be destroyed first. Not from
	 * the device's event callback. */
	void (*dev_close)(struct vbt_dev *dev);
	/* Fresh caps (port state, MTU, GID re-read). 0 or negative errno. */
	int (*dev_query)(struct vbt_dev *dev, struct vbt_dev_caps *caps);

	/* Protection domain. pd_free: -EBUSY while objects still use it. */
	int (*pd_alloc)(struct vbt_dev *dev, struct vbt_pd **out);
	int (*pd_free)(struct vbt_pd *pd);

	/* Register [addr, addr+len) with @access (enum vbt_access). The caller
	 * keeps owning the memory, which must outlive the MR. Never on the hot
	 * path. 0, -EINVAL, -ENOMEM, -EFAULT, other negative errno. */
	int (*mr_reg)(struct vbt_pd *pd, void *addr, size_t len, unsigned access,
		      struct vbt_mr **out);
	int (*mr_dereg)(struct vbt_mr *mr);

	/* Completion queue; with attr->channel, cq_arm/cq_wait work. */
	int (*cq_create)(struct vbt_dev *dev, const struct vbt_cq_attr *attr,
			 struct vbt_cq **out);
	/* -EBUSY while a QP still uses the CQ. */
	int (*cq_destroy)(struct vbt_cq *cq);
	/* Non-blocking. Fill up to @n entries; returns how many (0..n) or a
	 * negative errno (the CQ is broken). Hot path: no lock taken by verbus,
	 * no message unless it fails. */
	int (*cq_poll)(struct vbt_cq *cq, struct vbt_wc *wc, int n);
	/* Request a notification for the next completion (any, or solicited
	 * only). Blocking-mode pattern: arm; poll; if empty cq_wait; poll.
	 * -EOPNOTSUPP without a channel. */
	int (*cq_arm)(struct vbt_cq *cq, int solicited_only);
	/* Block up to @timeout_ms (< 0: forever) for the armed notification;
	 * consumes and acknowledges it. 0, -ETIMEDOUT, -EOPNOTSUPP without a
	 * channel, other negative errno. Re-arm before the next wait. */
	int (*cq_wait)(struct vbt_cq *cq, int timeout_ms);
	/* cq_wait over @n (1..8) armed CQs, possibly of different devices:
	 * block up to @timeout_ms for the first notification of any; consumes
	 * and acknowledges every notification already pending on them.
	 * @wake_fd (>= 0: an eventfd another thread writes when it has work
	 * for the waiter; -1: none) ends the wait too: its count is read
	 * (reset) and @n returned, unless a CQ was notified as well.
	 * Returns the index of a CQ that was notified, @n (woken), -ETIMEDOUT,
	 * -EINVAL (bad @n), -EOPNOTSUPP (a CQ without a channel), other
	 * negative errno. Same rules as cq_wait: one waiter per CQ, re-arm
	 * after. */
	int (*cq_wait_any)(struct vbt_cq *const *cqs, unsigned n, int wake_fd, int timeout_ms);

	/* Create a QP in RESET. cap is what is asked for; qp->cap what was
	 * granted. -EINVAL (caps over device limits: the message names them),
	 * -ENOMEM, other negative errno. */
	int (*qp_create)(struct vbt_pd *pd, const struct vbt_qp_init_attr *attr,
			 struct vbt_qp **out);
	/* Transition / change attributes. First validated by
	 * vbi_qp_fsm_check(type, mirrored state, attr->qp_state, mask): a
	 * refused change returns -EINVAL with the validator's message and the
	 * device is not called. Without VB_QP_STATE in @mask the state stays
	 * (an attribute change on the current state). On success the mirror
	 * records from->to and the time the device took. Device failures:
	 * negative errno with the state pair in the message. Blocking (a
	 * system call). */
	int (*qp_modify)(struct vbt_qp *qp, const struct vbt_qp_attr *attr, uint32_t mask);
	/* Read attributes (@mask hints which; the backend may fill more).
	 * Updates the mirrored state if the device reports another one. */
	int (*qp_query)(struct vbt_qp *qp, struct vbt_qp_attr *attr, uint32_t mask);
	/* Destroy (any state). The caller guarantees no concurrent call on the
	 * QP. Outstanding WRs are lost (drain first to get them back: see the
	 * lifecycle engine). 0 or negative errno (the QP stays valid then). */
	int (*qp_destroy)(struct vbt_qp *qp);

	/* Post a chain of WRs. 0, or negative errno with *@bad at the first WR
	 * not posted: -EAGAIN (send queue full: back-pressure), -EINVAL (bad WR,
	 * e.g. inline larger than the QP allows, or UD without ah), other.
	 * The WR structs may be reused when it returns; registered buffers
	 * must stay until the completion (inline ones: until it returns). */
	int (*post_send)(struct vbt_qp *qp, const struct vbt_send_wr *wr,
			 const struct vbt_send_wr **bad);
	/* Same for the receive queue: -EAGAIN when full. */
	int (*post_recv)(struct vbt_qp *qp, const struct vbt_recv_wr *wr,
			 const struct vbt_recv_wr **bad);

	/* Address handle for UD sends. */
	int (*ah_create)(struct vbt_pd *pd, const struct vbt_ah_attr *attr, struct vbt_ah **out);
	int (*ah_destroy)(struct vbt_ah *ah);

	/* Listen for connections of @type on @addr (port 0 = any: the bound
	 * port is in l->port). RC and UC use a reliable CM channel (UC QPs are
	 * wired with the attributes exchanged over it), UD uses SIDR. */
	int (*listen)(struct vbt_dev *dev, enum vb_qp_type type, const struct sockaddr *addr,
		      struct vbt_listener **out);
	/* Stop listening; pending requests are rejected. */
	void (*listener_close)(struct vbt_listener *l);
	/* Wait (up to p->cm_timeout_ms) for one request, bring @qp (ours, of
	 * the listener's type, in RESET or INIT; UD also RTR/RTS) up against
	 * the requester's parameters (INIT->RTR->RTS with explicit attributes,
	 * every step validated), accept, and for RC/UC wait until the
	 * connection is established. The QP stays the caller's; the conn holds
	 * the CM state, both peers' parameters and (UD) an AH to the peer.
	 * -ETIMEDOUT, -ECONNREFUSED, -EPROTO (peer sent garbage, counted and
	 * dropped: the request is rejected), other negative errno; on failure
	 * the QP may be left in any state (reset it to reuse it). */
	int (*accept)(struct vbt_listener *l, struct vbt_qp *qp, const struct vbt_conn_param *p,
		      struct vbt_conn **out);
	/* Resolve @dst (address + route), send our parameters, bring @qp up
	 * against the answer (as accept). Every CM step is bounded by
	 * p->cm_timeout_ms. -ETIMEDOUT, -ECONNREFUSED (rejected / unreachable),
	 * -EHOSTUNREACH, -EPROTO, other negative errno. */
	int (*connect)(struct vbt_dev *dev, struct vbt_qp *qp, const struct sockaddr *dst,
		       const struct vbt_conn_param *p, struct vbt_conn **out);
	/* Disconnect (non-blocking; the peer sees it), free the CM state and
	 * the AH. The QP is untouched and stays the caller's. Also frees a
	 * connection whose set-up is in progress or failed (below). */
	void (*conn_close)(struct vbt_conn *c);

	/* The same set-up in steps that never block, for a thread that drives
	 * many (the node's accept agent): start it, then call conn_step
	 * whenever conn_fd is readable (or at any time: it returns at once)
	 * until it returns 0. The caller bounds the whole with its own
	 * deadline and conn_close()s what did not finish in time. */
	/* A descriptor that is readable when a request may be waiting. */
	int (*listener_fd)(const struct vbt_listener *l);
	/* Take one waiting request, as accept does up to its wait for the
	 * requester's RTU: -EAGAIN (none waiting; @qp untouched); 0 (UD:
	 * accepted, *out is the connection); -EINPROGRESS (RC/UC: *out waits
	 * for the RTU: conn_step it); other negative errno as accept (*out
	 * NULL, the request rejected): -ECONNABORTED when its requester
	 * withdrew it first (it closed while connecting), which conn_step
	 * also returns for one withdrawn while its RTU was awaited.
	 * Thread-safety: one thread per listener. */
	int (*accept_start)(struct vbt_listener *l, struct vbt_qp *qp,
			    const struct vbt_conn_param *p, struct vbt_conn **out);
	/* Start connect: -EINPROGRESS with *out to be stepped, or a negative
	 * errno (*out NULL). */
	int (*connect_start)(struct vbt_dev *dev, struct vbt_qp *qp, const struct sockaddr *dst,
			     const struct vbt_conn_param *p, struct vbt_conn **out);
	/* Handle the connection's waiting CM events: 0 (established: the QP
	 * is in RTS and the conn is as accept/connect return it);
	 * -EINPROGRESS (not yet); or the error accept/connect would return,
	 * again on every later call (the conn is still the caller's:
	 * conn_close it). Thread-safety: the conn's owner only. */
	int (*conn_step)(struct vbt_conn *c);
	/* A descriptor that is readable when conn_step has something to do. */
	int (*conn_fd)(const struct vbt_conn *c);

	/* Join the multicast @group (IPv4 or IPv6 address; rdma_cm maps it to
	 * an MGID) through an rdma_cm id bound to @dev's own address (its
	 * source GID as an IP address), waiting for the join up to
	 * p->cm_timeout_ms. With @qp (UD, on @dev, any state) that QP is
	 * attached to the group and receives its datagrams once it has RTR
	 * and the group's Q_Key (see struct vbt_mcast); without it the
	 * membership only sends. The AH is created on @pd (NULL: @qp's PD).
	 * 0; -EOPNOTSUPP (the device or fabric has no multicast);
	 * -EADDRNOTAVAIL (@dev has no IP address to bind); -ETIMEDOUT; -EINVAL
	 * (not a multicast address, QP not UD); other negative errno. On
	 * failure nothing is left joined or attached. */
	int (*mcast_join)(struct vbt_dev *dev, struct vbt_pd *pd, struct vbt_qp *qp,
			  const struct sockaddr *group, const struct vbt_conn_param *p,
			  struct vbt_mcast **out);
	/* Detach the QP, leave the group, destroy the AH (no send to it may be
	 * outstanding: the device reads the AH when it sends) and free. Blocks
	 * briefly. NULL is a no-op. */
	void (*mcast_leave)(struct vbt_mcast *mc);
};

/* The libibverbs + librdmacm backend. */
extern const struct vbt_ops vbt_verbs_ops;

/* ---- generic helpers (transport/transport.c), built on the ops --------- */

static inline int vbt_dev_open(const struct vbt_ops *ops, const struct vbt_dev_attr *attr,
			       struct vbt_dev **out)
{
	return ops->dev_open(attr, out);
}

static inline int vbt_post_send(struct vbt_qp *qp, const struct vbt_send_wr *wr,
				const struct vbt_send_wr **bad)
{
	return qp->ops->post_send(qp, wr, bad);
}

static inline int vbt_post_recv(struct vbt_qp *qp, const struct vbt_recv_wr *wr,
				const struct vbt_recv_wr **bad)
{
	return qp->ops->post_recv(qp, wr, bad);
}

static inline int vbt_cq_poll(struct vbt_cq *cq, struct vbt_wc *wc, int n)
{
	return cq->ops->cq_poll(cq, wc, n);
}

static inline enum vb_qp_state vbt_qp_state(const struct vbt_qp *qp)
{
	return __atomic_load_n(&qp->state, __ATOMIC_ACQUIRE);
}

/* Defaults + VERBUS_* environment overrides (see struct vbt_conn_param). */
void vbt_conn_param_init(struct vbt_conn_param *p);
/* Dead-peer detection bound in microseconds: 4.096 x 2^timeout x
 * (retry_cnt + 1); retry_cnt 7 means forever: returns UINT64_MAX. */
uint64_t vbt_conn_param_detect_us(const struct vbt_conn_param *p);

/* This side's parameters for @qp: qpn, a fresh random 24-bit PSN, @qkey (0 =
 * the Q_Key a UD QP past RESET already has, else a random non-default Q_Key
 * with the MSB clear), the device's GID and active MTU. */
int vbt_qp_local_peer(struct vbt_qp *qp, uint32_t qkey, struct vbt_peer *out);
/* Address vector towards @remote from @dev's port and GID. */
void vbt_ah_attr_from_peer(const struct vbt_dev *dev, const struct vbt_peer *remote,
			   struct vbt_ah_attr *ah);

/* Explicit transitions (the ones the pre-warmed pool uses), each one
 * qp_modify with the type's required mask:
 *   to_init  RESET->INIT  RC/UC: PKEY_INDEX|PORT|ACCESS_FLAGS; UD: +QKEY
 *                          (local->qkey) instead of ACCESS_FLAGS
 *   to_rtr   INIT->RTR    RC: AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|
 *                          MIN_RNR_TIMER; UC: AV|PATH_MTU|DEST_QPN|RQ_PSN;
 *                          UD: none (@remote may be NULL)
 *   to_rts   RTR->RTS     RC: SQ_PSN|TIMEOUT|RETRY_CNT|RNR_RETRY|
 *                          MAX_QP_RD_ATOMIC; UC/UD: SQ_PSN
 * bring_up runs whichever of them the QP's mirrored state still needs. */
int vbt_qp_to_init(struct vbt_qp *qp, const struct vbt_conn_param *p,
		   const struct vbt_peer *local);
int vbt_qp_to_rtr(struct vbt_qp *qp, const struct vbt_conn_param *p,
		  const struct vbt_peer *local, const struct vbt_peer *remote);
int vbt_qp_to_rts(struct vbt_qp *qp, const struct vbt_conn_param *p,
		  const struct vbt_peer *local);
int vbt_qp_bring_up(struct vbt_qp *qp, const struct vbt_conn_param *p,
		    const struct vbt_peer *local, const struct vbt_peer *remote);
/* Move @qp to @state with only VB_QP_STATE in the mask (RESET, ERR, SQD
 * with EN_SQD_ASYNC_NOTIFY set, SQD->RTS, SQE->RTS, ...). */
int vbt_qp_set_state(struct vbt_qp *qp, enum vb_qp_state state);

/* Query @qp's state every ~1 ms (a driver may apply a transition lazily)
 * until it is @state: 0, or -ETIMEDOUT after @timeout_ms with the last seen
 * state in the message, or the query's negative errno. */
int vbt_qp_wait_state(struct vbt_qp *qp, enum vb_qp_state state, int timeout_ms);

const char *vbt_event_name(enum vbt_event_type t);
const char *vbt_wc_status_str(enum vbt_wc_status s);
const char *vbt_port_state_str(enum vbt_port_state s);

#endif
