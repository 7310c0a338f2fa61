/* regq: memory registrations done by helper threads, so that no step of
 * the driving thread waits for one, and a large pin-all goes as fast as
 * the cores allow.
 *
 * Pinning costs what the kernel makes it cost: faulting pages in, breaking
 * copy-on-write, zeroing fresh pages, then the device's page list; over
 * Soft-RoCE under emulation a 1 MiB registration took 12 ms and a 16 MiB
 * pin-all piece 150 ms, where a step has 10 ms, and on hardware ~0.1 s per
 * GiB of 4 KiB pages.  Both roles queue every registration they need
 * during a migration here (pin-all pieces, dynamic chunks, the
 * device-state rings) and reap the results in the order they were
 * submitted, in their steps.  Registrations are independent and
 * ibv_reg_mr is thread-safe, so one helper per CPU (at most
 * REGQ_MAX_THREADS) takes jobs as they come: a pin-all that keeps a few
 * pieces per helper queued ahead registers on every core.  A helper
 * writes the wake fd after each job, so an event loop wakes for it.
 *
 * Jobs live in a ring allocated at start; submitting never allocates.
 * The driving thread never waits for a helper and takes no lock: it
 * publishes the ring's tail (release) and posts a semaphore once per job;
 * a helper woken by it claims the next position with an atomic counter,
 * registers, and publishes that slot as finished (release); reaping takes
 * finished slots from the head while they are contiguous (acquire), so a
 * job finished early waits for the ones before it.  A lock would do, but
 * a helper preempted while holding it (helpers run at a lower priority,
 * rd_thread_background) held the driving thread's step for 25-56 ms on
 * the bed.  Stopping lets the jobs in progress finish (a registration
 * cannot be cut short) without waiting for them, so a cancel returns at
 * once; destroying joins the helpers and deregisters what was registered
 * but not reaped.  The verbs calls go through @ops, so the module is
 * unit-tested without a device. */
#ifndef RDMIG_REGQ_H
#define RDMIG_REGQ_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define REGQ_MAX_THREADS 8

struct regq_ops {
	/* Registers [addr, addr + len) with @access; 0 with *mr set, or a
	 * negative errno.  Runs on a helper thread, several at once. */
	int (*reg)(void *pd, void *addr, size_t len, int access, void **mr);
	void (*dereg)(void *mr);
	/* Makes [addr, addr + len) present for writing, unregistered (a job
	 * submitted with REGQ_FAULT_IN): 0 or a negative errno; NULL: the
	 * job fails with -ENOSYS. */
	int (*fault_in)(void *addr, size_t len);
};

/* A job's access that asks for its memory made present, not registered:
 * the fault of a fresh page (allocating and clearing it, 2 MiB at once
 * with transparent huge pages) is then a helper's, not a step's. */
#define REGQ_FAULT_IN (-1)

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

struct regq_slot {
	struct regq_job job;
	/* The position + 1 of the job finished in this slot (0: none yet);
	 * a slot is reused a ring later, so an old value never matches. */
	_Atomic uint64_t fin;
};

struct regq {
	pthread_t thread[REGQ_MAX_THREADS];
	unsigned nthreads;      /* started */
	atomic_bool stop;
	sem_t jobs;             /* posted once per job submitted, and per
				 * helper to stop */
	struct regq_ops ops;
	void *pd;
	int wake_fd;
	struct regq_slot *ring;
	unsigned cap;
	/* Positions, free-running: head <= tail, next <= tail.  [head, tail)
	 * are submitted and not reaped; a helper claims [next, tail) one at a
	 * time.  head and tail are the driving thread's, next the helpers'. */
	uint64_t head;
	_Atomic uint64_t tail, next;
};

/* The verbs registration (ibv_reg_mr on a struct ibv_pd). */
extern const struct regq_ops regq_verbs;

/* Helpers for this machine: one per online CPU, at most REGQ_MAX_THREADS. */
unsigned regq_default_threads(void);

/* A queue of @cap jobs for @pd, woken through @wake_fd; starts @threads
 * helpers (0: regq_default_threads(); at most REGQ_MAX_THREADS). */
int regq_init(struct regq *q, const struct regq_ops *ops, void *pd, unsigned cap,
	      unsigned threads, int wake_fd, struct rd_err *err);
/* Helpers running: a submitter that wants every core busy keeps a couple
 * of jobs per helper queued. */
unsigned regq_threads(const struct regq *q);
/* Queues a job: 0, or -EAGAIN when the ring is full (reap, then retry),
 * -ECANCELED once stopped. */
int regq_submit(struct regq *q, void *addr, size_t len, int access, int fallback,
		uint64_t cookie, struct rd_err *err);
/* Up to @max finished jobs, in the order they were submitted. */
unsigned regq_reap(struct regq *q, struct regq_job *out, unsigned max);
/* Jobs submitted and not reaped. */
unsigned regq_pending(const struct regq *q);
/* No job starts after this; those in progress finish on their own. */
void regq_stop(struct regq *q);
/* Stops, joins the helpers, deregisters what was not reaped, frees.  Safe
 * on a zeroed or never started queue. */
void regq_fini(struct regq *q);

#endif
