/* SPDX-License-Identifier: MIT */
/*
 * Connection set-up for the verbs backend over librdmacm.
 *
 * rdma_cm resolves addresses and routes and carries the handshake; it never
 * owns our QPs (cm_id->qp stays NULL). Each side sends its parameters (QPN,
 * random initial PSN, Q_Key, GID, active MTU: struct vbt_peer) in the CM
 * private data and drives its own QP INIT->RTR->RTS with explicit attributes
 * (vbt_qp_bring_up, every step through the validator). One code path for the
 * three types, and the same one the pre-warmed pool uses:
 *   RC, UC  RDMA_PS_TCP. rdma_cm cannot carry UC, so for UC the reliable CM
 *           exchange is only a side channel; the UC QP is wired by hand from
 *           the exchanged attributes. The active side sees CONNECT_RESPONSE
 *           (no QP on the id), brings its QP up, then rdma_establish()es;
 *           the passive side waits for ESTABLISHED.
 *   UD      RDMA_PS_UDP (SIDR). The SIDR reply's Q_Key is rdma_cm's default
 *           constant (0x01234567); ours is random and travels in the private
 *           data instead. The AH is built from the exchanged GID.
 * Private data ("wire params", 36 bytes, big endian): "VBUS", version, type,
 * mtu, 0, qpn, psn, qkey, gid[16]. A request that does not parse is rejected
 * and counted (-EPROTO).
 *
 * The handshake runs in steps that never block (accept_start,
 * connect_start, then conn_step each time the connection's descriptor is
 * readable), so one thread can drive any number of them; accept and
 * connect are those steps with a bounded wait between them (each step
 * within vbt_conn_param.cm_timeout_ms). Each listener and each connection
 * has its own event channel, so independent connections never read each
 * other's events. Thread-safety: one thread per listener / connection at a
 * time; different ones are independent.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/log.h"
#include "transport/verbs/verbs_priv.h"

#define VBV_WIRE_LEN 36
#define VBV_WIRE_VERSION 1

struct vbv_listener {
	struct vbt_listener core;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	uint64_t bad_requests;   /* rejected: private data did not parse */
};

/* Where a connection's handshake stands (vbv_conn_step drives it). */
enum vbv_step {
	VBV_STEP_ADDR,        /* connect: resolving the address */
	VBV_STEP_ROUTE,       /* connect: resolving the route */
	VBV_STEP_ANSWER,      /* connect: request sent, waiting for the answer */
	VBV_STEP_ESTABLISHED, /* accept: accepted, waiting for the requester's RTU */
	VBV_STEP_DONE,
};

/* One connection. Owner: the thread that started it (accept_start,
 * connect_start), or the one it was handed to; one at a time. */
struct vbv_conn {
	struct vbt_conn core;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	enum vb_qp_type type;
	enum vbv_step step;
	bool active;                 /* we connected (else accepted) */
	int failed;                  /* the step's error, once it failed */
	struct vbt_conn_param p;     /* the knobs it was started with */
};

static void put32(uint8_t *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return ntohl(v);
}

static void wire_put(const struct vbt_peer *peer, uint8_t *w)
{
	memcpy(w, "VBUS", 4);
	w[4] = VBV_WIRE_VERSION;
	w[5] = peer->type;
	w[6] = peer->mtu;
	w[7] = 0;
	put32(w + 8, peer->qpn);
	put32(w + 12, peer->psn);
	put32(w + 16, peer->qkey);
	memcpy(w + 20, peer->gid, 16);
}

