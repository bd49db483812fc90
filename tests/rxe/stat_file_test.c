/* SPDX-License-Identifier: MIT */
/*
 * The counters file and vb_stat (issue 17 item 1; docs/operability.md):
 *
 * test_killed_is_stale: a child process creates a context and is killed
 *   (SIGKILL) with its file in place; `vb_stat` lists it live before, and
 *   `vb_stat --json --once PID` reports it "stale" after, with the figures
 *   it had (its sizing, as the child's vb_ctx_stats() saw it); `vb_stat
 *   --clean` removes the file. The child's stat thread updates once an
 *   hour (VERBUS_STAT_MS): the child publishes only after that first
 *   update is in the file, and the file shows every publish at once and
 *   after the kill (the counters are written in place, not copied).
 * test_counters_move_and_match: one context, a publishing and a subscribing
 *   node connected over the device; `vb_stat --json --once` (another
 *   process) sees published/delivered move between two batches, a peer up
 *   in RC with an active lane in RTS, and once the traffic is quiet its
 *   figures equal vb_ctx_stats()'s; the publisher and subscriber records,
 *   the QPs' way to RTS, the Prometheus and text views; then a fault on
 *   the subscriber's connection shows as a failover of that peer, with its
 *   reason and recovery action, and a drained lane. The subscriber's
 *   record has its latest ACK's sequence (vb_sub_stats's acked), and goes
 *   and comes back with the subscriber at once (its slot is written in
 *   place). vb_ctx_destroy() removes the file.
 *
 * test_defaults_make_a_file: with neither variable set, the file is in
 *   /dev/shm, and destroy removes it.
 *
 * VERBUS_STAT_DIR is a fresh directory, VERBUS_STAT_MS 100 (but in the
 * last test).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <verbus/verbus.h>

#include "tests/common/proc.h"
#include "tests/common/pubsub.h"
#include "tests/common/rxe_env.h"

#define TOPIC "stat.orders"
#define WAIT_MS 20000

static char dir[64];

/* `vb_stat ARGS` (its exit status in *@rc): what it printed, malloc'd. */
static char *vb_stat(const char *args, int *rc)
{
	char cmd[512], *out = NULL;
	size_t len = 0, n;
	FILE *f, *m = open_memstream(&out, &len);
	char buf[4096];

	assert_non_null(m);
	snprintf(cmd, sizeof(cmd), "VERBUS_STAT_DIR=%s %s %s", dir, VB_STAT_BIN, args);
	f = popen(cmd, "r");
	assert_non_null(f);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, m);
	*rc = pclose(f);
	*rc = WIFEXITED(*rc) ? WEXITSTATUS(*rc) : 128;
	fclose(m);
	return out;
}

/* The first "@key":<number> in @json; fails the test without one. */
static uint64_t json_u64(const char *json, const char *key)
{
	char pat[80];
	const char *p = json;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	while ((p = strstr(p, pat))) {
		p += strlen(pat);
		if (*p >= '0' && *p <= '9')
			return strtoull(p, NULL, 10);
	}
	fail_msg("no \"%s\" number in vb_stat's output: %.400s", key, json);
	return 0;
}

static char *json_of(pid_t pid)
{
	char args[64], *out;
	int rc;

	snprintf(args, sizeof(args), "--json --once %d", (int)pid);
	out = vb_stat(args, &rc);
	if (rc)
		fail_msg("vb_stat %s: exit %d: %s", args, rc, out);
	return out;
}

static unsigned files_of(pid_t pid)
{
	char path[128];
	unsigned n = 0;

	for (unsigned no = 0; no < 64; no++) {
		snprintf(path, sizeof(path), "%s/verbus-%d-%u.stat", dir, (int)pid, no);
		n += access(path, F_OK) == 0;
	}
	return n;
}

/* ---- a killed process ----------------------------------------------------------------------- */

#define CHILD_PUBLISHES 37

struct child_share {
	int ready, go, published;
	uint32_t sq_depth;
	uint64_t stats_published;
};

