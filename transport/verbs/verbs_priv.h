/* SPDX-License-Identifier: MIT */
/*
 * Private objects of the verbs backend. Each embeds its core struct from
 * transport/transport.h FIRST; container_of() converts back. Only
 * the verbs backend sources include this.
 */
#ifndef VERBUS_TRANSPORT_VERBS_PRIV_H
#define VERBUS_TRANSPORT_VERBS_PRIV_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/qp_fsm.h"
#include "transport/transport.h"

#ifndef container_of
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

struct vbv_dev {
	struct vbt_dev core;
	struct ibv_context *ctx; /* ours (ibv_open_device), closed at dev_close */
	vbt_event_fn cb;
	void *cb_arg;
	pthread_t ev_thread;
	int stop_fd;             /* eventfd that wakes the event thread */
	uint64_t events;         /* async events seen (event thread only) */
	/* Bumped (release) after a QP or CQ is fully built; the event thread
	 * loads it (acquire) before following an event's qp_context /
	 * cq_context. The kernel cannot report an object before it exists, so
	 * this only makes that ordering explicit (and visible to TSan). */
	unsigned long published;
	/* removal watch (verbs_cm.c): NULL when the device has no address */
	struct rdma_event_channel *watch_ch;
	struct rdma_cm_id *watch_id; /* event thread only once started */
	atomic_bool removed;     /* DEVICE_REMOVAL seen */
};

struct vbv_pd {
	struct vbt_pd core;
	struct ibv_pd *pd;
};

struct vbv_mr {
	struct vbt_mr core;
	struct ibv_mr *mr;
};

struct vbv_cq {
	struct vbt_cq core;
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch; /* NULL without blocking mode */
};

struct vbv_qp {
	struct vbt_qp core;
	struct ibv_qp *qp;
	pthread_mutex_t lock;    /* serializes qp_modify/qp_query + the mirror */
	struct vbi_qp_mirror mirror;
};

struct vbv_ah {
	struct vbt_ah core;
	struct ibv_ah *ah;
};

static inline struct vbv_dev *to_vdev(struct vbt_dev *d) { return container_of(d, struct vbv_dev, core); }
static inline struct vbv_pd *to_vpd(struct vbt_pd *p) { return container_of(p, struct vbv_pd, core); }
static inline struct vbv_mr *to_vmr(struct vbt_mr *m) { return container_of(m, struct vbv_mr, core); }
static inline struct vbv_cq *to_vcq(struct vbt_cq *c) { return container_of(c, struct vbv_cq, core); }
static inline struct vbv_qp *to_vqp(struct vbt_qp *q) { return container_of(q, struct vbv_qp, core); }
static inline struct vbv_ah *to_vah(struct vbt_ah *a) { return container_of(a, struct vbv_ah, core); }

/* verbs_cm.c: connection set-up ops. */
int vbv_listen(struct vbt_dev *dev, enum vb_qp_type type, const struct sockaddr *addr,
	       struct vbt_listener **out);
void vbv_listener_close(struct vbt_listener *l);
int vbv_accept(struct vbt_listener *l, struct vbt_qp *qp, const struct vbt_conn_param *p,
	       struct vbt_conn **out);
int vbv_connect(struct vbt_dev *dev, struct vbt_qp *qp, const struct sockaddr *dst,
		const struct vbt_conn_param *p, struct vbt_conn **out);
void vbv_conn_close(struct vbt_conn *c);
int vbv_listener_fd(const struct vbt_listener *l);
int vbv_accept_start(struct vbt_listener *l, struct vbt_qp *qp, const struct vbt_conn_param *p,
		     struct vbt_conn **out);
int vbv_connect_start(struct vbt_dev *dev, struct vbt_qp *qp, const struct sockaddr *dst,
		      const struct vbt_conn_param *p, struct vbt_conn **out);
int vbv_conn_step(struct vbt_conn *c);
int vbv_conn_fd(const struct vbt_conn *c);

/* verbs_cm.c: the device and port rdma_cm binds @ip to (for dev_open). */
int vbv_resolve_local_ip(const char *ip, char *devname, size_t len, uint8_t *port);

