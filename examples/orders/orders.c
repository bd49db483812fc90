/* SPDX-License-Identifier: MIT */
/*
 * orders — order entry over VB_ORDERED with delivery acknowledgements.
 *
 * A gateway publishes orders on topic "orders" (ack_quorum 1: it is told
 * when the matching engine has received each one). The matching engine
 * subscribes to "orders" and answers each order with one fill on topic
 * "fills". The gateway checks that every order got exactly one fill, in
 * order, and that every order was acknowledged.
 *
 *   orders --engine  --listen IP:PORT
 *   orders --gateway --connect IP:PORT [--count N] [--inflight K]
 *   orders --demo [--ip IP] [--count N]     (forks both roles)
 *
 * The engine handles one trading session: it exits after answering the
 * gateway's end-of-session message.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>

#include "common.h"

#define ORDER_MAGIC 0x4f524452u /* "ORDR" */
#define FILL_MAGIC 0x46494c4cu  /* "FILL" */

enum { KIND_ORDER = 1, KIND_END = 2 };

struct order {
	uint32_t magic, kind;
	uint64_t id;            /* 1, 2, ... */
	char symbol[8];
	int32_t side;           /* +1 buy, -1 sell */
	uint32_t qty;
	int64_t price;          /* in 1/10000 */
	uint64_t sent_us;       /* gateway clock, echoed back for the round trip */
};

struct fill {
	uint32_t magic, kind;
	uint64_t order_id;
	uint32_t qty;
	int32_t side;
	int64_t price;
	uint64_t sent_us;
};

struct opts {
	char ip[64];
	uint16_t port;
	uint64_t count;
	unsigned inflight;
	int pipe_fd;            /* --demo: the engine reports its port here */
};

static void usage(void)
{
	fprintf(stderr,
		"usage: orders --engine  --listen IP:PORT\n"
		"       orders --gateway --connect IP:PORT [--count N] [--inflight K]\n"
		"       orders --demo [--ip IP] [--count N]\n"
		"  N orders (default 2000), at most K without a fill (default 64);\n"
		"  --demo forks an engine and a gateway on IP (default " EX_DEFAULT_IP ").\n");
}

/* ---- matching engine ------------------------------------------------------------ */

/* Orders arrive on the progress thread; fills are published from main(),
 * so back-pressure on "fills" never stalls the delivery of orders. */
struct engine {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct order q[4096];
	unsigned head, tail;
	uint64_t received, bad, overflow;
};

static void engine_on_order(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct engine *e = arg;
	struct order o;

	if (m->len != sizeof(o)) {
		e->bad++;
		return;
	}
	memcpy(&o, m->data, sizeof(o));
	if (o.magic != ORDER_MAGIC) {
		e->bad++;
		return;
	}
	pthread_mutex_lock(&e->lock);
	if (e->tail - e->head == sizeof(e->q) / sizeof(e->q[0])) {
		e->overflow++; /* the gateway bounds its orders in flight: never */
	} else {
		e->q[e->tail++ % (sizeof(e->q) / sizeof(e->q[0]))] = o;
		e->received++;
	}
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->lock);
}

static int has_subscriber(void *pub)
{
	return vb_pub_subscribers(pub) > 0;
}