static int child_main(void *arg)
{
	struct child_share *sh = arg;
	vb_ctx_t *ctx;
	vb_node_t *node;
	vb_pub_t *pub;
	vb_stats_t st;
	uint8_t buf[32] = { 0 };
	uint64_t seq, t0;

	setenv("VERBUS_STAT_MS", "3600000", 1); /* one update: at the start */
	ctx = vbt_ctx_open(NULL);
	node = vbt_node_open(ctx, "stat-child", false);
	/* FANOUT with no subscriber: each publish counts, nothing waits */
	assert_int_equal(vb_pub_create(node, "stat.child", VB_FANOUT, NULL, &pub), 0);
	vb_ctx_stats(ctx, &st);
	sh->sq_depth = st.sq_depth;
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	for (t0 = vbt_now_ms(); !__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE); usleep(5000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			return 1;
	for (unsigned i = 0; i < CHILD_PUBLISHES; i++)
		if (vb_publish(pub, buf, sizeof(buf), &seq))
			return 2;
	vb_ctx_stats(ctx, &st);
	sh->stats_published = st.published;
	__atomic_store_n(&sh->published, 1, __ATOMIC_RELEASE);
	for (;;)
		pause(); /* killed */
	return 0;
}

/* Waits for @flag of the child @pid (it fails the test past WAIT_MS). */
static void child_wait(pid_t *pid, const int *flag, const char *what)
{
	for (uint64_t t0 = vbt_now_ms(); !__atomic_load_n(flag, __ATOMIC_ACQUIRE); usleep(5000))
		if (vbt_now_ms() - t0 > WAIT_MS) {
			vbt_reap(pid);
			fail_msg("the child %s in %d ms", what, WAIT_MS);
		}
}

static void test_killed_is_stale(void **state)
{
	struct child_share *sh = vbt_shared(sizeof(*sh));
	char *out, line[64];
	pid_t pid;
	uint64_t t0;
	int rc;

	(void)state;
	assert_non_null(sh);
	pid = vbt_spawn(child_main, sh);
	child_wait(&pid, &sh->ready, "made no context");
	/* the stat thread's one update is in the file, with nothing published */
	for (t0 = vbt_now_ms();; usleep(5000)) {
		out = json_of(pid);
		if (json_u64(out, "updates") >= 1)
			break;
		free(out);
		if (vbt_now_ms() - t0 > WAIT_MS) {
			vbt_reap(&pid);
			fail_msg("the child's stat thread made no update in %d ms", WAIT_MS);
		}
	}
	assert_int_equal(json_u64(out, "published"), 0);
	free(out);
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	child_wait(&pid, &sh->published, "did not publish");
	assert_int_equal(sh->stats_published, CHILD_PUBLISHES);
	out = json_of(pid);
	printf("child published %d, its file says published %" PRIu64 " after %" PRIu64
	       " update(s)\n", CHILD_PUBLISHES, json_u64(out, "published"),
	       json_u64(out, "updates"));
	assert_int_equal(json_u64(out, "updates"), 1); /* no update since */
	assert_int_equal(json_u64(out, "published"), CHILD_PUBLISHES);
	/* its publisher's slot was named when it was created */
	assert_non_null(strstr(out, "\"publishers\":[{\"node\":\"stat-child\",\"topic\":"
				    "\"stat.child\",\"class\":\"FANOUT\""));
	free(out);
	out = vb_stat("", &rc); /* the list */
	snprintf(line, sizeof(line), "%-8d", (int)pid);
	printf("vb_stat (list), child %d alive:\n%s", (int)pid, out);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, line));
	assert_non_null(strstr(strstr(out, line), "live"));
	free(out);
	out = json_of(pid);
	assert_non_null(strstr(out, "\"state\":\"live\""));
	free(out);

	kill(pid, SIGKILL);
	assert_int_equal(vbt_wait(pid, 30), 128 + SIGKILL);
	out = json_of(pid);
	printf("after SIGKILL: %.300s...\n", out);
	assert_non_null(strstr(out, "\"state\":\"stale\""));
	assert_int_equal(json_u64(out, "sq_depth"), sh->sq_depth);
	assert_int_equal(json_u64(out, "published"), CHILD_PUBLISHES);
	free(out);
	assert_int_equal(files_of(pid), 1);
	out = vb_stat("--clean", &rc);
	printf("vb_stat --clean: %s", out);
	assert_int_equal(rc, 0);
	free(out);
	assert_int_equal(files_of(pid), 0);
	out = vb_stat("--json --once 999999999", &rc);
	assert_int_equal(rc, 1); /* no such context */
	free(out);
}

/* ---- a live context -------------------------------------------------------------------------- */

static uint64_t delivered;

static void on_msg(vb_sub_t *sub, const vb_msg_t *m, void *arg)
{
	(void)sub;
	(void)m;
	(void)arg;
	__atomic_fetch_add(&delivered, 1, __ATOMIC_RELEASE);
}

