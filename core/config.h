/* SPDX-License-Identifier: MIT */
/*
 * The one configuration table: every VERBUS_* environment variable the
 * library reads, declared once (core/config.c) with its type, default,
 * range, a one-line doc and the field it fills. Every getenv() of a
 * VERBUS_* variable in the library goes through it: the attr_init
 * functions take their defaults and overrides from it, the create functions
 * check the environment with it, README.md's table is generated from it
 * (vbi_cfg_markdown(); tests/unit/config_test checks the two agree) and
 * `vb_bench config` prints it with the values in force (vbi_cfg_dump()).
 *
 * Values: empty or unset is "unset" (the default). Integers are decimal or
 * 0x hex; VBI_CFG_UINT and VBI_CFG_SIZE take an optional k, m or g suffix
 * (x 1024, 1024^2, 1024^3), VBI_CFG_MS an optional "ms"; surrounding white
 * space is ignored. Booleans are 0/1, off/on, no/yes, false/true; enum
 * names are case-insensitive. A value that does not parse, or is out of its
 * row's range, is malformed: the error names the variable, the value (never
 * a secret's) and what is allowed.
 *
 * Thread-safety: every function reads the table (constant) and the
 * environment (getenv(), environ): any thread may call any of them at any
 * time, but not concurrently with setenv()/putenv()/unsetenv() (as for
 * getenv() itself). Errors go to the calling thread's message (vbi_err()).
 */
#ifndef VERBUS_CORE_CONFIG_H
#define VERBUS_CORE_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One id per variable; the table's row is named VERBUS_<id without VBI_CFG_>. */
enum vbi_cfg_id {
	/* the context: vb_ctx_attr_init() */
	VBI_CFG_DEVICE,
	VBI_CFG_IP,
	VBI_CFG_PROGRESS,
	VBI_CFG_PROGRESS_SPIN,
	VBI_CFG_IDLE,
	VBI_CFG_IDLE_SPIN_US,
	VBI_CFG_MSG_RATE,
	VBI_CFG_LATENCY_MS,
	VBI_CFG_MAX_MSG,
	VBI_CFG_SLOT_SIZE,
	VBI_CFG_POOL_CAP,
	VBI_CFG_MAX_PEERS,
	VBI_CFG_WINDOW,
	VBI_CFG_CM_TIMEOUT_MS,
	VBI_CFG_BATCH,
	VBI_CFG_STANDBY,
	VBI_CFG_STANDBY_DEVICE,
	VBI_CFG_STANDBY_IP,
	VBI_CFG_MCAST,
	VBI_CFG_MCAST_PREFIX,
	VBI_CFG_KEEPALIVE_MS,
	VBI_CFG_MAX_PENDING,
	VBI_CFG_AUTH_KEY,
	VBI_CFG_AUTH_KEY_FILE,
	/* nodes and publishers: vb_node_attr_init(), vb_pub_attr_init() */
	VBI_CFG_NODE_NAME,
	VBI_CFG_SLOW_SUB,
	VBI_CFG_SLOW_SUB_MS,
	VBI_CFG_RETAIN_BYTES,
	/* internal: the log, recovery, lanes, connections, the memory pool */
	VBI_CFG_LOG_LEVEL,
	VBI_CFG_DEGRADE_FAILURES,
	VBI_CFG_DEGRADE_WINDOW_MS,
	VBI_CFG_PROMOTE_HOLD_MS,
	VBI_CFG_PROMOTE_HOLD_MAX_MS,
	VBI_CFG_PROMOTE_RELAPSE_MS,
	VBI_CFG_PROMOTE_PROBES,
	VBI_CFG_PROMOTE_DIRECT,
	VBI_CFG_RECOVERY_QUEUE,
	VBI_CFG_RTO_MS,
	VBI_CFG_ACK_DELAY_MS,
	VBI_CFG_FLUSH_BURST,
	VBI_CFG_FAILOVER_QUIET_MS,
	VBI_CFG_QP_TIMEOUT,
	VBI_CFG_QP_RETRY_CNT,
	VBI_CFG_QP_RNR_RETRY,
	VBI_CFG_QP_MIN_RNR_TIMER,
	VBI_CFG_UD_QKEY,
	VBI_CFG_MEMPOOL_CHUNK,
	VBI_CFG_MEMPOOL_CAP,
	VBI_CFG_STAT_DIR,
	VBI_CFG_STAT_MS,
	/* test hooks (read by the library, set by the tests) */
	VBI_CFG_TEST_DROP_EVERY,
	VBI_CFG_TEST_CBQ_ENOMEM,
	/* no longer read: set, they are warned about */
	VBI_CFG_BATCH_US,
	VBI_CFG__COUNT
};

