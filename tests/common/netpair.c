/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "tests/common/netpair.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/proc.h"

#define VBN_SKIP 77

static const char *net_dir(void)
{
	return getenv("VERBUS_NET_DIR");
}

char vbn_role(void)
{
	const char *r = getenv("VERBUS_NET_ROLE"), *d = net_dir();

	if (!r || (strcmp(r, "a") && strcmp(r, "b")) || !d || !*d) {
		fprintf(stderr, "not one of a pair of hosts (VERBUS_NET_ROLE, VERBUS_NET_DIR): "
				"skipping (run through scripts/vm-pair.sh)\n");
		exit(VBN_SKIP);
	}
	return r[0];
}

const char *vbn_ip(char role, int link)
{
	static char ip[2][2][16];
	int r = role == 'a' ? 0 : 1, l = link == 2 ? 1 : 0;

	snprintf(ip[r][l], sizeof(ip[r][l]), "10.77.%d.%d", 9 + l, 1 + r);
	return ip[r][l];
}

const char *vbn_netdev(int link)
{
	return link == 2 ? "eth1" : "eth0";
}

const char *vbn_rdmadev(int link)
{
	return link == 2 ? "rxe1" : "rxe0";
}

/* $VERBUS_NET_DIR/<program>.<key>.<role> */
static void key_path(char *p, size_t n, const char *key, char role)
{
	snprintf(p, n, "%s/%s.%s.%c", net_dir(), program_invocation_short_name, key, role);
}

static int put_raw(const char *key, const char *val)
{
	char p[512], tmp[520];
	FILE *f;

	key_path(p, sizeof(p), key, vbn_role());
	snprintf(tmp, sizeof(tmp), "%s.tmp", p);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fputs(val, f);
	if (fclose(f) != 0 || rename(tmp, p) != 0)
		return -errno;
	return 0;
}

int vbn_put(const char *key, const char *fmt, ...)
{
	char val[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	return put_raw(key, val);
}

int vbn_get(char role, const char *key, char *buf, size_t n, int timeout_s)
{
	char p[512];
	uint64_t end = vbt_now_ms() + (uint64_t)timeout_s * 1000;

	key_path(p, sizeof(p), key, role);
	for (;;) {
		FILE *f = fopen(p, "r");

		if (f) {
			size_t len = fread(buf, 1, n - 1, f);

			fclose(f);
			buf[len] = '\0';
			return 0;
		}
		if (vbt_now_ms() > end)
			return -ETIMEDOUT;
		usleep(50000);
	}
}

int vbn_get_u64(char role, const char *key, uint64_t *out, int timeout_s)
{
	char buf[64], *e;
	int rc = vbn_get(role, key, buf, sizeof(buf), timeout_s);

	if (rc)
		return rc;
	errno = 0;
	*out = strtoull(buf, &e, 10);
	return errno || e == buf ? -EINVAL : 0;
}

int vbn_meet(const char *point, int timeout_s)
{
	char key[256], buf[8];
	uint64_t t0 = vbt_now_ms();
	int rc;

	snprintf(key, sizeof(key), "meet-%s", point);
	rc = put_raw(key, "here");
	if (rc)
		return rc;
	rc = vbn_get(vbn_other(vbn_role()), key, buf, sizeof(buf), timeout_s);
	if (rc)
		fprintf(stderr, "[%c] the other side did not reach '%s' within %d s\n", vbn_role(),
			point, timeout_s);
	else if (vbt_now_ms() - t0 > 2000)
		printf("[%c] met at '%s' after %.1f s\n", vbn_role(), point,
		       (double)(vbt_now_ms() - t0) / 1000.0);
	return rc;
}

uint64_t vbn_recovery_ms(void)
{
	const char *e = getenv("VERBUS_CM_TIMEOUT_MS");

	return 3 * (uint64_t)(e && atoi(e) > 0 ? atoi(e) : 5000);
}

int vbn_sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	printf("[%c] $ %s\n", vbn_role(), cmd);
	fflush(stdout);
	st = system(cmd);
	if (st == -1)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int vbn_netem(int link, const char *spec)
{
	if (!spec)
		return vbn_sh("tc qdisc del dev %s root 2>/dev/null || true", vbn_netdev(link));
	return vbn_sh("tc qdisc replace dev %s root netem %s", vbn_netdev(link), spec);
}

uint64_t vbn_hw_counter(int link, const char *name)
{
	char p[256];
	unsigned long long v = 0;
	FILE *f;

	snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/1/hw_counters/%s",
		 vbn_rdmadev(link), name);
	f = fopen(p, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

int vbn_poweroff(char role)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/poweroff.%c", net_dir(), role);
	f = fopen(p, "w");
	if (!f)
		return -errno;
	fprintf(f, "%s on %c\n", program_invocation_short_name, vbn_role());
	fclose(f);
	printf("[%c] asked the runner to power guest %c off\n", vbn_role(), role);
	return 0;
}

static void print_event(const vb_event_t *ev, void *arg)
{
	(void)arg;
	printf("[%c] event %d peer '%s': %s\n", vbn_role(), (int)ev->type, ev->peer, ev->detail);
	fflush(stdout);
}

int vbn_ctx(int link, bool standby, void (*tweak)(vb_ctx_attr_t *a), vb_ctx_t **out)
{
	vb_ctx_attr_t ca;
	int rc;

	vb_ctx_attr_init(&ca);
	ca.device = vbn_rdmadev(link);
	ca.ip = vbn_ip(vbn_role(), link);
	if (standby) {
		ca.standby_device = vbn_rdmadev(3 - link);
		ca.standby_ip = vbn_ip(vbn_role(), 3 - link);
	}
	ca.on_event = print_event;
	if (tweak)
		tweak(&ca);
	rc = vb_ctx_create(&ca, out);
	if (rc)
		fprintf(stderr, "[%c] vb_ctx_create: %s (%s)\n", vbn_role(), vb_strerror(rc),
			vb_errmsg());
	return rc;
}

int vbn_node(vb_ctx_t *ctx, int link, const char *name, bool listen, vb_node_t **out)
{
	vb_node_attr_t na;
	char full[64];
	int rc;

	snprintf(full, sizeof(full), "%c-%s", vbn_role(), name);
	vb_node_attr_init(&na);
	na.name = full;
	if (listen)
		na.listen_ip = vbn_ip(vbn_role(), link);
	rc = vb_node_create(ctx, &na, out);
	if (rc)
		fprintf(stderr, "[%c] vb_node_create: %s (%s)\n", vbn_role(), vb_strerror(rc),
			vb_errmsg());
	return rc;
}
