/* SPDX-License-Identifier: MIT */
/*
 * Seed corpus of the fuzz targets, built with the library's own encoders
 * (vbi_wire_put and core/wire_msg.h's HELLO/SUB/UDADDR/BYE/AUTH encoders,
 * which proto sends with): one valid example of every frame type, and
 * for the stateful targets short valid conversations.
 *
 *   fuzz_gen_seeds DIR           write DIR/<target>/seed-* (made as needed)
 *   fuzz_gen_seeds --check DIR   exit 1 unless every seed is in DIR with
 *                                the same bytes (the committed corpus,
 *                                tests/fuzz/corpus, is stale otherwise)
 *
 * Regression inputs (crash-* / regress-*) live next to the seeds and are
 * not touched. docs/testing.md has the details.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/wire.h"
#include "core/wire_msg.h"

#define SEED_MAX 4096

struct seed {
	uint8_t b[SEED_MAX];
	size_t n;
};

static const char *g_dir;
static bool g_check;
static int g_bad;

static void emit(const char *target, const char *name, const struct seed *s)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", g_dir, target);
	if (!g_check && mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		exit(2);
	}
	snprintf(path, sizeof(path), "%s/%s/seed-%s", g_dir, target, name);
	if (g_check) {
		uint8_t cur[SEED_MAX + 1];
		FILE *f = fopen(path, "rb");
		size_t n = f ? fread(cur, 1, sizeof(cur), f) : 0;

		if (f)
			fclose(f);
		if (!f || n != s->n || memcmp(cur, s->b, n)) {
			fprintf(stderr, "stale or missing seed: %s (regenerate: fuzz_gen_seeds %s)\n",
				path, g_dir);
			g_bad++;
		}
		return;
	}
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(s->b, 1, s->n, f) != s->n || fclose(f)) {
		perror(path);
		exit(2);
	}
}

/* ---- frame builders (append to a seed) ---- */

static void pad(struct seed *s)
{
	while (s->n % VBI_WIRE_ALIGN)
		s->b[s->n++] = 0;
}

static void put_frame(struct seed *s, const struct vbi_wire_hdr *h, const void *pl)
{
	vbi_wire_put(s->b + s->n, h);
	if (h->len)
		memcpy(s->b + s->n + VBI_WIRE_HDR_LEN, pl, h->len);
	s->n += VBI_WIRE_HDR_LEN + h->len;
	pad(s);
}

static void data(struct seed *s, uint32_t session, uint64_t seq, const char *msg, uint32_t off,
		 uint32_t len, uint32_t msg_len)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_DATA, .session = session, .topic = 7,
				  .epoch = 1, .len = len, .seq = seq, .frag_off = off,
				  .msg_len = msg_len };

	h.flags = (uint16_t)((off == 0 ? VBI_WF_FIRST : 0) |
			     (off + len == msg_len ? VBI_WF_LAST : 0));
	put_frame(s, &h, msg + off);
}

/* A BATCH frame of @n whole messages from seq @seq: record i holds the
 * first 3 * i + 1 bytes of @msg (the library's encoder: vbi_wire_rec_put). */
static void batch(struct seed *s, uint32_t session, uint64_t seq, const char *msg, unsigned n)
{
	struct vbi_wire_hdr h = { .type = VBI_WT_BATCH, .flags = VBI_WF_FIRST | VBI_WF_LAST,
				  .session = session, .topic = 7, .epoch = 1, .seq = seq,
				  .msg_len = n };
	uint32_t off = VBI_WIRE_HDR_LEN;

	for (unsigned i = 0; i < n; i++)
		off += (uint32_t)vbi_wire_rec_put(s->b + s->n + off, msg, 3 * i + 1);
	h.len = off - VBI_WIRE_HDR_LEN;
	vbi_wire_put(s->b + s->n, &h);
	s->n += off;
	pad(s);
}

/* A compact BATCH of @n records (the SEND's last frame: it runs to the end):
 * it continues the BATCH before it in the same input. */
static void cbatch(struct seed *s, const char *msg, unsigned n)
{
	uint32_t off = VBI_WIRE_CHDR_LEN;

	vbi_wire_cput(s->b + s->n, VBI_WF_ACK_REQ);
	for (unsigned i = 0; i < n; i++)
		off += (uint32_t)vbi_wire_rec_put(s->b + s->n + off, msg, 2 * i + 3);
	s->n += off;
}