static void publish(vb_pub_t *pub, unsigned n, uint64_t *seq)
{
	uint8_t buf[64] = { 0 };
	uint64_t t0, want = __atomic_load_n(&delivered, __ATOMIC_ACQUIRE) + n;
	int rc;

	for (unsigned i = 0; i < n; i++) {
		for (t0 = vbt_now_ms(); (rc = vb_publish(pub, buf, sizeof(buf), seq)) == -EAGAIN;
		     usleep(100))
			if (vbt_now_ms() - t0 > WAIT_MS)
				fail_msg("publish: -EAGAIN for %d ms", WAIT_MS);
		assert_int_equal(rc, 0);
	}
	for (t0 = vbt_now_ms(); __atomic_load_n(&delivered, __ATOMIC_ACQUIRE) < want; usleep(1000))
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("%" PRIu64 " of %" PRIu64 " delivered after %d ms",
				 __atomic_load_n(&delivered, __ATOMIC_ACQUIRE), want, WAIT_MS);
	assert_int_equal(vb_pub_wait_acked(pub, *seq, WAIT_MS), 0);
}

/* vb_stat's view once an update begun after this call is in the file:
 * updates moved by 2 (the one running at the first look may have begun
 * before). */
static char *json_fresh(void)
{
	char *out = json_of(getpid());
	uint64_t u = json_u64(out, "updates"), t0 = vbt_now_ms();

	for (;;) {
		free(out);
		out = json_of(getpid());
		if (json_u64(out, "updates") >= u + 2)
			return out;
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("the counters file was not updated for %d ms", WAIT_MS);
		usleep(50000);
	}
}

/* `vb_stat --prometheus --once`: every sample line is NAME{LABELS} VALUE,
 * every metric has its TYPE, and the context's published count is there. */
static void check_prometheus(uint64_t published)
{
	char *out, *save = NULL, want[128];
	int rc;
	unsigned samples = 0;

	out = vb_stat("--prometheus --once", &rc);
	assert_int_equal(rc, 0);
	snprintf(want, sizeof(want), "verbus_published_total{pid=\"%d\",ctx=\"0\"", (int)getpid());
	if (!strstr(out, want))
		fail_msg("no %s in: %.500s", want, out);
	assert_true(strtoull(strchr(strstr(out, want), '}') + 2, NULL, 10) >= published);
	assert_non_null(strstr(out, "# TYPE verbus_qp_transition_seconds histogram"));
	assert_non_null(strstr(out, "le=\"+Inf\""));
	for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char name[128], *sp = strrchr(l, ' ');

		if (l[0] == '#')
			continue;
		samples++;
		if (!sp || sscanf(l, "%127[a-zA-Z0-9_:]", name) != 1 || l[strlen(name)] != '{' ||
		    sp[-1] != '}' || strspn(sp + 1, "0123456789.+-eInf") != strlen(sp + 1))
			fail_msg("not a Prometheus sample: '%s'", l);
	}
	printf("vb_stat --prometheus: %u samples\n", samples);
	assert_true(samples > 60);
	free(out);
}

/* The text view of this process and --config. */
static void check_text(void)
{
	char args[64], *out;
	int rc;

	snprintf(args, sizeof(args), "--once %d", (int)getpid());
	out = vb_stat(args, &rc);
	printf("vb_stat %s:\n%s", args, out);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "publishers (1):"));
	assert_non_null(strstr(out, "subscribers (1):"));
	assert_non_null(strstr(out, "RTR   -> RTS"));
	free(out);
	out = vb_stat("--config", &rc);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "VERBUS_STAT_MS=100"));
	free(out);
}

/* A fault on the subscriber's connection (its QP to ERR): the stream goes
 * on over the standby, and vb_stat shows the failover with its reason and
 * action, the retired lane drained, and QPs moved to ERR. */
static void check_failover(vb_node_t *sn, vb_pub_t *pub, uint64_t *seq)
{
	char *out, *p;
	uint64_t t0;

	assert_int_equal(vb_node_inject_fault(sn, "stat-pub", VB_FAULT_QP_ERR), 0);
	publish(pub, 200, seq);
	for (t0 = vbt_now_ms();; usleep(100000)) {
		out = json_fresh();
		p = strstr(out, "\"name\":\"stat-pub\"");
		assert_non_null(p);
		if (json_u64(p, "failovers") >= 1 && json_u64(out, "lanes_drained") >= 1)
			break;
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("no failover and drained lane shown after %d ms: %s", WAIT_MS, out);
		free(out);
	}
	p = strndup(p, strcspn(p, "}")); /* that peer's record */
	assert_non_null(p);
	printf("after the fault, the subscriber's peer: %s\n", p);
	assert_true(json_u64(p, "last_failure_ns") > 0);
	assert_non_null(strstr(p, "\"last_failure\":\""));
	assert_null(strstr(p, "\"last_failure\":\"\""));   /* a reason */
	assert_non_null(strstr(p, "\"last_action\":\""));
	assert_null(strstr(p, "\"last_action\":\"\""));    /* and its action */
	free(p);
	assert_non_null(strstr(out, "\"to\":\"ERR\""));
	assert_true(json_u64(out, "drain_max_ns") > 0);
	free(out);
}

