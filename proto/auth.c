/* SPDX-License-Identifier: MIT */
/*
 * Peer authentication (vb_ctx_attr_t.auth_key) and the protocol rules for
 * lane numbers and epochs (docs/wire.md, "Rules", "Authentication").
 *
 * The handshake with a key, on every connection (lane):
 *   connector -> HELLO with flags KEYED and a fresh 32-byte nonce Nc
 *   acceptor  -> AUTH proof: a fresh nonce Na and
 *                MAC_a = HMAC(key, "verbus-auth-1 accept" | HELLO_c | Na)
 *                (nothing bound, no peer created: the lane stays pending)
 *   connector -> checks MAC_a (else refuses), AUTH answer:
 *                MAC_c = HMAC(key, "verbus-auth-1 connect" | Na | HELLO_c)
 *   acceptor  -> checks MAC_c (else refuses); only then is the HELLO acted
 *                on (peer created or found, lane bound, our HELLO sent).
 * HELLO_c is the connector's whole 160-byte HELLO payload (Nc inside), so
 * each side proves the key over a nonce the other just drew: a recorded
 * handshake replayed on a new connection fails. HMAC-SHA512-256 is
 * libsodium's crypto_auth (its streaming form, for keys of any length);
 * nonces come from randombytes_buf; MACs are compared in constant time.
 * A refusal sends an AUTH refusal with its reason (so the other end can
 * say why), counts auth_refused, reports VB_EV_AUTH_REFUSED and closes the
 * lane.
 *
 * Thread-safety: see auth.h.
 */
#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "proto/proto.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

#define LABEL_ACCEPT "verbus-auth-1 accept"
#define LABEL_CONNECT "verbus-auth-1 connect"

static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }

/* ---- the key ------------------------------------------------------------------------- */

/* Hex (whitespace ignored) into @out; the byte count or -1. */
static long hex_key(const char *s, size_t n, uint8_t *out, size_t cap)
{
	size_t len = 0;
	int hi = -1;

	for (size_t i = 0; i < n && s[i]; i++) {
		int c = (unsigned char)s[i], v;

		if (isspace(c))
			continue;
		if (!isxdigit(c))
			return -1;
		v = isdigit(c) ? c - '0' : tolower(c) - 'a' + 10;
		if (hi < 0) {
			hi = v;
			continue;
		}
		if (len >= cap)
			return -1;
		out[len++] = (uint8_t)(hi << 4 | v);
		hi = -1;
	}
	return hi < 0 ? (long)len : -1;
}

int vbi_auth_ctx_init(struct vb_ctx *ctx)
{
	const vb_ctx_attr_t *a = &ctx->attr;
	const char *file = a->auth_key_file, *env = NULL, *env_file = NULL;

	vbi_cfg_str(VBI_CFG_AUTH_KEY, &env);
	vbi_cfg_str(VBI_CFG_AUTH_KEY_FILE, &env_file);
	ctx->auth_key_len = 0;
	if (a->auth_key) {
		if (a->auth_key_len < VBI_AUTH_KEY_MIN || a->auth_key_len > VBI_AUTH_KEY_MAX)
			return vbi_err(-EINVAL, "auth_key of %zu bytes: %u..%u", a->auth_key_len,
				       VBI_AUTH_KEY_MIN, VBI_AUTH_KEY_MAX);
		memcpy(ctx->auth_key, a->auth_key, a->auth_key_len);
		ctx->auth_key_len = a->auth_key_len;
	} else if (env) {
		long n = hex_key(env, strlen(env), ctx->auth_key, sizeof(ctx->auth_key));

		if (n < VBI_AUTH_KEY_MIN)
			return vbi_err(-EINVAL, "VERBUS_AUTH_KEY: %u..%u bytes in hex expected",
				       VBI_AUTH_KEY_MIN, VBI_AUTH_KEY_MAX);
		ctx->auth_key_len = (size_t)n;
	} else if (file || (file = env_file)) {
		char buf[2 * VBI_AUTH_KEY_MAX + 256];
		FILE *f = fopen(file, "r");
		size_t got;
		long n;

		if (!f)
			return vbi_err(-EINVAL, "auth_key_file '%s': %s", file, strerror(errno));
		got = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[got] = '\0';
		n = hex_key(buf, got, ctx->auth_key, sizeof(ctx->auth_key));
		sodium_memzero(buf, sizeof(buf));
		if (n < VBI_AUTH_KEY_MIN)
			return vbi_err(-EINVAL, "auth_key_file '%s': %u..%u bytes in hex expected",
				       file, VBI_AUTH_KEY_MIN, VBI_AUTH_KEY_MAX);
		ctx->auth_key_len = (size_t)n;
	}
	/* the caller's pointers are not kept */
	ctx->attr.auth_key = NULL;
	ctx->attr.auth_key_file = NULL;
	if (sodium_init() < 0)
		return vbi_err(-ENOSYS, "libsodium could not be initialized");
	return 0;
}

