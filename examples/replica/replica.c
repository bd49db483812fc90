/* SPDX-License-Identifier: MIT */
/*
 * replica — a replicated append log over VB_ORDERED with k-of-n
 * acknowledgements.
 *
 * The writer appends records to topic "log" with ack_quorum 2: each append
 * returns once 2 of the 3 replicas have the record (vb_pub_wait_acked), the
 * way a storage write is durable once a quorum of replicas holds it. The
 * replicas subscribe to "log" and keep it in memory, or in a file with
 * --log. After the last record each replica reports its record count and a
 * checksum of its log on "log.sum"; the writer compares them with its own.
 *
 *   replica --writer  --listen IP:PORT [--replicas 3] [--quorum 2] [--count N]
 *   replica --replica --connect IP:PORT [--name NAME] [--log FILE] [--slow]
 *   replica --demo [--ip IP] [--count N]     (forks the writer and 3 replicas;
 *                                              the third is --slow)
 * --slow makes a replica lag (it sleeps 1 ms every 16 records): writes still
 * complete at the pace of the two faster ones.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>

#include "common.h"

#define REC_MAGIC 0x5245434fu /* "RECO" */
#define SUM_MAGIC 0x53554d53u /* "SUMS" */
#define MAX_REPLICAS 8

enum { REC_DATA = 1, REC_END = 2 };

struct rec_hdr {
	uint32_t magic, kind;
	uint64_t index;         /* 1, 2, ... */
	uint32_t len;           /* payload bytes after the header */
	uint32_t pad;
};

struct summary {
	uint32_t magic, pad;
	char name[32];
	uint64_t records, bytes, checksum, out_of_order;
};

struct opts {
	char ip[64];
	uint16_t port;
	unsigned replicas, quorum;
	uint64_t count;
	char name[32];
	char log[256];
	bool slow;
	int pipe_fd;
};

static void usage(void)
{
	fprintf(stderr,
		"usage: replica --writer  --listen IP:PORT [--replicas R] [--quorum K] [--count N]\n"
		"       replica --replica --connect IP:PORT [--name NAME] [--log FILE] [--slow]\n"
		"       replica --demo [--ip IP] [--count N]\n"
		"  N records (default 1000), each acknowledged by K (default 2) of R (default 3)\n"
		"  replicas; --demo runs everything on IP (default " EX_DEFAULT_IP ").\n");
}

/* Record @i: header + 16..1024 bytes derived from @i. Returns its size. */
static size_t make_record(uint8_t *buf, uint64_t i)
{
	struct rec_hdr h = { .magic = REC_MAGIC, .kind = REC_DATA, .index = i };
	uint64_t x = i * 0x9e3779b97f4a7c15ull;

	h.len = 16 + (uint32_t)(x >> 54);
	for (uint32_t b = 0; b < h.len; b++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[sizeof(h) + b] = (uint8_t)x;
	}
	memcpy(buf, &h, sizeof(h));
	return sizeof(h) + h.len;
}

/* ---- writer ----------------------------------------------------------------------- */

struct writer {
	struct summary sums[MAX_REPLICAS];
	unsigned nsums;
	uint64_t bad;
};

static void on_summary(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct writer *w = arg;
	struct summary s;

	if (m->len != sizeof(s) || w->nsums == MAX_REPLICAS) {
		w->bad++;
		return;
	}
	memcpy(&s, m->data, sizeof(s));
	if (s.magic != SUM_MAGIC) {
		w->bad++;
		return;
	}
	s.name[sizeof(s.name) - 1] = '\0';
	w->sums[w->nsums] = s;
	__atomic_store_n(&w->nsums, w->nsums + 1, __ATOMIC_RELEASE);
}

struct wait_subs {
	vb_pub_t *pub;
	int n;
};

static int enough_subscribers(void *arg)
{
	struct wait_subs *w = arg;

	return vb_pub_subscribers(w->pub) >= w->n;
}

static struct writer *g_writer;
static unsigned g_replicas;