/* verbs_cm.c, shared with verbs_mcast.c: a non-blocking CM event channel
 * (NULL with the error set); wait up to @timeout_ms for event @want (or
 * @alt when not 0) on @ch: 0 with *@out to be acked by the caller, or a
 * negative errno (any other event is acked and mapped to an errno). */
struct rdma_event_channel *vbv_cm_channel(void);
int vbv_cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		  enum rdma_cm_event_type alt, int timeout_ms, struct rdma_cm_event **out);

/* verbs_cm.c: the device-removal watch (see there). vbv_watch_open: 0, or
 * a negative errno when the device has no address to bind (no watch);
 * vbv_watch_removed drains @ch (non-blocking): true once DEVICE_REMOVAL came;
 * vbv_cm_forget_removed lets librdmacm close its context of a removed device
 * (call once no id is bound to it). */
int vbv_watch_open(const char *devname, const char *ip, const uint8_t *gid,
		   struct rdma_event_channel **ch, struct rdma_cm_id **id);
bool vbv_watch_removed(struct rdma_event_channel *ch);
void vbv_watch_close(struct rdma_event_channel *ch, struct rdma_cm_id *id);
void vbv_cm_forget_removed(void);

/* A verbs call that failed with NULL (or -1) + errno: -errno, or -@dflt
 * when the provider left errno at 0 (callers clear it before the call). */
static inline int vbv_errno_or(int dflt)
{
	return errno ? -errno : -dflt;
}

/* A GID that is an IPv4-mapped IPv6 address (::ffff:a.b.c.d: RoCE v2 over
 * IPv4); its last 4 bytes are the address. */
static inline bool vbv_is_v4_mapped(const uint8_t *gid)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(gid, pfx, sizeof(pfx));
}

/* verbs_transport.c: address vector conversion (QP attributes, AHs, CM). */
void vbv_ah_to_ibv(const struct vbt_ah_attr *a, struct ibv_ah_attr *o);
void vbv_ah_from_ibv(const struct ibv_ah_attr *a, struct vbt_ah_attr *o);

/* The ops of vbt_verbs_ops (verbs_transport.c), by the file that holds
 * them; each one's contract is its member's in transport/transport.h. */
/* verbs_dev.c: devices and their async-event thread. */
int vbv_dev_open(const struct vbt_dev_attr *attr, struct vbt_dev **out);
void vbv_dev_close(struct vbt_dev *dev);
int vbv_dev_query(struct vbt_dev *dev, struct vbt_dev_caps *caps);
/* verbs_cq.c: completion queues. */
int vbv_cq_create(struct vbt_dev *dev, const struct vbt_cq_attr *attr, struct vbt_cq **out);
int vbv_cq_destroy(struct vbt_cq *cq);
int vbv_cq_poll(struct vbt_cq *cq, struct vbt_wc *wc, int n);
int vbv_cq_arm(struct vbt_cq *cq, int solicited_only);
int vbv_cq_wait_any(struct vbt_cq *const *cqs, unsigned n, int wake_fd, int timeout_ms);
int vbv_cq_wait(struct vbt_cq *cq, int timeout_ms);
/* verbs_qp.c: queue pairs and posting. */
int vbv_qp_create(struct vbt_pd *pd, const struct vbt_qp_init_attr *attr, struct vbt_qp **out);
int vbv_qp_modify(struct vbt_qp *qp, const struct vbt_qp_attr *attr, uint32_t mask);
int vbv_qp_query(struct vbt_qp *qp, struct vbt_qp_attr *attr, uint32_t mask);
int vbv_qp_destroy(struct vbt_qp *qp);
int vbv_post_send(struct vbt_qp *qp, const struct vbt_send_wr *wr,
		  const struct vbt_send_wr **bad);
int vbv_post_recv(struct vbt_qp *qp, const struct vbt_recv_wr *wr,
		  const struct vbt_recv_wr **bad);

/* verbs_mcast.c: multicast membership ops. */
int vbv_mcast_join(struct vbt_dev *dev, struct vbt_pd *pd, struct vbt_qp *qp,
		   const struct sockaddr *group, const struct vbt_conn_param *p,
		   struct vbt_mcast **out);
void vbv_mcast_leave(struct vbt_mcast *mc);

#endif