void vbi_auth_ctx_fini(struct vb_ctx *ctx)
{
	sodium_memzero(ctx->auth_key, sizeof(ctx->auth_key));
	ctx->auth_key_len = 0;
}

static void mac(const struct vb_ctx *ctx, uint8_t out[VBI_AUTH_MAC], const char *label,
		const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	crypto_auth_hmacsha512256_state st;

	crypto_auth_hmacsha512256_init(&st, ctx->auth_key, ctx->auth_key_len);
	crypto_auth_hmacsha512256_update(&st, (const uint8_t *)label, strlen(label) + 1);
	crypto_auth_hmacsha512256_update(&st, a, alen);
	crypto_auth_hmacsha512256_update(&st, b, blen);
	crypto_auth_hmacsha512256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
}

/* ---- the handshake ------------------------------------------------------------------- */

static bool keyed(const struct vbi_lane *l)
{
	return l->node->ctx->auth_key_len != 0;
}

/* Send an AUTH frame on @l (its own lock or the peer's txlock). */
static int send_auth(struct vbi_lane *l, uint32_t op, uint64_t seq, uint32_t slots,
		     const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	uint8_t buf[VBI_WIRE_HDR_LEN + 2 * VBI_AUTH_MAC];
	uint32_t n = vbi_wire_auth_encode(buf, op, seq, slots, a, alen, b, blen);
	int rc;

	vbi_mutex_lock(l->lk);
	rc = vbi_lane_send_ctrl(l, buf, n);
	vbi_mutex_unlock(l->lk);
	if (rc)
		vbi_warn("lane QP %u: AUTH frame not sent: %d", l->qp->qpn, rc);
	return rc;
}

/* The name the HELLO on @l claims (for the reports). */
static const char *claimed_name(struct vbi_lane *l, char *buf, size_t len)
{
	if (l->peer && l->peer->name[0] && strcmp(l->peer->name, "?"))
		return l->peer->name;
	snprintf(buf, len, "%.*s", (int)(len - 1 < VBI_NAME_MAX - 1 ? len - 1 : VBI_NAME_MAX - 1),
		 (const char *)l->auth->hello + 40);
	for (char *c = buf; *c; c++)
		if (!isprint((unsigned char)*c))
			*c = '?';
	return buf;
}

/* Refuse @l: tell the other end @reason (0: nothing to tell), count,
 * report, close. */
static void refuse(struct vbi_lane *l, uint32_t reason, const char *why)
{
	struct vb_ctx *ctx = l->node->ctx;
	struct vbi_err_verdict v = { VBI_ACT_FAILOVER, VBI_SCOPE_QP, "authentication refused" };
	char name[VBI_NAME_MAX];

	atomic_store(&l->auth->state, VBI_AUTH_REFUSED);
	atomic_store(&l->auth->why, why);
	if (reason)
		send_auth(l, VBI_AUTH_REFUSE, reason, 0, NULL, 0, NULL, 0);
	atomic_fetch_add(&ctx->st->auth_refused, 1);
	vbi_warn("connection (QP %u) refused by authentication: %s", l->qp->qpn, why);
	vbi_event(ctx, VB_EV_AUTH_REFUSED, claimed_name(l, name, sizeof(name)),
		  "connection refused: %s", why);
	vbi_lane_report(l, v, "authentication refused");
}

