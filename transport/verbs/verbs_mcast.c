/* SPDX-License-Identifier: MIT */
/*
 * Multicast group membership for the verbs backend (mcast_join /
 * mcast_leave), after rdma-core's librdmacm/examples/mckey.c:
 *
 *   rdma_create_id(RDMA_PS_UDP) -> rdma_bind_addr(the device's own IP)
 *   -> rdma_join_multicast(group) -> RDMA_CM_EVENT_MULTICAST_JOIN, whose
 *   ud param carries the group's address vector, QPN (0xffffff) and Q_Key
 *   -> ibv_create_ah (sending) and ibv_attach_mcast(QP, mgid, mlid)
 *   (receiving).
 *
 * rdma_cm never owns the QP (cm_id->qp stays NULL, as in verbs_cm.c), so
 * librdmacm does not attach it: we do, with the MGID/MLID of the join
 * event. The group's Q_Key is fixed by the kernel (cma.c sets
 * RDMA_UDP_QKEY, 0x01234567, for RDMA_PS_UDP groups on RoCE); a receiving
 * QP must hold that Q_Key (rxe drops datagrams whose DETH Q_Key differs
 * from the QP's), which is the caller's business: the membership reports
 * it in vbt_mcast.qkey. On RoCE v2 a full join also makes the netdev a
 * member of the IP group (IGMP), which is what lets the IP stack loop a
 * group datagram back to the local device: a sender and receivers on the
 * same rxe device see each other.
 *
 * The rdma_cm id is bound to the device's own address: the IPv4 address
 * inside its IPv4-mapped source GID (RoCE v2), else the GID as an IPv6
 * address. Every membership has its own event channel. Thread-safety:
 * different memberships are independent; one membership is used by one
 * thread at a time for join/leave.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/log.h"
#include "transport/verbs/verbs_priv.h"

struct vbv_mcast {
	struct vbt_mcast core;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	union ibv_gid mgid;
	bool joined, attached;
};

static void addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	const void *a = sa->sa_family == AF_INET6
				? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
				: (const void *)&((const struct sockaddr_in *)sa)->sin_addr;

	if (!inet_ntop(sa->sa_family, a, buf, (socklen_t)len))
		snprintf(buf, len, "(family %d)", sa->sa_family);
}

/* The device's own IP address, from its source GID. */
static int dev_src_addr(const struct vbt_dev *dev, struct sockaddr_storage *ss)
{
	static const uint8_t zero[16];
	const uint8_t *g = dev->caps.gid;

	memset(ss, 0, sizeof(*ss));
	if (!memcmp(g, zero, 16))
		return vbi_err(-EADDRNOTAVAIL, "%s has no source GID to bind to", dev->caps.name);
	if (vbv_is_v4_mapped(g)) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, g + 12, 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, g, 16);
	}
	return 0;
}

static int check_group(const struct sockaddr *group)
{
	if (group->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)group;

		if (IN_MULTICAST(ntohl(s4->sin_addr.s_addr)))
			return 0;
	} else if (group->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)group;

		if (IN6_IS_ADDR_MULTICAST(&s6->sin6_addr))
			return 0;
	}
	return vbi_err(-EINVAL, "mcast_join: not an IPv4/IPv6 multicast address");
}

static void mc_free(struct vbv_mcast *m)
{
	struct vbt_mcast *mc = &m->core;

	if (m->attached) {
		int rc = ibv_detach_mcast(to_vqp(mc->qp)->qp, &m->mgid, mc->mlid);

		if (rc)
			vbi_warn("ibv_detach_mcast(QP %u): %s", mc->qp->qpn, strerror(rc));
	}
	if (mc->ah && mc->ah->ops->ah_destroy(mc->ah))
		vbi_warn("mcast_leave: %s", vbi_errmsg());
	if (m->joined && rdma_leave_multicast(m->id, (struct sockaddr *)&mc->group))
		vbi_warn("rdma_leave_multicast: %s", strerror(errno));
	if (m->id)
		rdma_destroy_id(m->id);
	if (m->ch)
		rdma_destroy_event_channel(m->ch);
	free(m);
}

/* join: an id on @m's channel bound to the device's own address @src (@ss
 * as text), and the check that rdma_cm bound it to @dev. */
static int mc_bind(struct vbv_mcast *m, struct vbt_dev *dev, struct sockaddr_storage *src,
		   const char *ss)
{
	if (rdma_create_id(m->ch, &m->id, m, RDMA_PS_UDP))
		return vbi_err(errno ? -errno : -ENOMEM, "rdma_create_id: %s", strerror(errno));
	if (rdma_bind_addr(m->id, (struct sockaddr *)src))
		return vbi_err(-EADDRNOTAVAIL, "rdma_bind_addr(%s): %s", ss, strerror(errno));
	if (!m->id->verbs || strcmp(ibv_get_device_name(m->id->verbs->device), dev->caps.name))
		return vbi_err(-EADDRNOTAVAIL, "%s is not an address of %s", ss, dev->caps.name);
	return 0;
}

