/* SPDX-License-Identifier: MIT */
/*
 * A raw-verbs peer for the wire tests (pubsub_malformed_test,
 * pubsub_auth_test): bare QPs through the verbs transport's ops (the same
 * rdma_cm private data every verbus node sends), one registered buffer,
 * and what the verbus node on the other end sent back (its HELLO, SUBs,
 * first DATA, AUTH frames). Failures end the calling cmocka test.
 */
#ifndef VERBUS_TESTS_COMMON_RAWPEER_H
#define VERBUS_TESTS_COMMON_RAWPEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wire.h"
#include "transport/transport.h"

/* HELLO payload as proto/lane_hello.c lays it out (little-endian, version 3,
 * docs/wire.md). */
enum {
	HELLO_VERSION = 0, HELLO_UD_QPN = 4, HELLO_UD_QKEY = 8, HELLO_GID = 12,
	HELLO_SLOTS = 28, HELLO_SLOT_SIZE = 32, HELLO_MAX_MSG = 36, HELLO_NAME = 40,
	HELLO_UID = 72, HELLO_LANE = 80, HELLO_ROLE = 84,
	HELLO_MODE = 112, /* 0: RC, the mode of the raw connection */
	HELLO_LEN = 124,
	HELLO_AUTH = 124, HELLO_NONCE = 128, HELLO_LEN_AUTH = 160, /* authentication */
};

#define RAW_SLOTS 64u
#define RAW_SLOT 4096u

struct raw {
	const struct vbt_ops *ops;
	struct vbt_dev *dev;
	struct vbt_pd *pd;
	struct vbt_mr *mr;
	uint8_t *mem;          /* [recv slots of every QP | send buffer] */
	size_t mem_len;
	unsigned next_area;
	struct vbt_conn_param cp;
};

struct rawqp {
	struct raw *r;
	struct vbt_cq *cq;
	struct vbt_qp *qp;
	struct vbt_conn *conn;
	uint8_t *slots;        /* RAW_SLOTS x RAW_SLOT */
	uint8_t *sbuf;         /* RAW_SLOT send buffer */
	bool ud;
	bool rc;
	struct vbi_wire_bctx bctx; /* RC: the stream a compact BATCH continues */
	/* learnt from what the victim sent */
	bool got_hello;
	struct vbt_peer victim_ud;
	bool got_data;
	uint32_t data_session, data_topic;
	uint64_t data_seq;
	unsigned subs_seen;
	bool got_proof, got_refuse;   /* AUTH frames from the victim */
	uint32_t refuse_reason;
	uint8_t proof[64];            /* nonce_A | MAC_A */
};

void put32le(uint8_t *p, uint32_t v);
uint32_t get32le(const uint8_t *p);
/* The device at vbt_test_ip(), a PD, 8 QPs' worth of registered memory. */
void raw_open(struct raw *r);
/* A QP of @type (RC/UC in INIT, UD in RTS) with RAW_SLOTS receives posted. */
void raw_qp(struct raw *r, struct rawqp *q, enum vb_qp_type type);
/* Reap completions: receives are parsed and reposted. Returns the number
 * of send completions seen (all must be successful). */
int raw_poll(struct rawqp *q);
/* An RC QP connected to port @port at vbt_test_ip() (rdma_cm), then 50 ms
 * of polling (the victim answers what we send first). */
void raw_connect(struct raw *r, struct rawqp *q, uint16_t port);
/* One SEND of @len bytes (RC), or one datagram to @to through @ah (UD). */
void raw_send(struct rawqp *q, const void *data, uint32_t len, struct vbt_ah *ah,
	      const struct vbt_peer *to);
void raw_close(struct rawqp *q);
/* Free what raw_open() made (its QPs closed first). */
void raw_fini(struct raw *r);
/* A HELLO of node @uid for lane @lane of @role (0 primary, 1 standby, ...),
 * RAW_SLOTS of RAW_SLOT bytes, into @buf; @nonce (32 bytes) or NULL: the
 * 124-byte form without the authentication section. Returns its length. */
uint32_t raw_hello(uint8_t *buf, uint64_t uid, uint32_t lane, uint32_t role,
		   const uint8_t *nonce);
/* The topic id verbus gives @name (proto: FNV-1a, 0 avoided). */
uint32_t topic_id(const char *name);

#endif
