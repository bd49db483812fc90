/* SPDX-License-Identifier: MIT */
/*
 * vb_bench lat | bw | fanout: the pub/sub API measured between processes on
 * one RDMA device (the Soft-RoCE VM when the host has none).
 *
 *   lat     ping-pong; one-way latency = RTT / 2, from an HDR-style histogram
 *           (p50 p90 p99 p99.9 max). --rate R sends at a fixed rate and
 *           measures from each message's intended send time (no coordinated
 *           omission); otherwise the next ping leaves when the pong is in.
 *   bw      one publisher, one subscriber: messages/s and MB/s measured at
 *           the receiver (first to last message).
 *   fanout  one publisher, --subs N subscribers: aggregate deliveries/s and
 *           each subscriber's latency p99 (publish time stamped in the
 *           payload; publisher and subscribers share the host clock).
 *
 * Common options: --class ordered|fanout, --size BYTES (repeatable list
 * "64,1024,65536"), --count N, --ip ADDR, --json FILE.
 */
#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <verbus/verbus.h>

#include "bench/bench.h"
#include "core/hist.h"

struct opts {
	vb_class_t cls;
	size_t sizes[8];
	int nsizes;
	uint64_t count;
	double rate;
	int subs;
	const char *ip;
	const char *json;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse(int argc, char **argv, struct opts *o, const char *what)
{
	static const struct option lo[] = {
		{ "class", required_argument, 0, 'c' }, { "size", required_argument, 0, 's' },
		{ "count", required_argument, 0, 'n' }, { "rate", required_argument, 0, 'r' },
		{ "subs", required_argument, 0, 'S' },  { "ip", required_argument, 0, 'i' },
		{ "json", required_argument, 0, 'j' },  { 0, 0, 0, 0 },
	};
	int c;

	optind = 1;
	while ((c = getopt_long(argc + 1, argv - 1, "", lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (!strcmp(optarg, "ordered"))
				o->cls = VB_ORDERED;
			else if (!strcmp(optarg, "fanout"))
				o->cls = VB_FANOUT;
			else
				goto bad;
			break;
		case 's': {
			char *save, *tok, *s = strdup(optarg);

			o->nsizes = 0;
			for (tok = strtok_r(s, ",", &save); tok && o->nsizes < 8;
			     tok = strtok_r(NULL, ",", &save))
				o->sizes[o->nsizes++] = strtoull(tok, NULL, 0);
			free(s);
			break;
		}
		case 'n': o->count = strtoull(optarg, NULL, 0); break;
		case 'r': o->rate = strtod(optarg, NULL); break;
		case 'S': o->subs = atoi(optarg); break;
		case 'i': o->ip = optarg; break;
		case 'j': o->json = optarg; break;
		default:
			goto bad;
		}
	}
	if (!o->count || o->subs < 1 || o->subs > 16)
		goto bad;
	return 0;
bad:
	fprintf(stderr, "vb_bench %s: [--class ordered|fanout] [--size N[,N...]] [--count N] "
			"[--rate MSGS_PER_S] [--subs N] [--ip ADDR] [--json FILE]\n", what);
	return -1;
}

static const char *cls_name(vb_class_t c)
{
	return c == VB_ORDERED ? "ORDERED" : "FANOUT";
}

/* ---- set-up shared by every shape -------------------------------------------------- */

struct end {
	vb_ctx_t *ctx;
	vb_node_t *node;
};

static int end_open(struct end *e, const char *ip, const char *name, int listen,
		    vb_progress_mode_t mode)
{
	vb_ctx_attr_t ca;
	vb_node_attr_t na;

	vb_ctx_attr_init(&ca);
	ca.ip = ip;
	ca.progress = mode;
	if (vb_ctx_create(&ca, &e->ctx))
		return fprintf(stderr, "%s: %s\n", name, vb_errmsg()), -1;
	vb_node_attr_init(&na);
	na.name = name;
	if (listen)
		na.listen_ip = ip;
	if (vb_node_create(e->ctx, &na, &e->node))
		return fprintf(stderr, "%s: %s\n", name, vb_errmsg()), -1;
	return 0;
}

static void end_close(struct end *e)
{
	vb_node_destroy(e->node);
	vb_ctx_destroy(e->ctx);
}

static int publish_spin(vb_pub_t *pub, const void *buf, size_t len, vb_ctx_t *ctx, int app)
{
	int rc;

	while ((rc = vb_publish(pub, buf, len, NULL)) == -EAGAIN)
		if (app)
			vb_progress(ctx);
	return rc;
}

/* ---- lat --------------------------------------------------------------------------- */

struct pong {
	vb_pub_t *pub;
	vb_ctx_t *ctx;
	atomic_uint_fast64_t got;
	uint64_t stamp;
};

static void pong_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct pong *p = arg;

	if (p->pub) /* ponger: echo it back */
		publish_spin(p->pub, m->data, m->len, p->ctx, 1);
	else if (m->len >= 8)
		memcpy(&p->stamp, m->data, 8);
	atomic_fetch_add(&p->got, 1);
}

static int ponger(const struct opts *o, uint16_t port)
{
	struct end e;
	vb_sub_attr_t sa;
	vb_sub_t *sub;
	static struct pong p;
	uint64_t want = o->count * (uint64_t)o->nsizes + 100 * (uint64_t)o->nsizes, idle = 0;

	if (end_open(&e, o->ip, "ponger", 0, VB_PROGRESS_APP))
		return 1;
	if (vb_pub_create(e.node, "lat.pong", o->cls, NULL, &p.pub))
		return 1;
	p.ctx = e.ctx;
	vb_sub_attr_init(&sa);
	sa.on_msg = pong_cb;
	sa.arg = &p;
	if (vb_sub_create(e.node, "lat.ping", o->cls, &sa, &sub))
		return 1;
	if (vb_node_connect(e.node, o->ip, port))
		return fprintf(stderr, "ponger: %s\n", vb_errmsg()), 1;
	/* serve until everything was echoed, or 3 s of silence */
	while (atomic_load(&p.got) < want && idle < 3000000) {
		if (vb_progress(e.ctx) > 0)
			idle = 0;
		else
			idle++;
	}
	vb_sub_destroy(sub);
	vb_pub_destroy(p.pub);
	end_close(&e);
	return 0;
}

static int wait_subs(vb_pub_t *pub, int n, vb_ctx_t *ctx, int app)
{
	uint64_t t0 = now_ns();

	while (vb_pub_subscribers(pub) < n) {
		if (now_ns() - t0 > 30000000000ull)
			return fprintf(stderr, "no subscriber after 30 s\n"), -1;
		if (app)
			vb_progress(ctx);
		else
			usleep(1000);
	}
	return 0;
}

static void print_lat(FILE *f, const char *shape, const struct opts *o, size_t size,
		      const struct vbi_hist *h, int json)
{
	if (json) {
		fprintf(f, "{\"bench\":\"%s\",\"class\":\"%s\",\"size\":%zu,\"count\":%llu,"
			   "\"rate\":%.0f,\"one_way_ns\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,"
			   "\"p999\":%llu,\"max\":%llu,\"mean\":%.0f}}\n",
			shape, cls_name(o->cls), size, (unsigned long long)h->count, o->rate,
			(unsigned long long)vbi_hist_pct(h, 50), (unsigned long long)vbi_hist_pct(h, 90),
			(unsigned long long)vbi_hist_pct(h, 99), (unsigned long long)vbi_hist_pct(h, 99.9),
			(unsigned long long)h->max, vbi_hist_mean(h));
		return;
	}
	fprintf(f, "%-8s %-8s %8zu %9llu %9.1f %9.1f %9.1f %9.1f %9.1f\n", shape, cls_name(o->cls),
		size, (unsigned long long)h->count, vbi_hist_pct(h, 50) / 1e3,
		vbi_hist_pct(h, 90) / 1e3, vbi_hist_pct(h, 99) / 1e3, vbi_hist_pct(h, 99.9) / 1e3,
		h->max / 1e3);
}

int vb_bench_lat(int argc, char **argv)
{
	struct opts o = { .cls = VB_ORDERED, .sizes = { 64 }, .nsizes = 1, .count = 10000,
			  .subs = 1, .ip = getenv("VERBUS_TEST_IP") };
	struct end e;
	struct pong p = { 0 };
	vb_sub_attr_t sa;
	vb_sub_t *sub;
	vb_pub_t *pub;
	int pfd[2];
	pid_t kid;
	uint16_t port;
	FILE *jf = NULL;
	uint8_t *buf;
	static struct vbi_hist h;

	if (!o.ip)
		o.ip = "10.77.0.1";
	if (parse(argc, argv, &o, "lat"))
		return 2;
	if (pipe(pfd))
		return 1;
	kid = fork();
	if (kid == 0) {
		if (read(pfd[0], &port, sizeof(port)) != sizeof(port))
			_exit(1);
		_exit(ponger(&o, port));
	}
	if (end_open(&e, o.ip, "pinger", 1, VB_PROGRESS_APP))
		return 1;
	vb_sub_attr_init(&sa);
	sa.on_msg = pong_cb;
	sa.arg = &p;
	if (vb_pub_create(e.node, "lat.ping", o.cls, NULL, &pub) ||
	    vb_sub_create(e.node, "lat.pong", o.cls, &sa, &sub))
		return fprintf(stderr, "lat: %s\n", vb_errmsg()), 1;
	port = vb_node_port(e.node);
	if (write(pfd[1], &port, sizeof(port)) != sizeof(port))
		return 1;
	if (wait_subs(pub, 1, e.ctx, 1))
		return 1;
	/* the ponger's publisher must see our subscription too */
	while (vb_node_peers(e.node) < 1)
		vb_progress(e.ctx);
	if (o.json && !(jf = fopen(o.json, "a")))
		return fprintf(stderr, "lat: cannot open %s\n", o.json), 1;
	buf = calloc(1, 1 << 20);
	printf("%-8s %-8s %8s %9s %9s %9s %9s %9s %9s   (one-way us)\n", "bench", "class", "bytes",
	       "samples", "p50", "p90", "p99", "p99.9", "max");
	for (int si = 0; si < o.nsizes; si++) {
		size_t size = o.sizes[si] < 8 ? 8 : o.sizes[si];
		uint64_t interval = o.rate > 0 ? (uint64_t)(1e9 / o.rate) : 0, t0;

		vbi_hist_init(&h);
		/* 100 warm-up round trips, then the measured ones */
		t0 = now_ns();
		for (uint64_t i = 0; i < o.count + 100; i++) {
			uint64_t intended = interval ? t0 + i * interval : now_ns(), sent, before, end;

			while (interval && now_ns() < intended)
				vb_progress(e.ctx);
			sent = now_ns();
			memcpy(buf, &sent, 8);
			before = atomic_load(&p.got);
			if (publish_spin(pub, buf, size, e.ctx, 1))
				return fprintf(stderr, "lat: %s\n", vb_errmsg()), 1;
			/* check the 5 s bound only now and then: reading the clock
			 * can cost a system call (HPET in a VM) */
			end = sent + 5000000000ull;
			for (unsigned spin = 0; atomic_load(&p.got) == before; spin++) {
				vb_progress(e.ctx);
				if (!(spin & 1023) && now_ns() > end)
					break;
			}
			if (atomic_load(&p.got) == before) {
				fprintf(stderr, "lat: pong %llu lost (FANOUT) or late\n",
					(unsigned long long)i);
				continue;
			}
			if (i >= 100)
				vbi_hist_record(&h, (now_ns() - (interval ? intended : sent)) / 2);
		}
		print_lat(stdout, "lat", &o, size, &h, 0);
		if (jf)
			print_lat(jf, "lat", &o, size, &h, 1);
	}
	if (jf)
		fclose(jf);
	free(buf);
	vb_sub_destroy(sub);
	vb_pub_destroy(pub);
	waitpid(kid, NULL, 0);
	end_close(&e);
	return 0;
}

/* ---- bw and fanout ------------------------------------------------------------------------ */

struct sink {
	atomic_uint_fast64_t got, bytes;
	uint64_t first_ns, last_ns;
	struct vbi_hist lat;
};

static void sink_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct sink *s = arg;
	uint64_t t = now_ns(), sent;

