/* SPDX-License-Identifier: MIT */
/*
 * The node's public functions (facade): attributes, argument checks and
 * address parsing. Nodes, their listeners, peers and connections are
 * proto/node.c; the diagnostic entry points proto/node_diag.c.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "proto/proto.h"
#include "core/config.h"
#include "core/err.h"

void vb_node_attr_init(vb_node_attr_t *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	vbi_cfg_str(VBI_CFG_NODE_NAME, &a->name); /* a string: never malformed */
}

int vb_node_create(vb_ctx_t *ctx, const vb_node_attr_t *attr, vb_node_t **out)
{
	if (!ctx || !attr || !out || attr->size < sizeof(*attr))
		return vbi_err(-EINVAL, "vb_node_create: NULL argument or attr not initialized");
	return vbi_node_create(ctx, attr, out);
}

int vb_node_destroy(vb_node_t *node)
{
	if (!node)
		return 0;
	if (vbi_in_callback(node->ctx))
		return vbi_err(-EDEADLK, "vb_node_destroy() from a callback: its connections are "
			       "drained by this very thread");
	return vbi_node_destroy(node);
}

uint16_t vb_node_port(const vb_node_t *node)
{
	return node ? node->port : 0;
}

int vb_node_peers(vb_node_t *node)
{
	if (!node)
		return vbi_err(-EINVAL, "NULL node");
	return (int)__atomic_load_n(&node->npeers_up, __ATOMIC_RELAXED);
}

int vb_node_connect(vb_node_t *node, const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	int rc;

	if (!node || !ip || !port)
		return vbi_err(-EINVAL, "vb_node_connect: node, ip and port are required");
	if ((rc = vbi_make_addr(ip, port, &ss)))
		return vbi_err_prefix(rc, "connect to %s:%u", ip, port);
	return vbi_node_connect_addr(node, &ss, NULL);
}

int vb_node_connect_backup(vb_node_t *node, const char *ip, uint16_t port, const char *backup_ip,
			   uint16_t backup_port)
{
	struct sockaddr_storage a, b;
	int rc;

	if (!node || !ip || !port || !backup_ip || !backup_port)
		return vbi_err(-EINVAL, "vb_node_connect_backup: node, both addresses and ports "
				      "are required");
	if ((rc = vbi_make_addr(ip, port, &a)) || (rc = vbi_make_addr(backup_ip, backup_port, &b)))
		return vbi_err_prefix(rc, "connect_backup");
	if (!memcmp(&a, &b, sizeof(a)))
		return vbi_err(-EINVAL, "backup %s:%u is the primary itself", backup_ip,
			       backup_port);
	return vbi_node_connect_backup(node, &a, &b);
}

int vb_node_inject_fault(vb_node_t *node, const char *peer, vb_fault_t fault)
{
	if (!node || fault < VB_FAULT_QP_ERR || fault > VB_FAULT_REM_ACCESS)
		return vbi_err(-EINVAL, "vb_node_inject_fault: NULL node or unknown fault %d",
			       (int)fault);
	return vbi_node_inject_fault(node, peer, fault);
}

int vb_node_peer_mode(vb_node_t *node, const char *peer)
{
	if (!node)
		return vbi_err(-EINVAL, "vb_node_peer_mode: NULL node");
	return vbi_node_peer_mode(node, peer);
}

int vb_node_dump(vb_node_t *node, FILE *f)
{
	if (!node || !f)
		return vbi_err(-EINVAL, "vb_node_dump: NULL argument");
	return vbi_node_dump(node, f);
}
