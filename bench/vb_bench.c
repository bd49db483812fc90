/* SPDX-License-Identifier: MIT */
/*
 * vb_bench — verbus benchmark driver. One binary, subcommands (usage()
 * lists them; each lives in bench/bench_<name>.c). Installed with the
 * library (`cmake --install`): a tool users run, like perftest's binaries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <verbus/verbus.h>

#include "bench/bench.h"
#include "bench/smoke.h"

static int usage(FILE *f)
{
	fprintf(f,
		"usage: vb_bench <subcommand> [options]\n"
		"verbus benchmarks on one RDMA device (bench/compare.sh runs them beside perftest\n"
		"and ucx_perftest). Times come from the TSC calibrated once against\n"
		"CLOCK_MONOTONIC; no system clock is read per message.\n"
		"\n"
		"  smoke [--device NAME]   RC exchange on raw verbs; prints what it did\n"
		"  mempool [--no-device] [--json FILE]\n"
		"         registered slab pool vs malloc and per-message ibv_reg_mr\n"
		"  lifecycle [--device NAME] [--qps N] [--json FILE]\n"
		"         QP bring-up/teardown: cold vs pool vs recycled\n"
		"  lat    [--class ordered|fanout] [--size N,...] [--count N] [--rate R] [--max-secs S]\n"
		"         ping-pong between two processes (2 busy threads); one-way = RTT/2 of\n"
		"         every round trip: p50 p90 p99 p99.9 max, share of samples above 1 ms\n"
		"         (tick mode), p50 of the samples at or below 1 ms (fast-mode p50).\n"
		"         --max-secs: stop a size after S s of measuring (fewer samples)\n"
		"  bw     [--class ordered|fanout] [--size N,...] [--count N] [--stamp-every N]\n"
		"         one publisher -> one subscriber process (3 busy threads): msg/s and\n"
		"         MB/s at the receiver, first delivery to last stamped one\n"
		"  fanout [--class fanout|ordered] [--size N,...] [--count N] [--subs N]\n"
		"         [--sub-procs P] [--stamp-every N]\n"
		"         one publisher -> N subscribers in P processes (default P = N; P = 1:\n"
		"         N nodes on one context, one progress thread): aggregate deliveries/s,\n"
		"         worst subscriber's delivery p99; 2 + P busy threads\n"
		"         (lat/bw/fanout: --ip ADDR of the device, default 10.77.0.1 or\n"
		"          VERBUS_TEST_IP; --json FILE appends one JSON line per size;\n"
		"          --stamp-every N: every Nth message carries its publish time, 64)\n"
		"  failover [--faults N] [--ip A] [--standby-ip B | --one-device] [--json FILE]\n"
		"         fault -> first delivery over the standby vs a fresh RC connection\n"
		"  config [--doc] [--check] [--markdown]\n"
		"         every VERBUS_* variable: the value in force and its default\n"
		"         (--doc: what each is, its type, range and field; --check:\n"
		"         exit 1 naming a malformed value, as vb_ctx_create refuses it;\n"
		"         --markdown: README.md's table of them); no device needed\n"
		"  -h, --help   this text\n"
		"environment: VERBUS_DEVICE (default device), VERBUS_* (library settings:\n"
		"vb_bench config lists them)\n");
	return f == stderr ? 2 : 0;
}

static int cmd_smoke(int argc, char **argv)
{
	const char *dev = getenv("VERBUS_DEVICE");
	struct vb_smoke_result r;
	int rc;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--device") && i + 1 < argc)
			dev = argv[++i];
		else
			return usage(stderr);
	}
	rc = vb_smoke_rc(dev, stdout, &r, NULL, NULL);
	if (rc) {
		fprintf(stderr, "vb_bench smoke: %s: %s\n", vb_strerror(rc), vb_errmsg());
		return 1;
	}
	printf("vb_bench smoke: OK on %s (verbus %s)\n", r.device, vb_version());
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage(stderr);
	if (!strcmp(argv[1], "smoke"))
		return cmd_smoke(argc - 2, argv + 2);
	if (!strcmp(argv[1], "lifecycle"))
		return vb_bench_lifecycle(argc - 2, argv + 2);
	if (!strcmp(argv[1], "lat"))
		return vb_bench_lat(argc - 2, argv + 2);
	if (!strcmp(argv[1], "bw"))
		return vb_bench_bw(argc - 2, argv + 2);
	if (!strcmp(argv[1], "fanout"))
		return vb_bench_fanout(argc - 2, argv + 2);
	if (!strcmp(argv[1], "mempool"))
		return vb_bench_mempool(argc - 2, argv + 2);
	if (!strcmp(argv[1], "failover"))
		return vb_bench_failover(argc - 2, argv + 2);
	if (!strcmp(argv[1], "config"))
		return vb_bench_config(argc - 2, argv + 2);
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
		return usage(stdout);
	fprintf(stderr, "vb_bench: unknown subcommand '%s'\n", argv[1]);
	return usage(stderr);
}
