/* SPDX-License-Identifier: MIT */
/*
 * vb_bench lat | bw | fanout: the pub/sub API measured between processes on
 * one RDMA device (the Soft-RoCE VM when the host has none).
 *
 *   lat     ping-pong; one-way latency = RTT / 2 of every round trip, kept
 *           sample by sample: exact (nearest-rank) p50 p90 p99 p99.9 max,
 *           the share of samples above 1 ms ("tick mode": the round trip
 *           waited for a scheduler tick) and the p50 of the samples at or
 *           below 1 ms ("fast-mode p50"). Two clock reads per round trip,
 *           as ib_send_lat. --rate R sends at a fixed rate and measures from
 *           each message's intended send time (no coordinated omission);
 *           otherwise the next ping leaves when the pong is in.
 *   bw      one publisher, one subscriber: messages/s and MB/s measured at
 *           the receiver, from its first delivery to its last stamped one.
 *   fanout  one publisher, --subs N subscribers in --sub-procs P processes
 *           (default N: one each; 1: all N in one process, each its own node
 *           on one context, so one progress thread): aggregate deliveries/s
 *           and the worst subscriber's delivery latency p99.
 *
 * No system clock per message: every time is read from the calibrated TSC
 * (bench/clock.h), and in bw/fanout only every --stamp-every'th message
 * (default 64, and the last one) carries its publish time; the subscriber
 * reads the clock for those and for its first delivery only, so per
 * message the publisher does one vb_publish() and the subscriber's callback
 * counts it.
 *
 * Common options: --class ordered|fanout, --size BYTES (repeatable list
 * "64,1024,65536"), --count N, --ip ADDR, --json FILE.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <verbus/verbus.h>

#include "bench/bench.h"
#include "bench/clock.h"
#include "bench/thread_cpu.h"
#include "bench/hist.h"

struct opts {
	vb_class_t cls;
	size_t sizes[8];
	int nsizes;
	uint64_t count;
	double rate;
	double max_secs;   /* lat: stop measuring a size after this long (0: never) */
	int subs;
	int sub_procs;     /* processes the subscribers are spread over; 0 = subs */
	unsigned stamp_every; /* bw/fanout: stamp every Nth message (and the last) */
	const char *ip;
	const char *json;
};

#define TICK_NS 1000000ull /* above this a round trip is in the tick mode */

static uint64_t now_ns(void)
{
	return vbb_now_ns();
}

static int parse(int argc, char **argv, struct opts *o, const char *what)
{
	static const struct option lo[] = {
		{ "class", required_argument, 0, 'c' }, { "size", required_argument, 0, 's' },
		{ "count", required_argument, 0, 'n' }, { "rate", required_argument, 0, 'r' },
		{ "subs", required_argument, 0, 'S' },  { "ip", required_argument, 0, 'i' },
		{ "json", required_argument, 0, 'j' },  { "sub-procs", required_argument, 0, 'P' },
		{ "stamp-every", required_argument, 0, 'E' }, { "max-secs", required_argument, 0, 'T' },
		{ 0, 0, 0, 0 },
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
		case 'P': o->sub_procs = atoi(optarg); break;
		case 'T': o->max_secs = strtod(optarg, NULL); break;
		case 'E': o->stamp_every = (unsigned)strtoul(optarg, NULL, 0); break;
		default:
			goto bad;
		}
	}
	if (!o->sub_procs || o->sub_procs > o->subs)
		o->sub_procs = o->subs;
	if (!o->stamp_every)
		o->stamp_every = 64;
	if (!o->count || o->subs < 1 || o->subs > 16 || o->sub_procs < 1)
		goto bad;
	vbb_clock_init(); /* before any fork: every process shares the rate */
	return 0;
bad:
	fprintf(stderr, "vb_bench %s: [--class ordered|fanout] [--size N[,N...]] [--count N] "
			"[--rate MSGS_PER_S] [--max-secs S] [--subs N] [--sub-procs P] "
			"[--stamp-every N] [--ip ADDR] [--json FILE]\n", what);
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

	/* Back-pressure: with a progress thread, give the core to it (and to
	 * the subscribers' threads: the bench runs more busy threads than the
	 * VM has cores); in APP mode, drive the progress. */
	while ((rc = vb_publish(pub, buf, len, NULL)) == -EAGAIN)
		if (app)
			vb_progress(ctx);
		else
			sched_yield();
	return rc;
}

