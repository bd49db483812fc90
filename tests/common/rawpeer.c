/* SPDX-License-Identifier: MIT */
/* The raw-verbs peer of the wire tests: see rawpeer.h. */
#include "tests/common/rawpeer.h"

#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "core/wire.h"
#include "core/wire_msg.h"
#include "tests/common/proc.h"

void put32le(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}


uint32_t get32le(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}


static uint8_t *raw_area(struct raw *r, size_t len)
{
	uint8_t *p = r->mem + (size_t)r->next_area * (RAW_SLOTS + 1) * RAW_SLOT;

	assert_true((size_t)(r->next_area + 1) * (RAW_SLOTS + 1) * RAW_SLOT <= r->mem_len);
	assert_true(len <= (RAW_SLOTS + 1) * RAW_SLOT);
	r->next_area++;
	return p;
}


void raw_open(struct raw *r)
{
	struct vbt_dev_attr da = { .ip = vbt_test_ip(), .gid_index = -1 };

	memset(r, 0, sizeof(*r)); /* callers pass it uninitialized (next_area) */
	r->ops = &vbt_verbs_ops;
	if (r->ops->dev_open(&da, &r->dev))
		fail_msg("raw dev_open: %s", vb_errmsg());
	assert_int_equal(r->ops->pd_alloc(r->dev, &r->pd), 0);
	r->mem_len = (size_t)8 * (RAW_SLOTS + 1) * RAW_SLOT;
	r->mem = aligned_alloc(4096, r->mem_len);
	assert_non_null(r->mem);
	memset(r->mem, 0, r->mem_len);
	if (r->ops->mr_reg(r->pd, r->mem, r->mem_len, VBT_ACCESS_LOCAL_WRITE, &r->mr))
		fail_msg("raw mr_reg: %s", vb_errmsg());
	vbt_conn_param_init(&r->cp);
}


static void raw_post_recv(struct rawqp *q, unsigned i)
{
	uint32_t len = q->ud ? 40 + RAW_SLOT - 64 : RAW_SLOT;
	struct vbt_sge sge = { (uintptr_t)(q->slots + (size_t)i * RAW_SLOT), len, q->r->mr->lkey };
	struct vbt_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 };
	const struct vbt_recv_wr *bad;

	if (vbt_post_recv(q->qp, &wr, &bad))
		fail_msg("raw post_recv: %s", vb_errmsg());
}


