/* SPDX-License-Identifier: MIT */
/*
 * A lock-free hand-off list between threads: any number of producers add
 * nodes, a consumer takes the whole list at once, oldest first. The
 * pattern of the Linux kernel's llist (include/linux/llist.h: llist_add,
 * llist_del_all, llist_reverse_order): a compare-and-swap to push, an
 * exchange to take everything. There is no single-node pop, so the ABA
 * problem of lock-free stacks cannot arise; two consumers taking at once
 * each get a disjoint part.
 *
 * The command queues between the agents use it (docs/architecture.md,
 * "Threads and their duty cycles"): a producer never waits for the
 * consumer, and neither takes a lock.
 *
 * Intrusive: the node lives in the producer's object, which belongs to the
 * list from vbi_llist_add() until a vbi_llist_take() returns it. No
 * allocation; nothing to initialise beyond zero (an all-zero struct
 * vbi_llist is empty).
 */
#ifndef VERBUS_CORE_LLIST_H
#define VERBUS_CORE_LLIST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct vbi_llnode {
	struct vbi_llnode *next;
};

struct vbi_llist {
	_Atomic(struct vbi_llnode *) first; /* newest first */
};

/* An empty list, as an initializer (all-zero memory is one too). */
#define VBI_LLIST_INIT { NULL }

/* Add @n (any thread; lock-free). Its next pointer is written before the
 * release that publishes it. Returns true when the list was empty before
 * (the consumer may need a wake-up). */
static inline bool vbi_llist_add(struct vbi_llist *h, struct vbi_llnode *n)
{
	struct vbi_llnode *first = atomic_load_explicit(&h->first, memory_order_relaxed);

	do
		n->next = first;
	while (!atomic_compare_exchange_weak_explicit(&h->first, &first, n, memory_order_release,
						      memory_order_relaxed));
	return !first;
}

/* Take every node added so far (any thread; wait-free): a chain linked
 * by next, oldest first (each producer's nodes in the order it added
 * them), or NULL. The nodes are the caller's from now on. */
static inline struct vbi_llnode *vbi_llist_take(struct vbi_llist *h)
{
	struct vbi_llnode *n = atomic_exchange_explicit(&h->first, NULL, memory_order_acquire);
	struct vbi_llnode *oldest = NULL;

	while (n) {
		struct vbi_llnode *next = n->next;

		n->next = oldest;
		oldest = n;
		n = next;
	}
	return oldest;
}

/* Whether nothing waits (a hint: a node may be added right after). */
static inline bool vbi_llist_empty(const struct vbi_llist *h)
{
	return !atomic_load_explicit(&h->first, memory_order_relaxed);
}

/* The object of type @type whose member @member is node @n. */
#define vbi_llist_entry(n, type, member) ((type *)(void *)((char *)(n) - offsetof(type, member)))

#endif /* VERBUS_CORE_LLIST_H */
