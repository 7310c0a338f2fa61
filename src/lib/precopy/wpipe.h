/* wpipe: the source's RDMA WRITE pipeline, without verbs.
 *
 * Planned WRITEs wait in a window (a ring of fixed size, allocated once):
 * planned at the tail, posted in order, completed at the head.  Op position
 * p goes to channel p % nchans, so a channel's WRITEs are every nchans-th
 * op and complete in order on its QP; each channel signals every
 * signal_every-th WRITE (and the last of each post call), and a signaled
 * completion finishes every earlier WRITE of its channel.  Nothing here
 * allocates after wp_init(), and every verbs call goes through the
 * caller's callbacks, so the module is unit-tested on its own. */
#ifndef RDMIG_WPIPE_H
#define RDMIG_WPIPE_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "fabric.h"
#include "util.h"

/* Ops in the window: enough for max_writes in flight on 64 channels plus
 * the registration look-ahead, and a power of two. */
#define WP_WINDOW_MIN 4096
#define WP_BATCH 32 /* work requests built per post call */
/* Bytes per post call at most (at least one WRITE goes): on rxe the post
 * moves the data itself, so this bounds the call. */
#define WP_BATCH_BYTES (1u << 20)

/* One RDMA WRITE; never crosses a registration slot. */
struct wp_op {
	uint32_t block;
	uint64_t offset, length;
	uint64_t slot;
};

/* Where an op goes: the local scatter entry and the remote address/key. */
struct wp_target {
	uint64_t local_addr;
	uint32_t lkey;
	uint64_t remote_addr;
	uint32_t rkey;
};

struct wp_callbacks {
	/* 1 with *t filled when @op (at position @pos) may go: its
	 * registrations are ready on both sides; 0 when not yet (posting stops
	 * there: WRITEs leave in order). */
	int (*target)(void *ctx, uint64_t pos, const struct wp_op *op, struct wp_target *t);
	/* Posts the chain @wr on channel @chan; 0 or a negative errno. */
	int (*post)(void *ctx, unsigned chan, struct ibv_send_wr *wr);
	/* @op completed (its registration may be released). */
	void (*done)(void *ctx, const struct wp_op *op);
	/* NULL, or whether channel @chan can take one more WRITE into the
	 * chain being built (posting threads: room in its hand-over ring). */
	bool (*room)(void *ctx, unsigned chan);
};

struct wp_chan {
	struct fab_tag tag;      /* in the WRITEs' wr_id: which channel completed */
	uint64_t *marks;         /* posted count at each signaled WRITE, a ring */
	uint64_t mcap;
	uint64_t posted, done;   /* WRITEs on this channel */
	uint64_t mhead, mtail;
	int first, last;         /* the chain being built, indexes into wr[] */
};

struct wpipe {
	struct wp_op *ops;
	uint64_t cap;            /* ring size, a power of two */
	uint64_t done, posted, tail; /* positions: done <= posted <= tail */
	struct wp_chan *chans;
	unsigned nchans;
	uint32_t max_writes;     /* in flight per channel */
	uint32_t signal_every;
	struct wp_callbacks cb;
	void *ctx;
	struct ibv_send_wr wr[WP_BATCH];
	struct ibv_sge sge[WP_BATCH];
};

/* @tag_kind marks the channels' tags (fab_tag.kind). */
int wp_init(struct wpipe *wp, unsigned nchans, uint32_t max_writes, uint32_t tag_kind,
	    const struct wp_callbacks *cb, void *ctx, struct rd_err *err);
void wp_fini(struct wpipe *wp);

/* Free entries at the tail. */
static inline uint64_t wp_room(const struct wpipe *wp)
{
	return wp->cap - (wp->tail - wp->done);
}

/* Appends @op (the caller checked wp_room). */
void wp_push(struct wpipe *wp, const struct wp_op *op);
/* The op at position @pos (done <= pos < tail). */
static inline struct wp_op *wp_at(const struct wpipe *wp, uint64_t pos)
{
	return &wp->ops[pos & (wp->cap - 1)];
}

/* Posts ready ops in order until one is not ready, a channel is full,
 * about @budget bytes went (0: no limit; at least one op goes), or, between
 * post calls, rd_now_us() passed @until_us (0: no limit).  Returns the
 * bytes posted (>= 0) or a negative errno from the post callback; *@nops
 * gets the number of WRITEs. */
int64_t wp_post(struct wpipe *wp, uint64_t budget, int64_t until_us, uint64_t *nops);
/* A signaled WRITE of @tag's channel completed successfully. */
int wp_complete(struct wpipe *wp, const struct fab_tag *tag, struct rd_err *err);
/* Which channel a tag belongs to (for error messages). */
unsigned wp_chan_index(const struct wpipe *wp, const struct fab_tag *tag);

/* Every planned op posted and completed. */
static inline bool wp_idle(const struct wpipe *wp)
{
	return wp->done == wp->tail;
}

#endif