/* Peer input: never trusted. */
static int wire_get(const void *data, size_t len, enum vb_qp_type want, struct vbt_peer *peer)
{
	const uint8_t *w = data;

	if (!w || len < VBV_WIRE_LEN || memcmp(w, "VBUS", 4))
		return vbi_err(-EPROTO, "peer sent no verbus parameters (%zu bytes)", len);
	if (w[4] != VBV_WIRE_VERSION)
		return vbi_err(-EPROTO, "peer speaks wire version %u, we %u", w[4],
			       VBV_WIRE_VERSION);
	memset(peer, 0, sizeof(*peer));
	peer->type = w[5];
	peer->mtu = w[6];
	peer->qpn = get32(w + 8);
	peer->psn = get32(w + 12);
	peer->qkey = get32(w + 16);
	memcpy(peer->gid, w + 20, 16);
	if (peer->type != (uint8_t)want)
		return vbi_err(-EPROTO, "peer QP type %s, expected %s",
			       vbi_qp_type_name((enum vb_qp_type)peer->type),
			       vbi_qp_type_name(want));
	if (peer->qpn > 0xffffff || peer->qpn < 2 || peer->psn > 0xffffff ||
	    peer->mtu < VBT_MTU_256 || peer->mtu > VBT_MTU_4096)
		return vbi_err(-EPROTO, "peer parameters out of range (qpn %u psn %u mtu %u)",
			       peer->qpn, peer->psn, peer->mtu);
	return 0;
}

static int cm_errno(int dflt)
{
	return errno ? -errno : -dflt;
}

static int ev_to_err(const struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return -EHOSTUNREACH;
	case RDMA_CM_EVENT_DISCONNECTED:
		return -ECONNRESET;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return -ENODEV;
	default:
		return -EPROTO;
	}
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Next event on @ch within @timeout_ms (< 0: forever). The caller acks it. */
static int cm_next(struct rdma_event_channel *ch, int timeout_ms, struct rdma_cm_event **ev)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (!rdma_get_cm_event(ch, ev))
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return vbi_err(cm_errno(EIO), "rdma_get_cm_event: %s", strerror(errno));
		int left = timeout_ms < 0 ? -1 : timeout_ms - (int)ms_since(&t0);
		if (timeout_ms >= 0 && left <= 0)
			return vbi_err(-ETIMEDOUT, "no CM event within %d ms", timeout_ms);
		if (poll(&pfd, 1, left) < 0 && errno != EINTR)
			return vbi_err(-errno, "poll on CM channel: %s", strerror(errno));
	}
}

/* Wait for @want (or @alt when not 0); anything else is an error, acked. */
static int cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		     enum rdma_cm_event_type alt, int timeout_ms, struct rdma_cm_event **out)
{
	struct rdma_cm_event *ev;
	int rc = cm_next(ch, timeout_ms, &ev);

	if (rc)
		return vbi_err_prefix(rc, "waiting for %s", rdma_event_str(want));
	if (ev->event == want || (alt && ev->event == alt)) {
		*out = ev;
		return 0;
	}
	rc = vbi_err(ev_to_err(ev), "expected %s, got %s (status %d)", rdma_event_str(want),
		     rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	return rc;
}

static struct rdma_event_channel *cm_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (!ch) {
		vbi_err(cm_errno(ENODEV), "rdma_create_event_channel: %s (is rdma_ucm loaded?)",
			strerror(errno));
		return NULL;
	}
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		vbi_err(-errno, "CM channel fd: %s", strerror(errno));
		rdma_destroy_event_channel(ch);
		return NULL;
	}
	return ch;
}

static enum rdma_port_space ps_of(enum vb_qp_type t)
{
	return t == VB_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
}

static socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int vbv_resolve_local_ip(const char *ip, char *devname, size_t len, uint8_t *port)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST }, *ai = NULL;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	int rc;

	if ((rc = getaddrinfo(ip, NULL, &hints, &ai)))
		return vbi_err(-EINVAL, "'%s' is not a numeric IP address: %s", ip,
			       gai_strerror(rc));
	ch = cm_channel();
	if (!ch) {
		rc = -ENODEV;
		goto out;
	}
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		rc = vbi_err(cm_errno(ENOMEM), "rdma_create_id: %s", strerror(errno));
		goto out;
	}
	if (rdma_bind_addr(id, ai->ai_addr)) {
		rc = vbi_err(cm_errno(EADDRNOTAVAIL), "rdma_bind_addr(%s): %s", ip,
			     strerror(errno));
		goto out;
	}
	if (!id->verbs) {
		rc = vbi_err(-ENODEV, "%s is not an address of an RDMA device", ip);
		goto out;
	}
	snprintf(devname, len, "%s", ibv_get_device_name(id->verbs->device));
	*port = id->port_num;
	rc = 0;
