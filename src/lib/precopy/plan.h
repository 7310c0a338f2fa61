/* Turns a block's dirty-page bitmap into the operations one pre-copy pass
 * sends: merged RDMA WRITEs of data pages, ZERO ranges for pages that became
 * zero, and skipped runs the destination already holds as zero. */
#ifndef RDMIG_PLAN_H
#define RDMIG_PLAN_H

#include <stdbool.h>
#include <stdint.h>

enum plan_kind {
	PLAN_WRITE = 1, /* RDMA WRITE of non-zero pages, inside one chunk */
	PLAN_ZERO,      /* the destination clears the range (ZERO_RANGES) */
	PLAN_SKIP,      /* zero pages the destination already holds as zero */
};

struct plan_params {
	unsigned chunk_shift; /* chunk size = 1 << chunk_shift, >= page_size */
	uint64_t merge_max;   /* max bytes of one WRITE: a multiple of page_size */
	uint32_t page_size;   /* the block's page size, a power of two */
	bool detect_zero;     /* ZERO_PAGES negotiated: look for zero pages */
	bool dest_zeroed;     /* the destination's block started all zero */
	uint64_t max_zero_pages; /* ZERO and SKIP runs end after this many pages,
				  * so one call reads a bounded amount (0: no
				  * bound) */
	/* NULL, or what a helper already found for a page (zscan.h): 1 zero,
	 * 0 not, -1 unknown (the page is read here then). */
	int (*zero_hint)(void *ctx, uint64_t page);
	void *hint_ctx;
};

struct plan_op {
	enum plan_kind kind;
	uint64_t offset, length; /* bytes within the block */
	uint64_t pages;          /* pages covered, the last maybe partial */
	uint64_t chunk;          /* chunk holding @offset */
};

/* Consumes the next run of dirty pages of one block at or after page
 * *cursor: clears their bits in @dirty, advances *cursor past them and
 * describes them in *op.  A run is one kind:
 *  - PLAN_WRITE: contiguous dirty pages that are not all zero (or every
 *    dirty page when !detect_zero), never crossing a chunk boundary, at most
 *    merge_max bytes (at least one page);
 *  - PLAN_ZERO: contiguous dirty all-zero pages the destination must clear;
 *    may cross chunks, since nothing is registered for it;
 *  - PLAN_SKIP: contiguous dirty all-zero pages whose bit in @written is
 *    clear while dest_zeroed: the destination holds them as zero already.
 * @written (one bit per page, never NULL) records what the destination may
 * hold: set for WRITE pages, cleared for ZERO pages, so a page written once
 * and zero later is cleared explicitly rather than skipped.
 * @host is the block's memory, read only when detect_zero.  The last page
 * may be partial: lengths are clipped to @blk_len.
 * Returns 1 with *op, or 0 when no dirty page is left at or after *cursor.
 * The page that ends a run by being of another kind is read again by the
 * next call: 16 bytes for a data page, a cache hit for a zero one (measured:
 * planning a 90%-zero GiB runs at the speed of zero_is_zero alone). */
int plan_next(const struct plan_params *p, const uint8_t *host, uint64_t blk_len,
	      uint64_t *dirty, uint64_t *written, uint64_t *cursor, struct plan_op *op);

#endif
