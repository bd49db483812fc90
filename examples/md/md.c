/* SPDX-License-Identifier: MIT */
/*
 * md — a market-data feed over VB_FANOUT to several subscribers.
 *
 * The feed publishes quotes on "md.quotes" (FANOUT: datagrams, one publish
 * reaches every subscriber, at most once; every 50th message is a
 * 2.5 KB book snapshot, fragmented into several datagrams). When done it
 * announces the count on "md.ctl" (ORDERED, acknowledged by every
 * subscriber). Each subscriber checks every quote it gets and counts what
 * it missed through the gap callback, then prints
 *   delivered + lost (+ before_join: sent before its first message) ==
 *   published.
 *
 *   md --feed --listen IP:PORT [--subs K] [--count N]
 *   md --sub  --connect IP:PORT [--name NAME]
 *   md --demo [--ip IP] [--subs K] [--count N]     (forks the feed and K subscribers)
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>

#include "common.h"

#define QUOTE_MAGIC 0x51554f54u /* "QUOT" */
#define SNAP_EVERY 50
#define SNAP_LEVELS 100

struct quote {
	uint32_t magic;
	uint32_t instrument;
	uint64_t n;             /* feed's message number, 1.. (== FANOUT seq) */
	int64_t bid, ask;       /* in 1/10000 */
	uint32_t bid_qty, ask_qty;
	uint32_t levels;        /* book snapshot: price levels that follow */
	uint32_t pad;
	uint64_t check;         /* FNV-1a over everything before it + the levels */
};

struct level {
	int64_t price;
	uint64_t qty;
	uint64_t orders;
};

struct end_msg {
	uint64_t published;
};

struct opts {
	char ip[64];
	uint16_t port;
	unsigned subs;
	uint64_t count;
	char name[32];
	int pipe_fd;
};

static void usage(void)
{
	fprintf(stderr,
		"usage: md --feed --listen IP:PORT [--subs K] [--count N]\n"
		"       md --sub  --connect IP:PORT [--name NAME]\n"
		"       md --demo [--ip IP] [--subs K] [--count N]\n"
		"  the feed waits for K subscribers (default 3), publishes N quotes\n"
		"  (default 20000); --demo runs everything on IP (default " EX_DEFAULT_IP ").\n");
}

/* Quote @n (and its book for snapshots) into @buf; returns its length. */
static size_t make_quote(uint8_t *buf, uint64_t n)
{
	struct quote q = { .magic = QUOTE_MAGIC, .instrument = (uint32_t)(n % 16), .n = n };
	size_t len = sizeof(q);

	q.bid = 1000000 + (int64_t)((n * 7919) % 500) * 5;
	q.ask = q.bid + 5;
	q.bid_qty = 100 * (1 + (uint32_t)(n % 9));
	q.ask_qty = 100 * (1 + (uint32_t)(n % 5));
	if (n % SNAP_EVERY == 0) {
		q.levels = SNAP_LEVELS;
		for (uint32_t i = 0; i < SNAP_LEVELS; i++) {
			struct level l = { .price = q.bid - (int64_t)i * 5 * (i & 1 ? -1 : 1),
					   .qty = 100 * ((n + i) % 13 + 1), .orders = (n ^ i) % 7 + 1 };

			memcpy(buf + len, &l, sizeof(l));
			len += sizeof(l);
		}
	}
	q.check = ex_fnv64(ex_fnv64(EX_FNV64_INIT, &q, offsetof(struct quote, check)),
			   buf + sizeof(q), len - sizeof(q));
	memcpy(buf, &q, sizeof(q));
	return len;
}

/* ---- feed ------------------------------------------------------------------------ */

struct feed_wait {
	vb_pub_t *quotes, *ctl;
	unsigned subs;
};

static int all_subscribed(void *arg)
{
	struct feed_wait *w = arg;

	return vb_pub_subscribers(w->quotes) >= (int)w->subs &&
	       vb_pub_subscribers(w->ctl) >= (int)w->subs;
}

