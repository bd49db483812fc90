/* SPDX-License-Identifier: MIT */
/*
 * The subscriber's public functions (facade): attributes and their
 * versioning, argument checks, the statistics struct. Subscribers
 * themselves are proto/sub.c.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "proto/proto.h"
#include "core/err.h"

void vb_sub_attr_init(vb_sub_attr_t *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
}

int vb_sub_create(vb_node_t *node, const char *topic, vb_class_t cls, const vb_sub_attr_t *attr,
		  vb_sub_t **out)
{
	vb_sub_attr_t full;
	int rc;

	if (!node || !attr || !out)
		return vbi_err(-EINVAL, "vb_sub_create: NULL argument");
	*out = NULL;
	/* an older header's struct (no on_end) is fine: the rest defaults */
	if (attr->size < offsetof(vb_sub_attr_t, on_end) || !attr->on_msg)
		return vbi_err(-EINVAL, "vb_sub_attr_t needs vb_sub_attr_init() and on_msg");
	if ((rc = vbi_check_topic(topic)))
		return rc;
	if (cls != VB_ORDERED && cls != VB_FANOUT)
		return vbi_err(-EINVAL, "class %d unknown", (int)cls);
	vb_sub_attr_init(&full);
	memcpy(&full, attr, attr->size < sizeof(full) ? attr->size : sizeof(full));
	full.size = sizeof(full);
	return vbi_sub_create(node, topic, cls, &full, out);
}

int vb_sub_destroy(vb_sub_t *sub)
{
	return sub ? vbi_sub_destroy(sub) : 0;
}

int vb_sub_stats_size(vb_sub_t *sub, vb_sub_stats_t *st, size_t size)
{
	vb_sub_stats_t all;

	if (!sub || !st)
		return vbi_err(-EINVAL, "NULL argument");
	if (size < sizeof(uint64_t))
		return vbi_err(-EINVAL, "vb_sub_stats_t of %zu bytes: call vb_sub_stats()", size);
	all.delivered = atomic_load(&sub->c->delivered);
	all.duplicates = atomic_load(&sub->c->duplicates);
	all.gaps = atomic_load(&sub->c->gaps);
	all.lost = atomic_load(&sub->c->lost);
	all.publishers = atomic_load(&sub->c->publishers);
	all.ends = atomic_load(&sub->c->ends);
	all.acked = atomic_load(&sub->c->acked);
	memcpy(st, &all, size < sizeof(all) ? size : sizeof(all));
	return 0;
}

