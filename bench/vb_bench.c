/* SPDX-License-Identifier: MIT */
/*
 * vb_bench — verbus benchmark driver. One binary, subcommands:
 *   smoke [--device NAME]   raw-verbs RC exchange on the device (chain check)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <verbus/verbus.h>

#include "bench/bench.h"
#include "bench/smoke.h"

static int usage(FILE *f)
{
	fprintf(f, "usage: vb_bench <subcommand> [options]\n"
		   "  smoke [--device NAME]   RC exchange on raw verbs; prints what it did\n"
		   "  mempool [--no-device] [--json FILE]   registered slab pool vs malloc and per-message ibv_reg_mr\n"
		   "  lifecycle [--device NAME] [--qps N] [--json FILE]   QP bring-up/teardown: cold vs pool vs recycled\n"
		   "  lat    [--class ordered|fanout] [--size N,...] [--count N] [--rate R]   ping-pong\n"
		   "  bw     [--class ordered|fanout] [--size N,...] [--count N]   one-way throughput\n"
		   "  fanout [--class fanout|ordered] [--size N,...] [--count N] [--subs N]\n"
		   "         (lat/bw/fanout: --ip ADDR of the device, default 10.77.0.1; --json FILE)\n"
		   "  failover [--faults N] [--ip A] [--standby-ip B | --one-device] [--json FILE]\n"
		   "         fault -> first delivery over the standby vs a fresh RC connection\n"
		   "environment: VERBUS_DEVICE (default device)\n");
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
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
		return usage(stdout);
	fprintf(stderr, "vb_bench: unknown subcommand '%s'\n", argv[1]);
	return usage(stderr);
}