void vbi_hello_auth_put(struct vbi_lane *l, uint8_t *pl)
{
	bool connector = l->peer && l->peer->connector;

	vbi_wire_put_le32(pl + VBI_HELLO_AUTH_OFF, keyed(l) ? 1u : 0u);
	if (!connector) {
		memcpy(pl + VBI_HELLO_NONCE_OFF, l->auth->nonce, VBI_AUTH_NONCE);
		return;
	}
	randombytes_buf(pl + VBI_HELLO_NONCE_OFF, VBI_AUTH_NONCE);
	memcpy(l->auth->hello, pl, VBI_HELLO_LEN_AUTH);
	if (keyed(l))
		atomic_store(&l->auth->state, VBI_AUTH_WAIT_PROOF);
}

enum vbi_hello_auth_verdict vbi_hello_auth_check(struct vbi_lane *l, const struct vbi_wire_hdr *h,
						  const uint8_t *pl, uint32_t slots)
{
	bool peer_keyed = h->len >= VBI_HELLO_LEN_AUTH && (get32(pl + VBI_HELLO_AUTH_OFF) & 1);
	unsigned st = atomic_load(&l->auth->state);
	uint8_t m[VBI_AUTH_MAC];

	if (st == VBI_AUTH_REFUSED)
		return VBI_HELLO_AUTH_STOP;
	if (l->peer && l->peer->connector) {
		/* the acceptor's HELLO: with a key, only after it proved it */
		if (!keyed(l) || st == VBI_AUTH_DONE)
			return VBI_HELLO_AUTH_GO;
		refuse(l, VBI_AUTH_R_NEED_KEY, "the peer answered without proving the key: it has "
		       "no authentication key (or a verbus without authentication)");
		return VBI_HELLO_AUTH_STOP;
	}
	if (st == VBI_AUTH_DONE)
		return VBI_HELLO_AUTH_GO; /* resumed after the answer */
	memcpy(l->auth->hello, pl, h->len < VBI_HELLO_LEN_AUTH ? h->len : VBI_HELLO_LEN_AUTH);
	if (st == VBI_AUTH_WAIT_ANSWER) {
		atomic_fetch_add(&l->node->ctx->st->malformed, 1);
		vbi_event(l->node->ctx, VB_EV_PROTOCOL, "", "HELLO repeated during authentication");
		return VBI_HELLO_AUTH_STOP;
	}
	if (!keyed(l)) {
		if (!peer_keyed)
			return VBI_HELLO_AUTH_GO; /* neither has a key: as before */
		refuse(l, VBI_AUTH_R_NO_KEY, "the peer has an authentication key and this node "
		       "has none");
		return VBI_HELLO_AUTH_STOP;
	}
	if (!peer_keyed) {
		refuse(l, VBI_AUTH_R_NEED_KEY, "the peer has no authentication key (this node "
		       "requires one)");
		return VBI_HELLO_AUTH_STOP;
	}
	l->auth->hello_hdr = *h;
	l->auth->hello_hdr.len = VBI_HELLO_LEN_AUTH;
	randombytes_buf(l->auth->nonce, VBI_AUTH_NONCE);
	mac(l->node->ctx, m, LABEL_ACCEPT, l->auth->hello, VBI_HELLO_LEN_AUTH, l->auth->nonce,
	    VBI_AUTH_NONCE);
	vbi_mutex_lock(l->lk);
	l->remote_slots = slots; /* our proof, our HELLO later */
	vbi_mutex_unlock(l->lk);
	atomic_store(&l->auth->state, VBI_AUTH_WAIT_ANSWER);
	if (send_auth(l, VBI_AUTH_PROOF, 0, l->nslots, l->auth->nonce, VBI_AUTH_NONCE, m,
		      VBI_AUTH_MAC)) {
		refuse(l, 0, "the challenge could not be sent");
		return VBI_HELLO_AUTH_STOP;
	}
	return VBI_HELLO_AUTH_WAIT;
}