out:
	if (id)
		rdma_destroy_id(id);
	if (ch)
		rdma_destroy_event_channel(ch);
	freeaddrinfo(ai);
	return rc;
}

int vbv_listen(struct vbt_dev *dev, enum vb_qp_type type, const struct sockaddr *addr,
	       struct vbt_listener **out)
{
	struct vbv_listener *l;
	int rc;

	*out = NULL;
	if ((unsigned)type >= VB_QPT__COUNT)
		return vbi_err(-EINVAL, "listen: unknown QP type %d", (int)type);
	l = calloc(1, sizeof(*l));
	if (!l)
		return vbi_err(-ENOMEM, "out of memory");
	l->ch = cm_channel();
	if (!l->ch) {
		rc = -ENODEV;
		goto err_free;
	}
	if (rdma_create_id(l->ch, &l->id, l, ps_of(type))) {
		rc = vbi_err(cm_errno(ENOMEM), "rdma_create_id: %s", strerror(errno));
		goto err_ch;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)addr)) {
		rc = vbi_err(cm_errno(EADDRNOTAVAIL), "rdma_bind_addr: %s", strerror(errno));
		goto err_id;
	}
	if (rdma_listen(l->id, 16)) {
		rc = vbi_err(cm_errno(EIO), "rdma_listen: %s", strerror(errno));
		goto err_id;
	}
	if (l->id->verbs && strcmp(ibv_get_device_name(l->id->verbs->device), dev->caps.name))
		vbi_warn("listening through %s, QPs on %s",
			 ibv_get_device_name(l->id->verbs->device), dev->caps.name);
	l->core.ops = dev->ops;
	l->core.dev = dev;
	l->core.type = type;
	l->core.port = ntohs(rdma_get_src_port(l->id));
	*out = &l->core;
	return 0;

err_id:
	rdma_destroy_id(l->id);
err_ch:
	rdma_destroy_event_channel(l->ch);
err_free:
	free(l);
	return rc;
}

void vbv_listener_close(struct vbt_listener *lc)
{
	struct vbv_listener *l;

	if (!lc)
		return;
	l = container_of(lc, struct vbv_listener, core);
	/* Requests not taken by accept() die with the id: the peer times out. */
	rdma_destroy_id(l->id);
	rdma_destroy_event_channel(l->ch);
	free(l);
}

static void conn_param(const struct vbt_conn_param *p, const struct vbt_qp *qp,
		       const uint8_t *wire, struct rdma_conn_param *cp)
{
	memset(cp, 0, sizeof(*cp));
	cp->private_data = wire;
	cp->private_data_len = VBV_WIRE_LEN;
	cp->responder_resources = p->max_dest_rd_atomic;
	cp->initiator_depth = p->max_rd_atomic;
	cp->flow_control = 1;
	cp->retry_count = p->retry_cnt;
	cp->rnr_retry_count = p->rnr_retry;
	cp->qp_num = qp->qpn;
}

static struct vbv_conn *conn_new(struct vbt_qp *qp, const struct vbt_conn_param *p)
{
	struct vbv_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		vbi_err(-ENOMEM, "out of memory");
		return NULL;
	}
	c->core.ops = qp->ops;
	c->core.qp = qp;
	c->type = qp->type;
	c->p = *p;
	return c;
}

/* Free a connection that never completed (no disconnect: there is none). */
static void conn_free(struct vbv_conn *c)
{
	if (c->core.ah)
		c->core.qp->ops->ah_destroy(c->core.ah);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
	free(c);
}

static void conn_log(const struct vbv_conn *c, const char *what)
{
	vbi_info("%s %s: local qpn %u psn %u <-> remote qpn %u psn %u", what,
		 vbi_qp_type_name(c->type), c->core.local.qpn, c->core.local.psn,
		 c->core.remote.qpn, c->core.remote.psn);
}

