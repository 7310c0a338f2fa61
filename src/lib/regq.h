/* regq: memory registrations done by a helper thread, so that no step of
 * the driving thread waits for one.
 *
 * Pinning costs what the kernel makes it cost: faulting pages in, breaking
 * copy-on-write, zeroing fresh pages; over Soft-RoCE under emulation a
 * 1 MiB registration took 12 ms and a 16 MiB pin-all piece 150 ms, where a
 * step has 10 ms.  Both roles queue every registration they need during a
 * migration here (pin-all pieces, dynamic chunks, the device-state rings)
 * and reap the results in order, in their steps.  The helper writes the
 * wake fd after each one, so an event loop wakes for it.
 *
 * Jobs live in a ring allocated at start; submitting never allocates.
 * The driving thread never waits for the helper: the ring is single
 * producer, single consumer each way (positions published with release
 * and read with acquire), and the helper sleeps on a semaphore that each
 * submission posts.  A lock would do, but a helper preempted while
 * holding it (it runs at a lower priority, rd_thread_background) held
 * the driving thread's step for 25-56 ms on the bed.  Stopping lets the
 * job in progress finish (a registration cannot be cut short) without
 * waiting for it, so a cancel returns at once; destroying joins the
 * helper and deregisters what was registered but not reaped.  The verbs
 * calls go through @ops, so the module is unit-tested without a
 * device. */
#ifndef RDMIG_REGQ_H
#define RDMIG_REGQ_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct regq_ops {
	/* Registers [addr, addr + len) with @access; 0 with *mr set, or a
	 * negative errno.  Runs on the helper thread. */
	int (*reg)(void *pd, void *addr, size_t len, int access, void **mr);
	void (*dereg)(void *mr);
};

struct regq_job {
	void *addr;
	size_t len;
	int access;
	/* Tried when @access fails with -EFAULT (-1: none): a read-only
	 * private mapping can only be pinned for reading. */
	int fallback;
	uint64_t cookie;        /* the submitter's: which piece or chunk */
	void *mr;               /* result */
	int rc;                 /* 0, or the registration's negative errno */
};

struct regq {
	pthread_t thread;
	bool running;
	atomic_bool stop;
	sem_t jobs;             /* posted once per job submitted, and to stop */
	struct regq_ops ops;
	void *pd;
	int wake_fd;
	struct regq_job *ring;
	unsigned cap;
	/* Positions, free-running: head <= done <= tail.  [head, done) are
	 * finished and not reaped, [done, tail) wait for the helper.  head
	 * and tail are the driving thread's, done the helper's. */
	uint64_t head;
	_Atomic uint64_t done, tail;
};

/* The verbs registration (ibv_reg_mr on a struct ibv_pd). */
extern const struct regq_ops regq_verbs;

/* A queue of @cap jobs for @pd, woken through @wake_fd; starts the
 * helper. */
int regq_init(struct regq *q, const struct regq_ops *ops, void *pd, unsigned cap,
	      int wake_fd, struct rd_err *err);
/* Queues a job: 0, or -EAGAIN when the ring is full (reap, then retry),
 * -ECANCELED once stopped, -errno when the helper cannot start. */
int regq_submit(struct regq *q, void *addr, size_t len, int access, int fallback,
		uint64_t cookie, struct rd_err *err);
/* Up to @max finished jobs, in the order they were submitted. */
unsigned regq_reap(struct regq *q, struct regq_job *out, unsigned max);
/* Jobs submitted and not reaped. */
unsigned regq_pending(const struct regq *q);
/* No job starts after this; the one in progress finishes on its own. */
void regq_stop(struct regq *q);
/* Stops, joins the helper, deregisters what was not reaped, frees.  Safe on
 * a zeroed or never started queue. */
void regq_fini(struct regq *q);

#endif
