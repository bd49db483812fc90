/* SPDX-License-Identifier: MIT */
/*
 * LANE numbering and epoch rules (docs/wire.md "Rules"): the input is one
 * byte (bit0: this end is the connector; bits 1-7: the connector's number
 * of the lane) and then a received SEND. HELLO frames go through
 * vbi_wire_hello_decode and vbi_wire_lane_new_ok (the accepting side binds
 * the lane as vbi_lane_on_hello does), LANE frames through
 * vbi_wire_lane_rule (vbi_rule_lane_frame). Checks: accepted epochs
 * strictly increase; a refusal changes nothing; only a promoted probe on
 * the accepting side is renumbered, above its own number and to at most
 * max_lane_id + 64; the highest lane number never goes down.
 */
#include <string.h>

#include "fuzz.h"

struct lane_state {
	bool connector;
	struct vbi_wire_lanes st;
	uint32_t id, role;
	bool bound, any_epoch;
	uint32_t last_epoch;
};

static void hello(struct lane_state *s, const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	struct vbi_wire_hello hi;
	bool ok;

	if (vbi_wire_hello_decode(pl, h->len, &hi) != VBI_WHELLO_OK || s->connector || s->bound)
		return;
	ok = vbi_wire_lane_new_ok(&s->st, hi.lane, hi.role);
	if (hi.role == 0)
		FUZZ_CHECK(ok == (hi.lane == 1));
	else
		FUZZ_CHECK(ok == (hi.lane > s->st.max_lane_id &&
				  hi.lane - s->st.max_lane_id <= VBI_WIRE_LANE_ID_SLACK));
	if (!ok)
		return;
	if (hi.lane > s->st.max_lane_id)
		s->st.max_lane_id = hi.lane;
	s->id = hi.lane;
	s->role = hi.role;
	s->bound = true;
}

static void lane(struct lane_state *s, const struct vbi_wire_hdr *h)
{
	struct vbi_wire_lanes before = s->st;
	bool probe = s->role == VBI_WIRE_ROLE_MAX;
	int rc = vbi_wire_lane_rule(&s->st, s->connector, probe, s->id, h);

	if (rc < 0) {
		FUZZ_CHECK(!memcmp(&before, &s->st, sizeof(before)));
		FUZZ_CHECK(rc != VBI_WLANE_WIDE || h->seq > UINT32_MAX);
		FUZZ_CHECK(rc != VBI_WLANE_EPOCH || h->epoch <= before.epoch_rx);
		return;
	}
	FUZZ_CHECK(h->seq <= UINT32_MAX);
	FUZZ_CHECK(h->epoch > before.epoch_rx && s->st.epoch_rx == h->epoch);
	FUZZ_CHECK(!s->any_epoch || h->epoch > s->last_epoch);
	s->any_epoch = true;
	s->last_epoch = h->epoch;
	FUZZ_CHECK(s->st.max_lane_id >= before.max_lane_id);
	if (rc == VBI_WLANE_RENUMBER) {
		FUZZ_CHECK(!s->connector && probe && h->seq != s->id);
		FUZZ_CHECK(h->seq > s->id &&
			   h->seq <= (uint64_t)before.max_lane_id + VBI_WIRE_LANE_ID_SLACK);
		FUZZ_CHECK(s->st.max_lane_id == (h->seq > before.max_lane_id ? h->seq
									  : before.max_lane_id));
		s->id = (uint32_t)h->seq;
	} else {
		FUZZ_CHECK(rc == VBI_WLANE_OK && h->seq == s->id);
		FUZZ_CHECK(s->st.max_lane_id == before.max_lane_id);
	}
}

static void on_frame(const struct vbi_wire_hdr *h, const uint8_t *pl, void *arg)
{
	struct lane_state *s = arg;

	if (h->type == VBI_WT_HELLO)
		hello(s, h, pl);
	else if (h->type == VBI_WT_LANE)
		lane(s, h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lane_state s;

	if (size < 1 || size > UINT32_MAX)
		return 0;
	memset(&s, 0, sizeof(s));
	s.connector = data[0] & 1;
	if (s.connector) { /* our own numbering of the lane, and role */
		s.id = (data[0] >> 1) & 0x3f;
		s.role = data[0] >> 7 ? VBI_WIRE_ROLE_MAX : 1;
		s.bound = true;
	}
	fuzz_walk(data + 1, (uint32_t)(size - 1), on_frame, &s);
	return 0;
}
