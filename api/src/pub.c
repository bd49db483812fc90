/* SPDX-License-Identifier: MIT */
/*
 * The publisher's public functions (facade): attributes with their defaults
 * and VERBUS_* overrides, attribute versioning, argument checks. What they
 * call is proto/pub.c (with pub_ordered.c, pub_frame.c, pub_fanout.c).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "core/err.h"
#include "core/log.h"

#define SLOW_SUB_MS_MIN 10u
#define SLOW_SUB_MS_MAX 3600000u

static void env_pub(vb_pub_attr_t *a)
{
	const char *v = getenv("VERBUS_SLOW_SUB");
	char *end;

	if (v && *v) {
		if (!strcmp(v, "cut"))
			a->slow_policy = VB_SLOW_CUT;
		else if (!strcmp(v, "block"))
			a->slow_policy = VB_SLOW_BLOCK;
		else
			vbi_warn("VERBUS_SLOW_SUB='%s' ignored (cut or block)", v);
	}
	v = getenv("VERBUS_SLOW_SUB_MS");
	if (v && *v) {
		unsigned long n = strtoul(v, &end, 10);

		if (*end || n < SLOW_SUB_MS_MIN || n > SLOW_SUB_MS_MAX)
			vbi_warn("VERBUS_SLOW_SUB_MS='%s' ignored (%u..%u)", v, SLOW_SUB_MS_MIN,
				 SLOW_SUB_MS_MAX);
		else
			a->slow_sub_ms = (unsigned)n;
	}
	v = getenv("VERBUS_RETAIN_BYTES");
	if (v && *v) {
		unsigned long long n = strtoull(v, &end, 10);

		if (*end)
			vbi_warn("VERBUS_RETAIN_BYTES='%s' ignored (bytes, 0 = no bound)", v);
		else
			a->retain_bytes = (size_t)n;
	}
}

void vb_pub_attr_init(vb_pub_attr_t *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->linger_ms = 2000;
	a->slow_policy = VB_SLOW_CUT;
	a->slow_sub_ms = 2000;
	a->retain_bytes = (size_t)64 << 20;
	env_pub(a);
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
	vb_pub_attr_t def;
	int rc;

	if (!node || !out)
		return vbi_err(-EINVAL, "vb_pub_create: NULL argument");
	*out = NULL;
	if ((rc = vbi_check_topic(topic)))
		return rc;
	if (cls != VB_ORDERED && cls != VB_FANOUT)
		return vbi_err(-EINVAL, "class %d unknown", (int)cls);
	if (!(attr = attr_full(attr, &def)))
		return vbi_err(-EINVAL, "vb_pub_attr_t not initialized with vb_pub_attr_init()");
	if (attr->ack_quorum && cls != VB_ORDERED)
		return vbi_err(-EINVAL, "ack_quorum needs VB_ORDERED");
	if (attr->slow_policy != VB_SLOW_CUT && attr->slow_policy != VB_SLOW_BLOCK)
		return vbi_err(-EINVAL, "slow_policy %d unknown (VB_SLOW_CUT or VB_SLOW_BLOCK)",
			       (int)attr->slow_policy);
	if (attr->slow_policy == VB_SLOW_CUT &&
	    (attr->slow_sub_ms < SLOW_SUB_MS_MIN || attr->slow_sub_ms > SLOW_SUB_MS_MAX))
		return vbi_err(-EINVAL, "slow_sub_ms %u out of range (%u..%u)", attr->slow_sub_ms,
			       SLOW_SUB_MS_MIN, SLOW_SUB_MS_MAX);
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