static int run_engine(const struct opts *o)
{
	static struct engine e = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx = ex_open_ctx(o->ip);
	vb_node_t *node = NULL;
	vb_pub_t *fills = NULL;
	vb_sub_t *orders = NULL;
	uint64_t filled = 0, seq = 0, retries = 0;
	bool end = false;
	int rc = 1;

	if (!ctx)
		return 1;
	vb_node_attr_init(&na);
	na.name = "engine";
	na.listen_ip = o->ip;
	na.listen_port = o->port;
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1; /* to know the session's last fill reached the gateway */
	vb_sub_attr_init(&sa);
	sa.on_msg = engine_on_order;
	sa.arg = &e;
	if (vb_node_create(ctx, &na, &node) ||
	    vb_pub_create(node, "fills", VB_ORDERED, &pa, &fills) ||
	    vb_sub_create(node, "orders", VB_ORDERED, &sa, &orders)) {
		fprintf(stderr, "engine: %s\n", vb_errmsg());
		return 1;
	}
	printf("engine: listening on %s:%u\n", o->ip, vb_node_port(node));
	fflush(stdout);
	if (o->pipe_fd >= 0) {
		uint16_t port = vb_node_port(node);

		if (write(o->pipe_fd, &port, sizeof(port)) != sizeof(port))
			return 1;
	}
	while (!end) {
		struct order ord;
		struct fill f;
		struct timespec dl;

		pthread_mutex_lock(&e.lock);
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 1;
		while (e.head == e.tail)
			if (pthread_cond_timedwait(&e.cv, &e.lock, &dl))
				break;
		if (e.head == e.tail) {
			pthread_mutex_unlock(&e.lock);
			continue; /* idle: keep serving */
		}
		ord = e.q[e.head++ % (sizeof(e.q) / sizeof(e.q[0]))];
		pthread_mutex_unlock(&e.lock);

		/* A fill published before the gateway's subscription reached us
		 * would go nowhere: the gateway subscribes as it connects, so
		 * this wait is short, and bounded. */
		if (!ex_wait_for(has_subscriber, fills, 10000)) {
			fprintf(stderr, "engine: nobody subscribes to fills\n");
			goto out;
		}
		memset(&f, 0, sizeof(f));
		f.magic = FILL_MAGIC;
		f.kind = ord.kind;
		f.order_id = ord.id;
		f.qty = ord.qty;
		f.side = ord.side;
		f.price = ord.price; /* an echoing engine: filled in full at the limit */
		f.sent_us = ord.sent_us;
		if (ex_publish(fills, &f, sizeof(f), &seq, 10000, &retries)) {
			fprintf(stderr, "engine: publish fill: %s\n", vb_errmsg());
			goto out;
		}
		if (ord.kind == KIND_END)
			end = true;
		else
			filled++;
	}
	/* The session is over when the gateway has the last fill. */
	if (vb_pub_wait_acked(fills, seq, 10000)) {
		fprintf(stderr, "engine: last fill not acknowledged: %s\n", vb_errmsg());
		goto out;
	}
	rc = e.bad || e.overflow ? 1 : 0;
out:
	printf("engine: orders=%" PRIu64 " fills=%" PRIu64 " bad=%" PRIu64 " back-pressure "
	       "retries=%" PRIu64 "\n", e.received, filled, e.bad, retries);
	ex_linger();
	vb_sub_destroy(orders);
	vb_pub_destroy(fills);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	return rc;
}

/* ---- gateway -------------------------------------------------------------------- */

struct gateway {
	uint64_t count;
	uint8_t *fills_per_order;  /* index = order id */
	uint64_t fills, in_order, out_of_order, duplicates, bad;
	uint64_t next_fill;        /* order id the next fill should be for */
	uint64_t rtt_sum_us, rtt_max_us;
	bool end;                  /* the end-of-session fill arrived */
	uint64_t acked;            /* highest order acknowledged by the engine */
	uint64_t ack_calls;        /* on_ack callbacks (the acknowledged seq moved) */
};

static void gw_on_fill(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	struct gateway *g = arg;
	struct fill f;
	uint64_t rtt;

	if (m->len != sizeof(f)) {
		g->bad++;
		return;
	}
	memcpy(&f, m->data, sizeof(f));
	if (f.magic != FILL_MAGIC || (f.kind == KIND_ORDER && (!f.order_id || f.order_id > g->count))) {
		g->bad++;
		return;
	}
	if (f.kind == KIND_END) {
		__atomic_store_n(&g->end, true, __ATOMIC_RELEASE);
		return;
	}
	if (g->fills_per_order[f.order_id]++)
		g->duplicates++;
	if (f.order_id == g->next_fill)
		g->in_order++;
	else
		g->out_of_order++;
	g->next_fill = f.order_id + 1;
	rtt = ex_now_us() - f.sent_us;
	g->rtt_sum_us += rtt;
	if (rtt > g->rtt_max_us)
		g->rtt_max_us = rtt;
	__atomic_store_n(&g->fills, g->fills + 1, __ATOMIC_RELEASE);
}