enum vbi_cfg_type {
	VBI_CFG_STR,     /* text */
	VBI_CFG_SECRET,  /* text that is never printed ("(set)") */
	VBI_CFG_UINT,    /* an integer, min..max */
	VBI_CFG_SIZE,    /* bytes, min..max */
	VBI_CFG_MS,      /* milliseconds, min..max */
	VBI_CFG_DOUBLE,  /* a finite number, dmin < value <= dmax */
	VBI_CFG_BOOL,    /* 0 or 1 */
	VBI_CFG_ENUM,    /* one of names[]: the value is its index */
	VBI_CFG_GONE,    /* no longer read (doc says what replaced it) */
	VBI_CFG__TYPES
};

#define VBI_CFG_F_TEST 1u /* a test hook: not for production */

/* A row of the table. */
struct vbi_cfg_var {
	const char *name;         /* "VERBUS_..." */
	enum vbi_cfg_type type;
	const char *dflt;         /* the default as text, parsed like a value;
				   * NULL: no default value (unset says what then) */
	const char *unset;        /* with dflt NULL: what unset means */
	uint64_t min, max;        /* UINT, SIZE, MS (inclusive) */
	uint64_t mult;            /* UINT, SIZE: a multiple of this (0: any) */
	double dmin, dmax;        /* DOUBLE */
	const char *const *names; /* ENUM: NULL-terminated */
	unsigned flags;           /* VBI_CFG_F_* */
	const char *field;        /* what it fills ("vb_ctx_attr_t.window") */
	const char *doc;          /* one line */
};

/* A parsed value: u for the integer types, BOOL (0/1) and ENUM (the
 * index); d for DOUBLE; s for STR and SECRET (points into the environment
 * or at the table's default). */
union vbi_cfg_val {
	uint64_t u;
	double d;
	const char *s;
};

/* The row of @id; NULL for an id outside the table. */
const struct vbi_cfg_var *vbi_cfg_var(enum vbi_cfg_id id);

/* The row named @name (its first @len bytes; the whole name: the name is
 * "VERBUS_..." up to '=' or its end); NULL when the table has none. */
const struct vbi_cfg_var *vbi_cfg_find(const char *name, size_t len);

/* "unsigned", "size", ... for the dump and the docs ("?" past the last). */
const char *vbi_cfg_type_name(enum vbi_cfg_type t);

/* What row @v allows, as text ("16..1048576", "thread, app", "1k..1m, a
 * multiple of 64") into @buf of @len bytes; returns @buf. */
char *vbi_cfg_range(const struct vbi_cfg_var *v, char *buf, size_t len);

/* Parse @s as a value of @id (the environment is not read): 0 and *@out;
 * -EINVAL when @s is malformed or out of range, with the reason in @why
 * ("VERBUS_WINDOW=8: out of range (unsigned 16..1048576)"; @why may be NULL)
 * and *@out untouched. An empty @s is malformed here (unset is the
 * environment's business). Sets no thread message and logs nothing. */
int vbi_cfg_parse(enum vbi_cfg_id id, const char *s, union vbi_cfg_val *out, char *why,
		  size_t len);

/* Read @id from the environment: 0 (set and valid: *@out the value), 1
 * (unset or empty: *@out untouched) or -EINVAL (malformed: the reason in
 * @why, *@out untouched). Logs nothing, sets no thread message: for callers
 * that must not (the log itself). */