static const char *refusal_text(uint64_t reason)
{
	switch (reason) {
	case VBI_AUTH_R_NEED_KEY:
		return "refused by the peer: it requires an authentication key and this "
		       "context has none, or the peer's key was not proven to it";
	case VBI_AUTH_R_NO_KEY:
		return "refused by the peer: it has no authentication key and this context has one";
	case VBI_AUTH_R_BAD_PROOF:
		return "refused by the peer: our proof of the key did not verify there (the keys "
		       "differ)";
	default:
		return "refused by the peer (unknown reason)";
	}
}

void vbi_hello_auth_on_frame(struct vbi_lane *l, const struct vbi_wire_hdr *h, const uint8_t *pl)
{
	struct vb_ctx *ctx = l->node->ctx;
	unsigned st = atomic_load(&l->auth->state);
	bool connector = l->peer && l->peer->connector;
	uint8_t m[VBI_AUTH_MAC];
	struct vbi_wire_auth a;
	bool ok = vbi_wire_auth_decode(h, pl, &a) == 0; /* the op's payload is there */

	if (st == VBI_AUTH_REFUSED)
		return;
	if (ok && a.op == VBI_AUTH_REFUSE && !atomic_load(&l->hello_rcvd)) {
		refuse(l, 0, refusal_text(a.reason));
		return;
	}
	if (ok && a.op == VBI_AUTH_PROOF && connector && st == VBI_AUTH_WAIT_PROOF) {
		if (a.slots) {
			vbi_mutex_lock(l->lk);
			l->remote_slots = a.slots;
			vbi_mutex_unlock(l->lk);
		}
		mac(ctx, m, LABEL_ACCEPT, l->auth->hello, VBI_HELLO_LEN_AUTH, a.nonce, VBI_AUTH_NONCE);
		if (sodium_memcmp(m, a.mac, VBI_AUTH_MAC)) {
			refuse(l, VBI_AUTH_R_BAD_PROOF, "the peer's proof of the key does not verify: "
			       "its key differs from ours");
			return;
		}
		mac(ctx, m, LABEL_CONNECT, a.nonce, VBI_AUTH_NONCE, l->auth->hello, VBI_HELLO_LEN_AUTH);
		atomic_store(&l->auth->state, VBI_AUTH_DONE);
		if (send_auth(l, VBI_AUTH_ANSWER, 0, 0, m, VBI_AUTH_MAC, NULL, 0))
			refuse(l, 0, "the answer to the peer's challenge could not be sent");
		return;
	}
	if (ok && a.op == VBI_AUTH_ANSWER && !l->peer && st == VBI_AUTH_WAIT_ANSWER) {
		mac(ctx, m, LABEL_CONNECT, l->auth->nonce, VBI_AUTH_NONCE, l->auth->hello,
		    VBI_HELLO_LEN_AUTH);
		if (sodium_memcmp(m, a.mac, VBI_AUTH_MAC)) {
			refuse(l, VBI_AUTH_R_BAD_PROOF, "the peer's answer to our challenge does not "
			       "verify: another key, or a replayed handshake");
			return;
		}
		atomic_store(&l->auth->state, VBI_AUTH_DONE);
		/* now the HELLO is acted on (node->lock held for writing: unbound) */
		vbi_lane_on_hello(l, &l->auth->hello_hdr, l->auth->hello);
		return;
	}
	atomic_fetch_add(&ctx->st->malformed, 1);
	vbi_event(ctx, VB_EV_PROTOCOL, l->peer ? l->peer->name : "",
		  "unexpected AUTH frame (op %u, %u bytes) dropped", h->frag_off, h->len);
}

const char *vbi_hello_auth_refusal(struct vbi_lane *l)
{
	return atomic_load(&l->auth->why);
}

