/* SPDX-License-Identifier: MIT */
/*
 * The publisher's public functions (facade): attributes with their defaults
 * and VERBUS_* overrides (core/config.c's table) and their check,
 * attribute versioning, argument checks. What they call is proto/pub.c
 * (with pub_ordered.c, pub_frame.c, pub_fanout.c).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "proto/proto.h"
#include "core/config.h"
#include "core/err.h"

/* The variables vb_pub_attr_init() reads: vb_pub_create() refuses a
 * malformed one (attr_init kept the default). */
static const enum vbi_cfg_id pub_vars[] = {
	VBI_CFG_SLOW_SUB, VBI_CFG_SLOW_SUB_MS, VBI_CFG_RETAIN_BYTES,
};

void vb_pub_attr_init(vb_pub_attr_t *a)
{
	unsigned u = 0;

	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->linger_ms = 2000;
	vbi_cfg_unsigned(VBI_CFG_SLOW_SUB, &u);
	a->slow_policy = (vb_slow_policy_t)u;
	vbi_cfg_unsigned(VBI_CFG_SLOW_SUB_MS, &a->slow_sub_ms);
	vbi_cfg_size(VBI_CFG_RETAIN_BYTES, &a->retain_bytes);
}

/* An attribute struct from an older header: what it lacks keeps its
 * default (@def holds the result); NULL: the defaults. NULL on a struct
 * vb_pub_attr_init() did not initialize. */
static const vb_pub_attr_t *attr_full(const vb_pub_attr_t *attr, vb_pub_attr_t *def)
{
	vb_pub_attr_init(def);
	if (!attr)
		return def;
	/* an older header's struct (no slow-subscriber fields): defaults for them */
	if (attr->size < offsetof(vb_pub_attr_t, slow_policy))
		return NULL;
	memcpy(def, attr, attr->size < sizeof(*def) ? attr->size : sizeof(*def));
	def->size = sizeof(*def);
	return def;
}

int vb_pub_create(vb_node_t *node, const char *topic, vb_class_t cls, const vb_pub_attr_t *attr,
		  vb_pub_t **out)
{
	const struct vbi_cfg_var *ms;
	vb_pub_attr_t def;
	int rc;

	if (!node || !out)
		return vbi_err(-EINVAL, "vb_pub_create: NULL argument");
	*out = NULL;
	for (unsigned i = 0; i < sizeof(pub_vars) / sizeof(pub_vars[0]); i++)
		if ((rc = vbi_cfg_check(pub_vars[i])))
			return rc;
	if ((rc = vbi_check_topic(topic)))
		return rc;
	if (cls != VB_ORDERED && cls != VB_FANOUT)
		return vbi_err(-EINVAL, "class %d unknown", (int)cls);
	if (!(attr = attr_full(attr, &def)))
		return vbi_err(-EINVAL, "vb_pub_attr_t not initialized with vb_pub_attr_init()");
	if (attr->ack_quorum && cls != VB_ORDERED)
		return vbi_err(-EINVAL, "ack_quorum needs VB_ORDERED");
	if (attr->ack_quorum > VBI_MAX_PEERS)
		return vbi_err(-EINVAL, "ack_quorum %u out of range (0..%u: a node has at most %u "
			       "peers)", attr->ack_quorum, VBI_MAX_PEERS, VBI_MAX_PEERS);
	if (attr->slow_policy != VB_SLOW_CUT && attr->slow_policy != VB_SLOW_BLOCK)
		return vbi_err(-EINVAL, "slow_policy %d unknown (VB_SLOW_CUT or VB_SLOW_BLOCK)",
			       (int)attr->slow_policy);
	ms = vbi_cfg_var(VBI_CFG_SLOW_SUB_MS); /* one range for the field and the variable */
	if (attr->slow_policy == VB_SLOW_CUT &&
	    (attr->slow_sub_ms < ms->min || attr->slow_sub_ms > ms->max))
		return vbi_err(-EINVAL, "slow_sub_ms %u out of range (%llu..%llu)", attr->slow_sub_ms,
			       (unsigned long long)ms->min, (unsigned long long)ms->max);
	return vbi_pub_create(node, topic, cls, attr, out);
}

int vb_pub_destroy(vb_pub_t *pub)
{
	return pub ? vbi_pub_destroy(pub) : 0;
}

int vb_pub_claim(vb_pub_t *pub, size_t len, vb_claim_t *claim)
{
	if (!pub || !claim)
		return vbi_err(-EINVAL, "NULL argument");
	return vbi_pub_claim(pub, len, claim);
}

int vb_pub_abort(vb_pub_t *pub, vb_claim_t *claim)
{
	if (!pub || !claim || !claim->priv_)
		return vbi_err(-EINVAL, "no claim to abort");
	if (((struct vbi_msg *)claim->priv_)->owner != pub)
		return vbi_err(-EINVAL, "'%s': the claim was made on another publisher", pub->topic);
	vbi_msg_put(claim->priv_);
	claim->priv_ = NULL;
	return 0;
}

int vb_pub_commit(vb_pub_t *pub, vb_claim_t *claim, size_t len, uint64_t *seq_out)
{
	if (!pub || !claim || !claim->priv_)
		return vbi_err(-EINVAL, "no claim to commit");
	if (((struct vbi_msg *)claim->priv_)->owner != pub)
		return vbi_err(-EINVAL, "'%s': the claim was made on another publisher (commit it "
			       "there)", pub->topic);
	if (len > claim->len)
		return vbi_err(-EINVAL, "commit of %zu bytes > %zu claimed", len, claim->len);
	return vbi_pub_commit(pub, claim, len, seq_out);
}

int vb_publish(vb_pub_t *pub, const void *data, size_t len, uint64_t *seq)
{
	if (!pub || (len && !data))
		return vbi_err(-EINVAL, "vb_publish: NULL argument");
	return vbi_publish(pub, data, len, seq);
}

int vb_pub_wait_acked(vb_pub_t *pub, uint64_t seq, int timeout_ms)
{
	if (!pub)
		return vbi_err(-EINVAL, "NULL publisher");
	if (pub->cls != VB_ORDERED || !pub->attr.ack_quorum)
		return vbi_err(-EINVAL, "'%s' has no acknowledgement quorum", pub->topic);
	if (vbi_in_callback(pub->node->ctx))
		return vbi_err(-EDEADLK, "vb_pub_wait_acked() from a callback: the acknowledgements "
			       "are read by this very thread; wait from another thread");
	return vbi_pub_wait_acked(pub, seq, timeout_ms);
}

int vb_pub_subscribers(vb_pub_t *pub)
{
	if (!pub)
		return vbi_err(-EINVAL, "NULL publisher");
	return vbi_pub_subscribers(pub);
}