static int conn_make_ah(struct vbv_conn *c)
{
	struct vbt_qp *qp = c->core.qp;
	struct vbt_ah_attr aa;

	vbt_ah_attr_from_peer(qp->pd->dev, &c->core.remote, &aa);
	return qp->ops->ah_create(qp->pd, &aa, &c->core.ah);
}

/* ---- set-up in steps (non-blocking) ------------------------------------- */

/* Next event on the connection's channel without waiting: 0 with *ev (to
 * be acked), -EINPROGRESS when none is waiting, or an error. */
static int conn_event(struct vbv_conn *c, struct rdma_cm_event **ev)
{
	if (!rdma_get_cm_event(c->ch, ev))
		return 0;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return -EINPROGRESS;
	return vbi_err(cm_errno(EIO), "rdma_get_cm_event: %s", strerror(errno));
}

/* The requester of an accepted connection gave it up before it was
 * established (it closed while connecting: the kernel's CM sends a REJ
 * when such an id is destroyed): -ECONNABORTED, @ev acked. */
static int conn_withdrawn(struct rdma_cm_event *ev)
{
	int rc = vbi_err(-ECONNABORTED,
			 "the requester withdrew its request after our answer (%s, status %d)",
			 rdma_event_str(ev->event), ev->status);

	rdma_ack_cm_event(ev);
	return rc;
}

/* An event the step did not expect: mapped to an errno, acked. */
static int conn_unexpected(struct rdma_cm_event *ev, const char *waiting_for)
{
	int rc = vbi_err(ev_to_err(ev), "waiting for %s, got %s (status %d)", waiting_for,
			 rdma_event_str(ev->event), ev->status);

	rdma_ack_cm_event(ev);
	return rc;
}

int vbv_accept_start(struct vbt_listener *lc, struct vbt_qp *qp, const struct vbt_conn_param *p,
		     struct vbt_conn **out)
{
	struct vbv_listener *l = container_of(lc, struct vbv_listener, core);
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct vbv_conn *c;
	uint8_t wire[VBV_WIRE_LEN];
	int rc;

	*out = NULL;
	if (qp->type != lc->type)
		return vbi_err(-EINVAL, "accept: %s QP on a %s listener",
			       vbi_qp_type_name(qp->type), vbi_qp_type_name(lc->type));
	if (rdma_get_cm_event(l->ch, &ev)) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -EAGAIN;
		return vbi_err(cm_errno(EIO), "rdma_get_cm_event: %s", strerror(errno));
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		return conn_unexpected(ev, "a connection request");
	c = conn_new(qp, p);
	if (!c) {
		rdma_reject(ev->id, NULL, 0);
		rdma_destroy_id(ev->id);
		rdma_ack_cm_event(ev);
		return -ENOMEM;
	}
	c->id = ev->id;
	if (qp->type == VB_QPT_UD)
		rc = wire_get(ev->param.ud.private_data, ev->param.ud.private_data_len, qp->type,
			      &c->core.remote);
	else
		rc = wire_get(ev->param.conn.private_data, ev->param.conn.private_data_len,
			      qp->type, &c->core.remote);
	rdma_ack_cm_event(ev);
	if (rc) {
		l->bad_requests++;
		vbi_warn("rejecting a connection request (%llu so far): %s",
			 (unsigned long long)l->bad_requests, vbi_errmsg());
		goto err_reject;
	}
	c->ch = cm_channel();
	if (!c->ch) {
		rc = -ENODEV;
		goto err_reject;
	}
	if (rdma_migrate_id(c->id, c->ch)) {
		rc = vbi_err(cm_errno(EIO), "rdma_migrate_id: %s", strerror(errno));
		goto err_reject;
	}
	if ((rc = vbt_qp_local_peer(qp, p->qkey, &c->core.local)))
		goto err_reject;
	if ((rc = vbt_qp_bring_up(qp, p, &c->core.local, &c->core.remote)))
		goto err_reject;
	if (qp->type == VB_QPT_UD && (rc = conn_make_ah(c)))
		goto err_reject;
	wire_put(&c->core.local, wire);
	conn_param(p, qp, wire, &cp);
	if (rdma_accept(c->id, &cp)) {
		if (errno == EINVAL && qp->type != VB_QPT_UD)
			/* the kernel's CM no longer holds the request: its
			 * requester's REJ came before our answer (ucma drops
			 * the events of a request not yet taken and lets the
			 * accept fail: drivers/infiniband/core/ucma.c) */
			rc = vbi_err(-ECONNABORTED, "the requester withdrew its request before "
						    "it was accepted (rdma_accept: %s)",
				     strerror(errno));
		else
			rc = vbi_err(cm_errno(EIO), "rdma_accept: %s", strerror(errno));
		goto err_reject;
	}
	*out = &c->core;
	if (qp->type != VB_QPT_UD) {
		c->step = VBV_STEP_ESTABLISHED; /* the requester's RTU */
		return -EINPROGRESS;
	}
	c->step = VBV_STEP_DONE;
	conn_log(c, "accepted");
	return 0;

err_reject:
	rdma_reject(c->id, NULL, 0);
	conn_free(c);
	return rc;
}