static void test_counters_move_and_match(void **state)
{
	vb_ctx_t *ctx = vbt_ctx_open(NULL);
	vb_node_t *pn = vbt_node_open(ctx, "stat-pub", true), *sn = vbt_node_open(ctx, "stat-sub", false);
	vb_pub_attr_t pa;
	vb_sub_attr_t sa;
	vb_pub_t *pub;
	vb_sub_t *sub;
	vb_stats_t st;
	vb_sub_stats_t sst;
	uint64_t seq = 0, p1, d1;
	char *out;

	(void)state;
	vb_pub_attr_init(&pa);
	pa.slow_sub_ms = VBT_NO_SLOW_CUT_MS;
	pa.ack_quorum = 1; /* vb_pub_wait_acked() */
	assert_int_equal(vb_pub_create(pn, TOPIC, VB_ORDERED, &pa, &pub), 0);
	vb_sub_attr_init(&sa);
	sa.on_msg = on_msg;
	assert_int_equal(vb_sub_create(sn, TOPIC, VB_ORDERED, &sa, &sub), 0);
	if (vb_node_connect(sn, vbt_test_ip(), vb_node_port(pn)))
		fail_msg("connect: %s", vb_errmsg());
	assert_true(vbt_wait_subscribers(pub, 1, WAIT_MS));
	assert_int_equal(files_of(getpid()), 1);

	publish(pub, 300, &seq);
	out = json_fresh();
	p1 = json_u64(out, "published");
	d1 = json_u64(out, "delivered");
	printf("after 300: published %" PRIu64 " delivered %" PRIu64 "\n", p1, d1);
	assert_true(p1 >= 300 && d1 >= 300);
	free(out);

	publish(pub, 500, &seq);
	/* the subscriber's ACK of the last one was sent (the publisher may see
	 * it a moment before the subscriber's side has counted the send) */
	for (uint64_t t0 = vbt_now_ms();; usleep(1000)) {
		assert_int_equal(vb_sub_stats(sub, &sst), 0);
		if (sst.acked == seq)
			break;
		if (vbt_now_ms() - t0 > WAIT_MS)
			fail_msg("vb_sub_stats: acked %" PRIu64 ", the publisher's last %" PRIu64
				 " acknowledged", sst.acked, seq);
	}
	out = json_fresh();
	vb_ctx_stats(ctx, &st);
	printf("after 500 more: %.600s...\n", out);
	assert_int_equal(json_u64(out, "published"), p1 + 500);
	assert_int_equal(json_u64(out, "delivered"), d1 + 500);
	assert_int_equal((int)json_u64(out, "pid"), (int)getpid());
	assert_non_null(strstr(out, "\"state\":\"live\""));
	const struct {
		const char *name;
		uint64_t want;
	} same[] = {
		{ "published", st.published }, { "delivered", st.delivered },
		{ "duplicates_dropped", st.duplicates_dropped }, { "gaps", st.gaps },
		{ "lost", st.lost }, { "peers", st.peers }, { "sq_depth", st.sq_depth },
		{ "rq_depth", st.rq_depth }, { "cq_depth", st.cq_depth },
		{ "max_inline", st.max_inline }, { "pool_chunks", st.pool_chunks },
		{ "pool_registered", st.pool_registered }, { "lanes_created", st.lanes_created },
		{ "failovers", st.failovers }, /* (ACKs and keepalives still move) */
	};

	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		if (json_u64(out, same[i].name) != same[i].want)
			fail_msg("%s: vb_stat %" PRIu64 ", vb_ctx_stats %" PRIu64, same[i].name,
				 json_u64(out, same[i].name), same[i].want);
	/* both ends of the connection are peers of this context, each up in
	 * RC on an active lane whose QP is in RTS */
	assert_int_equal(json_u64(out, "peers"), 2);
	assert_non_null(strstr(out, "\"name\":\"stat-pub\""));
	assert_non_null(strstr(out, "\"name\":\"stat-sub\""));
	assert_non_null(strstr(out, "\"up\":1,\"dead\":0,\"recovering\":0"));
	assert_non_null(strstr(out, "\"mode\":\"RC\",\"qp_state\":\"RTS\",\"active\":1"));
	/* the publisher and the subscriber, and the QPs' way to RTS */
	assert_non_null(strstr(out, "\"publishers\":[{\"node\":\"stat-pub\",\"topic\":\"" TOPIC
				    "\",\"class\":\"ORDERED\",\"subscribers\":1,"));
	assert_int_equal(json_u64(strstr(out, "\"publishers\":["), "published"), seq);
	assert_int_equal(json_u64(strstr(out, "\"publishers\":["), "acked"), seq);
	assert_int_equal(json_u64(strstr(out, "\"publishers\":["), "quorum_acked"), seq);
	assert_non_null(strstr(out, "\"subscribers\":[{\"node\":\"stat-sub\",\"topic\":\"" TOPIC
				    "\",\"class\":\"ORDERED\","));
	assert_int_equal(json_u64(strstr(out, "\"subscribers\":[{"), "delivered"), d1 + 500);
	assert_int_equal(json_u64(strstr(out, "\"subscribers\":[{"), "acked"), seq);
	for (size_t i = 0; i < 3; i++) {
		static const char *const step[] = { "\"from\":\"RESET\",\"to\":\"INIT\"",
						    "\"from\":\"INIT\",\"to\":\"RTR\"",
						    "\"from\":\"RTR\",\"to\":\"RTS\"" };
		const char *t = strstr(out, step[i]);

		if (!t)
			fail_msg("no %s in the QP transitions: %s", step[i],
				 strstr(out, "\"qp_transitions\""));
		assert_true(json_u64(t, "count") >= 2); /* both ends' QPs, at least */
	}
	free(out);
	check_prometheus(st.published);
	check_text();
	check_failover(sn, pub, &seq);

	assert_int_equal(vb_sub_destroy(sub), 0);
	/* its slot went back with it (subscribers are written in place: no
	 * update needed) */
	out = json_of(getpid());
	assert_non_null(strstr(out, "\"subscribers\":[]"));
	free(out);
	assert_int_equal(vb_sub_create(sn, TOPIC, VB_ORDERED, &sa, &sub), 0);
	out = json_of(getpid());
	assert_non_null(strstr(out, "\"subscribers\":[{\"node\":\"stat-sub\",\"topic\":\"" TOPIC
				    "\",\"class\":\"ORDERED\",\"delivered\":0,"));
	free(out);
	assert_int_equal(vb_sub_destroy(sub), 0);
	assert_int_equal(vb_pub_destroy(pub), 0);
	out = json_of(getpid());
	assert_non_null(strstr(out, "\"publishers\":[]"));
	free(out);
	assert_int_equal(vb_node_destroy(sn), 0);
	assert_int_equal(vb_node_destroy(pn), 0);
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(files_of(getpid()), 0);
}

