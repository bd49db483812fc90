/* SPDX-License-Identifier: MIT */
/*
 * Diagnostics: CPU time per thread of this process over a measured section
 * (user + system, from /proc/self/task/<tid>/stat, in clock ticks), so a
 * run shows which thread is the pipeline's busiest stage. vb_bench prints
 * it with VB_BENCH_STATS=1. Threads are named by their comm (the library
 * names its own: vb-progress, vb-maint).
 */
#ifndef VERBUS_BENCH_THREAD_CPU_H
#define VERBUS_BENCH_THREAD_CPU_H

#include <stdio.h>

#define VBB_TCPU_MAX 64

struct vbb_tcpu {
	int n;
	struct { int tid; char comm[20]; unsigned long long ticks; } t[VBB_TCPU_MAX];
};

/* Read every thread's CPU ticks so far into @s. */
void vbb_tcpu_snap(struct vbb_tcpu *s);
/* Print, per thread, the CPU time used since @before (ms, and the share of
 * @wall_ns), prefixed by @who. */
void vbb_tcpu_print(FILE *f, const char *who, const struct vbb_tcpu *before,
		    unsigned long long wall_ns);

#endif
