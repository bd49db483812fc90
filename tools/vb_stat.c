/* SPDX-License-Identifier: MIT */
/*
 * vb_stat: the verbus processes of this machine and their live counters,
 * read from each context's counters file (layout: core/statfile.h) without
 * any lock of theirs (vb_stat(1), docs/operability.md).
 *
 *   vb_stat [--dir DIR]                          list the contexts
 *   vb_stat [--dir DIR] [--once] [--interval MS] [--json | --prometheus] [PID[.N]]
 *   vb_stat --config                             every VERBUS_* variable
 *
 * Exit status: 0, 1 (no such context, a file unreadable), 2 (usage).
 * Single-threaded; it only reads the files (a stale one is left in place:
 * `vb_stat --clean` removes the files of processes that are gone).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <verbus/verbus.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/statfile.h"

/* one context's file, copied whole under its seqlock */
struct snap {
	char path[512];
	struct vbi_stat_hdr *h;  /* the copy (malloc'd, h->file_size bytes) */
	bool torn;               /* its writer died mid-update (seq stayed odd) */
	const char *state;       /* "live", "stale" (the process is gone), "closing" */
	struct vbi_stat_hdr *prev; /* the last round's copy (rates), NULL: first */
};

static const char *const mode_names[] = { "RC", "UC", "UD" };
static const char *const qps_names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

static const char *mode_name(unsigned m)
{
	return m < 3 ? mode_names[m] : "?";
}

static const char *qps_name(unsigned s)
{
	return s < 7 ? qps_names[s] : "?";
}

/* The file's process is gone: no such pid, or a pid reused by another. */
static bool stale(const struct vbi_stat_hdr *h)
{
	uint64_t t;
	char st;

	if (kill(h->pid, 0) && errno == ESRCH)
		return true;
	if (vbi_proc_start(h->pid, &t, &st)) /* exited between the two looks */
		return true;
	/* a zombie, or the pid of another process now */
	return st == 'Z' || st == 'X' || (h->start_ticks && t != h->start_ticks);
}

static bool layout_ok(const struct vbi_stat_hdr *h, size_t size)
{
	return h->hdr_size >= sizeof(*h) && h->file_size <= size &&
	       h->name_size >= sizeof(struct vbi_stat_name) && h->nlive <= h->nvals &&
	       h->nqps <= 16 &&
	       h->peer_size >= sizeof(struct vbi_stat_peer) &&
	       h->lane_size >= sizeof(struct vbi_stat_lane) &&
	       h->vals_off % 8 == 0 &&
	       h->vals_off + (uint64_t)h->nvals * sizeof(uint64_t) <= h->file_size &&
	       h->names_off + (uint64_t)h->nvals * h->name_size <= h->file_size &&
	       h->peers_off + (uint64_t)h->max_peers * h->peer_size <= h->file_size &&
	       h->lanes_off + (uint64_t)h->max_lanes * h->lane_size <= h->file_size &&
	       h->pub_size >= sizeof(struct vbi_stat_pub) &&
	       h->sub_size >= sizeof(struct vbi_stat_sub) &&
	       h->qpt_size >= sizeof(struct vbi_stat_qpt) &&
	       h->pubs_off + (uint64_t)h->max_pubs * h->pub_size <= h->file_size &&
	       h->subs_off + (uint64_t)h->max_subs * h->sub_size <= h->file_size &&
	       h->qpt_off + (uint64_t)h->nqps * h->nqps * h->qpt_size <= h->file_size;
}

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VB_STAT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define VB_STAT_TSAN 1
#endif

static inline void read_fence(void)
{
#ifdef VB_STAT_TSAN
	/* TSan supports no fence (gcc: -Wtsan); this program has one thread
	 * and its writer is another process, where TSan sees nothing anyway */
	__asm__ __volatile__("" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

/* The publisher or subscriber slots in use (of a copy), moved to the
 * front: returns how many. @in_use: the records' in_use offset. */
static uint32_t slots_compact(char *base, uint32_t max, uint32_t size, size_t in_use)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < max; i++) {
		char *o = base + (size_t)i * size;

		if (!o[in_use])
			continue;
		if (n != i)
			memcpy(base + (size_t)n * size, o, size);
		n++;
	}
	return n;
}

/* Copy @path whole between two equal, even reads of its seq. 0, or -1
 * with a message on stderr (not a counters file, another version). */