static void ctl(struct seed *s, uint8_t type, uint32_t session, uint64_t seq, uint32_t epoch,
		uint32_t frag_off, uint32_t msg_len)
{
	struct vbi_wire_hdr h = { .type = type, .session = session, .topic = 7, .epoch = epoch,
				  .seq = seq, .frag_off = frag_off, .msg_len = msg_len };

	put_frame(s, &h, NULL);
}

static void hello(struct seed *s, uint32_t lane, uint32_t role, bool auth)
{
	struct vbi_wire_hello hi;
	uint8_t pl[VBI_WIRE_HELLO_LEN_AUTH];
	struct vbi_wire_hdr h = { .type = VBI_WT_HELLO,
				  .len = auth ? VBI_WIRE_HELLO_LEN_AUTH : VBI_WIRE_HELLO_LEN };

	memset(&hi, 0, sizeof(hi));
	hi.version = VBI_WIRE_HELLO_VERSION;
	hi.ud_qpn = 0x11;
	hi.ud_qkey = 0x11111111;
	memset(hi.gid, 0xfe, 16);
	hi.slots = 256;
	hi.slot_size = 8192;
	hi.max_msg = 1u << 20;
	strcpy(hi.name, "node-a");
	hi.uid = 0x0123456789abcdefull;
	hi.lane = lane;
	hi.role = role;
	hi.sb_family = 4;
	hi.sb_port = 7471;
	memcpy(hi.sb_addr, "\x0a\x00\x00\x02", 4);
	hi.mode = 0;
	hi.uc_port = 7472;
	hi.auth_flags = auth ? 1 : 0;
	memset(hi.nonce, 0x5a, sizeof(hi.nonce));
	vbi_wire_hello_encode(&hi, pl);
	put_frame(s, &h, pl);
}

static void sub(struct seed *s, const char *topic, uint8_t cls, uint32_t group)
{
	s->n += vbi_wire_sub_encode(s->b + s->n, vbi_topic_id(topic), group, cls, topic,
				    strlen(topic));
}

static void udaddr(struct seed *s)
{
	struct vbi_wire_udaddr a = { .qpn = 0x22, .qkey = 0x11111111 };

	memset(a.gid, 0xfd, 16);
	s->n += vbi_wire_udaddr_encode(s->b + s->n, &a);
	pad(s);
}

static void bye(struct seed *s, const char *why)
{
	s->n += vbi_wire_bye_encode(s->b + s->n, why);
	pad(s);
}

static void auth(struct seed *s, uint32_t op)
{
	uint8_t nonce[VBI_WIRE_NONCE], mac[VBI_WIRE_AUTH_MAC];

	memset(nonce, 0x3c, sizeof(nonce));
	memset(mac, 0xc3, sizeof(mac));
	if (op == VBI_WAUTH_PROOF)
		s->n += vbi_wire_auth_encode(s->b + s->n, op, 0, 256, nonce, sizeof(nonce), mac,
					     sizeof(mac));
	else if (op == VBI_WAUTH_ANSWER)
		s->n += vbi_wire_auth_encode(s->b + s->n, op, 0, 0, mac, sizeof(mac), NULL, 0);
	else
		s->n += vbi_wire_auth_encode(s->b + s->n, op, 3, 0, NULL, 0, NULL, 0);
	pad(s);
}

/* A UD receive for fanout_fuzz: u16 length, a zero GRH, the frames. */
static void datagram(struct seed *out, const struct seed *frames)
{
	uint32_t n = VBI_WIRE_UD_GRH + (uint32_t)frames->n;

	out->b[out->n++] = (uint8_t)n;
	out->b[out->n++] = (uint8_t)(n >> 8);
	memset(out->b + out->n, 0, VBI_WIRE_UD_GRH);
	memcpy(out->b + out->n + VBI_WIRE_UD_GRH, frames->b, frames->n);
	out->n += n;
}

#define NEW(s) struct seed s = { .n = 0 }
#define RESET(s) ((s).n = 0)

static const char MSG[] = "verbus fuzz seed: a message in three fragments";