static int run_feed(const struct opts *o)
{
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_ctx_t *ctx = ex_open_ctx(o->ip);
	vb_node_t *node = NULL;
	vb_pub_t *quotes = NULL, *ctl = NULL;
	struct feed_wait w;
	struct end_msg end = { o->count };
	uint8_t buf[sizeof(struct quote) + SNAP_LEVELS * sizeof(struct level)];
	uint64_t seq = 0, retries = 0, snaps = 0, t0;
	vb_stats_t st;
	int rc = 1;

	if (!ctx)
		return 1;
	vb_node_attr_init(&na);
	na.name = "md-feed";
	na.listen_ip = o->ip;
	na.listen_port = o->port;
	vb_pub_attr_init(&pa);
	pa.ack_quorum = o->subs; /* the end-of-feed message reaches everyone */
	if (vb_node_create(ctx, &na, &node) ||
	    vb_pub_create(node, "md.quotes", VB_FANOUT, NULL, &quotes) ||
	    vb_pub_create(node, "md.ctl", VB_ORDERED, &pa, &ctl)) {
		fprintf(stderr, "feed: %s\n", vb_errmsg());
		return 1;
	}
	printf("feed: listening on %s:%u, waiting for %u subscribers\n", o->ip,
	       vb_node_port(node), o->subs);
	fflush(stdout);
	if (o->pipe_fd >= 0) {
		uint16_t port = vb_node_port(node);

		if (write(o->pipe_fd, &port, sizeof(port)) != sizeof(port))
			goto out;
	}
	w = (struct feed_wait){ quotes, ctl, o->subs };
	if (!ex_wait_for(all_subscribed, &w, 60000)) {
		fprintf(stderr, "feed: only %d subscribers after 60 s\n", vb_pub_subscribers(quotes));
		goto out;
	}
	t0 = ex_now_ms();
	for (uint64_t n = 1; n <= o->count; n++) {
		size_t len = make_quote(buf, n);

		if (ex_publish(quotes, buf, len, &seq, 10000, &retries)) {
			fprintf(stderr, "feed: publish: %s\n", vb_errmsg());
			goto out;
		}
		snaps += n % SNAP_EVERY == 0;
	}
	if (ex_publish(ctl, &end, sizeof(end), &seq, 10000, NULL) ||
	    vb_pub_wait_acked(ctl, seq, 30000)) {
		fprintf(stderr, "feed: end of feed: %s\n", vb_errmsg());
		vb_node_dump(node, stderr); /* its connections, to say why */
		goto out;
	}
	vb_ctx_stats(ctx, &st);
	printf("feed: published=%" PRIu64 " snapshots=%" PRIu64 " subscribers=%u in %.1f s "
	       "(%" PRIu64 " datagrams, %" PRIu64 " back-pressure retries)\n", o->count, snaps,
	       o->subs, (double)(ex_now_ms() - t0) / 1000.0, st.sends_posted, retries);
	rc = 0;
out:
	ex_linger();
	vb_pub_destroy(ctl);
	vb_pub_destroy(quotes);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return rc;
}

/* ---- subscriber ---------------------------------------------------------------- */

struct mdsub {
	uint64_t delivered, bad, first_seq, last_seq, gap_calls, gap_lost;
	uint64_t published;       /* from the end-of-feed message; 0 until then */
};

static void on_quote(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct mdsub *s = arg;
	struct quote q;
	bool ok = m->len >= sizeof(q);

	if (ok) {
		memcpy(&q, m->data, sizeof(q));
		ok = q.magic == QUOTE_MAGIC && q.n == m->seq &&
		     m->len == sizeof(q) + q.levels * sizeof(struct level) &&
		     q.check == ex_fnv64(ex_fnv64(EX_FNV64_INIT, &q, offsetof(struct quote, check)),
					 (const uint8_t *)m->data + sizeof(q), m->len - sizeof(q));
	}
	if (!ok || m->seq <= s->last_seq)
		s->bad++;
	if (!s->first_seq)
		s->first_seq = m->seq;
	s->last_seq = m->seq;
	__atomic_store_n(&s->delivered, s->delivered + 1, __ATOMIC_RELEASE);
}

static void on_gap(vb_sub_t *sub, uint32_t publisher, uint64_t lost, uint64_t next_seq, void *arg)
{
	struct mdsub *s = arg;

	s->gap_calls++;
	s->gap_lost += lost;
}

static void on_ctl(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct mdsub *s = arg;
	struct end_msg e;

	if (m->len == sizeof(e)) {
		memcpy(&e, m->data, sizeof(e));
		__atomic_store_n(&s->published, e.published, __ATOMIC_RELEASE);
	}
}

struct sub_wait {
	vb_sub_t *sub;
	uint64_t published;
};

static int accounted(void *arg)
{
	struct sub_wait *w = arg;
	vb_sub_stats_t st;

	vb_sub_stats(w->sub, &st);
	return st.delivered + st.lost >= w->published;
}

static int published_known(void *arg)
{
	return __atomic_load_n(&((struct mdsub *)arg)->published, __ATOMIC_ACQUIRE) != 0;
}

