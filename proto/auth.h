/* SPDX-License-Identifier: MIT */
/*
 * Peer authentication in the handshake (auth.c) and the rules a peer's
 * LANE frames and new lanes must follow (docs/wire.md, "Rules" and
 * "Authentication").
 *
 * Thread-safety: vbi_auth_ctx_init/fini run in vb_ctx_create/destroy. The
 * vbi_hello_auth_* calls on a lane run on the progress context (receive
 * dispatch, node->lock held) except vbi_hello_auth_put, which runs on the
 * thread sending our HELLO before it is posted (the state it writes is
 * atomic or only read after the peer answered that HELLO).
 */
#ifndef VERBUS_PROTO_AUTH_H
#define VERBUS_PROTO_AUTH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wire.h"
#include "core/wire_msg.h"
#include "engine/engine.h" /* VBI_AUTH_KEY_MAX */

struct vb_ctx;
struct vbi_lane;
struct vbi_peer;

#define VBI_AUTH_NONCE VBI_WIRE_NONCE
#define VBI_AUTH_MAC VBI_WIRE_AUTH_MAC
#define VBI_AUTH_KEY_MIN 16

/* HELLO (version 3) authentication section, after the 124 bytes of v3 */
#define VBI_HELLO_AUTH_OFF VBI_WIRE_HELLO_AUTH_OFF   /* u32 flags: bit0 the sender has a key */
#define VBI_HELLO_NONCE_OFF VBI_WIRE_HELLO_NONCE_OFF /* 32 bytes: the connector's challenge */
#define VBI_HELLO_LEN_AUTH VBI_WIRE_HELLO_LEN_AUTH
/* A peer's new lane may be numbered at most this far above the highest
 * lane number seen from it (lanes the connector built whose HELLO has not
 * arrived here yet). */
#define VBI_LANE_ID_SLACK VBI_WIRE_LANE_ID_SLACK

enum vbi_auth_op {
	VBI_AUTH_PROOF = VBI_WAUTH_PROOF,
	VBI_AUTH_ANSWER = VBI_WAUTH_ANSWER,
	VBI_AUTH_REFUSE = VBI_WAUTH_REFUSE,
};
enum vbi_auth_reason {
	VBI_AUTH_R_NEED_KEY = 1,  /* the sender requires a key; the receiver has none */
	VBI_AUTH_R_NO_KEY = 2,    /* the sender has no key; the receiver offered one */
	VBI_AUTH_R_BAD_PROOF = 3, /* the receiver's proof did not verify */
};
enum vbi_auth_state {
	VBI_AUTH_IDLE = 0,        /* no key here, or nothing sent yet */
	VBI_AUTH_WAIT_PROOF,      /* connector: challenge sent in our HELLO */
	VBI_AUTH_WAIT_ANSWER,     /* acceptor: our proof + challenge sent */
	VBI_AUTH_DONE,            /* the peer proved the key */
	VBI_AUTH_REFUSED,         /* refused (either end): nothing more is acted on */
};

/* Per lane (embedded in struct vbi_lane). */
struct vbi_lane_auth {
	atomic_uchar state;          /* enum vbi_auth_state */
	uint8_t nonce[VBI_AUTH_NONCE]; /* acceptor: our challenge */
	uint8_t hello[VBI_HELLO_LEN_AUTH]; /* the connector's HELLO payload (the
				      * MACs cover it): sent, or received */
	struct vbi_wire_hdr hello_hdr; /* acceptor: its header, to resume */
	_Atomic(const char *) why;   /* refused: the reason (static text) */
};

enum vbi_hello_auth_verdict {
	VBI_HELLO_AUTH_GO = 0,    /* go on with the HELLO */
	VBI_HELLO_AUTH_WAIT,      /* acceptor: challenge sent; resumed on the answer */
	VBI_HELLO_AUTH_STOP,      /* refused (counted, reported, the lane closes) */
};

/* The context's key: attr.auth_key or attr.auth_key_file. 0, -EINVAL. */
int vbi_auth_ctx_init(struct vb_ctx *ctx);
void vbi_auth_ctx_fini(struct vb_ctx *ctx);
/* Our HELLO on @l: fill its authentication section (@pl: payload). */
void vbi_hello_auth_put(struct vbi_lane *l, uint8_t *pl);
/* A geometrically valid HELLO arrived on @l (@slots: the peer's). */
enum vbi_hello_auth_verdict vbi_hello_auth_check(struct vbi_lane *l, const struct vbi_wire_hdr *h,
						  const uint8_t *pl, uint32_t slots);
/* An AUTH frame on @l (bound or not). */
void vbi_hello_auth_on_frame(struct vbi_lane *l, const struct vbi_wire_hdr *h, const uint8_t *pl);
/* Why @l was refused by authentication (NULL: it was not). */
const char *vbi_hello_auth_refusal(struct vbi_lane *l);

/* ---- protocol rules (auth.c): false = the frame breaks them (counted as
 * malformed, VB_EV_PROTOCOL, not acted on) ---- */
/* A HELLO on accepted lane @l announces lane number @id of @role for known
 * peer @p (NULL: a new peer). */
bool vbi_rule_new_lane(struct vbi_lane *l, struct vbi_peer *p, uint32_t id, uint32_t role);
/* A LANE frame @h on @l of @p: checks it and applies a renumbering. */
bool vbi_rule_lane_frame(struct vbi_peer *p, struct vbi_lane *l, const struct vbi_wire_hdr *h);

#endif