	if (!s->first_ns)
		s->first_ns = t;
	s->last_ns = t;
	if (m->len >= 8) {
		memcpy(&sent, m->data, 8);
		if (sent && t > sent)
			vbi_hist_record(&s->lat, t - sent);
	}
	atomic_fetch_add_explicit(&s->bytes, m->len, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->got, 1, memory_order_relaxed);
}

struct sink_result {
	uint64_t got, lost, bytes, ns, p50, p99;
};

static int sink_proc(const struct opts *o, size_t size, uint16_t port, int wfd)
{
	struct end e;
	vb_sub_attr_t sa;
	vb_sub_t *sub;
	vb_sub_stats_t st;
	static struct sink s;
	struct sink_result r;
	uint64_t last = 0, quiet_since = now_ns();

	(void)size;
	vbi_hist_init(&s.lat);
	if (end_open(&e, o->ip, "sink", 0, VB_PROGRESS_THREAD))
		return 1;
	vb_sub_attr_init(&sa);
	sa.on_msg = sink_cb;
	sa.arg = &s;
	if (vb_sub_create(e.node, "bench.stream", o->cls, &sa, &sub) ||
	    vb_node_connect(e.node, o->ip, port))
		return fprintf(stderr, "sink: %s\n", vb_errmsg()), 1;
	/* until everything arrived or was reported lost, or 3 s of silence
	 * once the stream has started (60 s before it does) */
	for (;;) {
		uint64_t g;

		vb_sub_stats(sub, &st);
		g = st.delivered + st.lost;
		if (g >= o->count)
			break;
		if (!g && now_ns() - quiet_since < 60000000000ull) {
			usleep(1000);
			continue;
		}
		if (g != last) {
			last = g;
			quiet_since = now_ns();
		} else if (now_ns() - quiet_since > 3000000000ull) {
			break;
		}
		usleep(1000);
	}
	vb_sub_stats(sub, &st);
	r.got = st.delivered;
	r.lost = st.lost;
	r.bytes = atomic_load(&s.bytes);
	r.ns = s.last_ns - s.first_ns;
	r.p50 = vbi_hist_pct(&s.lat, 50);
	r.p99 = vbi_hist_pct(&s.lat, 99);
	if (write(wfd, &r, sizeof(r)) != sizeof(r))
		return 1;
	vb_sub_destroy(sub);
	end_close(&e);
	return 0;
}