int vbv_connect_start(struct vbt_dev *dev, struct vbt_qp *qp, const struct sockaddr *dst,
		      const struct vbt_conn_param *p, struct vbt_conn **out)
{
	struct sockaddr_storage ss;
	struct vbv_conn *c;
	int rc;

	*out = NULL;
	if (qp->pd->dev != dev)
		return vbi_err(-EINVAL, "connect: QP %u is not on device %s", qp->qpn,
			       dev->caps.name);
	c = conn_new(qp, p);
	if (!c)
		return -ENOMEM;
	c->active = true;
	c->ch = cm_channel();
	if (!c->ch) {
		rc = -ENODEV;
		goto err;
	}
	if (rdma_create_id(c->ch, &c->id, c, ps_of(qp->type))) {
		rc = vbi_err(cm_errno(ENOMEM), "rdma_create_id: %s", strerror(errno));
		goto err;
	}
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, dst, sa_len(dst));
	if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&ss, p->cm_timeout_ms)) {
		rc = vbi_err(cm_errno(EHOSTUNREACH), "rdma_resolve_addr: %s", strerror(errno));
		goto err;
	}
	c->step = VBV_STEP_ADDR;
	*out = &c->core;
	return -EINPROGRESS;
err:
	conn_free(c);
	return rc;
}

/* connect, route resolved: warn when it leaves from another device than
 * the QP's; bring the QP as far as it goes without the peer (UD to RTS,
 * RC/UC to INIT) and send our parameters. */
static int connect_request(struct vbv_conn *c)
{
	struct vbt_qp *qp = c->core.qp;
	struct rdma_conn_param cp;
	uint8_t wire[VBV_WIRE_LEN];
	int rc;

	if (c->id->verbs && strcmp(ibv_get_device_name(c->id->verbs->device), qp->pd->dev->caps.name))
		vbi_warn("route to the peer goes through %s, the QP is on %s",
			 ibv_get_device_name(c->id->verbs->device), qp->pd->dev->caps.name);
	if ((rc = vbt_qp_local_peer(qp, c->p.qkey, &c->core.local)))
		return rc;
	if (qp->type == VB_QPT_UD)
		rc = vbt_qp_bring_up(qp, &c->p, &c->core.local, NULL);
	else if (vbt_qp_state(qp) == VB_QPS_RESET)
		rc = vbt_qp_to_init(qp, &c->p, &c->core.local);
	else if (vbt_qp_state(qp) != VB_QPS_INIT)
		rc = vbi_err(-EINVAL, "connect: QP %u is in %s (RESET or INIT expected)",
			     qp->qpn, vbi_qp_state_name(vbt_qp_state(qp)));
	if (rc)
		return rc;
	wire_put(&c->core.local, wire);
	conn_param(&c->p, qp, wire, &cp);
	if (rdma_connect(c->id, &cp))
		return vbi_err(cm_errno(EIO), "rdma_connect: %s", strerror(errno));
	return 0;
}

