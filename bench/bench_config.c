/* SPDX-License-Identifier: MIT */
/*
 * vb_bench config: every VERBUS_* variable of the library, its default and
 * the value in force (like `ucx_info -c`), from the one table
 * (core/config.c); vb_stat --config prints the same.
 */
#include <stdio.h>
#include <string.h>

#include <verbus/verbus.h>

#include "bench/bench.h"
#include "core/config.h"

static int usage(void)
{
	fprintf(stderr, "usage: vb_bench config [--doc] [--check] [--markdown]\n");
	return 2;
}

int vb_bench_config(int argc, char **argv)
{
	unsigned flags = 0;
	int check = 0, markdown = 0, rc;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--doc"))
			flags |= VBI_CFG_DUMP_DOC;
		else if (!strcmp(argv[i], "--check"))
			check = 1;
		else if (!strcmp(argv[i], "--markdown"))
			markdown = 1;
		else
			return usage();
	}
	if (markdown)
		return vbi_cfg_markdown(stdout) ? 1 : 0;
	if (check) {
		rc = vbi_cfg_check_env();
		if (rc) {
			fprintf(stderr, "vb_bench config: %s\n", vb_errmsg());
			return 1;
		}
		printf("vb_bench config: every VERBUS_* value set is valid\n");
		return 0;
	}
	printf("# verbus %s\n", vb_version());
	return vbi_cfg_dump(stdout, flags) ? 1 : 0;
}
