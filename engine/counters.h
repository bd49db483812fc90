/* SPDX-License-Identifier: MIT */
/*
 * The context's counters (ctx->st): one 64-bit atomic each, named as the
 * vb_stats_t field it fills. They live in the counters file when the
 * context has one (proto/statfile.c maps it before anything counts, and
 * core/statfile.h's values section starts with them), so each thread's
 * increment lands in the file at once: the file of a process that crashed
 * holds every count up to its last instruction. Without a file they live
 * in the context (ctx->st_own).
 *
 * Writers: the thread that does the counted thing (an application thread
 * publishing, the progress thread delivering, the maintenance thread
 * recovering), with relaxed atomics: no counter orders anything else.
 * Readers: vb_ctx_stats() and any process that maps the file.
 *
 * Appending a counter: add it at the end of VBI_CTX_COUNTERS (the file's
 * entries keep their positions) with the vb_stats_t field of its name.
 */
#ifndef VERBUS_ENGINE_COUNTERS_H
#define VERBUS_ENGINE_COUNTERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* C(name): only grows. G(name): a level now (a gauge, or a last/max pair). */
#define VBI_CTX_COUNTERS(C, G)                                                               \
	C(published) C(delivered) C(duplicates_dropped) C(gaps) C(lost) C(malformed)         \
	C(sends_posted) C(frames_sent) C(batched_frames) C(inline_sends) C(backpressure)     \
	C(acks_sent) C(acks_received) C(failovers) C(rebuilds) C(path_downs)                 \
	C(retransmits) C(stale_frames) C(lanes_created) C(lanes_retired)                     \
	C(standbys_warmed) G(recover_last_ns) G(recover_max_ns) C(mcast_datagrams)           \
	C(mcast_joins) C(mcast_join_failures) G(mcast_groups) C(degrades) C(promotions)      \
	C(naks_sent) C(naks_received) C(rto_retransmits) C(credit_resyncs) C(probes)         \
	C(unacked_on_close) C(peer_switches) C(keepalives) C(devices_removed)                \
	C(devices_released) C(events_dropped) C(peers_reaped) C(slow_cuts)                   \
	C(slow_cut_msgs) C(streams_ended) C(retain_full) C(pending_dropped) C(refused)       \
	C(auth_refused) C(pool_registrations_progress) C(heartbeats_sent)                    \
	C(lanes_drained) G(drain_last_ns) G(drain_max_ns) C(compact_batches)                 \
	C(handshakes_withdrawn) C(signaled_sends) C(cork_holds)

#define VBI_CTR_FIELD(name) atomic_uint_fast64_t name;
struct vbi_ctx_counters {
	VBI_CTX_COUNTERS(VBI_CTR_FIELD, VBI_CTR_FIELD)
};
#undef VBI_CTR_FIELD

#define VBI_CTR_ONE(name) +1
enum { VBI_CTX_NCOUNTERS = 0 VBI_CTX_COUNTERS(VBI_CTR_ONE, VBI_CTR_ONE) };
#undef VBI_CTR_ONE

/* The file holds them as an array of uint64_t: no padding, 8 bytes each. */
_Static_assert(sizeof(atomic_uint_fast64_t) == sizeof(uint64_t), "counters are 8 bytes");
_Static_assert(sizeof(struct vbi_ctx_counters) == VBI_CTX_NCOUNTERS * sizeof(uint64_t),
	       "struct vbi_ctx_counters has padding");

/* A duration pair of the counters: *@last = @v, *@max raised to @v. Any
 * thread (atomics). */
static inline void vbi_st_last_max(atomic_uint_fast64_t *last, atomic_uint_fast64_t *max,
				   uint64_t v)
{
	uint_fast64_t m = atomic_load_explicit(max, memory_order_relaxed);

	atomic_store_explicit(last, v, memory_order_relaxed);
	while (v > m && !atomic_compare_exchange_weak_explicit(max, &m, v, memory_order_relaxed,
								  memory_order_relaxed))
		;
}

/* Counter @c moved by @n in direction @dir: 1 counts, -1 takes a count
 * back (a SEND counted before its post whose post failed). Any thread. */
static inline void vbi_st_step(atomic_uint_fast64_t *c, int dir, uint64_t n)
{
	/* unsigned wrap-around: -1 * n subtracts n */
	atomic_fetch_add_explicit(c, (uint64_t)(int64_t)dir * n, memory_order_relaxed);
}

/* A SEND counted in @st before it is posted (@dir 1), or taken back when
 * the post failed (@dir -1), @inl when it goes inline, @sig when it is
 * signaled (asks for a completion): a vb_ctx_stats() snapshot taken once
 * the peer has the SEND includes it. Any thread. */
static inline void vbi_st_count_send(struct vbi_ctx_counters *st, bool inl, bool sig, int dir)
{
	if (inl)
		vbi_st_step(&st->inline_sends, dir, 1);
	if (sig)
		vbi_st_step(&st->signaled_sends, dir, 1);
	vbi_st_step(&st->sends_posted, dir, 1);
}

#endif