/* connect, the answer: UD's SIDR reply (ESTABLISHED; its QPN must match
 * the private data's) gives the AH; RC/UC's CONNECT_RESPONSE brings our QP
 * up, then rdma_establish() sends the RTU (no QP on the id: librdmacm
 * leaves it to us). */
static int connect_answer(struct vbv_conn *c, struct rdma_cm_event *ev)
{
	struct vbt_qp *qp = c->core.qp;
	enum rdma_cm_event_type got = ev->event;
	int rc;

	if (qp->type == VB_QPT_UD) {
		rc = wire_get(ev->param.ud.private_data, ev->param.ud.private_data_len, qp->type,
			      &c->core.remote);
		if (!rc && ev->param.ud.qp_num != c->core.remote.qpn)
			rc = vbi_err(-EPROTO, "SIDR reply QPN %u, private data says %u",
				     ev->param.ud.qp_num, c->core.remote.qpn);
		rdma_ack_cm_event(ev);
		return rc ? rc : conn_make_ah(c);
	}
	rc = wire_get(ev->param.conn.private_data, ev->param.conn.private_data_len, qp->type,
		      &c->core.remote);
	rdma_ack_cm_event(ev);
	if (rc || (rc = vbt_qp_bring_up(qp, &c->p, &c->core.local, &c->core.remote)))
		return rc;
	if (got == RDMA_CM_EVENT_CONNECT_RESPONSE && rdma_establish(c->id))
		return vbi_err(cm_errno(EIO), "rdma_establish: %s", strerror(errno));
	return 0;
}