static int snap_read(struct snap *s, const char *path)
{
	struct stat stt;
	const struct vbi_stat_hdr *m;
	void *map;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	snprintf(s->path, sizeof(s->path), "%s", path);
	if (fd < 0 || fstat(fd, &stt) || (size_t)stt.st_size < sizeof(struct vbi_stat_hdr)) {
		fprintf(stderr, "vb_stat: %s: %s\n", path, fd < 0 ? strerror(errno) : "too short");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	map = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		fprintf(stderr, "vb_stat: %s: %s\n", path, strerror(errno));
		return -1;
	}
	m = map;
	if (memcmp(m->magic, VBI_STAT_MAGIC, 8) || m->version != VBI_STAT_VERSION ||
	    !layout_ok(m, (size_t)stt.st_size)) {
		fprintf(stderr, "vb_stat: %s: not a verbus counters file of version %u\n", path,
			VBI_STAT_VERSION);
		munmap(map, (size_t)stt.st_size);
		return -1;
	}
	free(s->h);
	s->h = malloc(m->file_size);
	if (!s->h) {
		munmap(map, (size_t)stt.st_size);
		return -1;
	}
	s->torn = true;
	for (int tries = 0; tries < 200 && s->torn; tries++) {
		uint64_t a = __atomic_load_n(&m->seq, __ATOMIC_ACQUIRE), b;

		if (a & 1) {
			usleep(1000);
			continue;
		}
		memcpy(s->h, m, m->file_size);
		read_fence(); /* the copy's loads before the second look */
		b = __atomic_load_n(&m->seq, __ATOMIC_RELAXED);
		s->torn = a != b;
	}
	if (s->torn) /* the last copy, as it is */
		memcpy(s->h, m, m->file_size);
	munmap(map, (size_t)stt.st_size);
	s->h->npubs = slots_compact((char *)s->h + s->h->pubs_off, s->h->max_pubs, s->h->pub_size,
				    offsetof(struct vbi_stat_pub, in_use));
	s->h->nsubs = slots_compact((char *)s->h + s->h->subs_off, s->h->max_subs, s->h->sub_size,
				    offsetof(struct vbi_stat_sub, in_use));
	s->state = stale(s->h) ? "stale" : s->h->closing ? "closing" : "live";
	return 0;
}

static const struct vbi_stat_name *name(const struct vbi_stat_hdr *h, unsigned i)
{
	return (const void *)((const char *)h + h->names_off + (size_t)i * h->name_size);
}

static uint64_t value(const struct vbi_stat_hdr *h, unsigned i)
{
	return ((const uint64_t *)(const void *)((const char *)h + h->vals_off))[i];
}

static const struct vbi_stat_peer *peer(const struct vbi_stat_hdr *h, unsigned i)
{
	return (const void *)((const char *)h + h->peers_off + (size_t)i * h->peer_size);
}

static const struct vbi_stat_lane *lane(const struct vbi_stat_hdr *h, unsigned i)
{
	return (const void *)((const char *)h + h->lanes_off + (size_t)i * h->lane_size);
}

static const struct vbi_stat_pub *pubrec(const struct vbi_stat_hdr *h, unsigned i)
{
	return (const void *)((const char *)h + h->pubs_off + (size_t)i * h->pub_size);
}

static const struct vbi_stat_sub *subrec(const struct vbi_stat_hdr *h, unsigned i)
{
	return (const void *)((const char *)h + h->subs_off + (size_t)i * h->sub_size);
}

/* QP timing entry @i: from i / nqps, to i % nqps */
static const struct vbi_stat_qpt *qpt(const struct vbi_stat_hdr *h, unsigned i)
{
	return (const void *)((const char *)h + h->qpt_off + (size_t)i * h->qpt_size);
}

static unsigned nqpt(const struct vbi_stat_hdr *h)
{
	return h->nqps * h->nqps;
}

static unsigned npubs(const struct vbi_stat_hdr *h)
{
	return h->npubs < h->max_pubs ? h->npubs : h->max_pubs;
}

static unsigned nsubs(const struct vbi_stat_hdr *h)
{
	return h->nsubs < h->max_subs ? h->nsubs : h->max_subs;
}

static unsigned npeers(const struct vbi_stat_hdr *h)
{
	return h->npeers < h->max_peers ? h->npeers : h->max_peers;
}

static unsigned nlanes(const struct vbi_stat_hdr *h)
{
	return h->nlanes < h->max_lanes ? h->nlanes : h->max_lanes;
}

/* ---- the files ------------------------------------------------------------------------------ */

/* verbus-<pid>-<n>.stat names in @dir, sorted; *n of them. */
static char **list_files(const char *dir, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **v = NULL;
	size_t cap = 0;
	int pid;
	unsigned no;
	char tail;

	*n = 0;
	if (!d)
		return NULL;
	while ((e = readdir(d))) {
		if (sscanf(e->d_name, "verbus-%d-%u.stat%c", &pid, &no, &tail) != 2)
			continue;
		if (*n == cap) {
			char **nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof(*v));

			if (!nv)
				break;
			v = nv;
		}
		if (asprintf(&v[*n], "%s/%s", dir, e->d_name) < 0)
			break;
		(*n)++;
	}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof(*v), (int (*)(const void *, const void *))strcmp);
	return v;
}

/* @sel "PID" or "PID.N" (NULL: every context) matches the file's process. */
static bool selected(const struct vbi_stat_hdr *h, const char *sel)
{
	int pid;
	unsigned no;
	int k;

	if (!sel)
		return true;
	k = sscanf(sel, "%d.%u", &pid, &no);
	return (k >= 1 && pid == h->pid) && (k < 2 || no == h->ctx_no);
}

/* ---- output ---------------------------------------------------------------------------------- */