int main(int argc, char **argv)
{
	uint32_t ml = (uint32_t)strlen(MSG);

	if (argc == 3 && !strcmp(argv[1], "--check")) {
		g_check = true;
		g_dir = argv[2];
	} else if (argc == 2) {
		g_dir = argv[1];
		if (mkdir(g_dir, 0755) && errno != EEXIST) {
			perror(g_dir);
			return 2;
		}
	} else {
		fprintf(stderr, "usage: %s [--check] DIR\n", argv[0]);
		return 2;
	}

	{ /* frames: one of each type, and a batch */
		NEW(s);
		data(&s, 0xa1, 1, MSG, 0, ml, ml);
		emit("frames", "data", &s);
		RESET(s);
		batch(&s, 0xa1, 2, MSG, 3);
		emit("frames", "batchframe", &s);
		RESET(s);
		batch(&s, 0xa1, 2, MSG, 2);
		ctl(&s, VBI_WT_ACK, 0xa1, 1, 1, 4, 0);
		cbatch(&s, MSG, 3);
		emit("frames", "compact", &s);
		RESET(s);
		ctl(&s, VBI_WT_ACK, 0xa1, 1, 1, 4, 0);
		emit("frames", "ack", &s);
		RESET(s);
		ctl(&s, VBI_WT_NAK, 0xa1, 2, 1, 0, 0);
		emit("frames", "nak", &s);
		RESET(s);
		hello(&s, 1, 0, true);
		emit("frames", "hello", &s);
		RESET(s);
		ctl(&s, VBI_WT_HEARTBEAT, 0xa1, 3, 1, 0, 0);
		emit("frames", "heartbeat", &s);
		RESET(s);
		sub(&s, "prices", VBI_WIRE_CLASS_ORDERED, 0);
		emit("frames", "sub", &s);
		RESET(s);
		ctl(&s, VBI_WT_UNSUB, 0, 0, 0, 0, 0);
		emit("frames", "unsub", &s);
		RESET(s);
		bye(&s, NULL);
		emit("frames", "bye", &s);
		RESET(s);
		ctl(&s, VBI_WT_LANE, 0, 1, 2, 0, 0);
		emit("frames", "lane", &s);
		RESET(s);
		udaddr(&s);
		emit("frames", "udaddr", &s);
		RESET(s);
		ctl(&s, VBI_WT_END, 0xa1, 5, 1, 1, 0);
		emit("frames", "end", &s);
		RESET(s);
		auth(&s, VBI_WAUTH_ANSWER);
		emit("frames", "auth", &s);
		RESET(s);
		data(&s, 0xa1, 1, MSG, 0, 5, 5);
		ctl(&s, VBI_WT_ACK, 0xa1, 1, 1, 1, 0);
		data(&s, 0xa1, 2, MSG, 0, 16, ml);
		data(&s, 0xa1, 2, MSG, 16, ml - 16, ml);
		ctl(&s, VBI_WT_HEARTBEAT, 0xa1, 2, 1, 0, 0);
		emit("frames", "batch", &s);
	}
	{ /* hello */
		NEW(s);
		hello(&s, 1, 0, true);
		emit("hello", "auth", &s);
		RESET(s);
		hello(&s, 2, 1, false);
		emit("hello", "v3", &s);
	}
	{ /* sub */
		NEW(s);
		sub(&s, "prices", VBI_WIRE_CLASS_ORDERED, 0);
		emit("sub", "ordered", &s);
		RESET(s);
		sub(&s, "ticks/eu", VBI_WIRE_CLASS_FANOUT, 0xef000001u);
		sub(&s, "x", VBI_WIRE_CLASS_ORDERED, 0);
		emit("sub", "batch", &s);
	}
	{ /* ctrl: UDADDR, BYE, AUTH */
		NEW(s);
		udaddr(&s);
		emit("ctrl", "udaddr", &s);
		RESET(s);
		bye(&s, "max_peers (16) reached at node 'x'");
		emit("ctrl", "bye-refusal", &s);
		RESET(s);
		auth(&s, VBI_WAUTH_PROOF);
		emit("ctrl", "auth-proof", &s);
		RESET(s);
		auth(&s, VBI_WAUTH_ANSWER);
		emit("ctrl", "auth-answer", &s);
		RESET(s);
		auth(&s, VBI_WAUTH_REFUSE);
		emit("ctrl", "auth-refuse", &s);
	}
	{ /* lane: prefix byte (bit0 connector, bits 1-6 lane, bit 7 probe), frames */
		NEW(s);
		s.b[s.n++] = 0; /* accepting side */
		hello(&s, 1, 0, false);
		ctl(&s, VBI_WT_LANE, 0, 1, 1, 0, 0);
		ctl(&s, VBI_WT_LANE, 0, 1, 2, 0, 0);
		emit("lane", "primary", &s);
		RESET(s);
		s.b[s.n++] = 0;
		hello(&s, 2, VBI_WIRE_ROLE_MAX, false); /* a probe lane */
		ctl(&s, VBI_WT_LANE, 0, 3, 4, 0, 0);    /* promoted, renumbered */
		emit("lane", "probe", &s);
		RESET(s);
		s.b[s.n++] = 1 | 1 << 1; /* connector, lane 1 */
		ctl(&s, VBI_WT_LANE, 0, 1, 1, 0, 0);
		emit("lane", "connector", &s);
	}
	{ /* acknak: prefix byte (bits 0-5 window - 1, bit 6 unreliable), frames */
		NEW(s);
		s.b[s.n++] = 7;
		data(&s, 0xa1, 1, MSG, 0, 4, 4);
		data(&s, 0xa1, 2, MSG, 0, 4, 4);
		data(&s, 0xa1, 3, MSG, 0, 4, 4);
		ctl(&s, VBI_WT_ACK, 0xa1, 2, 1, 2, 0);
		ctl(&s, VBI_WT_NAK, 0xa1, 3, 1, 0, 0);
		ctl(&s, VBI_WT_ACK, 0, 0, 0, 1, 0); /* keepalive: credits only */
		emit("acknak", "reliable", &s);
		RESET(s);
		s.b[s.n++] = 1 | 0x40;
		data(&s, 0xa1, 1, MSG, 0, 4, 4);
		data(&s, 0xa1, 2, MSG, 0, 4, 4);
		ctl(&s, VBI_WT_ACK, 0xa1, 1, 1, 5, 0); /* more credits than used */
		emit("acknak", "unreliable", &s);
	}
	{ /* reasm */
		NEW(s);
		data(&s, 0xa1, 4, MSG, 0, 16, ml);
		data(&s, 0xa1, 4, MSG, 16, 16, ml);
		data(&s, 0xa1, 4, MSG, 32, ml - 32, ml);
		emit("reasm", "three", &s);
		RESET(s);
		data(&s, 0xa1, 5, MSG, 0, 16, ml);
		ctl(&s, VBI_WT_END, 0xa1, 5, 1, 1, 0);
		data(&s, 0xa1, 6, MSG, 0, 8, ml);
		data(&s, 0xa1, 6, MSG, 8, ml - 8, ml);
		emit("reasm", "end", &s);
	}
	{ /* fanout: datagrams */
		NEW(s);
		NEW(f);
		data(&f, 0xb2, 1, MSG, 0, 8, 8);
		datagram(&s, &f);
		RESET(f);
		batch(&f, 0xd4, 1, MSG, 2); /* a batch datagram, another publisher */
		datagram(&s, &f);
		RESET(f);
		data(&f, 0xb2, 3, MSG, 0, 8, 8); /* gap: 2 lost */
		datagram(&s, &f);
		RESET(f);
		ctl(&f, VBI_WT_HEARTBEAT, 0xb2, 5, 1, 0, 0); /* tail loss: 4, 5 */
		datagram(&s, &f);
		RESET(f);
		data(&f, 0xb2, 6, MSG, 0, 20, ml);
		datagram(&s, &f);
		RESET(f);
		data(&f, 0xb2, 6, MSG, 20, ml - 20, ml);
		data(&f, 0xc3, 9, MSG, 0, 3, 3); /* another publisher */
		datagram(&s, &f);
		emit("fanout", "stream", &s);
	}
	if (g_check && g_bad) {
		fprintf(stderr, "%d seed(s) stale: run fuzz_gen_seeds tests/fuzz/corpus and commit\n",
			g_bad);
		return 1;
	}
	return 0;
}
