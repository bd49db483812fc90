/* SPDX-License-Identifier: MIT */
#include "tests/common/rxe_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/verbs/verbs_device.h"

const char *vbt_require_device(void)
{
	static char names[512];
	const char *env = getenv("VERBUS_DEVICE");
	int n = vbi_verbs_list_devices(names, sizeof(names));
	int required = getenv("VERBUS_IN_VM") || getenv("VERBUS_REQUIRE_RDMA");

	if (n <= 0) {
		fprintf(stderr, "no RDMA device present%s\n",
			required ? " but one is required (VERBUS_IN_VM/VERBUS_REQUIRE_RDMA)"
				 : ": skipping (run through scripts/vm-run.sh)");
		exit(required ? 1 : VBT_SKIP);
	}
	if (env && *env)
		return env;
	if (strstr(names, "rxe0"))
		return "rxe0";
	char *sp = strchr(names, ' ');
	if (sp)
		*sp = '\0';
	return names;
}

int vbt_res_count(const char *kind, pid_t pid)
{
	char cmd[128], pat[48];
	char *out = NULL;
	size_t cap = 0, len = 0;
	FILE *p;
	int count = 0;

	snprintf(cmd, sizeof(cmd), "rdma res show %s -j 2>/dev/null", kind);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	for (;;) {
		if (len + 4096 + 1 > cap) {
			char *nb = realloc(out, cap = cap ? cap * 2 : 8192);

			if (!nb) {
				free(out);
				pclose(p);
				return -1;
			}
			out = nb;
		}
		size_t r = fread(out + len, 1, 4096, p);

		if (!r)
			break;
		len += r;
	}
	if (pclose(p) != 0 || !out) {
		free(out);
		return -1;
	}
	out[len] = '\0';
	if (!strchr(out, '[')) {
		free(out);
		return -1;
	}
	/* Objects are flat: {"ifindex":..,...,"pid":N,"comm":"..."} */
	if (!pid) {
		/* every user object: one with a pid, or with no name at all.
		 * The kernel omits the pid once the creating thread has exited
		 * (a QP a joined thread created and left parked); the kernel's
		 * own objects have a name and no pid ("comm":"ib_core") */
		for (char *s = out; (s = strchr(s, '{')); s++) {
			char *e = strchr(s, '}');

			if (!e)
				break;
			*e = '\0';
			if (strstr(s, "\"pid\":") || !strstr(s, "\"comm\":"))
				count++;
			s = e;
		}
		free(out);
		return count;
	}
	snprintf(pat, sizeof(pat), "\"pid\":%d", (int)pid);
	for (char *s = out; (s = strstr(s, pat)); s += strlen(pat)) {
		char c = s[strlen(pat)];

		if (c == ',' || c == '}')
			count++;
	}
	free(out);
	return count;
}