static void print_list(struct snap *s, size_t n)
{
	uint64_t now = vbi_real_ns();

	printf("%-8s %-4s %-16s %-10s %-8s %-10s %s\n", "PID", "CTX", "PROGRAM", "DEVICE", "STATE",
	       "UPDATED", "PEERS");
	for (size_t i = 0; i < n; i++) {
		const struct vbi_stat_hdr *h = s[i].h;

		printf("%-8d %-4u %-16s %-10s %-8s %7.1f s  %u\n", h->pid, h->ctx_no, h->progname,
		       h->device, s[i].state,
		       h->updated_ns && now > h->updated_ns ? (double)(now - h->updated_ns) / 1e9 : 0.0,
		       npeers(h));
	}
}

/* @prev's publisher of the same node and topic (NULL: none) */
static const struct vbi_stat_pub *prev_pub(const struct vbi_stat_hdr *prev,
					   const struct vbi_stat_pub *p)
{
	for (unsigned i = 0; prev && i < npubs(prev); i++)
		if (!strcmp(pubrec(prev, i)->node, p->node) && !strcmp(pubrec(prev, i)->topic, p->topic))
			return pubrec(prev, i);
	return NULL;
}

static const struct vbi_stat_sub *prev_sub(const struct vbi_stat_hdr *prev,
					   const struct vbi_stat_sub *p)
{
	for (unsigned i = 0; prev && i < nsubs(prev); i++)
		if (!strcmp(subrec(prev, i)->node, p->node) && !strcmp(subrec(prev, i)->topic, p->topic))
			return subrec(prev, i);
	return NULL;
}

static double per_s(uint64_t now, uint64_t before, double dt)
{
	return dt > 0 && now >= before ? (double)(now - before) / dt : 0;
}

static void print_text_pubsub(const struct vbi_stat_hdr *h, const struct vbi_stat_hdr *prev,
			      double dt)
{
	printf("  publishers (%u):\n", npubs(h));
	for (unsigned i = 0; i < npubs(h); i++) {
		const struct vbi_stat_pub *p = pubrec(h, i), *q = prev_pub(prev, p);

		printf("    %s '%s' %s: %u subscribers, published %llu", p->node, p->topic,
		       p->cls ? "FANOUT" : "ORDERED", p->subscribers, (unsigned long long)p->published);
		if (q)
			printf(" (%.0f/s)", per_s(p->published, q->published, dt));
		if (!p->cls)
			printf(", acked by all %llu, in flight %llu of %u, retained %llu B",
			       (unsigned long long)p->acked, (unsigned long long)p->inflight, p->window,
			       (unsigned long long)p->retained_bytes);
		if (p->ack_quorum)
			printf(", %u-of-n acked %llu", p->ack_quorum, (unsigned long long)p->quorum_acked);
		printf(", back-pressure %llu", (unsigned long long)p->backpressure);
		if (q)
			printf(" (%.0f/s)", per_s(p->backpressure, q->backpressure, dt));
		printf("\n");
	}
	printf("  subscribers (%u):\n", nsubs(h));
	for (unsigned i = 0; i < nsubs(h); i++) {
		const struct vbi_stat_sub *p = subrec(h, i), *q = prev_sub(prev, p);

		printf("    %s '%s' %s: %llu publishers, delivered %llu", p->node, p->topic,
		       p->cls ? "FANOUT" : "ORDERED", (unsigned long long)p->publishers,
		       (unsigned long long)p->delivered);
		if (q)
			printf(" (%.0f/s)", per_s(p->delivered, q->delivered, dt));
		if (!p->cls)
			printf(", acked %llu", (unsigned long long)p->acked);
		printf(", duplicates %llu, gaps %llu, lost %llu, streams ended %llu\n",
		       (unsigned long long)p->duplicates, (unsigned long long)p->gaps,
		       (unsigned long long)p->lost, (unsigned long long)p->ends);
	}
}

/* upper bound of histogram bucket @b in us (VBI_STAT_QPT_HIST) */
static unsigned long bucket_us(unsigned b)
{
	return 1ul << b;
}

static void print_text_qpt(const struct vbi_stat_hdr *h)
{
	printf("  QP state changes (count, last / mean / max ms, histogram <1us ..):\n");
	for (unsigned i = 0; i < nqpt(h); i++) {
		const struct vbi_stat_qpt *t = qpt(h, i);

		if (!t->n)
			continue;
		printf("    %-5s -> %-5s %6llu  %8.3f %8.3f %8.3f ", qps_name(i / h->nqps),
		       qps_name(i % h->nqps), (unsigned long long)t->n, (double)t->last_ns / 1e6,
		       (double)t->total_ns / (double)t->n / 1e6, (double)t->max_ns / 1e6);
		for (unsigned b = 0; b < VBI_STAT_QPT_HIST; b++)
			if (t->hist[b])
				printf(" <%luus:%llu", bucket_us(b), (unsigned long long)t->hist[b]);
		printf("\n");
	}
}

