/* pcset: what post-copy needs to know before the destination's guest
 * runs, as it crosses the wire, checked.
 *
 * The page set: the pages the destination does not hold as of the pause
 * (marked since the last round, or never sent), in POSTCOPY_RANGES: ranges
 * of pages of one block each, block by block in ascending order and never
 * overlapping, so that a set takes at most as many ranges as it has pages
 * and a receiver checks each range against the one before it and its
 * block alone.  The source cuts its bitmaps into ranges from a cursor, a
 * message's worth at a time (pcset_cut); the destination takes each
 * message's ranges into its own bitmaps (pcset_take), all of a message
 * checked before any is applied.
 *
 * The keys: where the destination may read each piece of each block of the
 * source's memory, in POSTCOPY_KEYS (pckeys_take): every piece of every
 * block once, before post-copy begins (pckeys_complete).
 *
 * Pure: no verbs, no protobuf (the callers hand over the parallel arrays
 * protobuf-c unpacked), so both are unit-tested and fuzzed alone. */
#ifndef RDMIG_PCSET_H
#define RDMIG_PCSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* ---- the source: bitmaps into ranges ---- */

struct pcset_cursor {
	unsigned block;         /* == nblocks once every block was cut */
	uint64_t page;          /* the next page of that block to look at */
};

/* Up to @max ranges of the pages set in @bm[b] (of @npages[b] bits), from
 * @c on, into the parallel arrays; advances @c past them and adds their
 * pages to *@pages.  Each range is a whole run of set bits, so the ranges
 * of consecutive calls are in order and do not touch.  Returns the number
 * of ranges (0 once the cursor is at the end). */
size_t pcset_cut(const uint64_t *const *bm, const uint64_t *npages, unsigned nblocks,
		 struct pcset_cursor *c, uint32_t *block, uint64_t *first, uint64_t *count,
		 size_t max, uint64_t *pages);

/* ---- the destination: ranges into bitmaps ---- */

struct pcset_rx {
	unsigned nblocks;
	const uint64_t *npages;     /* per block */
	uint64_t **set;             /* per block: the pages of the set */
	/* Where the last range taken ended: the next must begin after it. */
	unsigned end_block;
	uint64_t end_page;
	bool any;
	uint64_t pages;             /* in the set so far */
};

/* Ready to take a set into the zeroed bitmaps @set of blocks of @npages
 * pages. */
void pcset_rx_init(struct pcset_rx *rx, unsigned nblocks, const uint64_t *npages,
		   uint64_t **set);
/* One message's @n ranges: each in a block that exists, at least one
 * page, inside the block (overflow-safe), after the end of the one before
 * (across messages too).  All are checked before any is set.  0, or
 * -EPROTO with @err naming the range and why. */
int pcset_take(struct pcset_rx *rx, const uint32_t *block, const uint64_t *first,
	       const uint64_t *count, size_t n, struct rd_err *err);

/* ---- the keys ---- */

/* Pieces are 1 << shift bytes of a block, from its start; the last may be
 * shorter.  At least 1 MiB: what the keys cost the destination (12 bytes a
 * piece) stays a thousandth of a percent of the image it admitted. */
#define PCKEYS_SHIFT_MIN 20
#define PCKEYS_SHIFT_MAX 30

struct pckeys {
	unsigned nblocks;
	const uint64_t *length;     /* per block, bytes */
	unsigned shift;             /* 0 until the first message fixed it */
	uint64_t *first_piece;      /* per block: its first piece's index in the arrays */
	uint64_t npieces;           /* in all blocks */
	uint64_t *addr;             /* per piece: the source's address of its first byte */
	uint32_t *rkey;
	uint64_t *seen;             /* bitmap over the pieces */
	uint64_t got;
};

/* Ready for the keys of blocks of @length bytes; allocates nothing until
 * the first message says the pieces' size. */
void pckeys_init(struct pckeys *k, unsigned nblocks, const uint64_t *length);
/* One message: the piece size (the same in every message, in
 * PCKEYS_SHIFT_MIN..PCKEYS_SHIFT_MAX), then for each entry a block that
 * exists, a piece inside it, never a piece twice, and an address whose
 * piece does not wrap around the address space.  All are checked before
 * any is kept.  0, -EPROTO with @err naming the entry, or -ENOMEM. */
int pckeys_take(struct pckeys *k, unsigned shift, const uint32_t *block, const uint64_t *piece,
		const uint64_t *addr, const uint32_t *rkey, size_t n, struct rd_err *err);
/* Every piece of every block has its key. */
bool pckeys_complete(const struct pckeys *k);
/* Where byte @off of block @b is at the source, and its piece's key; and
 * how many bytes from there stay in that piece.  The keys must be
 * complete. */
uint64_t pckeys_at(const struct pckeys *k, unsigned b, uint64_t off, uint32_t *rkey,
		   uint64_t *left);
void pckeys_fini(struct pckeys *k);

#endif
