/* SPDX-License-Identifier: MIT */
/* The counters file's process identity (core/statfile.h). */
#include <stdio.h>
#include <string.h>

#include "core/statfile.h"

int vbi_proc_start(int pid, uint64_t *start_ticks, char *state)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	FILE *f;
	size_t n;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	else
		snprintf(path, sizeof(path), "/proc/self/stat");
	if (!(f = fopen(path, "r")))
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* "pid (comm) S ...": the name may hold spaces and parentheses */
	if (!(p = strrchr(buf, ')')) || p[1] != ' ' || !p[2])
		return -1;
	if (state)
		*state = p[2];
	p++; /* the space before field 3 */
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %llu", &v) != 1)
		return -1;
	*start_ticks = v;
	return 0;
}