/* ---- rules --------------------------------------------------------------------------- */

static bool rule_broken(struct vbi_lane *l, struct vbi_peer *p, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool rule_broken(struct vbi_lane *l, struct vbi_peer *p, const char *fmt, ...)
{
	struct vb_ctx *ctx = l->node->ctx;
	char why[192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&ctx->st->malformed, 1);
	vbi_event(ctx, VB_EV_PROTOCOL, p ? p->name : "", "%s", why);
	return false;
}

bool vbi_rule_new_lane(struct vbi_lane *l, struct vbi_peer *p, uint32_t id, uint32_t role)
{
	struct vbi_err_verdict v = { VBI_ACT_FAILOVER, VBI_SCOPE_QP, "lane numbering" };
	struct vbi_wire_lanes st = { .max_lane_id = p->max_lane_id, .epoch_rx = p->lane_epoch_rx };

	if (vbi_wire_lane_new_ok(&st, id, role))
		return true;
	if (role == VBI_LANE_PRIMARY) {
		rule_broken(l, p, "HELLO: a first connection numbered %u (the connector "
			    "numbers its lanes from 1): refused", id);
	} else {
		rule_broken(l, p, "HELLO: new lane numbered %u, but lanes of this peer must be "
			    "numbered %u..%u: refused", id, p->max_lane_id + 1,
			    p->max_lane_id + VBI_LANE_ID_SLACK);
	}
	vbi_lane_report(l, v, "lane numbering");
	return false;
}

bool vbi_rule_lane_frame(struct vbi_peer *p, struct vbi_lane *l, const struct vbi_wire_hdr *h)
{
	uint32_t id = __atomic_load_n(&l->id, __ATOMIC_RELAXED);
	struct vbi_wire_lanes st = { .max_lane_id = p->max_lane_id, .epoch_rx = p->lane_epoch_rx };

	if (vbi_lane_dead(l) || p->dead)
		return true; /* vbi_lane_on_switch ignores it (and says why) */
	switch (vbi_wire_lane_rule(&st, p->connector, l->role == VBI_LANE_PROBE, id, h)) {
	case VBI_WLANE_WIDE:
		return rule_broken(l, p, "LANE naming lane %llu (beyond 32 bits) dropped",
				   (unsigned long long)h->seq);
	case VBI_WLANE_EPOCH:
		return rule_broken(l, p, "LANE with epoch %u, not after %u (epochs only move "
				   "forward) dropped", h->epoch, p->lane_epoch_rx);
	case VBI_WLANE_NAME:
		return rule_broken(l, p, "LANE naming lane %llu on lane %u dropped (only a "
				   "promoted probe lane is renumbered)",
				   (unsigned long long)h->seq, id);
	case VBI_WLANE_RANGE:
		return rule_broken(l, p, "LANE renumbering lane %u to %llu dropped (allowed "
				   "%u..%u)", id, (unsigned long long)h->seq,
				   id + 1, p->max_lane_id + VBI_LANE_ID_SLACK);
	case VBI_WLANE_RENUMBER: {
		/* a promoted probe, renumbered by the connector after every
		 * lane it had then: to a number no other lane of the peer has */
		const struct vbi_lane *o;

		vbi_mutex_lock(&p->txlock);
		for (o = p->lanes; o; o = o->next)
			if (o != l && __atomic_load_n(&o->id, __ATOMIC_RELAXED) == h->seq)
				break;
		if (!o)
			__atomic_store_n(&l->id, (uint32_t)h->seq, __ATOMIC_RELAXED);
		vbi_mutex_unlock(&p->txlock);
		if (o)
			return rule_broken(l, p, "LANE renumbering lane %u to %llu dropped "
					   "(another lane has that number)", id,
					   (unsigned long long)h->seq);
		break;
	}
	default:
		break;
	}
	p->max_lane_id = st.max_lane_id;
	p->lane_epoch_rx = st.epoch_rx;
	return true;
}