static int run_stream(const struct opts *o, const char *shape, FILE *jf)
{
	printf("%-7s %-8s %8s %5s %10s %12s %10s %9s %12s %9s %9s\n", "bench", "class", "bytes", "subs",
	       "sent", "pub msg/s", "delivered", "lost", "agg msg/s", "MB/s", "p99 us");
	for (int si = 0; si < o->nsizes; si++) {
		size_t size = o->sizes[si] < 8 ? 8 : o->sizes[si];
		struct end e;
		vb_pub_t *pub;
		int pfd[2], rfd[2];
		pid_t kids[16];
		uint16_t port;
		uint8_t *buf = calloc(1, size);
		uint64_t t0, t1, got = 0, lost = 0, bytes = 0, maxns = 0, worst_p99 = 0;
		double agg = 0;

		if (!buf || pipe(pfd) || pipe(rfd))
			return 1;
		for (int k = 0; k < o->subs; k++) {
			kids[k] = fork();
			if (kids[k] == 0) {
				if (read(pfd[0], &port, sizeof(port)) != sizeof(port))
					_exit(1);
				_exit(sink_proc(o, size, port, rfd[1]));
			}
		}
		if (end_open(&e, o->ip, "source", 1, VB_PROGRESS_THREAD))
			return 1;
		if (vb_pub_create(e.node, "bench.stream", o->cls, NULL, &pub))
			return fprintf(stderr, "%s: %s\n", shape, vb_errmsg()), 1;
		port = vb_node_port(e.node);
		for (int k = 0; k < o->subs; k++)
			if (write(pfd[1], &port, sizeof(port)) != sizeof(port))
				return 1;
		if (wait_subs(pub, o->subs, e.ctx, 0))
			return 1;
		if (o->count > 20000)
			fprintf(stderr, "%s: %s %zu B x %llu to %d subscriber(s)...\n", shape,
				cls_name(o->cls), size, (unsigned long long)o->count, o->subs);
		t0 = now_ns();
		for (uint64_t i = 0; i < o->count; i++) {
			uint64_t ts = now_ns();

			memcpy(buf, &ts, 8);
			if (publish_spin(pub, buf, size, e.ctx, 0))
				return fprintf(stderr, "%s: %s\n", shape, vb_errmsg()), 1;
		}
		t1 = now_ns();
		for (int k = 0; k < o->subs; k++) {
			struct sink_result r;

			if (read(rfd[0], &r, sizeof(r)) != sizeof(r))
				return fprintf(stderr, "%s: a subscriber died\n", shape), 1;
			got += r.got;
			lost += r.lost;
			bytes += r.bytes;
			if (r.ns > maxns)
				maxns = r.ns;
			if (r.ns)
				agg += (double)r.got / ((double)r.ns / 1e9);
			if (r.p99 > worst_p99)
				worst_p99 = r.p99;
		}
		for (int k = 0; k < o->subs; k++)
			waitpid(kids[k], NULL, 0);
		printf("%-7s %-8s %8zu %5d %10llu %12.0f %10llu %9llu %12.0f %9.2f %9.1f\n", shape,
		       cls_name(o->cls), size, o->subs, (unsigned long long)o->count,
		       (double)o->count / ((double)(t1 - t0) / 1e9), (unsigned long long)got,
		       (unsigned long long)lost, agg,
		       maxns ? (double)bytes / ((double)maxns / 1e9) / 1e6 : 0.0, worst_p99 / 1e3);
		if (jf)
			fprintf(jf, "{\"bench\":\"%s\",\"class\":\"%s\",\"size\":%zu,\"subs\":%d,"
				    "\"sent\":%llu,\"pub_msgs_per_s\":%.0f,\"delivered\":%llu,\"lost\":%llu,"
				    "\"agg_deliveries_per_s\":%.0f,\"mb_per_s\":%.3f,\"worst_sub_p99_ns\":%llu}\n",
				shape, cls_name(o->cls), size, o->subs, (unsigned long long)o->count,
				(double)o->count / ((double)(t1 - t0) / 1e9), (unsigned long long)got,
				(unsigned long long)lost, agg,
				maxns ? (double)bytes / ((double)maxns / 1e9) / 1e6 : 0.0,
				(unsigned long long)worst_p99);
		vb_pub_destroy(pub);
		end_close(&e);
		free(buf);
		close(pfd[0]);
		close(pfd[1]);
		close(rfd[0]);
		close(rfd[1]);
	}
	return 0;
}

