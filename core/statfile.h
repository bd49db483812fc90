/* SPDX-License-Identifier: MIT */
/*
 * The counters file's layout (docs/operability.md, "Live counters"): one
 * file per context, <VERBUS_STAT_DIR>/verbus-<pid>-<n>.stat (default
 * directory /dev/shm), read by vb_stat (tools/vb_stat.c) or any program
 * that maps it: readers take no lock of verbus.
 *
 * Writers: the context's counters (the first nlive values) and the QP
 * state-change times are the library's own: the thread that counts
 * writes them in place with an atomic add (engine/counters.h,
 * core/qp_fsm.h), so they are exact to the last event, also in the file
 * of a process that crashed. The rest (levels gathered from several
 * objects, and the peer, lane, publisher and subscriber sections) is
 * sampled by the context's stat thread (proto/statfile.c) every
 * interval_ms, under the seqlock.
 *
 * Fixed and versioned: a reader checks magic and version, and finds each
 * section at the offset the header gives (sections may grow at their end:
 * entry sizes are in the header too). Every number is in the host's byte
 * order; strings are NUL-terminated within their arrays.
 *
 * Consistency: the stat thread makes hdr.seq odd, updates what it samples,
 * then makes seq even again (release ordering). A reader copies what it
 * needs between two reads of an even, equal seq. A writer that died
 * mid-update leaves seq odd for good: the reader reports the copy it gets
 * as torn. The in-place values are single 64-bit atomics: read each with
 * one aligned load, any time.
 *
 * Staleness: pid and start_ticks (field 22 of /proc/<pid>/stat, the
 * process's start in clock ticks since boot) name the process; a file
 * whose pid is gone, or whose pid now has another start time, outlived
 * its process (a crash: a clean vb_ctx_destroy() removes the file). Its
 * counters stay readable.
 */
#ifndef VBI_STATFILE_H
#define VBI_STATFILE_H

#include <stdint.h>

#define VBI_STAT_MAGIC "VBSTAT\x00\x01" /* 8 bytes, with the NUL inside */
#define VBI_STAT_VERSION 2u /* 2: the values written in place */
#define VBI_STAT_NAME 48u  /* vbi_stat_name.name, with its NUL */
#define VBI_STAT_STR 64u   /* peer, node and device names in the file */

enum vbi_stat_kind {
	VBI_STAT_COUNTER = 0, /* only ever grows (Prometheus "counter") */
	VBI_STAT_GAUGE = 1,   /* a level now */
};

enum vbi_stat_writer {
	VBI_STAT_LIVE = 0,    /* the counting thread, in place, at once */
	VBI_STAT_SAMPLED = 1, /* the stat thread, every interval_ms */
};

struct vbi_stat_hdr {
	char magic[8];            /* VBI_STAT_MAGIC */
	uint32_t version;         /* VBI_STAT_VERSION */
	uint32_t hdr_size;        /* sizeof(struct vbi_stat_hdr) of the writer */
	uint64_t file_size;
	int32_t pid;
	uint32_t ctx_no;          /* the n of the file name: contexts of the process */
	uint64_t start_ticks;     /* the process's start (see above) */
	uint64_t created_ns;      /* CLOCK_REALTIME, when the context was created */
	uint32_t interval_ms;     /* the writer updates this often (VERBUS_STAT_MS) */
	uint32_t name_size, peer_size, lane_size; /* entry sizes of the sections */
	uint32_t nvals;           /* values, and their names (fixed) */
	uint32_t nlive;           /* the first nlive values: VBI_STAT_LIVE */
	uint32_t max_peers, max_lanes; /* capacity of those sections */
	uint32_t pub_size, sub_size, qpt_size;
	uint32_t max_pubs, max_subs;
	uint32_t nqps;            /* QP states: the QP timing section has
				   * nqps x nqps entries, [from][to] */
	uint64_t names_off, vals_off, peers_off, lanes_off, pubs_off, subs_off, qpt_off;
	char lib_version[VBI_STAT_STR];
	char progname[64];        /* the process's name (/proc/self/comm) */
	char device[VBI_STAT_STR], standby_device[VBI_STAT_STR]; /* "" = none */
	/* ---- written by the stat thread under seq (and the sampled parts of
	 * the sections below) ---- */
	uint64_t seq;             /* odd: an update is under way */
	uint64_t updated_ns;      /* CLOCK_REALTIME of the last update */
	uint64_t updates;         /* updates made */
	uint32_t npeers, nlanes;  /* entries in use in those sections */
	uint32_t npubs, nsubs;    /* slots in use (written when one is taken
				   * or given back) */
	uint32_t closing;         /* 1: vb_ctx_destroy() is removing the file */
	uint32_t truncated;       /* 1: more peers, lanes, publishers or
				   * subscribers than the sections hold */
};

/* The values section: uint64_t values[nvals], one per vb_stats_t field
 * (err_by_action[i] as "err_action_<NAME>"), named by the names section,
 * names[nvals] (written once, before the file is in use). */