static void print_text(struct snap *s)
{
	const struct vbi_stat_hdr *h = s->h;
	uint64_t now = vbi_real_ns();
	const struct vbi_stat_hdr *ph = s->prev;
	double dt = ph && h->updated_ns > ph->updated_ns && ph->nvals == h->nvals
			    ? (double)(h->updated_ns - ph->updated_ns) / 1e9 : 0;
	unsigned col = 0;

	printf("verbus %s  pid %d (%s) context %u  device %s%s%s  %s%s, updated %.1f s ago\n",
	       h->lib_version, h->pid, h->progname, h->ctx_no, h->device,
	       *h->standby_device ? " standby " : "", h->standby_device, s->state,
	       s->torn ? " (torn: its writer died mid-update)" : "",
	       now > h->updated_ns ? (double)(now - h->updated_ns) / 1e9 : 0.0);
	for (unsigned i = 0; i < h->nvals; i++) {
		const struct vbi_stat_name *v = name(h, i);
		uint64_t x = value(h, i);
		char buf[96];
		int len;

		len = snprintf(buf, sizeof(buf), "%s %llu", v->name, (unsigned long long)x);
		if (ph && dt > 0 && v->kind == VBI_STAT_COUNTER && x >= value(ph, i))
			snprintf(buf + len, sizeof(buf) - (size_t)len, " (%.0f/s)",
				 (double)(x - value(ph, i)) / dt);
		printf("  %-38s", buf);
		if (++col == 3) {
			printf("\n");
			col = 0;
		}
	}
	if (col)
		printf("\n");
	printf("  peers (%u):\n", npeers(h));
	for (unsigned i = 0; i < npeers(h); i++) {
		const struct vbi_stat_peer *p = peer(h, i);

		printf("    %s: peer %s%s%s%s, mode %s (policy %s) epoch %u lane %u%s: failures %llu "
		       "failovers %llu degradations %llu promotions %llu downs %llu, outage last "
		       "%.3f ms max %.3f ms\n", p->node, *p->name ? p->name : "(connecting)",
		       p->connector ? " (we connected)" : "", p->dead ? " dead" : "",
		       p->recovering ? " recovering" : "", mode_name(p->mode),
		       mode_name(p->policy_mode), p->epoch, p->active_lane,
		       p->has_standby ? " +standby" : "", (unsigned long long)p->failures,
		       (unsigned long long)p->failovers, (unsigned long long)p->degradations,
		       (unsigned long long)p->promotions, (unsigned long long)p->downs,
		       (double)p->last_outage_ns / 1e6, (double)p->max_outage_ns / 1e6);
		printf("      retransmits %llu", (unsigned long long)p->retransmits);
		if (p->last_failure_ns)
			printf(", last failure: lane %u %s -> %s, %.1f s ago", p->last_failure_lane,
			       p->last_failure, p->last_action,
			       now > p->last_failure_ns ? (double)(now - p->last_failure_ns) / 1e9 : 0.0);
		printf("\n");
	}
	printf("  lanes (%u):\n", nlanes(h));
	for (unsigned i = 0; i < nlanes(h); i++) {
		const struct vbi_stat_lane *l = lane(h, i);

		printf("    %s lane %u %s QP %u %s on %s%s%s%s%s credits %u sq %u/%u recvs %u "
		       "sends %llu\n", *l->peer ? l->peer : "(connecting)", l->id, mode_name(l->mode),
		       l->qpn, qps_name(l->qp_state), l->device, l->active ? " active" : "",
		       l->dead ? " dead" : "", l->retiring ? " retiring" : "",
		       l->hello ? "" : " no-hello", l->credits, l->sq_outstanding, l->sq_depth,
		       l->recvs, (unsigned long long)l->sends);
	}
	print_text_pubsub(h, dt > 0 ? ph : NULL, dt);
	print_text_qpt(h);
	if (h->truncated)
		printf("  (more peers, lanes, publishers or subscribers than the file holds: "
		       "the rest are not shown)\n");
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void print_json(struct snap *s)
{
	const struct vbi_stat_hdr *h = s->h;

	printf("{\"pid\":%d,\"ctx\":%u,\"program\":", h->pid, h->ctx_no);
	json_str(h->progname);
	printf(",\"version\":");
	json_str(h->lib_version);
	printf(",\"device\":");
	json_str(h->device);
	printf(",\"standby_device\":");
	json_str(h->standby_device);
	printf(",\"state\":\"%s\",\"torn\":%s,\"created_ns\":%llu,\"updated_ns\":%llu,"
	       "\"updates\":%llu,\"interval_ms\":%u,\"stats\":{", s->state,
	       s->torn ? "true" : "false", (unsigned long long)h->created_ns,
	       (unsigned long long)h->updated_ns, (unsigned long long)h->updates, h->interval_ms);
	for (unsigned i = 0; i < h->nvals; i++)
		printf("%s\"%s\":%llu", i ? "," : "", name(h, i)->name,
		       (unsigned long long)value(h, i));
	printf("},\"peers\":[");
	for (unsigned i = 0; i < npeers(h); i++) {
		const struct vbi_stat_peer *p = peer(h, i);

		printf("%s{\"node\":", i ? "," : "");
		json_str(p->node);
		printf(",\"name\":");
		json_str(p->name);
		printf(",\"up\":%u,\"dead\":%u,\"recovering\":%u,\"connector\":%u,\"mode\":\"%s\","
		       "\"policy_mode\":\"%s\",\"standby\":%u,\"epoch\":%u,\"active_lane\":%u,"
		       "\"failures\":%llu,\"failovers\":%llu,\"degradations\":%llu,"
		       "\"promotions\":%llu,\"downs\":%llu,\"recoveries\":%llu,"
		       "\"last_outage_ns\":%llu,\"max_outage_ns\":%llu,\"backpressured\":%llu,"
		       "\"retransmits\":%llu,\"last_failure_ns\":%llu,\"last_failure_lane\":%u,"
		       "\"last_failure\":",
		       p->up, p->dead, p->recovering, p->connector, mode_name(p->mode),
		       mode_name(p->policy_mode), p->has_standby, p->epoch, p->active_lane,
		       (unsigned long long)p->failures, (unsigned long long)p->failovers,
		       (unsigned long long)p->degradations, (unsigned long long)p->promotions,
		       (unsigned long long)p->downs, (unsigned long long)p->recoveries,
		       (unsigned long long)p->last_outage_ns, (unsigned long long)p->max_outage_ns,
		       (unsigned long long)p->backpressured, (unsigned long long)p->retransmits,
		       (unsigned long long)p->last_failure_ns, p->last_failure_lane);
		json_str(p->last_failure);
		printf(",\"last_action\":");
		json_str(p->last_action);
		printf("}");
	}
	printf("],\"lanes\":[");
	for (unsigned i = 0; i < nlanes(h); i++) {
		const struct vbi_stat_lane *l = lane(h, i);

		printf("%s{\"peer\":", i ? "," : "");
		json_str(l->peer);
		printf(",\"device\":");
		json_str(l->device);
		printf(",\"id\":%u,\"qpn\":%u,\"mode\":\"%s\",\"qp_state\":\"%s\",\"active\":%u,"
		       "\"dead\":%u,\"retiring\":%u,\"hello\":%u,\"credits\":%u,"
		       "\"sq_outstanding\":%u,\"sq_depth\":%u,\"recvs\":%u,\"sends\":%llu}",
		       l->id, l->qpn, mode_name(l->mode), qps_name(l->qp_state), l->active, l->dead,
		       l->retiring, l->hello, l->credits, l->sq_outstanding, l->sq_depth, l->recvs,
		       (unsigned long long)l->sends);
	}
	printf("],\"publishers\":[");
	for (unsigned i = 0; i < npubs(h); i++) {
		const struct vbi_stat_pub *p = pubrec(h, i);

		printf("%s{\"node\":", i ? "," : "");
		json_str(p->node);
		printf(",\"topic\":");
		json_str(p->topic);
		printf(",\"class\":\"%s\",\"subscribers\":%u,\"published\":%llu,\"acked\":%llu,"
		       "\"quorum_acked\":%llu,\"ack_quorum\":%u,\"window\":%u,\"inflight\":%llu,"
		       "\"retained_bytes\":%llu,\"backpressure\":%llu}",
		       p->cls ? "FANOUT" : "ORDERED", p->subscribers, (unsigned long long)p->published,
		       (unsigned long long)p->acked, (unsigned long long)p->quorum_acked,
		       p->ack_quorum, p->window, (unsigned long long)p->inflight,
		       (unsigned long long)p->retained_bytes, (unsigned long long)p->backpressure);
	}
	printf("],\"subscribers\":[");
	for (unsigned i = 0; i < nsubs(h); i++) {
		const struct vbi_stat_sub *p = subrec(h, i);

		printf("%s{\"node\":", i ? "," : "");
		json_str(p->node);
		printf(",\"topic\":");
		json_str(p->topic);
		printf(",\"class\":\"%s\",\"delivered\":%llu,\"duplicates\":%llu,\"gaps\":%llu,"
		       "\"lost\":%llu,\"publishers\":%llu,\"ends\":%llu,\"acked\":%llu}",
		       p->cls ? "FANOUT" : "ORDERED", (unsigned long long)p->delivered,
		       (unsigned long long)p->duplicates, (unsigned long long)p->gaps,
		       (unsigned long long)p->lost, (unsigned long long)p->publishers,
		       (unsigned long long)p->ends, (unsigned long long)p->acked);
	}
	printf("],\"qp_transitions\":[");
	for (unsigned i = 0, k = 0; i < nqpt(h); i++) {
		const struct vbi_stat_qpt *t = qpt(h, i);

		if (!t->n)
			continue;
		printf("%s{\"from\":\"%s\",\"to\":\"%s\",\"count\":%llu,\"total_ns\":%llu,"
		       "\"max_ns\":%llu,\"last_ns\":%llu,\"hist\":[", k++ ? "," : "",
		       qps_name(i / h->nqps), qps_name(i % h->nqps), (unsigned long long)t->n,
		       (unsigned long long)t->total_ns, (unsigned long long)t->max_ns,
		       (unsigned long long)t->last_ns);
		for (unsigned b = 0; b < VBI_STAT_QPT_HIST; b++)
			printf("%s%llu", b ? "," : "", (unsigned long long)t->hist[b]);
		printf("]}");
	}
	printf("],\"truncated\":%s}", h->truncated ? "true" : "false");
}

/* Prometheus text exposition: label values escaped (\\, \", \n). */
static void prom_label(const char *name, const char *v, bool first)
{
	printf("%s%s=\"", first ? "" : ",", name);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			printf("\\%c", *v);
		else if (*v == '\n')
			printf("\\n");
		else
			putchar(*v);
	}
	putchar('"');
}

