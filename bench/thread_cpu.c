/* SPDX-License-Identifier: MIT */
#include "bench/thread_cpu.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* utime + stime of /proc/self/task/@tid/stat (fields 14 and 15; the comm,
 * field 2, is in parentheses and may hold spaces: parse after its ')'). */
static int read_task(int tid, char *comm, size_t clen, unsigned long long *ticks)
{
	char path[64], buf[1024], *p, *q;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	if (!(f = fopen(path, "r")))
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (!(p = strchr(buf, '(')) || !(q = strrchr(buf, ')')))
		return -1;
	snprintf(comm, clen, "%.*s", (int)(q - p - 1), p + 1);
	/* after ')': state(3) ppid pgrp session tty tpgid flags minflt
	 * cminflt majflt cmajflt utime(14) stime(15) */
	if (sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	*ticks = ut + st;
	return 0;
}

void vbb_tcpu_snap(struct vbb_tcpu *s)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	s->n = 0;
	if (!d)
		return;
	while ((e = readdir(d)) && s->n < VBB_TCPU_MAX) {
		int tid = atoi(e->d_name);

		if (tid > 0 && read_task(tid, s->t[s->n].comm, sizeof(s->t[s->n].comm),
					 &s->t[s->n].ticks) == 0)
			s->t[s->n++].tid = tid;
	}
	closedir(d);
}

void vbb_tcpu_print(FILE *f, const char *who, const struct vbb_tcpu *before,
		    unsigned long long wall_ns)
{
	struct vbb_tcpu now;
	double ms_per_tick = 1000.0 / (double)sysconf(_SC_CLK_TCK);

	vbb_tcpu_snap(&now);
	for (int i = 0; i < now.n; i++) {
		unsigned long long b = 0;

		for (int j = 0; j < before->n; j++)
			if (before->t[j].tid == now.t[i].tid)
				b = before->t[j].ticks;
		if (now.t[i].ticks == b)
			continue;
		double ms = (double)(now.t[i].ticks - b) * ms_per_tick;

		fprintf(f, "%s: thread %-15s tid %-6d CPU %8.1f ms (%3.0f%% of %.1f ms)\n", who,
			now.t[i].comm, now.t[i].tid, ms,
			wall_ns ? 100.0 * ms * 1e6 / (double)wall_ns : 0.0, (double)wall_ns / 1e6);
	}
}