/* ---- lat --------------------------------------------------------------------------- */

/* VB_BENCH_STATS: what an end of a ping-pong posted over the whole run. */
static void lat_sends(const char *who, vb_ctx_t *ctx)
{
	vb_stats_t cs;

	if (getenv("VB_BENCH_STATS") && vb_ctx_stats(ctx, &cs) == 0)
		fprintf(stderr, "lat: %s: published %llu (held %llu), SENDs %llu (frames %llu, "
			"signaled %llu), ACK-carrying %llu, keepalives %llu, heartbeats %llu\n", who,
			(unsigned long long)cs.published, (unsigned long long)cs.cork_holds,
			(unsigned long long)cs.sends_posted,
			(unsigned long long)cs.frames_sent, (unsigned long long)cs.signaled_sends,
			(unsigned long long)cs.acks_sent,
			(unsigned long long)cs.keepalives, (unsigned long long)cs.heartbeats_sent);
}

struct pong {
	vb_pub_t *pub;
	vb_ctx_t *ctx;
	atomic_uint_fast64_t got;
	atomic_bool stop; /* ponger: the pinger is done (a 1-byte message) */
	uint64_t cb_ns;   /* pinger: clock at the last pong's callback */
};

static void pong_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct pong *p = arg;

	if (p->pub && m->len == 1) /* the pinger is done */
		atomic_store(&p->stop, true);
	else if (p->pub) /* ponger: echo it back */
		publish_spin(p->pub, m->data, m->len, p->ctx, 1);
	p->cb_ns = now_ns();
	atomic_fetch_add_explicit(&p->got, 1, memory_order_release);
}

static int ponger(const struct opts *o, uint16_t port)
{
	struct end e;
	vb_sub_attr_t sa;
	vb_sub_t *sub;
	static struct pong p;
	uint64_t idle = 0;

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
	/* serve until the pinger says it is done (or about 3 s of silence) */
	while (idle < 3000000 && !atomic_load(&p.stop)) {
		if (vb_progress(e.ctx) > 0)
			idle = 0;
		else
			idle++;
	}
	lat_sends("ponger", e.ctx);
	vb_sub_destroy(sub);
	vb_pub_destroy(p.pub);
	end_close(&e);
	return 0;
}

/*
 * Until @pub has @n subscribers and, when standbys are on (the default:
 * vb_ctx_attr_t.standby, VERBUS_STANDBY), the connections to them have
 * their pre-warmed standby: that connection is built right after the
 * first, on the library's threads, and registers its buffers meanwhile.
 * Timing starts after the set-up, as perftest's does; a stream started at
 * once ran ~30% slower over 20,000 messages (docs/benchmarks.md). A
 * standby that does not come within 10 s is said, and the run goes on.
 */
static int wait_subs(vb_pub_t *pub, int n, vb_ctx_t *ctx, int app)
{
	uint64_t t0 = now_ns();
	vb_ctx_attr_t ca;
	vb_stats_t st;

	while (vb_pub_subscribers(pub) < n) {
		if (now_ns() - t0 > 30000000000ull)
			return fprintf(stderr, "no subscriber after 30 s\n"), -1;
		if (app)
			vb_progress(ctx);
		else
			usleep(1000);
	}
	vb_ctx_attr_init(&ca);
	if (!ca.standby)
		return 0;
	t0 = now_ns();
	while (vb_ctx_stats(ctx, &st) == 0 && st.standbys_warmed < (uint64_t)n) {
		if (now_ns() - t0 > 10000000000ull) {
			fprintf(stderr, "%llu of %d standby connections warm after 10 s: timing "
				"anyway\n", (unsigned long long)st.standbys_warmed, n);
			break;
		}
		if (app)
			vb_progress(ctx);
		else
			usleep(1000);
	}
	return 0;
}

/* Latency samples of one size, summarised as perftest's are (nearest rank
 * over the sorted samples), plus the two modes seen under TCG. */