static void gw_on_ack(vb_pub_t *pub, uint64_t acked_seq, void *arg)
{
	struct gateway *g = arg;

	__atomic_store_n(&g->acked, acked_seq, __ATOMIC_RELEASE);
	__atomic_fetch_add(&g->ack_calls, 1, __ATOMIC_RELAXED);
}

static int gw_end(void *arg)
{
	return __atomic_load_n(&((struct gateway *)arg)->end, __ATOMIC_ACQUIRE);
}

static int run_gateway(const struct opts *o)
{
	static const char *syms[] = { "ACME", "INIT", "GLOBX", "VRBS" };
	struct gateway g = { .count = o->count, .next_fill = 1 };
	vb_node_attr_t na;
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_ctx_t *ctx;
	vb_node_t *node = NULL;
	vb_pub_t *orders = NULL;
	vb_sub_t *fills = NULL;
	uint64_t seq = 0, last_order_seq = 0, retries = 0, missing = 0, acked, t0;
	struct order ord;
	int rc = 1, wrc;

	g.fills_per_order = calloc(o->count + 1, 1);
	if (!g.fills_per_order || !(ctx = ex_open_ctx(o->ip)))
		return 1;
	vb_node_attr_init(&na);
	na.name = "gateway";
	vb_pub_attr_init(&pa);
	pa.ack_quorum = 1;
	pa.on_ack = gw_on_ack;
	pa.arg = &g;
	vb_sub_attr_init(&sa);
	sa.on_msg = gw_on_fill;
	sa.arg = &g;
	if (vb_node_create(ctx, &na, &node) ||
	    vb_pub_create(node, "orders", VB_ORDERED, &pa, &orders) ||
	    vb_sub_create(node, "fills", VB_ORDERED, &sa, &fills)) {
		fprintf(stderr, "gateway: %s\n", vb_errmsg());
		return 1;
	}
	if (vb_node_connect(node, o->ip, o->port)) {
		fprintf(stderr, "gateway: connect %s:%u: %s\n", o->ip, o->port, vb_errmsg());
		goto out;
	}
	if (!ex_wait_for(has_subscriber, orders, 10000)) {
		fprintf(stderr, "gateway: the engine did not subscribe to orders\n");
		goto out;
	}
	t0 = ex_now_ms();
	for (uint64_t id = 1; id <= o->count + 1; id++) {
		/* at most --inflight orders without a fill */
		while (id - 1 - __atomic_load_n(&g.fills, __ATOMIC_ACQUIRE) >= o->inflight) {
			if (ex_now_ms() - t0 > 60000) {
				fprintf(stderr, "gateway: fills stopped coming\n");
				goto out;
			}
			ex_sleep_us(20);
		}
		memset(&ord, 0, sizeof(ord));
		ord.magic = ORDER_MAGIC;
		ord.kind = id <= o->count ? KIND_ORDER : KIND_END;
		ord.id = id;
		snprintf(ord.symbol, sizeof(ord.symbol), "%s", syms[id % 4]);
		ord.side = id & 1 ? 1 : -1;
		ord.qty = 100 * (1 + (uint32_t)(id % 7));
		ord.price = 1000000 + (int64_t)(id % 100) * 25;
		ord.sent_us = ex_now_us();
		if (ex_publish(orders, &ord, sizeof(ord), &seq, 10000, &retries)) {
			fprintf(stderr, "gateway: publish order %" PRIu64 ": %s\n", id, vb_errmsg());
			goto out;
		}
		if (ord.kind == KIND_ORDER)
			last_order_seq = seq;
	}
	wrc = vb_pub_wait_acked(orders, seq, 10000);
	if (wrc)
		fprintf(stderr, "gateway: orders not acknowledged: %s\n", vb_errmsg());
	if (!ex_wait_for(gw_end, &g, 10000))
		fprintf(stderr, "gateway: no end-of-session fill\n");
	for (uint64_t id = 1; id <= o->count; id++)
		missing += !g.fills_per_order[id];
	/* order i has sequence i: the acknowledged sequence counts orders */
	acked = wrc == 0 ? last_order_seq : __atomic_load_n(&g.acked, __ATOMIC_ACQUIRE);
	if (acked > last_order_seq)
		acked = last_order_seq;
	printf("gateway: orders=%" PRIu64 " acked=%" PRIu64 " fills=%" PRIu64 " in_order=%" PRIu64
	       " out_of_order=%" PRIu64 " duplicates=%" PRIu64 " missing=%" PRIu64 " bad=%" PRIu64
	       "\n", o->count, acked, g.fills, g.in_order,
	       g.out_of_order, g.duplicates, missing, g.bad);
	printf("gateway: %.1f s, order->fill round trip avg %.0f us max %" PRIu64 " us, "
	       "%" PRIu64 " ack callbacks, %" PRIu64 " back-pressure retries\n",
	       (double)(ex_now_ms() - t0) / 1000.0,
	       g.fills ? (double)g.rtt_sum_us / (double)g.fills : 0.0, g.rtt_max_us,
	       __atomic_load_n(&g.ack_calls, __ATOMIC_RELAXED), retries);
	rc = g.fills == o->count && g.in_order == o->count && !g.duplicates && !missing &&
	     !g.bad && g.end && acked == o->count ? 0 : 1;
out:
	ex_linger();
	vb_sub_destroy(fills);
	vb_pub_destroy(orders);
	vb_node_destroy(node);
	vb_ctx_destroy(ctx);
	free(g.fills_per_order);
	return rc;
}