int vbi_cfg_read(enum vbi_cfg_id id, union vbi_cfg_val *out, char *why, size_t len);

/*
 * The value in force of @id, for the attr_init functions: 0 (the
 * environment's value), 1 (unset: the row's default) or -EINVAL (malformed:
 * the row's default; the error is logged and is the thread's message).
 * With no default in the row (dflt NULL) *@out is left as it is when 1 or
 * -EINVAL. The typed forms convert: vbi_cfg_unsigned() is for rows whose max
 * fits an unsigned, vbi_cfg_int() for those whose max fits an int.
 */
int vbi_cfg_get(enum vbi_cfg_id id, union vbi_cfg_val *out);
int vbi_cfg_u64(enum vbi_cfg_id id, uint64_t *out);
int vbi_cfg_unsigned(enum vbi_cfg_id id, unsigned *out);
int vbi_cfg_int(enum vbi_cfg_id id, int *out);
int vbi_cfg_size(enum vbi_cfg_id id, size_t *out);
int vbi_cfg_double(enum vbi_cfg_id id, double *out);
int vbi_cfg_str(enum vbi_cfg_id id, const char **out);
/* A duration row in milliseconds (a *_MS variable), in nanoseconds: its
 * value in force as vbi_cfg_u64() gives it (0 when unset with no default).
 * Any thread. */
uint64_t vbi_cfg_ms_ns(enum vbi_cfg_id id);
/* An integer row (UINT or MS) read once per process: the first call takes
 * its value as vbi_cfg_u64() gives it (a malformed one: the default, and
 * the error logged once), every later call returns that, whatever the
 * environment says since. For what the hot paths read (a timer, a test
 * hook); what a create function reads stays per object. Any thread; two
 * first calls at once both read it, the same value. Inline after the
 * first call (a load): the hot paths call it per message. */
extern _Atomic uint64_t vbi_cfg_once_[VBI_CFG__COUNT]; /* value + 1; 0: not read yet */
uint64_t vbi_cfg_u64_once_slow(enum vbi_cfg_id id);
static inline uint64_t vbi_cfg_u64_once(enum vbi_cfg_id id)
{
	uint64_t v = atomic_load_explicit(&vbi_cfg_once_[id], memory_order_relaxed);

	return v ? v - 1 : vbi_cfg_u64_once_slow(id);
}

/* For the create functions: 0 when @id is unset or valid; -EINVAL with the
 * thread's message naming it, its value and the range when malformed
 * (nothing is logged: the caller returns the error). */
int vbi_cfg_check(enum vbi_cfg_id id);

/*
 * Check the whole environment (vb_ctx_create() does, before anything else):
 * every set VERBUS_* variable of the table is parsed; the first malformed
 * one is the error (-EINVAL, the thread's message names it, its value and
 * the range, and the others that are malformed too). A VERBUS_* variable
 * that is not in the table is logged as a warning (with the closest known
 * name), unless the test harness reads it (tests/, scripts/: the list in
 * core/config.c); one that is no longer read is warned about. Returns 0 or
 * -EINVAL.
 */
int vbi_cfg_check_env(void);

/* The dump (`vb_bench config`, later `vb_stat --config`). */
#define VBI_CFG_DUMP_DOC 1u /* a comment line before each: doc, type, range, field */

/*
 * Write every variable to @f, one line each, like `ucx_info -c`:
 *   VERBUS_WINDOW=4096    # default
 *   VERBUS_WINDOW=8192    # set (default 4096)
 *   VERBUS_WINDOW=4096    # malformed 'x': ... (default in force)
 * the value in force first (a secret's as "(set)"), then VERBUS_* variables
 * of the environment the table does not know (names only). @flags:
 * VBI_CFG_DUMP_*. Returns 0, or -EIO when writing failed.
 */
int vbi_cfg_dump(FILE *f, unsigned flags);

/* Write README.md's table of the variables (markdown) to @f: the text
 * between README's markers, which tests/unit/config_test compares with it.
 * Returns 0, or -EIO when writing failed. */
int vbi_cfg_markdown(FILE *f);

#endif