struct lat_stats {
	uint64_t n, p50, p90, p99, p999, max, slow, fast_p50;
	double mean;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t rank(const uint64_t *v, uint64_t n, double p)
{
	uint64_t k = (uint64_t)(p / 100.0 * (double)n + 0.999999);

	if (!n)
		return 0;
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

static void lat_summary(uint64_t *v, uint64_t n, struct lat_stats *st)
{
	double sum = 0;
	uint64_t fast = 0;

	qsort(v, n, sizeof(*v), cmp_u64);
	for (uint64_t i = 0; i < n; i++) {
		sum += (double)v[i];
		if (v[i] <= TICK_NS)
			fast++;
	}
	st->n = n;
	st->p50 = rank(v, n, 50);
	st->p90 = rank(v, n, 90);
	st->p99 = rank(v, n, 99);
	st->p999 = rank(v, n, 99.9);
	st->max = n ? v[n - 1] : 0;
	st->slow = n - fast;
	st->fast_p50 = rank(v, fast, 50); /* the sorted prefix at or below 1 ms */
	st->mean = n ? sum / (double)n : 0;
}

static void print_lat(FILE *f, const char *shape, const struct opts *o, size_t size,
		      const struct lat_stats *st, int json)
{
	double slow_pct = st->n ? 100.0 * (double)st->slow / (double)st->n : 0;

	if (json) {
		fprintf(f, "{\"bench\":\"%s\",\"class\":\"%s\",\"size\":%zu,\"count\":%llu,"
			   "\"rate\":%.0f,\"clock\":\"%s\",\"busy_threads\":2,"
			   "\"one_way_ns\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,"
			   "\"p999\":%llu,\"max\":%llu,\"mean\":%.0f},\"tick_ns\":%llu,"
			   "\"tick_share\":%.5f,\"fast_p50\":%llu}\n",
			shape, cls_name(o->cls), size, (unsigned long long)st->n, o->rate,
			vbb_clock_source(), (unsigned long long)st->p50, (unsigned long long)st->p90,
			(unsigned long long)st->p99, (unsigned long long)st->p999,
			(unsigned long long)st->max, st->mean, (unsigned long long)TICK_NS,
			slow_pct / 100.0, (unsigned long long)st->fast_p50);
		return;
	}
	fprintf(f, "%-8s %-8s %8zu %9llu %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f %9.1f\n", shape,
		cls_name(o->cls), size, (unsigned long long)st->n, st->p50 / 1e3, st->p90 / 1e3,
		st->p99 / 1e3, st->p999 / 1e3, st->max / 1e3, slow_pct, st->fast_p50 / 1e3);
}

/* VB_BENCH_STATS: how many round trips had the pinger post a SEND besides
 * its ping (an ACK, credits, a keepalive), among all of them and among
 * the slow ones (one-way above 4x the median). */
static void lat_extra(const uint64_t *samp, const uint8_t *extra, uint64_t n)
{
	uint64_t *sorted = malloc(n * sizeof(*sorted)), med, all = 0, slow = 0, slow_x = 0;

	if (!sorted)
		return;
	memcpy(sorted, samp, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_u64);
	med = sorted[n / 2];
	free(sorted);
	for (uint64_t i = 0; i < n; i++) {
		all += extra[i] != 0;
		if (samp[i] > 4 * med) {
			slow++;
			slow_x += extra[i] != 0;
		}
	}
	fprintf(stderr, "lat: round trips with another SEND from the pinger: %llu of %llu; "
		"slow ones (one-way > %.1f us): %llu, %llu of them with another SEND\n",
		(unsigned long long)all, (unsigned long long)n, 4 * med / 1e3,
		(unsigned long long)slow, (unsigned long long)slow_x);
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
	uint64_t *samp, *d_pub = NULL, *d_tail = NULL;
	uint8_t *d_extra = NULL; /* VB_BENCH_STATS: SENDs the pinger posted beyond the ping */
	struct lat_stats st;

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
	samp = calloc(o.count, sizeof(*samp));
	if (getenv("VB_BENCH_STATS")) { /* where a round trip's time goes, pinger side */
		d_pub = calloc(o.count, sizeof(*d_pub));
		d_tail = calloc(o.count, sizeof(*d_tail));
		d_extra = calloc(o.count, 1);
		if (!d_pub || !d_tail || !d_extra)
			return fprintf(stderr, "lat: out of memory\n"), 1;
	}
	if (!buf || !samp)
		return fprintf(stderr, "lat: out of memory\n"), 1;
	printf("%-8s %-8s %8s %9s %9s %9s %9s %9s %9s %7s %9s   (one-way us; clock: %s)\n",
	       "bench", "class", "bytes", "samples", "p50", "p90", "p99", "p99.9", "max", ">1ms %",
	       "fast p50", vbb_clock_source());
	for (int si = 0; si < o.nsizes; si++) {
		size_t size = o.sizes[si] < 8 ? 8 : o.sizes[si];
		uint64_t interval = o.rate > 0 ? (uint64_t)(1e9 / o.rate) : 0, t0, ns = 0;
		uint64_t deadline = UINT64_MAX;

		/* 100 warm-up round trips, then the measured ones */
		t0 = now_ns();
		for (uint64_t i = 0; i < o.count + 100; i++) {
			uint64_t intended = interval ? t0 + i * interval : now_ns(), sent, before, end;
			uint64_t published, sends0 = 0;
			vb_stats_t cs;

			while (interval && now_ns() < intended)
				vb_progress(e.ctx);
			if (d_extra && vb_ctx_stats(e.ctx, &cs) == 0)
				sends0 = cs.sends_posted;
			sent = now_ns();
			before = atomic_load(&p.got);
			if (publish_spin(pub, buf, size, e.ctx, 1))
				return fprintf(stderr, "lat: %s\n", vb_errmsg()), 1;
			published = now_ns();
			/* the 5 s bound is checked only now and then */
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
			if (i >= 100 && ns < o.count) {
				uint64_t t = now_ns();

				if (d_pub) {
					d_pub[ns] = published - sent;
					d_tail[ns] = t - p.cb_ns;
					if (vb_ctx_stats(e.ctx, &cs) == 0)
						d_extra[ns] = (uint8_t)(cs.sends_posted - sends0 - 1 > 255 ?
									255 : cs.sends_posted - sends0 - 1);
				}
				samp[ns++] = (t - (interval ? intended : sent)) / 2;
				if (t > deadline)
					break; /* --max-secs: fewer samples, said in "samples" */
			} else if (i == 99) {
				if (o.max_secs > 0)
					deadline = now_ns() + (uint64_t)(o.max_secs * 1e9);
				vbb_mark_start();
			}
		}
		vbb_mark_end("lat (pinger, per round trip)", ns);
		if (d_pub && ns) {
			struct lat_stats a, b;

			lat_summary(d_pub, ns, &a);
			lat_summary(d_tail, ns, &b);
			fprintf(stderr, "lat: pinger's vb_publish() p50 %.2f us p90 %.2f; its pong "
				"callback -> vb_progress() return p50 %.2f us p90 %.2f\n", a.p50 / 1e3,
				a.p90 / 1e3, b.p50 / 1e3, b.p90 / 1e3);
			lat_extra(samp, d_extra, ns);
		}
		lat_summary(samp, ns, &st);
		print_lat(stdout, "lat", &o, size, &st, 0);
		if (jf)
			print_lat(jf, "lat", &o, size, &st, 1);
	}
	free(samp);
	free(d_pub);
	free(d_tail);
	free(d_extra);
	lat_sends("pinger", e.ctx);
	buf[0] = 0; /* tell the ponger we are done: a 1-byte message */
	publish_spin(pub, buf, 1, e.ctx, 1);
	for (int k = 0; k < 10000; k++)
		vb_progress(e.ctx); /* let it go out */
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

/* One subscriber's counters. Written only by the progress thread that runs
 * its callback; read after vb_sub_destroy() (no callback runs after it). */
struct sink {
	uint64_t n, bytes;       /* deliveries seen by the callback */
	uint64_t first_ns;       /* clock at the first delivery */
	uint64_t last_ns, last_n; /* clock at the last stamped delivery, its index */
	struct vbi_hist lat;     /* publish -> delivery of the stamped messages */
	uint64_t mark_ns[64];    /* clock at deliveries 0, MARK_EVERY, 2 x MARK_EVERY, ... */
};
#define MARK_EVERY 5000 /* VB_BENCH_STATS: the subscriber's rate per interval */

static void sink_cb(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct sink *s = arg;
	uint64_t n = s->n++, sent = 0, t;

	(void)sub;
	s->bytes += m->len;
	if (n % MARK_EVERY == 0 && n / MARK_EVERY < 64)
		s->mark_ns[n / MARK_EVERY] = now_ns();
	if (m->len >= 8)
		memcpy(&sent, m->data, 8);
	if (!sent && n)
		return; /* the common case: no clock read */
	t = now_ns();
	if (!n)
		s->first_ns = t;
	if (sent) {
		if (t > sent)
			vbi_hist_record(&s->lat, t - sent);
		s->last_ns = t;
		s->last_n = n;
	}
}

struct sink_result {
	uint64_t got, lost, bytes, ns, span, p50, p99;
};

/* One subscriber process: @nsubs subscribers, each its own node (a node
 * subscribes to a topic once), all on one context: one progress thread. */
static int sink_proc(const struct opts *o, int nsubs, uint16_t port, int wfd)
{
	vb_ctx_attr_t ca;
	vb_ctx_t *ctx;
	vb_node_t *node[16];
	vb_sub_t *sub[16];
	vb_sub_attr_t sa;
	vb_sub_stats_t st;
	static struct sink s[16];
	struct sink_result r;
	uint64_t last = 0, quiet_since = now_ns(), started = 0, regs0 = 0;
	vb_stats_t cs0;
	static struct vbb_tcpu cpu0;

	vb_ctx_attr_init(&ca);
	ca.ip = o->ip;
	ca.progress = VB_PROGRESS_THREAD;
	if (vb_ctx_create(&ca, &ctx))
		return fprintf(stderr, "sink: %s\n", vb_errmsg()), 1;
	for (int k = 0; k < nsubs; k++) {
		vb_node_attr_t na;
		char name[16];

		snprintf(name, sizeof(name), "sink%d", k);
		vb_node_attr_init(&na);
		na.name = name;
		vbi_hist_init(&s[k].lat);
		vb_sub_attr_init(&sa);
		sa.on_msg = sink_cb;
		sa.arg = &s[k];
		if (vb_node_create(ctx, &na, &node[k]) ||
		    vb_sub_create(node[k], "bench.stream", o->cls, &sa, &sub[k]) ||
		    vb_node_connect(node[k], o->ip, port))
			return fprintf(stderr, "sink: %s\n", vb_errmsg()), 1;
	}
	/* until everything arrived or was reported lost, or 3 s of silence
	 * once the stream has started (60 s before it does) */
	for (;;) {
		uint64_t g = 0;

		for (int k = 0; k < nsubs; k++) {
			vb_sub_stats(sub[k], &st);
			g += st.delivered + st.lost;
		}
		if (g >= o->count * (uint64_t)nsubs)
			break;
		if (!g && now_ns() - quiet_since < 60000000000ull) {
			usleep(1000);
			continue;
		}
		if (!started) { /* the stream started: CPU time counts from here */
			vbb_tcpu_snap(&cpu0);
			started = now_ns();
			if (getenv("VB_BENCH_STATS") && vb_ctx_stats(ctx, &cs0) == 0)
				regs0 = cs0.pool_registrations;
		}
		if (g != last) {
			last = g;
			quiet_since = now_ns();
		} else if (now_ns() - quiet_since > 3000000000ull) {
			break;
		}
		usleep(1000);
	}
	if (getenv("VB_BENCH_STATS") && started) {
		vb_stats_t cs;

		vbb_tcpu_print(stderr, "subscriber", &cpu0, now_ns() - started);
		for (int k = 0; k < nsubs; k++)
			for (unsigned i = 1; i < 64 && s[k].mark_ns[i]; i++)
				fprintf(stderr, "sub %d: deliveries %u-%u: %.0f msg/s\n", k,
					(i - 1) * MARK_EVERY, i * MARK_EVERY,
					MARK_EVERY / ((double)(s[k].mark_ns[i] - s[k].mark_ns[i - 1]) / 1e9));
		if (vb_ctx_stats(ctx, &cs) == 0)
			fprintf(stderr, "subscriber: pool chunks %u, registered %zu, registrations %llu "
				"(%llu since the first delivery), acks sent %llu\n", cs.pool_chunks,
				cs.pool_registered, (unsigned long long)cs.pool_registrations,
				(unsigned long long)(cs.pool_registrations - regs0),
				(unsigned long long)cs.acks_sent);
	}
	for (int k = 0; k < nsubs; k++) {
		vb_sub_stats(sub[k], &st);
		vb_sub_destroy(sub[k]);
		r.got = st.delivered;
		r.lost = st.lost;
		r.bytes = s[k].bytes;
		r.ns = s[k].last_ns > s[k].first_ns ? s[k].last_ns - s[k].first_ns : 0;
		r.span = s[k].last_n;
		r.p50 = vbi_hist_pct(&s[k].lat, 50);
		r.p99 = vbi_hist_pct(&s[k].lat, 99);
		if (write(wfd, &r, sizeof(r)) != sizeof(r))
			return 1;
	}
	for (int k = 0; k < nsubs; k++)
		vb_node_destroy(node[k]);
	vb_ctx_destroy(ctx);
	return 0;
}

static int run_stream(const struct opts *o, const char *shape, FILE *jf)
{
	/* spinning threads: the publisher's own and its progress thread, one
	 * progress thread per subscriber process */
	int busy = 2 + o->sub_procs;

	printf("%-7s %-8s %8s %5s %5s %10s %12s %10s %9s %12s %9s %9s   (clock: %s, stamp every "
	       "%u, %d busy threads)\n", "bench", "class", "bytes", "subs", "procs", "sent",
	       "pub msg/s", "delivered", "lost", "agg msg/s", "MB/s", "p99 us", vbb_clock_source(),
	       o->stamp_every, busy);
	for (int si = 0; si < o->nsizes; si++) {
		size_t size = o->sizes[si] < 8 ? 8 : o->sizes[si];
		struct end e;
		vb_pub_t *pub;
		int pfd[2], rfd[2];
		pid_t kids[16];
		uint16_t port;
		uint8_t *plain = calloc(1, size), *stamped = calloc(1, size);
		uint64_t t0, t1, got = 0, lost = 0, bytes = 0, maxns = 0, worst_p99 = 0;
		uint64_t pmark[64] = { 0 }; /* VB_BENCH_STATS: clock at publish 0, MARK_EVERY, ... */
		uint64_t regs0 = 0;         /* VB_BENCH_STATS: pool registrations before the stream */
		double agg = 0;
		static struct vbb_tcpu cpu0;

		if (!plain || !stamped || pipe(pfd) || pipe(rfd))
			return 1;
		for (int k = 0; k < o->sub_procs; k++) {
			/* spread o->subs over o->sub_procs processes */
			int here = o->subs / o->sub_procs + (k < o->subs % o->sub_procs);

			kids[k] = fork();
			if (kids[k] == 0) {
				if (read(pfd[0], &port, sizeof(port)) != sizeof(port))
					_exit(1);
				_exit(sink_proc(o, here, port, rfd[1]));
			}
		}
		if (end_open(&e, o->ip, "source", 1, VB_PROGRESS_THREAD))
			return 1;
		if (vb_pub_create(e.node, "bench.stream", o->cls, NULL, &pub))
			return fprintf(stderr, "%s: %s\n", shape, vb_errmsg()), 1;
		port = vb_node_port(e.node);
		for (int k = 0; k < o->sub_procs; k++)
			if (write(pfd[1], &port, sizeof(port)) != sizeof(port))
				return 1;
		if (wait_subs(pub, o->subs, e.ctx, 0))
			return 1;
		if (o->count > 20000)
			fprintf(stderr, "%s: %s %zu B x %llu to %d subscriber(s)...\n", shape,
				cls_name(o->cls), size, (unsigned long long)o->count, o->subs);
		if (getenv("VB_BENCH_STATS")) {
			vb_stats_t st0;

			if (vb_ctx_stats(e.ctx, &st0) == 0)
				regs0 = st0.pool_registrations;
		}
		vbb_tcpu_snap(&cpu0);
		t0 = now_ns();
		vbb_mark_start();
		for (uint64_t i = 0; i < o->count; i++) {
			const uint8_t *buf = plain;

			if (i % o->stamp_every == 0 || i + 1 == o->count) {
				uint64_t ts = now_ns();

				memcpy(stamped, &ts, 8);
				buf = stamped;
			}
			if (i % MARK_EVERY == 0 && i / MARK_EVERY < 64)
				pmark[i / MARK_EVERY] = now_ns();
			if (publish_spin(pub, buf, size, e.ctx, 0))
				return fprintf(stderr, "%s: %s\n", shape, vb_errmsg()), 1;
		}
		t1 = now_ns();
		vbb_mark_end("publisher", o->count);
		if (getenv("VB_BENCH_STATS")) { /* diagnostics: how the messages went out */
			vb_stats_t st;

			vbb_tcpu_print(stderr, "publisher", &cpu0, t1 - t0);
			for (unsigned i = 1; i < 64 && pmark[i]; i++)
				fprintf(stderr, "pub: messages %u-%u: %.0f msg/s\n", (i - 1) * MARK_EVERY,
					i * MARK_EVERY,
					MARK_EVERY / ((double)(pmark[i] - pmark[i - 1]) / 1e9));
			if (vb_ctx_stats(e.ctx, &st) == 0) {
				fprintf(stderr, "%s: publisher: published %llu, SENDs/datagrams %llu, "
					"frames %llu (batched %llu), inline %llu, back-pressure %llu\n",
					shape, (unsigned long long)st.published,
					(unsigned long long)st.sends_posted,
					(unsigned long long)st.frames_sent,
					(unsigned long long)st.batched_frames,
					(unsigned long long)st.inline_sends,
					(unsigned long long)st.backpressure);
				fprintf(stderr, "%s: publisher: pool chunks %u, registered %zu, "
					"registrations %llu (%llu during the stream), acks received "
					"%llu\n", shape, st.pool_chunks, st.pool_registered,
					(unsigned long long)st.pool_registrations,
					(unsigned long long)(st.pool_registrations - regs0),
					(unsigned long long)st.acks_received);
			}
		}
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
				agg += (double)r.span / ((double)r.ns / 1e9);
			if (r.p99 > worst_p99)
				worst_p99 = r.p99;
		}
		for (int k = 0; k < o->sub_procs; k++)
			waitpid(kids[k], NULL, 0);
		printf("%-7s %-8s %8zu %5d %5d %10llu %12.0f %10llu %9llu %12.0f %9.2f %9.1f\n", shape,
		       cls_name(o->cls), size, o->subs, o->sub_procs, (unsigned long long)o->count,
		       (double)o->count / ((double)(t1 - t0) / 1e9), (unsigned long long)got,
		       (unsigned long long)lost, agg,
		       maxns ? (double)bytes / ((double)maxns / 1e9) / 1e6 : 0.0, worst_p99 / 1e3);
		if (jf)
			fprintf(jf, "{\"bench\":\"%s\",\"class\":\"%s\",\"size\":%zu,\"subs\":%d,"
				    "\"sub_procs\":%d,\"busy_threads\":%d,\"clock\":\"%s\","
				    "\"stamp_every\":%u,\"sent\":%llu,\"pub_msgs_per_s\":%.0f,"
				    "\"delivered\":%llu,\"lost\":%llu,\"agg_deliveries_per_s\":%.0f,"
				    "\"mb_per_s\":%.3f,\"worst_sub_p99_ns\":%llu}\n",
				shape, cls_name(o->cls), size, o->subs, o->sub_procs, busy,
				vbb_clock_source(), o->stamp_every, (unsigned long long)o->count,
				(double)o->count / ((double)(t1 - t0) / 1e9), (unsigned long long)got,
				(unsigned long long)lost, agg,
				maxns ? (double)bytes / ((double)maxns / 1e9) / 1e6 : 0.0,
				(unsigned long long)worst_p99);
		vb_pub_destroy(pub);
		end_close(&e);
		free(plain);
		free(stamped);
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
	o.sub_procs = 1;
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
