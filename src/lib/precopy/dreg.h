/* dreg: the source's side of dynamic registration, without verbs.
 *
 * Walking the WRITE window ahead of the posting, it asks the destination to
 * register the chunks the next ops need, in batches that start small (the
 * first WRITEs wait one short round trip) and double up to what one
 * REGISTER_REQ holds, with up to DREG_OUTSTANDING requests in flight.
 * Under a pinned-bytes cap it releases idle chunks, least recently used
 * first, on both sides (the releases ride in the next request).  Our own
 * registration of each chunk happens while the destination does its part,
 * one chunk at a time so the caller can stop when its step is over.
 * Each op holds its chunk (creg_get) from its request to its completion, so
 * a chunk with WRITEs in flight is never released.  The caller's callbacks
 * do the verbs calls; the scratch of a request is allocated once. */
#ifndef RDMIG_DREG_H
#define RDMIG_DREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "creg.h"
#include "rdmig.pb-c.h"
#include "util.h"
#include "wpipe.h"

#define DREG_OUTSTANDING 4

struct dreg_callbacks {
	/* Starts registering our side of [off, off + len) of @block (chunk
	 * @slot): 0 once submitted (the result comes to dreg_local_done()),
	 * -EAGAIN when no more can be submitted now, or a negative errno. */
	int (*reg)(void *ctx, unsigned block, uint64_t slot, uint64_t off, uint64_t len);
	void (*dereg)(void *ctx, void *mr);
};

struct dreg_block {
	uint64_t first_slot, length;
};

struct dreg_req {
	uint64_t id;
	uint64_t *slots;
	size_t n;
	size_t nsub;     /* slots[0..nsub) were submitted for our side ... */
	size_t nlocal;   /* ... and slots[0..nlocal) hold our MR (in order) */
};

struct dreg {
	struct creg creg;
	const struct dreg_block *blocks;
	unsigned nblocks, chunk_shift;
	struct dreg_req q[DREG_OUTSTANDING];
	unsigned qhead, qlen;    /* requests sent, not yet done on both sides */
	unsigned qanswered;      /* the first qanswered of them have their keys */
	uint64_t next_id;
	size_t batch, max_batch;
	uint64_t frontier;       /* window position up to which chunks are asked */
	/* one request's scratch, max_batch entries each */
	uint32_t *cb, *rb;
	uint64_t *ci, *ri;
	uint64_t *slots;
	size_t n, nrel;
	struct dreg_callbacks ops;
	void *ctx;
	uint64_t requests, chunks;
};

/* @max_batch: chunk references (chunks plus releases) one request may
 * carry (ctrl_register_max of the peer's frame size). */
int dreg_init(struct dreg *d, const struct dreg_block *blocks, unsigned nblocks,
	      unsigned chunk_shift, uint64_t nslots, uint64_t cap, size_t max_batch,
	      const struct dreg_callbacks *ops, void *ctx, struct rd_err *err);
/* Releases our MRs (through the callback) and frees everything. */
void dreg_fini(struct dreg *d);

/* A new iteration: batches start small again. */
void dreg_restart(struct dreg *d);
/* Fills *@req (pointing into the scratch) with the chunks the ops from the
 * frontier on need; 1 when there is something to send, 0 when not (no op
 * waiting, DREG_OUTSTANDING in flight, or no room under the cap until
 * WRITEs complete). */
int dreg_build(struct dreg *d, const struct wpipe *wp, Rdmig__RegisterReq *req);
/* After @req was sent: queues it (our side registers in dreg_reg_local). */
void dreg_sent(struct dreg *d, const Rdmig__RegisterReq *req);
/* Submits our side of the chunks sent for, oldest first, until the
 * callback says -EAGAIN.  1 when it submitted something, 0 when nothing
 * could go, or the callback's error (with its message). */
int dreg_reg_local(struct dreg *d);
/* Our registration of chunk @slot finished (they finish in the order they
 * were submitted).  -EPROTO when that is not the chunk expected next. */
int dreg_local_done(struct dreg *d, uint64_t slot, void *mr, uint32_t lkey,
		    struct rd_err *err);
/* The destination's answer to the oldest request. */
int dreg_on_resp(struct dreg *d, const Rdmig__RegisterResp *r, struct rd_err *err);
/* An op may go once its position is below the frontier and its chunk is
 * registered on both sides. */
bool dreg_ready(const struct dreg *d, uint64_t pos, const struct wp_op *op,
		uint32_t *lkey, uint32_t *rkey);
/* An op completed: its chunk may be released. */
void dreg_op_done(struct dreg *d, const struct wp_op *op);

#endif
