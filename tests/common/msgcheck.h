/* SPDX-License-Identifier: MIT */
/*
 * Self-checking test messages: a 24-byte header (magic, stream, counter,
 * length) and a body that is a function of (stream, counter), checked byte
 * for byte, so a receiver can prove each message is intact, in order, not
 * missing and not duplicated, without sharing state with the sender.
 */
#ifndef VERBUS_TESTS_MSGCHECK_H
#define VERBUS_TESTS_MSGCHECK_H

#include <stddef.h>
#include <stdint.h>

#define VBT_MSG_MIN 24u

/* Fill @buf with message @counter of @stream. Messages shorter than
 * VBT_MSG_MIN carry only body bytes (the receiver must know the ids). */
void vbt_msg_fill(void *buf, size_t len, uint32_t stream, uint64_t counter);

/* Read the ids of a message of at least VBT_MSG_MIN bytes: 0, or -1. */
int vbt_msg_peek(const void *buf, size_t len, uint32_t *stream, uint64_t *counter);

/* 0 when @buf is exactly message @counter of @stream; -1 with *@why. */
int vbt_msg_verify(const void *buf, size_t len, uint32_t stream, uint64_t counter,
		   const char **why);

/* Deterministic length for message @counter of @stream in [lo, hi]. */
size_t vbt_msg_len(uint32_t stream, uint64_t counter, size_t lo, size_t hi);

/* VERBUS_TEST_SCALE (default 1) times @n, at least 1. */
uint64_t vbt_scaled(uint64_t n);

#endif
