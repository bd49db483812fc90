/* SPDX-License-Identifier: MIT */
/*
 * vb_bench failover: the time from a fault to the first message delivered
 * over the new connection, over N faults (default 20), beside the time to
 * set up a fresh RC connection (CM + handshake) measured in the same run.
 * The fault: the subscriber's active QP moved to ERR from its own thread
 * (vb_node_inject_fault); the stream is ORDERED and audited (nothing lost,
 * duplicated or out of order). Uses the fault tests' harness
 * (tests/common/failover.c): publisher and subscriber are two processes.
 * Target (issue #6): failover to a warm standby under a tenth of a cold
 * connection set-up.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "tests/common/failover.h"

int vb_bench_failover(int argc, char **argv)
{
	struct vbt_fo_cfg c;
	struct vbt_fo_result r;
	const char *json = NULL;
	uint64_t v[VBT_FO_MAX_FAULTS], p50, p99, max, cold;
	unsigned faults = 20;

	memset(&c, 0, sizeof(c));
	c.name = "failover";
	c.topics = 1;
	c.cls = VB_ORDERED;
	c.min_len = 8;
	c.max_len = 64;
	c.side = VBT_FO_SUB;
	c.fault = vbt_fo_fault_qp_err;
	c.ip = "10.77.0.1";
	c.standby_ip = "10.77.1.1";
	c.wait_standby = true;
	c.quiet = true;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--faults") && i + 1 < argc)
			faults = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--ip") && i + 1 < argc)
			c.ip = argv[++i];
		else if (!strcmp(argv[i], "--standby-ip") && i + 1 < argc)
			c.standby_ip = argv[++i];
		else if (!strcmp(argv[i], "--one-device"))
			c.standby_ip = NULL;
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else {
			fprintf(stderr, "usage: vb_bench failover [--faults N (1..%d, 20)] [--ip A] "
				"[--standby-ip B | --one-device] [--json FILE]\n", VBT_FO_MAX_FAULTS);
			return 2;
		}
	}
	if (!faults || faults > VBT_FO_MAX_FAULTS) {
		fprintf(stderr, "vb_bench failover: --faults 1..%d\n", VBT_FO_MAX_FAULTS);
		return 2;
	}
	c.nfaults = faults;
	c.msgs = (uint64_t)(faults + 1) * 5000;
	/* This measures failover to the warm standby: faults this close
	 * together would otherwise make the path policy degrade to UC (3
	 * failures within 1 s), which failover_degrade_test covers. */
	setenv("VERBUS_DEGRADE_FAILURES", "64", 0);
	fprintf(stderr, "vb_bench failover: %u faults over %" PRIu64 " ORDERED messages, standby on "
		"%s\n", faults, c.msgs, c.standby_ip ? c.standby_ip : "the same device");
	if (vbt_failover_run(&c, &r)) {
		fprintf(stderr, "vb_bench failover: could not run\n");
		return 1;
	}
	memcpy(v, r.first_ns, sizeof(v));
	p50 = vbt_fo_pct(v, r.measured, 50);
	p99 = vbt_fo_pct(v, r.measured, 99);
	max = vbt_fo_pct(v, r.measured, 100);
	cold = r.cold_connect_ns;
	printf("failover: %u faults, %u measured; fault -> first delivery over the standby: "
	       "p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", r.faults, r.measured, p50 / 1e6,
	       p99 / 1e6, max / 1e6);
	printf("failover: fresh RC connection set-up (median of 5): %.3f ms; failover p50 / cold = "
	       "%.3f (target < 0.1)\n", cold / 1e6, cold ? (double)p50 / (double)cold : 0.0);
	/* what the failovers cost in traffic: the publisher rewinds to what it
	 * saw acknowledged; what the subscriber already had comes again and
	 * is dropped by sequence */
	printf("failover: the publisher rewound %" PRIu64 " messages over %" PRIu64 " switches; "
	       "the subscriber dropped %" PRIu64 " duplicates of them\n", r.pub_stats.retransmits,
	       r.pub_stats.failovers, r.sub_stats.duplicates_dropped);
	printf("failover: audit: published %" PRIu64 ", delivered %" PRIu64 ", out of order %" PRIu64
	       ", duplicates %" PRIu64 ", corrupt %" PRIu64 " -> %s\n", r.published, r.delivered,
	       r.out_of_order, r.duplicates, r.corrupt, r.ok ? "OK" : r.why);
	if (json) {
		FILE *f = fopen(json, "a");

		if (f) {
			fprintf(f, "{\"bench\":\"failover\",\"faults\":%u,\"measured\":%u,"
				"\"standby_ip\":\"%s\",\"p50_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64
				",\"max_ns\":%" PRIu64 ",\"cold_connect_ns\":%" PRIu64
				",\"audit_ok\":%s}\n", r.faults, r.measured,
				c.standby_ip ? c.standby_ip : "", p50, p99, max, cold,
				r.ok ? "true" : "false");
			fclose(f);
		}
	}
	return r.ok ? 0 : 1;
}
