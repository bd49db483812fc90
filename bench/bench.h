/* SPDX-License-Identifier: MIT */
/*
 * vb_bench subcommands: one `int vb_bench_<name>(int argc, char **argv)` per
 * bench/bench_<name>.c, dispatched from vb_bench.c. @argv holds the options
 * after the subcommand name; the return value is the process exit status.
 */
#ifndef VERBUS_BENCH_BENCH_H
#define VERBUS_BENCH_BENCH_H

/* Registered-memory pool: alloc+free cost vs malloc/mallocx, per-message
 * ibv_reg_mr cost, registrations over 1M mixed-size messages. */
int vb_bench_mempool(int argc, char **argv);
int vb_bench_failover(int argc, char **argv);

/* QP lifecycle: create / RESET->INIT / INIT->RTR / RTR->RTS / destroy
 * p50/p99, cold vs pre-warmed pool vs recycled (bench_lifecycle.c). */
int vb_bench_lifecycle(int argc, char **argv);

/* Pub/sub API between processes (bench_pubsub.c): ping-pong latency,
 * one-way throughput, 1 -> N fan-out. */
int vb_bench_lat(int argc, char **argv);
int vb_bench_bw(int argc, char **argv);
int vb_bench_fanout(int argc, char **argv);

/* Every VERBUS_* variable, its default and the value in force (--doc: with
 * what each is; --check: vb_ctx_create's environment check; --markdown:
 * README.md's table), bench_config.c. */
int vb_bench_config(int argc, char **argv);

/* Per-message counts of locks, allocations, clock reads and system calls
 * between these marks, printed by ../shared/tools/prof/shim.so when it is
 * preloaded (LD_PRELOAD); without it the weak symbols are NULL and the
 * marks do nothing. */
void shim_mark_start(void) __attribute__((weak));
void shim_mark_end(const char *label, uint64_t nmsg) __attribute__((weak));
static inline void vbb_mark_start(void)
{
	if (shim_mark_start)
		shim_mark_start();
}
static inline void vbb_mark_end(const char *label, uint64_t nmsg)
{
	if (shim_mark_end && nmsg)
		shim_mark_end(label, nmsg);
}

#endif
