/* regpool: pin-all's pieces registered on helper threads.
 *
 * Registering is one core's work per piece (pinning every page, then the
 * device's page list: ~0.1 s per GiB of 4 KiB pages on hardware, seconds
 * under TCG), the pieces are independent and ibv_reg_mr is thread-safe, so
 * a large image's pin-all goes as fast as the cores allow rather than one
 * piece per event-loop step.
 *
 * Helpers take the pieces in their global order (an atomic counter) and
 * publish each MR in its slot; the driving thread takes them in the same
 * order (rp_take), so the keys reach the source in the order they did
 * before, and it never waits: a piece not done yet is taken in a later
 * step, and every piece done writes the wake fd.  A failed registration
 * keeps its errno in the piece's slot for the driving thread to report when
 * it gets there (every piece before it was taken by a helper already, so
 * it does), and the helpers take no more.  Nothing is allocated once started; the threads
 * are the library's own and are joined by rp_stop, which also releases the
 * MRs registered but never taken. */
#ifndef RDMIG_REGPOOL_H
#define RDMIG_REGPOOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util.h"

#define RP_MAX_THREADS 8

/* Registers piece @i: its MR in *@mr and 0, or a positive errno. */
typedef int (*rp_reg_fn)(void *ctx, uint64_t i, void **mr);
/* Releases an MR of piece @i that was never taken. */
typedef void (*rp_release_fn)(void *ctx, uint64_t i, void *mr);

struct regpool {
	rp_reg_fn reg;
	rp_release_fn release;
	void *ctx;
	int wake_fd;
	uint64_t n;                /* pieces */
	_Atomic(void *) *mr;       /* one slot per piece: NULL until registered,
				    * and again once taken */
	_Atomic uint64_t next;     /* the next piece a helper takes */
	_Atomic int *err;          /* one per piece: 0, or its positive errno */
	atomic_bool failed;        /* a piece failed: take no more */
	atomic_bool stop;
	pthread_t thread[RP_MAX_THREADS];
	unsigned nthreads;
	bool started;
};

/* Helpers for this machine: one per online CPU (the driving thread only
 * waits meanwhile), at most RP_MAX_THREADS. */
unsigned rp_default_threads(void);

/* Starts @threads helpers (1..RP_MAX_THREADS) over @n pieces on a zeroed
 * @p.  0, or a negative errno with @err set (nothing left running). */
int rp_start(struct regpool *p, uint64_t n, unsigned threads, rp_reg_fn reg,
	     rp_release_fn release, void *ctx, int wake_fd, struct rd_err *err);

/* Piece @i's MR, now the caller's, once a helper registered it; NULL while
 * it is not (yet) registered. */
void *rp_take(struct regpool *p, uint64_t i);

/* Whether piece @i is registered and not taken yet. */
bool rp_ready(const struct regpool *p, uint64_t i);

/* 0, or the positive errno piece @i failed with. */
int rp_failed(const struct regpool *p, uint64_t i);

/* Stops and joins the helpers (a registration in progress finishes), then
 * releases every MR not taken and frees the slots.  Safe on a zeroed,
 * failed or already stopped pool. */
void rp_stop(struct regpool *p);

#endif