struct vbi_stat_name {
	char name[VBI_STAT_NAME];
	uint8_t kind;             /* enum vbi_stat_kind */
	uint8_t writer;           /* enum vbi_stat_writer */
	uint8_t pad[6];
};

/* one per peer of every node of the context */
struct vbi_stat_peer {
	char node[VBI_STAT_STR], name[VBI_STAT_STR];
	uint8_t up, dead, recovering, connector;
	uint8_t mode, policy_mode; /* enum vb_qp_type (RC 0, UC 1, UD 2): the
				    * active lane's, and where its policy is */
	uint8_t has_standby, pad;
	uint32_t epoch;            /* path epoch: bumped by each lane switch */
	uint32_t active_lane;      /* its id, 0: none */
	uint64_t failures, failovers, degradations, promotions, downs, recoveries;
	uint64_t last_outage_ns, max_outage_ns; /* failure -> traffic again */
	uint64_t backpressured;    /* publishes refused while it recovered */
	uint64_t retransmits;      /* messages resent to it (lane switch, NAK, timeout) */
	uint64_t last_failure_ns;  /* CLOCK_REALTIME of its last lane failure, 0: none */
	uint32_t last_failure_lane;
	uint32_t pad2;
	char last_failure[VBI_STAT_STR]; /* its reason ("" : none) */
	char last_action[VBI_STAT_STR];  /* the recovery action taken (errpolicy) */
};

/* one per lane (connection) bound to those peers */
struct vbi_stat_lane {
	char peer[VBI_STAT_STR], device[VBI_STAT_STR];
	uint32_t id, qpn;
	uint8_t mode;              /* enum vb_qp_type */
	uint8_t qp_state;          /* enum vb_qp_state (RESET 0 .. ERR 6) */
	uint8_t active, dead, retiring, hello, pad[2];
	uint32_t credits;          /* SENDs it may post (the remote's free slots) */
	uint32_t sq_outstanding, sq_depth; /* send WRs in flight / ring size */
	uint32_t recvs;            /* receive WRs posted */
	uint64_t sends;            /* SENDs posted on it */
};

/* A slot per publisher, taken when it is created and given back when it
 * is freed (in_use, as a subscriber's). backpressure is written in place
 * by the publishing threads; the rest is its window's state, sampled by
 * the stat thread under seq. */
struct vbi_stat_pub {
	char node[VBI_STAT_STR], topic[VBI_STAT_STR];
	uint8_t cls;               /* vb_class_t: 0 ORDERED, 1 FANOUT */
	uint8_t in_use;
	uint8_t pad[2];
	uint32_t subscribers;
	uint64_t published;        /* its last sequence number */
	uint64_t acked;            /* ORDERED: acknowledged by every subscriber */
	uint64_t quorum_acked;     /* ORDERED with ack_quorum k: by k of them */
	uint32_t ack_quorum, window; /* k (0: off); window capacity */
	uint64_t inflight;         /* ORDERED: sent, not acknowledged by all */
	uint64_t retained_bytes;   /* ORDERED: payload bytes kept for them */
	uint64_t backpressure;     /* -EAGAIN returned to its publishers */
};

/* A slot per subscriber (vb_sub_stats_t), taken when it is created and
 * given back when it is freed: in_use 1 while it is (a reader shows the
 * slots in use, in any order). Its counters are written in place by the
 * threads that count (the subscriber's vbi_sub_ctr, proto/proto.h). */
struct vbi_stat_sub {
	char node[VBI_STAT_STR], topic[VBI_STAT_STR];
	uint8_t cls;
	uint8_t in_use;
	uint8_t pad[6];
	uint64_t delivered, duplicates, gaps, lost, publishers, ends;
	uint64_t acked;            /* ORDERED: the latest ACK's sequence */
};

/* QP state changes of the context's devices, written in place by the
 * modifying thread: entry [from * nqps + to] (RESET 0, INIT 1, RTR 2,
 * RTS 3, SQD 4, SQE 5, ERR 6; from == to: an attribute change in place).
 * Histogram: VBI_QPT_HIST buckets of core/qp_fsm.h (0: under 1 us; i:
 * [2^(i-1), 2^i) us; the last: 16.384 ms and more). The same layout as
 * struct vbi_qp_timing_cell. */
#define VBI_STAT_QPT_HIST 16
struct vbi_stat_qpt {
	uint64_t n, total_ns, max_ns, last_ns;
	uint64_t hist[VBI_STAT_QPT_HIST];
};

/* Field 22 (start time, clock ticks since boot) and field 3 (state: R,
 * S, ... Z for a zombie) of /proc/<@pid>/stat (0: this process). 0, or -1
 * when there is no such process or the file cannot be read. @state may be
 * NULL. Any thread. */
int vbi_proc_start(int pid, uint64_t *start_ticks, char *state);

#endif
