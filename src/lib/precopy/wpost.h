/* wpost: a thread per data channel that posts the WRITE pipeline's work
 * requests, so that several channels' posting runs on several cores while
 * the driving thread plans the next WRITEs.
 *
 * Posting is where the sending work is done on Soft-RoCE (rxe builds the
 * packets, copies the data and computes their CRC inside the post call, in
 * the context of the thread that posts, and its loopback receive runs in
 * the same context), so one thread posting for every channel was the
 * limit: two or four channels moved no more than one.  On a NIC that does
 * the copy itself a post is cheap, and the threads only move the doorbells
 * off the driving thread.
 *
 * wpipe keeps every count: a WRITE handed over here is "posted" for it.
 * The driving thread copies each work request of a chain into its
 * channel's ring (wpost_room says whether a whole chain of @batch fits);
 * the channel's thread links what it finds into one chain and posts it in
 * one call.  A ring holds max_writes + batch requests at least: wpipe never
 * has more than max_writes of one channel in flight, and a request handed
 * over is in flight, so room is short only for the instant between a
 * WRITE's completion and its thread noticing its post call returned; the
 * thread then writes the wake fd.  A post that fails is kept (errno and message) for the driving
 * thread, and the wake fd is written so an event loop notices at once.
 *
 * The threads are made at setup (wpost_start) and stopped with the
 * migration, before the queue pairs go (wpost_stop).  Unlike the other
 * helpers they keep the caller's priority: their work is the sending
 * itself, which the driving thread would otherwise do.  The event-loop
 * contract is unchanged: the caller's thread still drives every step, and
 * the handle's fd is readable when a thread needs it. */
#ifndef RDMIG_WPOST_H
#define RDMIG_WPOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "util.h"

struct wpost;

struct wpost_chan {
	struct wpost *p;
	unsigned index;
	struct ibv_qp *qp;
	pthread_t thread;
	bool running;
	struct ibv_send_wr *wr;  /* the ring: cap requests and their entries */
	struct ibv_sge *sge;
	uint64_t cap;            /* a power of two, max_writes + batch at least */
	_Atomic uint64_t tail;   /* handed over (the driving thread) */
	_Atomic uint64_t head;   /* posted (the channel's thread) */
	atomic_bool want_wake;   /* the driving thread found the ring full */
	pthread_mutex_t lock;    /* with cond: the thread sleeps on an empty ring */
	pthread_cond_t cond;
	bool sleeping;           /* under lock */
	_Atomic uint64_t posts;  /* post calls made */
};

struct wpost {
	struct wpost_chan *chans;
	unsigned n;
	int wake_fd;
	uint32_t batch;          /* the longest chain handed over at once */
	atomic_bool stop;
	/* The first failure: err is stored last (release), so a reader that
	 * sees it non-zero (acquire) reads a finished message. */
	_Atomic int err;
	struct rd_err msg;
	atomic_flag failing;
};

/* Starts a thread per queue pair of @qps (channel k posts on qps[k]), each
 * with a ring for @max_writes requests in flight plus a chain of @batch.
 * 0, or a negative errno with @err set and nothing left running. */
int wpost_start(struct wpost *p, struct ibv_qp *const *qps, unsigned n, uint32_t max_writes,
		uint32_t batch, int wake_fd, struct rd_err *err);
/* Whether channel @chan's ring has room for a chain of up to @batch
 * requests (the driving thread only). */
bool wpost_room(struct wpost *p, unsigned chan);
/* Hands the chain @wr (at most @batch requests, with room checked by
 * wpost_room first; one scatter entry each at most) to channel @chan's
 * thread; the requests and their scatter entries are copied, so @wr may
 * be reused at once (the driving thread only). */
void wpost_submit(struct wpost *p, unsigned chan, const struct ibv_send_wr *wr);
/* 0, or the first failed post's negative errno with its message set in
 * @err. */
int wpost_error(struct wpost *p, struct rd_err *err);
/* Post calls channel @chan's thread made (for tests and profiles). */
uint64_t wpost_calls(const struct wpost *p, unsigned chan);
/* Stops and joins every thread (a post call in progress finishes first);
 * safe on a zeroed, half-started or stopped @p. */
void wpost_stop(struct wpost *p);

#endif