static int all_summaries(void *arg)
{
	return __atomic_load_n(&g_writer->nsums, __ATOMIC_ACQUIRE) >= g_replicas;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int run_writer(const struct opts *o)
{
	static struct writer w;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx = ex_open_ctx(o->ip);
	vb_node_t *node = NULL;
	vb_pub_t *log = NULL;
	vb_sub_t *sums = NULL;
	struct wait_subs ws;
	struct rec_hdr end = { .magic = REC_MAGIC, .kind = REC_END };
	uint8_t buf[sizeof(struct rec_hdr) + 1100];
	uint64_t *lat = calloc(o->count, sizeof(*lat));
	uint64_t seq, checksum = EX_FNV64_INIT, bytes = 0, retries = 0, t0;
	unsigned equal = 0;
	int rc = 1;

	if (!ctx || !lat)
		return 1;
	g_writer = &w;
	g_replicas = o->replicas;
	vb_node_attr_init(&na);
	na.name = "writer";
	na.listen_ip = o->ip;
	na.listen_port = o->port;
	vb_pub_attr_init(&pa);
	pa.ack_quorum = o->quorum;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_summary;
	sa.arg = &w;
	if (vb_node_create(ctx, &na, &node) ||
	    vb_pub_create(node, "log", VB_ORDERED, &pa, &log) ||
	    vb_sub_create(node, "log.sum", VB_ORDERED, &sa, &sums)) {
		fprintf(stderr, "writer: %s\n", vb_errmsg());
		return 1;
	}
	printf("writer: listening on %s:%u, waiting for %u replicas\n", o->ip, vb_node_port(node),
	       o->replicas);
	fflush(stdout);
	if (o->pipe_fd >= 0) {
		uint16_t port = vb_node_port(node);

		if (write(o->pipe_fd, &port, sizeof(port)) != sizeof(port))
			goto out;
	}
	ws = (struct wait_subs){ log, (int)o->replicas };
	if (!ex_wait_for(enough_subscribers, &ws, 60000)) {
		fprintf(stderr, "writer: %d of %u replicas after 60 s\n", vb_pub_subscribers(log),
			o->replicas);
		goto out;
	}
	t0 = ex_now_ms();
	for (uint64_t i = 1; i <= o->count; i++) {
		size_t len = make_record(buf, i);
		uint64_t t = ex_now_us();

		/* append: durable when the quorum has it */
		if (ex_publish(log, buf, len, &seq, 10000, &retries) ||
		    vb_pub_wait_acked(log, seq, 10000)) {
			fprintf(stderr, "writer: record %" PRIu64 ": %s\n", i, vb_errmsg());
			vb_node_dump(node, stderr); /* its connections, to say why */
			goto out;
		}
		lat[i - 1] = ex_now_us() - t;
		checksum = ex_fnv64(checksum, buf, len);
		bytes += len;
	}
	qsort(lat, o->count, sizeof(*lat), cmp_u64);
	printf("writer: records=%" PRIu64 " bytes=%" PRIu64 " quorum=%u/%u checksum=%016" PRIx64
	       "\n", o->count, bytes, o->quorum, o->replicas, checksum);
	printf("writer: %.1f s; append (publish + %u acknowledgements) p50 %" PRIu64 " us, p99 %"
	       PRIu64 " us; %" PRIu64 " back-pressure retries\n",
	       (double)(ex_now_ms() - t0) / 1000.0, o->quorum, lat[o->count / 2],
	       lat[o->count * 99 / 100], retries);
	/* end of log: every replica, then their summaries */
	if (ex_publish(log, &end, sizeof(end), &seq, 10000, NULL)) {
		fprintf(stderr, "writer: end: %s\n", vb_errmsg());
		goto out;
	}
	if (!ex_wait_for(all_summaries, NULL, 60000))
		fprintf(stderr, "writer: %u of %u replica summaries\n",
			__atomic_load_n(&w.nsums, __ATOMIC_ACQUIRE), o->replicas);
	for (unsigned r = 0; r < __atomic_load_n(&w.nsums, __ATOMIC_ACQUIRE); r++) {
		const struct summary *s = &w.sums[r];
		bool same = s->records == o->count && s->bytes == bytes && s->checksum == checksum &&
			    !s->out_of_order;

		equal += same;
		printf("replica %s: records=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64
		       " match=%s\n", s->name, s->records, s->bytes, s->checksum, same ? "yes" : "NO");
	}
	printf("writer: %u of %u replica logs equal the writer's\n", equal, o->replicas);
	rc = equal == o->replicas && !w.bad ? 0 : 1;
out:
	ex_linger();
	vb_sub_destroy(sums);
	vb_pub_destroy(log);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	free(lat);
	return rc;
}

/* ---- replica ------------------------------------------------------------------------ */

struct replica {
	const struct opts *o;
	FILE *file;
	uint8_t *mem;             /* the log when not in a file */
	size_t len, cap;
	uint64_t records, next, out_of_order, io_errors;
	bool end;
};

static void append(struct replica *r, const void *data, size_t len)
{
	if (r->file) {
		if (fwrite(data, 1, len, r->file) != len)
			r->io_errors++;
		return;
	}
	if (r->len + len > r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 1 << 20;
		uint8_t *m;

		while (cap < r->len + len)
			cap *= 2;
		m = realloc(r->mem, cap);
		if (!m) {
			r->io_errors++;
			return;
		}
		r->mem = m;
		r->cap = cap;
	}
	memcpy(r->mem + r->len, data, len);
	r->len += len;
}

/* Runs on the progress thread; the writer's acknowledgement for this
 * record leaves after it returns, i.e. once the record is in the log. */
static void on_record(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct replica *r = arg;
	struct rec_hdr h;

	if (m->len < sizeof(h)) {
		r->out_of_order++;
		return;
	}
	memcpy(&h, m->data, sizeof(h));
	if (h.magic != REC_MAGIC) {
		r->out_of_order++;
		return;
	}
	if (h.kind == REC_END) {
		__atomic_store_n(&r->end, true, __ATOMIC_RELEASE);
		return;
	}
	if (h.index != r->next || m->len != sizeof(h) + h.len)
		r->out_of_order++;
	r->next = h.index + 1;
	append(r, m->data, m->len);
	r->records++;
	if (r->o->slow && r->records % 16 == 0)
		ex_sleep_us(1000);
}

static int log_ended(void *arg)
{
	return __atomic_load_n(&((struct replica *)arg)->end, __ATOMIC_ACQUIRE);
}

/* Checksum of the log as stored (read back from the file when there is one). */
static int log_checksum(struct replica *r, uint64_t *sum, uint64_t *bytes)
{
	uint8_t buf[65536];
	size_t n;

	*sum = EX_FNV64_INIT;
	*bytes = 0;
	if (!r->file) {
		*sum = ex_fnv64(*sum, r->mem, r->len);
		*bytes = r->len;
		return 0;
	}
	if (fflush(r->file) || fseek(r->file, 0, SEEK_SET))
		return -1;
	while ((n = fread(buf, 1, sizeof(buf), r->file)) > 0) {
		*sum = ex_fnv64(*sum, buf, n);
		*bytes += n;
	}
	return ferror(r->file) ? -1 : 0;
}

static int run_replica(const struct opts *o)
{
	static struct replica r;
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node = NULL;
	vb_pub_t *sumpub = NULL;
	vb_sub_t *log = NULL;
	struct wait_subs ws;
	struct summary s = { .magic = SUM_MAGIC };
	uint64_t seq;
	int rc = 1;

	r.o = o;
	r.next = 1;
	if (o->log[0] && !(r.file = fopen(o->log, "w+b"))) {
		perror(o->log);
		return 1;
	}
	if (!(ctx = ex_open_ctx(o->ip)))
		return 1;
	vb_node_attr_init(&na);
	na.name = o->name;
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	vb_sub_attr_init(&sa);
	sa.on_msg = on_record;
	sa.arg = &r;
	if (vb_node_create(ctx, &na, &node) ||
	    vb_sub_create(node, "log", VB_ORDERED, &sa, &log) ||
	    vb_pub_create(node, "log.sum", VB_ORDERED, &pa, &sumpub) ||
	    vb_node_connect(node, o->ip, o->port)) {
		fprintf(stderr, "%s: %s\n", o->name, vb_errmsg());
		goto out;
	}
	if (!ex_wait_for(log_ended, &r, 600000)) {
		fprintf(stderr, "%s: the log did not end\n", o->name);
		goto out;
	}
	snprintf(s.name, sizeof(s.name), "%s", o->name);
	s.records = r.records;
	s.out_of_order = r.out_of_order + r.io_errors;
	if (log_checksum(&r, &s.checksum, &s.bytes))
		s.out_of_order++;
	ws = (struct wait_subs){ sumpub, 1 };
	if (!ex_wait_for(enough_subscribers, &ws, 10000) ||
	    ex_publish(sumpub, &s, sizeof(s), &seq, 10000, NULL) ||
	    vb_pub_wait_acked(sumpub, seq, 10000)) {
		fprintf(stderr, "%s: summary: %s\n", o->name, vb_errmsg());
		goto out;
	}
	printf("%s: records=%" PRIu64 " bytes=%" PRIu64 " checksum=%016" PRIx64 "%s%s\n", o->name,
	       s.records, s.bytes, s.checksum, r.file ? " file=" : "", r.file ? o->log : "");
	rc = s.out_of_order ? 1 : 0;
out:
	ex_linger();
	vb_pub_destroy(sumpub);
	vb_sub_destroy(log);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	if (r.file)
		fclose(r.file);
	free(r.mem);
	return rc;
}

/* ---- demo ----------------------------------------------------------------------------- */

static int writer_main(void *arg)
{
	return run_writer(arg);
}

static int replica_main(void *arg)
{
	return run_replica(arg);
}

static int run_demo(const struct opts *o)
{
	struct opts wo = *o, ro[MAX_REPLICAS];
	pid_t writer, reps[MAX_REPLICAS];
	int fds[2], wst, bad = 0;
	uint16_t port;

	/* several processes share the CPUs: poll less before blocking (an
	 * environment override, like every vb_ctx_attr_t field has) */
	setenv("VERBUS_PROGRESS_SPIN", "200", 0);
	if (pipe(fds))
		return 1;
	wo.port = 0;
	wo.pipe_fd = fds[1];
	writer = ex_spawn(writer_main, &wo);
	if (writer < 0 || read(fds[0], &port, sizeof(port)) != sizeof(port)) {
		fprintf(stderr, "demo: the writer did not start\n");
		if (writer > 0)
			ex_wait_child(writer, 5);
		return 1;
	}
	for (unsigned i = 0; i < o->replicas; i++) {
		ro[i] = *o;
		ro[i].port = port;
		ro[i].slow = i == 2;
		snprintf(ro[i].name, sizeof(ro[i].name), "r%u", i + 1);
		/* the first replica keeps its log in a file, the others in memory */
		if (i == 0)
			snprintf(ro[i].log, sizeof(ro[i].log), "/tmp/verbus-replica-%d-r1.log",
				 (int)getpid());
		else
			ro[i].log[0] = '\0';
		reps[i] = ex_spawn(replica_main, &ro[i]);
	}
	wst = ex_wait_child(writer, 600);
	for (unsigned i = 0; i < o->replicas; i++) {
		int st = ex_wait_child(reps[i], 60);

		if (st) {
			fprintf(stderr, "demo: replica %s exited %d\n", ro[i].name, st);
			bad++;
		}
	}
	unlink(ro[0].log);
	printf("replica demo: %s (writer exit %d, %u of %u replicas exit 0)\n",
	       !wst && !bad ? "OK" : "FAILED", wst, o->replicas - bad, o->replicas);
	return !wst && !bad ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "writer", no_argument, NULL, 'w' }, { "replica", no_argument, NULL, 'r' },
		{ "demo", no_argument, NULL, 'd' },   { "listen", required_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' }, { "ip", required_argument, NULL, 'i' },
		{ "replicas", required_argument, NULL, 'R' }, { "quorum", required_argument, NULL, 'k' },
		{ "count", required_argument, NULL, 'n' }, { "name", required_argument, NULL, 'N' },
		{ "log", required_argument, NULL, 'L' }, { "slow", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },   { NULL, 0, NULL, 0 },
	};
	struct opts o = { .replicas = 3, .quorum = 2, .count = 1000, .pipe_fd = -1 };
	int role = 0, c;

	snprintf(o.ip, sizeof(o.ip), "%s", EX_DEFAULT_IP);
	snprintf(o.name, sizeof(o.name), "replica");
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'w': case 'r': case 'd':
			role = c;
			break;
		case 'l': case 'c':
			if (ex_parse_addr(optarg, o.ip, sizeof(o.ip), &o.port)) {
				fprintf(stderr, "replica: '%s' is not IP:PORT\n", optarg);
				return 2;
			}
			break;
		case 'i':
			snprintf(o.ip, sizeof(o.ip), "%s", optarg);
			break;
		case 'R':
			o.replicas = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'k':
			o.quorum = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'n':
			o.count = strtoull(optarg, NULL, 0);
			break;
		case 'N':
			snprintf(o.name, sizeof(o.name), "%s", optarg);
			break;
		case 'L':
			snprintf(o.log, sizeof(o.log), "%s", optarg);
			break;
		case 's':
			o.slow = true;
			break;
		default:
			usage();
			return c == 'h' ? 0 : 2;
		}
	}
	if (!role || !o.count || !o.replicas || o.replicas > MAX_REPLICAS || !o.quorum ||
	    o.quorum > o.replicas || (role == 'r' && !o.port)) {
		usage();
		return 2;
	}
	if (role == 'w')
		return run_writer(&o);
	if (role == 'r')
		return run_replica(&o);
	return run_demo(&o);
}