void raw_qp(struct raw *r, struct rawqp *q, enum vb_qp_type type)
{
	struct vbt_cq_attr ca = { .cqe = 256 };
	struct vbt_qp_init_attr qa = {
		.type = type, .cap = { .max_send_wr = 16, .max_recv_wr = RAW_SLOTS,
				       .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct vbt_peer local;

	memset(q, 0, sizeof(*q));
	q->r = r;
	q->ud = type == VB_QPT_UD;
	q->rc = type == VB_QPT_RC;
	q->slots = raw_area(r, (RAW_SLOTS + 1) * RAW_SLOT);
	q->sbuf = q->slots + (size_t)RAW_SLOTS * RAW_SLOT;
	assert_int_equal(r->ops->cq_create(r->dev, &ca, &q->cq), 0);
	qa.send_cq = qa.recv_cq = q->cq;
	if (r->ops->qp_create(r->pd, &qa, &q->qp))
		fail_msg("raw qp_create: %s", vb_errmsg());
	assert_int_equal(vbt_qp_local_peer(q->qp, 0, &local), 0);
	if (q->ud)
		assert_int_equal(vbt_qp_bring_up(q->qp, &r->cp, &local, NULL), 0);
	else
		assert_int_equal(vbt_qp_to_init(q->qp, &r->cp, &local), 0);
	for (unsigned i = 0; i < RAW_SLOTS; i++)
		raw_post_recv(q, i);
}


/* What the victim sends us: remember its HELLO, SUBs and DATA. */
static void raw_parse(struct rawqp *q, const uint8_t *buf, uint32_t len)
{
	struct vbi_wire_walk w;
	struct vbi_wire_hdr h;
	const uint8_t *pl;
	int n;

	/* the library's walk: BATCH frames come out as DATA, record by record */
	vbi_wire_walk_init(&w, buf, len, 0);
	if (q->rc)
		vbi_wire_walk_bctx(&w, &q->bctx);
	while ((n = vbi_wire_walk_next(&w, &h, &pl)) != 0) {
		if (n < 0)
			fail_msg("the victim sent a malformed frame: %s",
				 vbi_wire_err_name((enum vbi_wire_err)-n));
		if (h.type == VBI_WT_HELLO && h.len >= HELLO_LEN) {
			q->got_hello = true;
			q->victim_ud.qpn = get32le(pl + HELLO_UD_QPN);
			q->victim_ud.qkey = get32le(pl + HELLO_UD_QKEY);
			memcpy(q->victim_ud.gid, pl + HELLO_GID, 16);
		} else if (h.type == VBI_WT_SUB) {
			q->subs_seen++;
		} else if (h.type == VBI_WT_DATA && !q->got_data) {
			q->got_data = true;
			q->data_session = h.session;
			q->data_topic = h.topic;
			q->data_seq = h.seq;
		} else if (h.type == VBI_WT_AUTH && h.frag_off == 0 && h.len >= 64) {
			q->got_proof = true;
			memcpy(q->proof, pl, 64);
		} else if (h.type == VBI_WT_AUTH && h.frag_off == 2) {
			q->got_refuse = true;
			q->refuse_reason = (uint32_t)h.seq;
		}
	}
}


/* Reap completions: receives are parsed and reposted. Returns the number of
 * send completions seen (all must be successful). */
int raw_poll(struct rawqp *q)
{
	struct vbt_wc wc[16];
	int n = vbt_cq_poll(q->cq, wc, 16), sends = 0;

	assert_true(n >= 0);
	for (int i = 0; i < n; i++) {
		if (wc[i].opcode == VBT_WC_OP_SEND) {
			if (wc[i].status != VBT_WC_SUCCESS)
				fail_msg("raw send completed with %s", vbt_wc_status_str(wc[i].status));
			sends++;
			continue;
		}
		if (wc[i].status != VBT_WC_SUCCESS)
			fail_msg("raw receive completed with %s", vbt_wc_status_str(wc[i].status));
		if (!q->ud)
			raw_parse(q, q->slots + wc[i].wr_id * RAW_SLOT, wc[i].byte_len);
		raw_post_recv(q, (unsigned)wc[i].wr_id);
	}
	return sends;
}


void raw_connect(struct raw *r, struct rawqp *q, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	uint64_t t0;

	raw_qp(r, q, VB_QPT_RC);
	assert_int_equal(inet_pton(AF_INET, vbt_test_ip(), &sa.sin_addr), 1);
	if (r->ops->connect(r->dev, q->qp, (struct sockaddr *)&sa, &r->cp, &q->conn))
		fail_msg("raw connect: %s", vb_errmsg());
	/* the connector speaks first: the victim's HELLO answers ours */
	for (t0 = vbt_now_ms(); vbt_now_ms() - t0 < 50;)
		raw_poll(q);
}


/* One SEND of @len bytes (RC), or one datagram to the victim's UD QP. */
void raw_send(struct rawqp *q, const void *data, uint32_t len, struct vbt_ah *ah,
		     const struct vbt_peer *to)
{
	struct vbt_sge sge = { (uintptr_t)q->sbuf, len, q->r->mr->lkey };
	struct vbt_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = len ? 1 : 0,
				  .opcode = VBT_WR_SEND, .flags = VBT_SEND_SIGNALED };
	const struct vbt_send_wr *bad;
	uint64_t t0;

	assert_true(len <= RAW_SLOT);
	memcpy(q->sbuf, data, len);
	if (ah) {
		wr.ah = ah;
		wr.remote_qpn = to->qpn;
		wr.remote_qkey = to->qkey;
	}
	if (vbt_post_send(q->qp, &wr, &bad))
		fail_msg("raw post_send: %s", vb_errmsg());
	for (t0 = vbt_now_ms(); !raw_poll(q);)
		assert_true(vbt_now_ms() - t0 < 10000);
}


void raw_close(struct rawqp *q)
{
	if (q->conn)
		q->r->ops->conn_close(q->conn);
	assert_int_equal(q->r->ops->qp_destroy(q->qp), 0);
	assert_int_equal(q->r->ops->cq_destroy(q->cq), 0);
}


uint32_t topic_id(const char *name)
{
	uint32_t h = 2166136261u; /* FNV-1a, as core/wire_msg.c */

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h ? h : 1;
}

uint32_t raw_hello(uint8_t *buf, uint64_t uid, uint32_t lane, uint32_t role,
		   const uint8_t *nonce)
{
	uint32_t len = nonce ? HELLO_LEN_AUTH : HELLO_LEN;
	struct vbi_wire_hdr h = { .type = VBI_WT_HELLO, .len = len };
	uint8_t *pl = buf + VBI_WIRE_HDR_LEN;

	vbi_wire_put(buf, &h);
	memset(pl, 0, len);
	put32le(pl + HELLO_VERSION, 3);
	put32le(pl + HELLO_UID, (uint32_t)uid);
	put32le(pl + HELLO_UID + 4, (uint32_t)(uid >> 32));
	put32le(pl + HELLO_LANE, lane);
	put32le(pl + HELLO_ROLE, role);
	put32le(pl + HELLO_SLOTS, RAW_SLOTS);
	put32le(pl + HELLO_SLOT_SIZE, RAW_SLOT);
	put32le(pl + HELLO_MAX_MSG, 1u << 20);
	memcpy(pl + HELLO_NAME, "raw-client", 10);
	if (nonce) {
		put32le(pl + HELLO_AUTH, 1); /* we have a key */
		memcpy(pl + HELLO_NONCE, nonce, 32);
	}
	return VBI_WIRE_HDR_LEN + len;
}

void raw_fini(struct raw *r)
{
	assert_int_equal(r->ops->mr_dereg(r->mr), 0);
	assert_int_equal(r->ops->pd_free(r->pd), 0);
	r->ops->dev_close(r->dev);
	free(r->mem);
}