static int run_sub(const struct opts *o)
{
	static struct mdsub s;
	vb_node_attr_t na;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx = ex_open_ctx(o->ip);
	vb_node_t *node = NULL;
	vb_sub_t *quotes = NULL, *ctl = NULL;
	vb_sub_stats_t st;
	struct sub_wait w;
	uint64_t before_join;
	int rc = 1;

	if (!ctx)
		return 1;
	vb_node_attr_init(&na);
	na.name = o->name;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_quote;
	sa.on_gap = on_gap;
	sa.arg = &s;
	if (vb_node_create(ctx, &na, &node) ||
	    vb_sub_create(node, "md.quotes", VB_FANOUT, &sa, &quotes)) {
		fprintf(stderr, "%s: %s\n", o->name, vb_errmsg());
		return 1;
	}
	sa.on_msg = on_ctl;
	sa.on_gap = NULL;
	if (vb_sub_create(node, "md.ctl", VB_ORDERED, &sa, &ctl) ||
	    vb_node_connect(node, o->ip, o->port)) {
		fprintf(stderr, "%s: %s\n", o->name, vb_errmsg());
		goto out;
	}
	/* the feed may take a while: bounded by the feed's own limits */
	if (!ex_wait_for(published_known, &s, 600000)) {
		fprintf(stderr, "%s: no end-of-feed message\n", o->name);
		goto out;
	}
	/* FANOUT datagrams and the ORDERED end message travel on different
	 * queues: wait until every quote is either delivered or reported lost
	 * (the feed's heartbeats report loss at the tail). */
	w = (struct sub_wait){ quotes, s.published };
	if (!ex_wait_for(accounted, &w, 10000))
		fprintf(stderr, "%s: not every quote accounted for after 10 s\n", o->name);
	vb_sub_stats(quotes, &st);
	before_join = s.first_seq ? s.first_seq - 1 : s.published;
	printf("md-sub %s: published=%" PRIu64 " delivered=%" PRIu64 " lost=%" PRIu64 " gaps=%"
	       PRIu64 " before_join=%" PRIu64 " bad=%" PRIu64 "\n", o->name, s.published,
	       st.delivered, st.lost, st.gaps, before_join, s.bad);
	rc = st.delivered + st.lost + before_join == s.published && st.lost == s.gap_lost &&
	     st.gaps == s.gap_calls && st.delivered == s.delivered && !s.bad && st.delivered
	     ? 0 : 1;
out:
	ex_linger();
	vb_sub_destroy(ctl);
	vb_sub_destroy(quotes);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return rc;
}

/* ---- demo -------------------------------------------------------------------------- */

static int feed_main(void *arg)
{
	return run_feed(arg);
}

static int sub_main(void *arg)
{
	return run_sub(arg);
}

static int run_demo(const struct opts *o)
{
	struct opts fo = *o, so[16];
	pid_t feed, subs[16];
	int fds[2], fst, bad = 0;
	uint16_t port;

	/* several processes share the CPUs: poll less before blocking (an
	 * environment override, like every vb_ctx_attr_t field has) */
	setenv("VERBUS_PROGRESS_SPIN", "200", 0);
	if (pipe(fds))
		return 1;
	fo.port = 0;
	fo.pipe_fd = fds[1];
	feed = ex_spawn(feed_main, &fo);
	if (feed < 0 || read(fds[0], &port, sizeof(port)) != sizeof(port)) {
		fprintf(stderr, "demo: the feed did not start\n");
		if (feed > 0)
			ex_wait_child(feed, 5);
		return 1;
	}
	for (unsigned i = 0; i < o->subs; i++) {
		so[i] = *o;
		so[i].port = port;
		snprintf(so[i].name, sizeof(so[i].name), "sub%u", i + 1);
		subs[i] = ex_spawn(sub_main, &so[i]);
	}
	fst = ex_wait_child(feed, 600);
	for (unsigned i = 0; i < o->subs; i++) {
		int st = ex_wait_child(subs[i], 60);

		if (st) {
			fprintf(stderr, "demo: %s exited %d\n", so[i].name, st);
			bad++;
		}
	}
	printf("md demo: %s (feed exit %d, %u of %u subscribers exit 0)\n",
	       !fst && !bad ? "OK" : "FAILED", fst, o->subs - bad, o->subs);
	return !fst && !bad ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "feed", no_argument, NULL, 'f' },  { "sub", no_argument, NULL, 's' },
		{ "demo", no_argument, NULL, 'd' },  { "listen", required_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' }, { "ip", required_argument, NULL, 'i' },
		{ "subs", required_argument, NULL, 'k' }, { "count", required_argument, NULL, 'n' },
		{ "name", required_argument, NULL, 'N' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .subs = 3, .count = 20000, .pipe_fd = -1 };
	int role = 0, c;

	snprintf(o.ip, sizeof(o.ip), "%s", EX_DEFAULT_IP);
	snprintf(o.name, sizeof(o.name), "md-sub");
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'f': case 's': case 'd':
			role = c;
			break;
		case 'l': case 'c':
			if (ex_parse_addr(optarg, o.ip, sizeof(o.ip), &o.port)) {
				fprintf(stderr, "md: '%s' is not IP:PORT\n", optarg);
				return 2;
			}
			break;
		case 'i':
			snprintf(o.ip, sizeof(o.ip), "%s", optarg);
			break;
		case 'k':
			o.subs = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'n':
			o.count = strtoull(optarg, NULL, 0);
			break;
		case 'N':
			snprintf(o.name, sizeof(o.name), "%s", optarg);
			break;
		default:
			usage();
			return c == 'h' ? 0 : 2;
		}
	}
	if (!role || !o.count || !o.subs || o.subs > 16 || (role == 's' && !o.port)) {
		usage();
		return 2;
	}
	if (role == 'f')
		return run_feed(&o);
	if (role == 's')
		return run_sub(&o);
	return run_demo(&o);
}
