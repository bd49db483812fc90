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

#endif