/* join: join m->core.group (@gs as text), wait for MULTICAST_JOIN, keep the
 * group's MGID, MLID, QPN and Q_Key from it, and make the AH to send to the
 * group on @pd. On failure m->joined says whether a leave is owed. */
static int mc_join_group(struct vbv_mcast *m, struct vbt_dev *dev, struct vbt_pd *pd,
			 const struct vbt_conn_param *p, const char *gs)
{
	struct rdma_cm_event *ev;
	struct rdma_ud_param ud;
	struct vbt_ah_attr aa;
	int rc;

	if (rdma_join_multicast(m->id, (struct sockaddr *)&m->core.group, m)) {
		int e = errno ? errno : EIO;

		return vbi_err(e == ENOSYS || e == ENODEV ? -EOPNOTSUPP : -e,
			       "rdma_join_multicast(%s) on %s: %s", gs, dev->caps.name, strerror(e));
	}
	rc = vbv_cm_expect(m->ch, RDMA_CM_EVENT_MULTICAST_JOIN, 0, p->cm_timeout_ms, &ev);
	if (rc) {
		/* The join is outstanding or failed: leave it so the id can go. */
		m->joined = true;
		vbi_err_prefix(rc, "joining %s on %s", gs, dev->caps.name);
		return rc;
	}
	m->joined = true;
	ud = ev->param.ud;
	rdma_ack_cm_event(ev);
	m->mgid = ud.ah_attr.grh.dgid;
	memcpy(m->core.mgid, m->mgid.raw, 16);
	m->core.mlid = ud.ah_attr.dlid;
	m->core.remote_qpn = ud.qp_num;
	m->core.qkey = ud.qkey;
	vbv_ah_from_ibv(&ud.ah_attr, &aa);
	if ((rc = pd->ops->ah_create(pd, &aa, &m->core.ah))) {
		vbi_err_prefix(rc, "AH for group %s", gs);
		return rc;
	}
	return 0;
}

int vbv_mcast_join(struct vbt_dev *dev, struct vbt_pd *pd, struct vbt_qp *qp,
		   const struct sockaddr *group, const struct vbt_conn_param *p,
		   struct vbt_mcast **out)
{
	struct sockaddr_storage src;
	struct vbv_mcast *m;
	char gs[INET6_ADDRSTRLEN], ss[INET6_ADDRSTRLEN];
	int rc;

	*out = NULL;
	if ((rc = check_group(group)))
		return rc;
	if (qp && (qp->type != VB_QPT_UD || qp->pd->dev != dev))
		return vbi_err(-EINVAL, "mcast_join: QP %u is not a UD QP on %s", qp->qpn,
			       dev->caps.name);
	if (!pd)
		pd = qp ? qp->pd : NULL;
	if (!pd || pd->dev != dev)
		return vbi_err(-EINVAL, "mcast_join: no protection domain on %s for the AH",
			       dev->caps.name);
	if ((rc = dev_src_addr(dev, &src)))
		return rc;
	addr_str(group, gs, sizeof(gs));
	addr_str((struct sockaddr *)&src, ss, sizeof(ss));

	m = calloc(1, sizeof(*m));
	if (!m)
		return vbi_err(-ENOMEM, "out of memory");
	m->core.ops = dev->ops;
	m->core.dev = dev;
	memcpy(&m->core.group, group,
	       group->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	m->ch = vbv_cm_channel();
	if (!m->ch) {
		rc = -ENODEV;
		goto err;
	}
	if ((rc = mc_bind(m, dev, &src, ss)))
		goto err;
	if ((rc = mc_join_group(m, dev, pd, p, gs)))
		goto err;
	if (qp) {
		int e = ibv_attach_mcast(to_vqp(qp)->qp, &m->mgid, m->core.mlid);

		if (e) {
			rc = vbi_err(e > 0 ? -e : -EIO, "ibv_attach_mcast(QP %u, %s): %s", qp->qpn,
				     gs, strerror(e > 0 ? e : EIO));
			goto err;
		}
		m->core.qp = qp;
		m->attached = true;
	}
	vbi_info("joined %s on %s (bound %s): qpn %#x qkey %#x mlid %u%s%u", gs, dev->caps.name,
		 ss, m->core.remote_qpn, m->core.qkey, m->core.mlid, qp ? ", attached QP " : "",
		 qp ? qp->qpn : 0);
	*out = &m->core;
	return 0;
err:
	{
		char msg[VBI_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "%s", vbi_errmsg());
		mc_free(m);
		vbi_err(rc, "%s", msg);
	}
	return rc;
}

void vbv_mcast_leave(struct vbt_mcast *mc)
{
	if (!mc)
		return;
	mc_free(container_of(mc, struct vbv_mcast, core));
}