static void prom_ctx_labels(const struct vbi_stat_hdr *h)
{
	char pid[16], no[16];

	snprintf(pid, sizeof(pid), "%d", h->pid);
	snprintf(no, sizeof(no), "%u", h->ctx_no);
	prom_label("pid", pid, true);
	prom_label("ctx", no, false);
	prom_label("program", h->progname, false);
	prom_label("device", h->device, false);
}

/* Prometheus counters are named *_total */
#define SFX(type) (strcmp(type, "counter") ? "" : "_total")

#define PEER_METRICS(X)                                                                       \
	X(up, "gauge", "1: the peer's first HELLO arrived")                                  \
	X(dead, "gauge", "1: given up or closed")                                            \
	X(recovering, "gauge", "1: its connection failed, no lane carries traffic yet")     \
	X(mode, "gauge", "mode of its active connection: 0 RC, 1 UC, 2 UD")                  \
	X(failures, "counter", "connection failures counted by its failover policy")        \
	X(failovers, "counter", "switches to a standby connection")                          \
	X(degradations, "counter", "moves to a worse mode (RC -> UC -> UD)")                 \
	X(promotions, "counter", "moves back to a better mode")                              \
	X(max_outage_ns, "gauge", "longest failure -> traffic again, ns")                    \
	X(retransmits, "counter", "messages resent to it (lane switch, NAK, timeout)")