/* One event of the handshake, in the step it belongs to. */
static int conn_advance(struct vbv_conn *c, struct rdma_cm_event *ev)
{
	int rc;

	switch (c->step) {
	case VBV_STEP_ADDR:
		if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
			return conn_unexpected(ev, "ADDR_RESOLVED");
		rdma_ack_cm_event(ev);
		if (rdma_resolve_route(c->id, c->p.cm_timeout_ms))
			return vbi_err(cm_errno(EHOSTUNREACH), "rdma_resolve_route: %s",
				       strerror(errno));
		c->step = VBV_STEP_ROUTE;
		return 0;
	case VBV_STEP_ROUTE:
		if (ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
			return conn_unexpected(ev, "ROUTE_RESOLVED");
		rdma_ack_cm_event(ev);
		if ((rc = connect_request(c)))
			return rc;
		c->step = VBV_STEP_ANSWER;
		return 0;
	case VBV_STEP_ANSWER:
		if (ev->event != RDMA_CM_EVENT_ESTABLISHED &&
		    (c->type == VB_QPT_UD || ev->event != RDMA_CM_EVENT_CONNECT_RESPONSE))
			return conn_unexpected(ev, c->type == VB_QPT_UD ? "the SIDR reply"
									: "CONNECT_RESPONSE");
		if ((rc = connect_answer(c, ev)))
			return rc;
		c->step = VBV_STEP_DONE;
		conn_log(c, "connected");
		return 0;
	case VBV_STEP_ESTABLISHED:
		if (ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_DISCONNECTED)
			return conn_withdrawn(ev);
		if (ev->event != RDMA_CM_EVENT_ESTABLISHED)
			return conn_unexpected(ev, "ESTABLISHED");
		rdma_ack_cm_event(ev);
		c->step = VBV_STEP_DONE;
		conn_log(c, "accepted");
		return 0;
	default:
		rdma_ack_cm_event(ev); /* after the handshake: the owner's business */
		return 0;
	}
}

int vbv_conn_step(struct vbt_conn *cc)
{
	struct vbv_conn *c = container_of(cc, struct vbv_conn, core);
	struct rdma_cm_event *ev;
	int rc;

	if (c->failed)
		return c->failed;
	while (c->step != VBV_STEP_DONE) {
		if ((rc = conn_event(c, &ev)) == -EINPROGRESS)
			return rc;
		if (rc || (rc = conn_advance(c, ev))) {
			c->failed = rc < 0 ? rc : -EIO;
			return c->failed;
		}
	}
	return 0;
}

int vbv_conn_fd(const struct vbt_conn *cc)
{
	return container_of(cc, const struct vbv_conn, core)->ch->fd;
}

int vbv_listener_fd(const struct vbt_listener *lc)
{
	return container_of(lc, const struct vbv_listener, core)->ch->fd;
}

/* ---- the blocking forms, on the steps ----------------------------------- */

/* Wait up to @ms (>= 0) for @fd to be readable. */
static void fd_wait(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	(void)poll(&pfd, 1, ms);
}

/* Drive @c until it is done, each wait bounded by @step_ms(), failing with
 * -ETIMEDOUT when one passes with nothing new. On failure @c is freed. */
static int conn_finish(struct vbv_conn *c, const struct vbt_conn_param *p,
		       const struct timespec *t0, int (*step_ms)(const struct vbt_conn_param *,
								 const struct timespec *))
{
	int rc;

	for (;;) {
		struct timespec ts;
		int ms = step_ms(p, t0);
		enum vbv_step was = c->step;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		while ((rc = vbv_conn_step(&c->core)) == -EINPROGRESS && c->step == was &&
		       ms_since(&ts) < ms)
			fd_wait(c->ch->fd, ms - (int)ms_since(&ts));
		if (rc != -EINPROGRESS)
			break;
		if (c->step == was) {
			rc = vbi_err(-ETIMEDOUT, "no CM event within %d ms (%s)", ms,
				     c->active ? "connecting" : "accepting");
			break;
		}
	}
	if (rc)
		vbv_conn_close(&c->core);
	return rc;
}

/* accept: every step waits cm_timeout_ms. */
static int accept_step_ms(const struct vbt_conn_param *p, const struct timespec *t0)
{
	(void)t0;
	return p->cm_timeout_ms;
}

int vbv_accept(struct vbt_listener *lc, struct vbt_qp *qp, const struct vbt_conn_param *p,
	       struct vbt_conn **out)
{
	int wait_ms = p->accept_wait_ms > 0 ? p->accept_wait_ms : p->cm_timeout_ms;
	struct timespec t0;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((rc = vbv_accept_start(lc, qp, p, out)) == -EAGAIN) {
		if (ms_since(&t0) >= wait_ms)
			return vbi_err(-ETIMEDOUT, "no connection request within %d ms", wait_ms);
		fd_wait(vbv_listener_fd(lc), wait_ms - (int)ms_since(&t0));
	}
	if (rc != -EINPROGRESS)
		return rc;
	if (!*out)
		return vbi_err(-EIO, "accept: in progress without a connection");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = conn_finish(container_of(*out, struct vbv_conn, core), p, &t0, accept_step_ms);
	if (rc)
		*out = NULL;
	return rc;
}

/* connect: the wait allowed for the next CM step, started at @t0: cm_timeout_ms,
 * and no more than what is left of connect_budget_ms (at least 1 ms, so the
 * step fails by its own timeout when none is left). */
static int step_ms(const struct vbt_conn_param *p, const struct timespec *t0)
{
	int64_t left;

	if (p->connect_budget_ms <= 0)
		return p->cm_timeout_ms;
	left = (int64_t)p->connect_budget_ms - (int64_t)ms_since(t0);
	if (left < 1)
		left = 1;
	return left < p->cm_timeout_ms ? (int)left : p->cm_timeout_ms;
}

int vbv_connect(struct vbt_dev *dev, struct vbt_qp *qp, const struct sockaddr *dst,
		const struct vbt_conn_param *p, struct vbt_conn **out)
{
	struct timespec t0;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = vbv_connect_start(dev, qp, dst, p, out);
	if (rc != -EINPROGRESS)
		return rc;
	if (!*out)
		return vbi_err(-EIO, "connect: in progress without a connection");
	rc = conn_finish(container_of(*out, struct vbv_conn, core), p, &t0, step_ms);
	if (rc)
		*out = NULL;
	return rc;
}

void vbv_conn_close(struct vbt_conn *cc)
{
	struct vbv_conn *c;

	if (!cc)
		return;
	c = container_of(cc, struct vbv_conn, core);
	/* sends DREQ (or, before the handshake completed, the CM's REJ when
	 * the id goes); does not wait for the reply */
	if (c->type != VB_QPT_UD && (c->step == VBV_STEP_DONE || c->step == VBV_STEP_ESTABLISHED ||
				     c->step == VBV_STEP_ANSWER))
		rdma_disconnect(c->id);
	if (cc->ah && cc->ops->ah_destroy(cc->ah))
		vbi_warn("conn_close: %s", vbi_errmsg());
	cc->ah = NULL;
	conn_free(c);
}

struct rdma_event_channel *vbv_cm_channel(void)
{
	return cm_channel();
}

int vbv_cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		  enum rdma_cm_event_type alt, int timeout_ms, struct rdma_cm_event **out)
{
	return cm_expect(ch, want, alt, timeout_ms, out);
}

