/* zscan: helper threads that check an iteration's dirty pages for zeros
 * ahead of the sweep, so the memory reading the zero check costs (one core
 * reads 10-24 GB/s) is spread over cores instead of being done by the
 * driving thread between its posts.
 *
 * The sweep hands out windows in the order it will plan them: a block's
 * pages [first, first + ZS_WINDOW_PAGES) with a copy of their dirty bits
 * (the iteration's sending bitmap is frozen, and only the driving thread
 * touches it).  A helper checks a window's dirty pages and publishes a zero
 * bit per page; the sweep, reaching a page, takes the bit when its window
 * is done and reads the page itself when it is not: it never waits for a
 * helper, and a window it passed before a helper took it is withdrawn.
 *
 * A helper's answer is a snapshot, like the sweep's own: a page written
 * after it was checked was written after the iteration began, so tracking
 * reports it for the next one.
 *
 * Windows are a ring of fixed slots made at start: nothing is allocated
 * while sweeping.  The threads sleep while nothing is queued and stop with
 * the migration (zs_stop). */
#ifndef RDMIG_ZSCAN_H
#define RDMIG_ZSCAN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util.h"

#define ZS_WINDOW_PAGES 2048u   /* 8 MiB of 4 KiB pages */
#define ZS_AHEAD 4u             /* windows queued per helper */
#define ZS_MAX_THREADS 8u
/* Windows with no dirty page one zs_feed call passes over at most, so a
 * call reads a bounded part of a sparse bitmap. */
#define ZS_FEED_SKIP 64u

enum zs_state {
	ZS_FREE,    /* nobody's: the driving thread may fill it */
	ZS_QUEUED,  /* filled, waiting for a helper */
	ZS_BUSY,    /* a helper is checking it */
	ZS_DONE,    /* checked: zero[] holds the answer */
};

struct zs_win {
	_Atomic int state;
	unsigned block;
	uint64_t first, npages;     /* pages of the block */
	const uint8_t *host;        /* the block's memory */
	uint64_t blk_len;
	uint32_t page_size;
	uint64_t dirty[ZS_WINDOW_PAGES / 64];
	uint64_t zero[ZS_WINDOW_PAGES / 64];
};

/* What the sweep plans from: one entry per block. */
struct zs_block {
	const uint8_t *host;
	uint64_t length, npages;
	uint32_t page_size;
	const uint64_t *sending;    /* this iteration's dirty bits */
};

struct zscan {
	struct zs_win *win;
	unsigned nwin;
	uint64_t head, tail;        /* live windows, in sweep order (driver) */
	unsigned next_block;        /* where the next window starts (driver) */
	uint64_t next_page;
	const struct zs_block *blocks;
	unsigned nblocks;
	pthread_t thread[ZS_MAX_THREADS];
	unsigned nthreads;
	pthread_mutex_t lock;       /* with cond: helpers wait for work */
	pthread_cond_t cond;
	unsigned pending;           /* windows queued and not yet claimed */
	atomic_bool stop;
	bool started;
	/* Pages the sweep asked about: answered by a helper, or not. */
	uint64_t hits, misses;
};

/* Starts @threads helpers (1..ZS_MAX_THREADS).  0, or a negative errno
 * with @err set and nothing left running. */
int zs_start(struct zscan *z, unsigned threads, struct rd_err *err);
/* A new iteration over @blocks (kept until the next zs_begin): windows of
 * the last one are withdrawn or, when a helper has them, left to finish
 * unread. */
void zs_begin(struct zscan *z, const struct zs_block *blocks, unsigned nblocks);
/* The sweep is at page @cursor of block @block: windows it passed are
 * retired, and new ones are queued ahead while slots are free. */
void zs_feed(struct zscan *z, unsigned block, uint64_t cursor);
/* 1 when page @page of block @block is zero, 0 when not, -1 when no helper
 * checked it (yet). */
int zs_hint(struct zscan *z, unsigned block, uint64_t page);
/* Stops and joins the helpers; safe on a zeroed or stopped @z. */
void zs_stop(struct zscan *z);
/* How many helpers to run on this machine: one per online CPU but the
 * driving thread's, at most ZS_MAX_THREADS (0 on one CPU). */
unsigned zs_default_threads(void);

#endif