/* With neither VERBUS_STAT_DIR nor VERBUS_STAT_MS set, a context has its
 * file in /dev/shm (the defaults in force), and destroy removes it. Found
 * by reading the full run's log: every context without those variables
 * warned "no counters file" (a default read as an error). */
static void test_defaults_make_a_file(void **state)
{
	char saved_dir[sizeof(dir)];
	vb_ctx_t *ctx;
	unsigned n;

	(void)state;
	memcpy(saved_dir, dir, sizeof(dir));
	snprintf(dir, sizeof(dir), "/dev/shm");
	unsetenv("VERBUS_STAT_DIR");
	unsetenv("VERBUS_STAT_MS");
	ctx = vbt_ctx_open(NULL);
	n = files_of(getpid());
	assert_int_equal(vb_ctx_destroy(ctx), 0);
	assert_int_equal(files_of(getpid()), 0);
	memcpy(dir, saved_dir, sizeof(dir));
	setenv("VERBUS_STAT_DIR", dir, 1);
	setenv("VERBUS_STAT_MS", "100", 1);
	if (n != 1)
		fail_msg("%u counters files of this process in /dev/shm with the defaults", n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_killed_is_stale), /* forks: before any context here */
		cmocka_unit_test(test_counters_move_and_match),
		cmocka_unit_test(test_defaults_make_a_file),
	};

	vbt_require_device();
	snprintf(dir, sizeof(dir), "%s/vbstat.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	setenv("VERBUS_STAT_DIR", dir, 1);
	setenv("VERBUS_STAT_MS", "100", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