/* ---- device removal watch ------------------------------------------------------------- */

/*
 * rdma_cm reports a device's unregistration (rdma link delete, hot-unplug)
 * as RDMA_CM_EVENT_DEVICE_REMOVAL to every id bound to it; devices that
 * cannot disassociate (rxe, siw) send no async event, and the kernel waits
 * until every user has closed the device. So each device handle binds one
 * id to an address of its own (@ip, else the IPv4 of a v4-mapped @gid) on a
 * channel of its own, polled by the device's event thread.
 */
int vbv_watch_open(const char *devname, const char *ip, const uint8_t *gid,
		   struct rdma_event_channel **chp, struct rdma_cm_id **idp)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct sockaddr_storage ss;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	int rc;

	*chp = NULL;
	*idp = NULL;
	memset(&ss, 0, sizeof(ss));
	if (ip && *ip) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1)
			s4->sin_family = AF_INET;
		else if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1)
			s6->sin6_family = AF_INET6;
	} else if (!memcmp(gid, pfx, sizeof(pfx))) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, gid + 12, 4);
	}
	if (!ss.ss_family)
		return vbi_err(-EAFNOSUPPORT, "%s: no IP address to watch it by", devname);
	if (!(ch = cm_channel()))
		return vbi_err_prefix(-ENODEV, "%s: removal watch", devname);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		rc = vbi_err(cm_errno(ENOMEM), "%s: rdma_create_id: %s", devname, strerror(errno));
		goto err;
	}
	if (rdma_bind_addr(id, (struct sockaddr *)&ss)) {
		rc = vbi_err(cm_errno(EADDRNOTAVAIL), "%s: rdma_bind_addr: %s", devname,
			     strerror(errno));
		goto err;
	}
	if (!id->verbs || strcmp(ibv_get_device_name(id->verbs->device), devname)) {
		rc = vbi_err(-ENODEV, "%s: its address is bound to %s", devname,
			     id->verbs ? ibv_get_device_name(id->verbs->device) : "no device");
		goto err;
	}
	*chp = ch;
	*idp = id;
	return 0;
err:
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return rc;
}

bool vbv_watch_removed(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	bool removed = false;

	while (!rdma_get_cm_event(ch, &ev)) {
		removed |= ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL;
		rdma_ack_cm_event(ev);
	}
	return removed;
}

void vbv_watch_close(struct rdma_event_channel *ch, struct rdma_cm_id *id)
{
	if (id)
		rdma_destroy_id(id);
	if (ch)
		rdma_destroy_event_channel(ch);
}

void vbv_cm_forget_removed(void)
{
	/* librdmacm keeps a device context per device and closes a removed
	 * one only when it re-reads the device list with no id left on it */
	struct ibv_context **l = rdma_get_devices(NULL);

	if (l)
		rdma_free_devices(l);
}