/* ---- demo ------------------------------------------------------------------------- */

static int engine_main(void *arg)
{
	return run_engine(arg);
}

static int gateway_main(void *arg)
{
	return run_gateway(arg);
}

static int run_demo(struct opts *o)
{
	struct opts eo = *o, go = *o;
	int fds[2], est, gst;
	pid_t engine, gateway;
	uint16_t port;

	/* several processes share the CPUs: poll less before blocking (an
	 * environment override, like every vb_ctx_attr_t field has) */
	setenv("VERBUS_PROGRESS_SPIN", "200", 0);
	if (pipe(fds))
		return 1;
	eo.port = 0;
	eo.pipe_fd = fds[1];
	engine = ex_spawn(engine_main, &eo);
	if (engine < 0 || read(fds[0], &port, sizeof(port)) != sizeof(port)) {
		fprintf(stderr, "demo: the engine did not start\n");
		if (engine > 0)
			ex_wait_child(engine, 5);
		return 1;
	}
	go.port = port;
	gateway = ex_spawn(gateway_main, &go);
	gst = ex_wait_child(gateway, 300);
	est = ex_wait_child(engine, 30);
	printf("orders demo: %s (engine exit %d, gateway exit %d)\n",
	       !est && !gst ? "OK" : "FAILED", est, gst);
	return !est && !gst ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "engine", no_argument, NULL, 'e' }, { "gateway", no_argument, NULL, 'g' },
		{ "demo", no_argument, NULL, 'd' },   { "listen", required_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' }, { "ip", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' }, { "inflight", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },   { NULL, 0, NULL, 0 },
	};
	struct opts o = { .count = 2000, .inflight = 64, .pipe_fd = -1 };
	int role = 0, c;

	snprintf(o.ip, sizeof(o.ip), "%s", EX_DEFAULT_IP);
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'e': case 'g': case 'd':
			role = c;
			break;
		case 'l': case 'c':
			if (ex_parse_addr(optarg, o.ip, sizeof(o.ip), &o.port)) {
				fprintf(stderr, "orders: '%s' is not IP:PORT\n", optarg);
				return 2;
			}
			break;
		case 'i':
			snprintf(o.ip, sizeof(o.ip), "%s", optarg);
			break;
		case 'n':
			o.count = strtoull(optarg, NULL, 0);
			break;
		case 'k':
			o.inflight = (unsigned)strtoul(optarg, NULL, 0);
			break;
		default:
			usage();
			return c == 'h' ? 0 : 2;
		}
	}
	if (!role || !o.count || !o.inflight || o.inflight > 4000 ||
	    (role == 'g' && !o.port)) {
		usage();
		return 2;
	}
	if (role == 'e')
		return run_engine(&o);
	if (role == 'g')
		return run_gateway(&o);
	return run_demo(&o);
}
