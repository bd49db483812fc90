/* SPDX-License-Identifier: MIT */
/*
 * Two-host tests (tests/net, label net): one program runs once in each of
 * the two guests that scripts/vm-pair.sh boots, as role 'a' in one and 'b'
 * in the other, joined by two real (virtual) Ethernet links:
 *   link 1: eth0, rxe0, 10.77.9.1 (a) <-> 10.77.9.2 (b)
 *   link 2: eth1, rxe1, 10.77.10.1 (a) <-> 10.77.10.2 (b)
 * The two sides meet and exchange results through files in a directory
 * both guests see ($VERBUS_NET_DIR, on the host's disk over 9p), named
 * after the test program, so a side that failed in one test cannot be met
 * by the other side of the next. Every wait is bounded.
 */
#ifndef VERBUS_TESTS_NETPAIR_H
#define VERBUS_TESTS_NETPAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <verbus/verbus.h>

/* This side's role, 'a' or 'b'. Outside a pair (no VERBUS_NET_ROLE /
 * VERBUS_NET_DIR) the program exits 77 (ctest: skipped). */
char vbn_role(void);

/* The other role. */
static inline char vbn_other(char r)
{
	return r == 'a' ? 'b' : 'a';
}

/* The address of @role on @link (1 or 2): static storage. */
const char *vbn_ip(char role, int link);

/* The netdev and the RDMA device of @link on this guest ("eth0", "rxe0"). */
const char *vbn_netdev(int link);
const char *vbn_rdmadev(int link);

/* Meet the other side at @point: returns 0 once both arrived, -ETIMEDOUT
 * after @timeout_s (the other side failed or is far behind). */
int vbn_meet(const char *point, int timeout_s);

/* Publish a result under @key for the other side (atomically: it sees the
 * whole value or none). 0 or -errno. */
int vbn_put(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Wait up to @timeout_s for @role's value of @key into @buf: 0, -ETIMEDOUT. */
int vbn_get(char role, const char *key, char *buf, size_t n, int timeout_s);

/* vbn_get() of an unsigned number; -ETIMEDOUT or -EINVAL (not a number). */
int vbn_get_u64(char role, const char *key, uint64_t *out, int timeout_s);

/* The recovery timeout the library uses here: 3 x cm_timeout_ms
 * ($VERBUS_CM_TIMEOUT_MS, else the library's default 5000), in ms. */
uint64_t vbn_recovery_ms(void);

/* Run a shell command (printed first); its exit status, -1 when it could
 * not be run. */
int vbn_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* netem on @link's netdev of this guest, e.g. "loss 1%"; NULL removes it.
 * 0, or the tc command's status. */
int vbn_netem(int link, const char *spec);

/* A counter of the rxe device of @link, from
 * /sys/class/infiniband/rxeN/ports/1/hw_counters/@name; 0 if absent. */
uint64_t vbn_hw_counter(int link, const char *name);

/* Ask the runner to power guest @role off now (its qemu is killed, as a
 * power cut). Returns 0 once requested. */
int vbn_poweroff(char role);

#endif


/* A context on this guest's @link (1: rxe0, 2: rxe1), with the other link
 * as the standby device when @standby, events printed with the role;
 * @tweak (may be NULL) adjusts the attributes first. 0 or the
 * vb_ctx_create() error (printed). */
int vbn_ctx(int link, bool standby, void (*tweak)(vb_ctx_attr_t *a), vb_ctx_t **out);

/* A node named "<role>-<name>", listening on @link (and on the standby
 * link when its context has one) when @listen. 0 or the error (printed). */
int vbn_node(vb_ctx_t *ctx, int link, const char *name, bool listen, vb_node_t **out);