#define LANE_METRICS(X)                                                                       \
	X(credits, "gauge", "SENDs the lane may post now (the remote's free receive slots)") \
	X(sq_outstanding, "gauge", "send work requests in flight")                           \
	X(recvs, "gauge", "receive work requests posted")                                    \
	X(sends, "counter", "SENDs posted on the lane")

#define PUB_METRICS(X)                                                                        \
	X(subscribers, "gauge", "subscriber connections")                                    \
	X(published, "counter", "its last sequence number (messages published)")            \
	X(acked, "gauge", "ORDERED: last sequence acknowledged by every subscriber")        \
	X(quorum_acked, "gauge", "ORDERED with ack_quorum: last sequence acknowledged by k") \
	X(inflight, "gauge", "ORDERED: messages not yet acknowledged by all")                \
	X(retained_bytes, "gauge", "ORDERED: payload bytes kept for retransmission")         \
	X(backpressure, "counter", "publishes refused with -EAGAIN")

#define SUB_METRICS(X)                                                                        \
	X(delivered, "counter", "messages delivered")                                        \
	X(duplicates, "counter", "duplicates dropped")                                       \
	X(gaps, "counter", "FANOUT: gaps detected")                                          \
	X(lost, "counter", "FANOUT: messages lost in them")                                  \
	X(publishers, "gauge", "publishers it receives from")                                \
	X(ends, "counter", "ORDERED streams a publisher ended")                             \
	X(acked, "gauge", "ORDERED: the sequence its latest ACK acknowledged up to")

