/* arena: a bump allocator protobuf-c unpacks into, so that decoding a
 * control message on the data path calls malloc zero times.
 *
 * One buffer, allocated once with the control channel, hands out 16-byte
 * aligned pieces; freeing a piece of it does nothing, and the whole buffer
 * is handed out again once no decoded message lives in it any more.  A piece
 * that does not fit comes from malloc and goes back to free, so the arena's
 * size bounds only the common case, never what can be decoded (a big block
 * map at setup, a STATE under a huge ctrl_msg_max).
 *
 * Under AddressSanitizer or valgrind the parts not handed out are poisoned,
 * so overruns between pieces and use after the arena is reused are caught
 * as they would be with malloc. */
#ifndef RDMIG_ARENA_H
#define RDMIG_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "util.h"

struct arena {
	ProtobufCAllocator pc;  /* what protobuf-c is given */
	uint8_t *buf;
	size_t size;            /* a multiple of 16 */
	size_t used;            /* handed out since the last reuse */
	unsigned holders;       /* messages living in buf (or being decoded) */
	uint64_t fallbacks;     /* pieces that did not fit and came from malloc */
};

/* Allocates @size bytes (rounded down to 16).  0 or -ENOMEM. */
int arena_init(struct arena *a, size_t size, struct rd_err *err);
/* Frees the buffer; accepts a zeroed arena.  Messages must be freed first. */
void arena_fini(struct arena *a);

/* A message is about to be decoded into @a, and will live there until the
 * matching arena_release(); the buffer is reused only once every holder has
 * let go, so a message still in use is never overwritten. */
void arena_hold(struct arena *a);
void arena_release(struct arena *a);

/* Whether @p is a piece of @a's buffer (rather than from the fallback). */
bool arena_owns(const struct arena *a, const void *p);

#endif