int vb_bench_bw(int argc, char **argv)
{
	struct opts o = { .cls = VB_ORDERED, .sizes = { 64 }, .nsizes = 1, .count = 100000,
			  .subs = 1, .ip = getenv("VERBUS_TEST_IP") };
	FILE *jf = NULL;
	int rc;

	if (!o.ip)
		o.ip = "10.77.0.1";
	if (parse(argc, argv, &o, "bw"))
		return 2;
	if (o.json && !(jf = fopen(o.json, "a")))
		return 1;
	o.subs = 1;
	rc = run_stream(&o, "bw", jf);
	if (jf)
		fclose(jf);
	return rc;
}

int vb_bench_fanout(int argc, char **argv)
{
	struct opts o = { .cls = VB_FANOUT, .sizes = { 64 }, .nsizes = 1, .count = 100000,
			  .subs = 4, .ip = getenv("VERBUS_TEST_IP") };
	FILE *jf = NULL;
	int rc;

	if (!o.ip)
		o.ip = "10.77.0.1";
	if (parse(argc, argv, &o, "fanout"))
		return 2;
	if (o.json && !(jf = fopen(o.json, "a")))
		return 1;
	rc = run_stream(&o, "fanout", jf);
	if (jf)
		fclose(jf);
	return rc;
}
