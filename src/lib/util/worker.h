/* worker: one job at a time on a thread of the library's own.
 *
 * For set-up work that allocates: under memory pressure from other threads
 * of the process (registration helpers pinning, a VMM faulting guest
 * memory in), malloc, mmap and thread creation wait for the address-space
 * lock for tens of milliseconds, with no CPU spent.  The driving thread
 * hands such a job over and reaps its result in a later step; it never
 * waits for it, and the worker wakes the handle's fd when the job is done.
 * The worker never calls back into the application. */
#ifndef RDMIG_WORKER_H
#define RDMIG_WORKER_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "util.h"

struct worker {
	pthread_t th;
	sem_t go;
	int (*fn)(void *arg);
	void *arg;
	int rc;                 /* the job's result, read after a reap */
	atomic_int state;       /* WK_IDLE, WK_OUT, WK_DONE */
	atomic_bool stop;
	atomic_bool dead;       /* the thread left its loop on an error */
	bool started;
	int wake_fd;
};

/* Starts the thread; @wake_fd (an eventfd) is written after each job. */
int worker_start(struct worker *w, int wake_fd, struct rd_err *err);
/* Hands @fn(@arg) over: 0, -EBUSY while a job is out or not reaped, or
 * -ESRCH when the worker was not started, was stopped or died. */
int worker_hand(struct worker *w, int (*fn)(void *), void *arg);
/* 1 with the job's result in *rc once it is done (the worker is free
 * again), 0 while it runs, -ENOENT when no job was handed over, -ESRCH
 * when the thread died with the job never run.  Whatever
 * the job wrote is visible to the caller after a 1. */
int worker_reap(struct worker *w, int *rc);
/* True from a hand-over until the reap. */
bool worker_busy(const struct worker *w);
/* Waits for a job in progress to end (its result is dropped), then joins
 * the thread.  Safe on a worker never started, and twice. */
void worker_stop(struct worker *w);

#endif
