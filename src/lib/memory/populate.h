/* populate: a helper thread that makes memory present (faulted in for
 * writing) ahead of the thread that registers it, so pinning does not
 * allocate and clear fresh pages while the link waits.
 *
 * It walks the ranges in order, POP_STEP bytes per madvise(
 * MADV_POPULATE_WRITE) call (Linux 5.14 and later; on older kernels it
 * does nothing and registration populates as before).  The consumer tells
 * it where registration has got to, and it jumps past that: populating
 * behind the consumer would be wasted.  MADV_POPULATE_WRITE never changes
 * a page's contents, so it is safe beside RDMA WRITEs into pages already
 * registered.  A failure (no memory or no space left for a file's pages)
 * is kept for the consumer to report; the wake fd is written so an event
 * loop notices at once. */
#ifndef RDMIG_POPULATE_H
#define RDMIG_POPULATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define POP_STEP (2u << 20)

struct pop_range {
	uint8_t *host;
	uint64_t len;
};

struct populate {
	struct pop_range *ranges;
	unsigned n;
	uint64_t total;
	int wake_fd;
	pthread_t thread;
	bool running;
	atomic_bool stop;
	_Atomic uint64_t floor;  /* the consumer has registered below this */
	_Atomic uint64_t done;   /* the helper has populated below this */
	_Atomic int err;         /* 0, or the helper's negative errno */
	_Atomic uint64_t err_at; /* where it failed (global offset) */
	atomic_bool unsupported; /* the kernel has no MADV_POPULATE_WRITE */
};

/* Starts the helper over copies of @ranges (offsets count across them in
 * order) on a zeroed @p (pop_skip() may come first).  0, or a negative
 * errno with @err set. */
int pop_start(struct populate *p, const struct pop_range *ranges, unsigned n, int wake_fd,
	      struct rd_err *err);
/* The consumer registered everything below global offset @upto. */
void pop_skip(struct populate *p, uint64_t upto);
/* 0 while fine, or the helper's negative errno; *@range and *@off say
 * where it failed. */
int pop_error(const struct populate *p, unsigned *range, uint64_t *off);
/* Stops and joins the helper; safe when never started or already
 * stopped. */
void pop_stop(struct populate *p);

/* Makes [addr, addr + len) present for writing without changing a byte
 * (MADV_POPULATE_WRITE): 0, -EINVAL where the kernel cannot (older than
 * 5.14), or the negative errno (-ENOMEM, -EFAULT: no memory, or no space
 * left for a file's pages). */
int pop_fault_in(void *addr, size_t len);
/* Whether every page of [addr, addr + len) is present (mincore): a write
 * there allocates nothing, except over a private page only read so far
 * (the shared zero page: a 4 KiB copy).  False when it cannot tell. */
bool pop_present(const void *addr, size_t len);

#endif
