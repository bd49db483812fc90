/* SPDX-License-Identifier: MIT */
/*
 * The lock-free hand-off list of the agents' command queues (core/llist.h).
 * One thread: what goes in comes out once, oldest first, and add() says
 * when the list was empty. Many threads: 4 producers add 50,000 nodes each
 * while one consumer (then two) take concurrently; every node must come
 * out exactly once, and each producer's nodes in the order it added them
 * (within a consumer's take). Under TSan this is also the check that the
 * node's link is published by the add's release and read after the take's
 * acquire.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/llist.h"

#define PRODUCERS 4
#define PER_PRODUCER 50000

struct item {
	unsigned producer, i;
	struct vbi_llnode node;
};

static void test_one_thread(void **state)
{
	struct vbi_llist h = VBI_LLIST_INIT;
	struct item it[5];
	struct vbi_llnode *n;
	unsigned k = 0;

	(void)state;
	assert_true(vbi_llist_empty(&h));
	assert_null(vbi_llist_take(&h));
	for (unsigned i = 0; i < 5; i++) {
		it[i].i = i;
		/* only the first add finds the list empty */
		assert_int_equal(vbi_llist_add(&h, &it[i].node), i == 0);
	}
	assert_false(vbi_llist_empty(&h));
	for (n = vbi_llist_take(&h); n; n = n->next, k++)
		assert_int_equal(vbi_llist_entry(n, struct item, node)->i, k);
	assert_int_equal(k, 5);
	assert_true(vbi_llist_empty(&h));
	assert_null(vbi_llist_take(&h));
	/* and again, once emptied */
	assert_true(vbi_llist_add(&h, &it[3].node));
	assert_false(vbi_llist_add(&h, &it[1].node));
	n = vbi_llist_take(&h);
	assert_ptr_equal(n, &it[3].node);
	assert_ptr_equal(n->next, &it[1].node);
	assert_null(n->next->next);
}

struct run {
	struct vbi_llist h;
	struct item *items;          /* PRODUCERS x PER_PRODUCER */
	atomic_uint seen_count;
	atomic_uchar *seen;          /* per item: times taken */
	atomic_uint producers_done;
	atomic_uint bad_order;
};

struct prod_arg {
	struct run *r;
	unsigned id;
};

static void *producer(void *arg)
{
	struct prod_arg *a = arg;
	struct item *mine = a->r->items + (size_t)a->id * PER_PRODUCER;

	for (unsigned i = 0; i < PER_PRODUCER; i++) {
		mine[i].producer = a->id;
		mine[i].i = i;
		vbi_llist_add(&a->r->h, &mine[i].node);
	}
	atomic_fetch_add(&a->r->producers_done, 1);
	return NULL;
}

/* Take until every node was seen; each take's nodes of a producer must
 * come in the order it added them. */
static void *consumer(void *arg)
{
	struct run *r = arg;
	const unsigned total = PRODUCERS * PER_PRODUCER;

	while (atomic_load(&r->seen_count) < total) {
		long last[PRODUCERS];
		struct vbi_llnode *n = vbi_llist_take(&r->h);

		for (unsigned p = 0; p < PRODUCERS; p++)
			last[p] = -1;
		while (n) {
			struct vbi_llnode *next = n->next; /* read before the node is counted */
			struct item *it = vbi_llist_entry(n, struct item, node);
			size_t idx = (size_t)it->producer * PER_PRODUCER + it->i;

			if ((long)it->i <= last[it->producer])
				atomic_fetch_add(&r->bad_order, 1);
			last[it->producer] = it->i;
			atomic_fetch_add(&r->seen[idx], 1);
			atomic_fetch_add(&r->seen_count, 1);
			n = next;
		}
		if (atomic_load(&r->producers_done) == PRODUCERS && vbi_llist_empty(&r->h))
			break;
	}
	return NULL;
}

static void run_with(unsigned nconsumers)
{
	const unsigned total = PRODUCERS * PER_PRODUCER;
	struct run r = { .h = VBI_LLIST_INIT };
	struct prod_arg pa[PRODUCERS];
	pthread_t pt[PRODUCERS], ct[2];
	unsigned twice = 0, never = 0;

	r.items = calloc(total, sizeof(*r.items));
	r.seen = calloc(total, sizeof(*r.seen));
	assert_non_null(r.items);
	assert_non_null(r.seen);
	for (unsigned c = 0; c < nconsumers; c++)
		assert_int_equal(pthread_create(&ct[c], NULL, consumer, &r), 0);
	for (unsigned p = 0; p < PRODUCERS; p++) {
		pa[p] = (struct prod_arg){ &r, p };
		assert_int_equal(pthread_create(&pt[p], NULL, producer, &pa[p]), 0);
	}
	for (unsigned p = 0; p < PRODUCERS; p++)
		pthread_join(pt[p], NULL);
	for (unsigned c = 0; c < nconsumers; c++)
		pthread_join(ct[c], NULL);
	for (unsigned k = 0; k < total; k++) {
		unsigned s = atomic_load(&r.seen[k]);

		twice += s > 1;
		never += s == 0;
	}
	print_message("%u consumer(s): %u nodes taken, %u never, %u more than once, %u out of "
		      "order\n", nconsumers, atomic_load(&r.seen_count), never, twice,
		      atomic_load(&r.bad_order));
	assert_int_equal(never, 0);
	assert_int_equal(twice, 0);
	assert_int_equal(atomic_load(&r.seen_count), total);
	assert_int_equal(atomic_load(&r.bad_order), 0);
	assert_true(vbi_llist_empty(&r.h));
	free(r.items);
	free(r.seen);
}

static void test_producers_one_consumer(void **state)
{
	(void)state;
	run_with(1);
}

static void test_producers_two_consumers(void **state)
{
	(void)state;
	run_with(2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_thread),
		cmocka_unit_test(test_producers_one_consumer),
		cmocka_unit_test(test_producers_two_consumers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