static void print_prometheus_pubsub(struct snap *s, size_t n)
{
#define X(f, type, help)                                                                      \
	printf("# HELP verbus_pub_%s%s %s\n# TYPE verbus_pub_%s%s %s\n", #f, SFX(type), help, #f, SFX(type), type);      \
	for (size_t c = 0; c < n; c++)                                                        \
		for (unsigned i = 0; i < npubs(s[c].h); i++) {                                 \
			const struct vbi_stat_pub *p = pubrec(s[c].h, i);                      \
			printf("verbus_pub_%s%s{", #f, SFX(type));                                          \
			prom_ctx_labels(s[c].h);                                               \
			prom_label("node", p->node, false);                                    \
			prom_label("topic", p->topic, false);                                  \
			prom_label("class", p->cls ? "FANOUT" : "ORDERED", false);             \
			printf("} %llu\n", (unsigned long long)p->f);                          \
		}
	PUB_METRICS(X)
#undef X
#define X(f, type, help)                                                                      \
	printf("# HELP verbus_sub_%s%s %s\n# TYPE verbus_sub_%s%s %s\n", #f, SFX(type), help, #f, SFX(type), type);      \
	for (size_t c = 0; c < n; c++)                                                        \
		for (unsigned i = 0; i < nsubs(s[c].h); i++) {                                 \
			const struct vbi_stat_sub *p = subrec(s[c].h, i);                      \
			printf("verbus_sub_%s%s{", #f, SFX(type));                                          \
			prom_ctx_labels(s[c].h);                                               \
			prom_label("node", p->node, false);                                    \
			prom_label("topic", p->topic, false);                                  \
			prom_label("class", p->cls ? "FANOUT" : "ORDERED", false);             \
			printf("} %llu\n", (unsigned long long)p->f);                          \
		}
	SUB_METRICS(X)
#undef X
}

/* QP state changes as a Prometheus histogram (cumulative buckets) */
static void print_prometheus_qpt(struct snap *s, size_t n)
{
	printf("# HELP verbus_qp_transition_seconds how long ibv_modify_qp took, per state "
	       "change\n# TYPE verbus_qp_transition_seconds histogram\n");
	for (size_t c = 0; c < n; c++)
		for (unsigned i = 0; i < nqpt(s[c].h); i++) {
			const struct vbi_stat_qpt *t = qpt(s[c].h, i);
			uint64_t cum = 0;

			if (!t->n)
				continue;
			for (unsigned b = 0; b < VBI_STAT_QPT_HIST; b++) {
				char le[32];

				cum += t->hist[b];
				if (b + 1 < VBI_STAT_QPT_HIST)
					snprintf(le, sizeof(le), "%g", (double)bucket_us(b) / 1e6);
				else
					snprintf(le, sizeof(le), "+Inf");
				printf("verbus_qp_transition_seconds_bucket{");
				prom_ctx_labels(s[c].h);
				prom_label("from", qps_name(i / s[c].h->nqps), false);
				prom_label("to", qps_name(i % s[c].h->nqps), false);
				prom_label("le", le, false);
				printf("} %llu\n", (unsigned long long)cum);
			}
			printf("verbus_qp_transition_seconds_sum{");
			prom_ctx_labels(s[c].h);
			prom_label("from", qps_name(i / s[c].h->nqps), false);
			prom_label("to", qps_name(i % s[c].h->nqps), false);
			printf("} %.9f\nverbus_qp_transition_seconds_count{", (double)t->total_ns / 1e9);
			prom_ctx_labels(s[c].h);
			prom_label("from", qps_name(i / s[c].h->nqps), false);
			prom_label("to", qps_name(i % s[c].h->nqps), false);
			printf("} %llu\n", (unsigned long long)t->n);
		}
}

static void print_prometheus(struct snap *s, size_t n)
{
	if (!n)
		return;
	printf("# HELP verbus_stale 1: the process of this counters file is gone\n"
	       "# TYPE verbus_stale gauge\n");
	for (size_t c = 0; c < n; c++) {
		printf("verbus_stale{");
		prom_ctx_labels(s[c].h);
		printf("} %d\n", strcmp(s[c].state, "stale") == 0);
	}
	for (unsigned i = 0; i < s[0].h->nvals; i++) {
		const struct vbi_stat_name *v0 = name(s[0].h, i);
		bool ctr = v0->kind == VBI_STAT_COUNTER;

		printf("# HELP verbus_%s%s vb_stats_t.%s (vb_ctx_stats(3))\n# TYPE verbus_%s%s %s\n",
		       v0->name, ctr ? "_total" : "", v0->name, v0->name, ctr ? "_total" : "",
		       ctr ? "counter" : "gauge");
		for (size_t c = 0; c < n; c++) {
			if (i >= s[c].h->nvals || strcmp(name(s[c].h, i)->name, v0->name))
				continue; /* another version's layout */
			printf("verbus_%s%s{", v0->name, ctr ? "_total" : "");
			prom_ctx_labels(s[c].h);
			printf("} %llu\n", (unsigned long long)value(s[c].h, i));
		}
	}
#define X(f, type, help)                                                                      \
	printf("# HELP verbus_peer_%s%s %s\n# TYPE verbus_peer_%s%s %s\n", #f, SFX(type), help, #f, SFX(type), type);    \
	for (size_t c = 0; c < n; c++)                                                        \
		for (unsigned i = 0; i < npeers(s[c].h); i++) {                                \
			const struct vbi_stat_peer *p = peer(s[c].h, i);                       \
			printf("verbus_peer_%s%s{", #f, SFX(type));                                         \
			prom_ctx_labels(s[c].h);                                               \
			prom_label("node", p->node, false);                                    \
			prom_label("peer", p->name, false);                                    \
			printf("} %llu\n", (unsigned long long)p->f);                          \
		}
	PEER_METRICS(X)
#undef X
#define X(f, type, help)                                                                      \
	printf("# HELP verbus_lane_%s%s %s\n# TYPE verbus_lane_%s%s %s\n", #f, SFX(type), help, #f, SFX(type), type);    \
	for (size_t c = 0; c < n; c++)                                                        \
		for (unsigned i = 0; i < nlanes(s[c].h); i++) {                                \
			const struct vbi_stat_lane *l = lane(s[c].h, i);                       \
			char id[16], qpn[16];                                                  \
			snprintf(id, sizeof(id), "%u", l->id);                                 \
			snprintf(qpn, sizeof(qpn), "%u", l->qpn);                              \
			printf("verbus_lane_%s%s{", #f, SFX(type));                                         \
			prom_ctx_labels(s[c].h);                                               \
			prom_label("peer", l->peer, false);                                    \
			prom_label("lane", id, false);                                         \
			prom_label("qpn", qpn, false);                                         \
			prom_label("mode", mode_name(l->mode), false);                         \
			prom_label("state", qps_name(l->qp_state), false);                     \
			printf("} %llu\n", (unsigned long long)l->f);                          \
		}
	LANE_METRICS(X)
#undef X
	print_prometheus_pubsub(s, n);
	print_prometheus_qpt(s, n);
}

/* ---- main ------------------------------------------------------------------------------------ */

enum fmt { FMT_TEXT, FMT_JSON, FMT_PROM };

static int usage(void)
{
	fprintf(stderr,
		"usage: vb_stat [--dir DIR]                      list the verbus contexts\n"
		"       vb_stat [--dir DIR] [--once] [--interval MS] [--json | --prometheus] "
		"[PID[.N]]\n"
		"       vb_stat [--dir DIR] --clean               remove stale counters files\n"
		"       vb_stat --config                          every VERBUS_* variable\n"
		"DIR defaults to VERBUS_STAT_DIR, else /dev/shm.\n");
	return 2;
}

/* Read every selected file of @dir into *@out (kept across rounds for the
 * rates); returns how many, -1 on error. */
static long read_round(const char *dir, const char *sel, struct snap **out, size_t *cap)
{
	size_t nf, n = 0;
	char **files = list_files(dir, &nf);

	for (size_t i = 0; i < nf; i++) {
		struct snap s = { 0 };

		if (snap_read(&s, files[i]) || !selected(s.h, sel)) {
			free(s.h);
			free(files[i]);
			continue;
		}
		if (n == *cap) {
			struct snap *nv = realloc(*out, (*cap ? 2 * *cap : 8) * sizeof(**out));

			if (!nv) {
				free(s.h);
				while (i < nf)
					free(files[i++]);
				free(files);
				return -1;
			}
			*cap = *cap ? 2 * *cap : 8;
			memset(nv + n, 0, (*cap - n) * sizeof(*nv));
			*out = nv;
		}
		/* the same file as last round's n-th: its copy is the previous */
		free((*out)[n].prev);
		if (strcmp((*out)[n].path, s.path)) {
			free((*out)[n].h);
			(*out)[n].h = NULL;
		}
		s.prev = (*out)[n].h;
		(*out)[n++] = s;
		free(files[i]);
	}
	free(files);
	return (long)n;
}

static int clean(const char *dir)
{
	size_t nf;
	char **files = list_files(dir, &nf);
	int rc = 0;

	for (size_t i = 0; i < nf; i++) {
		struct snap s = { 0 };

		if (!snap_read(&s, files[i]) && !strcmp(s.state, "stale")) {
			if (unlink(files[i])) {
				fprintf(stderr, "vb_stat: %s: %s\n", files[i], strerror(errno));
				rc = 1;
			} else {
				printf("removed %s (pid %d is gone)\n", files[i], s.h->pid);
			}
		}
		free(s.h);
		free(files[i]);
	}
	free(files);
	return rc;
}

int main(int argc, char **argv)
{
	const char *dir = getenv("VERBUS_STAT_DIR"), *sel = NULL;
	bool once = false, list;
	enum fmt fmt = FMT_TEXT;
	unsigned interval_ms = 1000;
	struct snap *s = NULL;
	size_t cap = 0;
	long n;

	if (!dir || !*dir)
		dir = "/dev/shm";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--once"))
			once = true;
		else if (!strcmp(argv[i], "--json"))
			fmt = FMT_JSON;
		else if (!strcmp(argv[i], "--prometheus"))
			fmt = FMT_PROM;
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--interval") && i + 1 < argc) {
			char *e;
			unsigned long v = strtoul(argv[++i], &e, 10);

			if (*e || !v || v > 3600000) {
				fprintf(stderr, "vb_stat: --interval %s: 1..3600000 ms\n", argv[i]);
				return 2;
			}
			interval_ms = (unsigned)v;
		} else if (!strcmp(argv[i], "--config")) {
			printf("# verbus %s\n", vb_version());
			return vbi_cfg_dump(stdout, 0) ? 1 : 0;
		} else if (!strcmp(argv[i], "--clean")) {
			return clean(dir);
		} else if (argv[i][0] != '-' && !sel) {
			int pid;

			if (sscanf(argv[i], "%d", &pid) != 1 || pid <= 0)
				return usage();
			sel = argv[i];
		} else {
			return usage();
		}
	}
	/* no process named and no format: the list */
	list = !sel && fmt == FMT_TEXT;
	for (;;) {
		n = read_round(dir, sel, &s, &cap);
		if (n < 0)
			return 1;
		if (!n && (sel || fmt == FMT_JSON)) {
			fprintf(stderr, "vb_stat: no verbus context %s%sin %s\n", sel ? sel : "",
				sel ? " " : "", dir);
			return 1;
		}
		if (list) {
			print_list(s, (size_t)n);
		} else if (fmt == FMT_PROM) {
			print_prometheus(s, (size_t)n);
		} else if (fmt == FMT_JSON) {
			printf("[");
			for (long i = 0; i < n; i++) {
				printf("%s", i ? "," : "");
				print_json(&s[i]);
			}
			printf("]\n");
		} else {
			for (long i = 0; i < n; i++)
				print_text(&s[i]);
		}
		fflush(stdout);
		if (once || list)
			break;
		usleep(interval_ms * 1000u);
		if (fmt == FMT_TEXT)
			printf("\n");
	}
	for (size_t i = 0; i < cap; i++) {
		free(s[i].h);
		free(s[i].prev);
	}
	free(s);
	return 0;
}
