#include "wpipe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int wp_init(struct wpipe *wp, unsigned nchans, uint32_t max_writes, uint32_t tag_kind,
	    const struct wp_callbacks *cb, void *ctx, struct rd_err *err)
{
	uint64_t need = (uint64_t)nchans * max_writes * 2, cap = WP_WINDOW_MIN;
	unsigned k;

	memset(wp, 0, sizeof(*wp));
	if (!nchans || !max_writes)
		return rd_err_set(err, -EINVAL, "a pipeline needs channels and WRITEs");
	while (cap < need)
		cap <<= 1;
	wp->ops = calloc(cap, sizeof(*wp->ops));
	wp->chans = calloc(nchans, sizeof(*wp->chans));
	if (!wp->ops || !wp->chans)
		goto nomem;
	wp->cap = cap;
	wp->nchans = nchans;
	wp->max_writes = max_writes;
	wp->signal_every = max_writes < 16 ? 1 : 16;
	wp->cb = *cb;
	wp->ctx = ctx;
	for (k = 0; k < nchans; k++) {
		struct wp_chan *ch = &wp->chans[k];

		ch->tag.kind = tag_kind;
		/* Each post call signals at most one extra WRITE per channel. */
		ch->mcap = (uint64_t)max_writes + 1;
		ch->marks = calloc(ch->mcap, sizeof(*ch->marks));
		if (!ch->marks)
			goto nomem;
	}
	return 0;
nomem:
	wp_fini(wp);
	return rd_err_set(err, -ENOMEM, "out of memory for the WRITE pipeline");
}

void wp_fini(struct wpipe *wp)
{
	unsigned k;

	for (k = 0; wp->chans && k < wp->nchans; k++)
		free(wp->chans[k].marks);
	free(wp->chans);
	free(wp->ops);
	memset(wp, 0, sizeof(*wp));
}

void wp_push(struct wpipe *wp, const struct wp_op *op)
{
	*wp_at(wp, wp->tail++) = *op;
}

static void signal_wr(struct wp_chan *ch, struct ibv_send_wr *wr)
{
	wr->send_flags = IBV_SEND_SIGNALED;
	ch->marks[ch->mtail++ % ch->mcap] = ch->posted;
}

/* Appends the op at wp->posted to its channel's chain as wr[n]; false when
 * it cannot go now (channel full, registration not ready). */
static bool chain(struct wpipe *wp, int n)
{
	const struct wp_op *op = wp_at(wp, wp->posted);
	unsigned k = (unsigned)(wp->posted % wp->nchans);
	struct wp_chan *ch = &wp->chans[k];
	struct wp_target t;

	/* Room is asked for a whole batch's chain (wpost_room), and a batch
	 * chains at most WP_BATCH: the first WRITE of a channel's chain asks
	 * for all of it, sparing the others a look at the posting thread's
	 * cache line. */
	if (ch->posted - ch->done >= wp->max_writes ||
	    (wp->cb.room && ch->first < 0 && !wp->cb.room(wp->ctx, k)) ||
	    wp->cb.target(wp->ctx, wp->posted, op, &t) <= 0)
		return false;
	wp->sge[n] = (struct ibv_sge){ .addr = t.local_addr, .length = (uint32_t)op->length,
				       .lkey = t.lkey };
	wp->wr[n] = (struct ibv_send_wr){ .wr_id = fab_wr_id(&ch->tag), .sg_list = &wp->sge[n],
		.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.wr.rdma = { .remote_addr = t.remote_addr, .rkey = t.rkey } };
	if (ch->last >= 0)
		wp->wr[ch->last].next = &wp->wr[n];
	else
		ch->first = n;
	ch->last = n;
	ch->posted++;
	if (ch->posted % wp->signal_every == 0)
		signal_wr(ch, &wp->wr[n]);
	return true;
}

/* One post call's worth: at most WP_BATCH WRITEs. */
static int64_t post_batch(struct wpipe *wp, uint64_t budget, uint64_t *nops)
{
	uint64_t bytes = 0;
	unsigned k;
	int n = 0, rc;

	for (k = 0; k < wp->nchans; k++)
		wp->chans[k].first = wp->chans[k].last = -1;
	while (n < WP_BATCH && wp->posted < wp->tail && (!bytes || bytes < WP_BATCH_BYTES) &&
	       (!budget || !bytes || bytes < budget) && chain(wp, n)) {
		bytes += wp_at(wp, wp->posted)->length;
		wp->posted++;
		n++;
	}
	for (k = 0; k < wp->nchans; k++) {
		struct wp_chan *ch = &wp->chans[k];

		if (ch->first < 0)
			continue;
		if (!(wp->wr[ch->last].send_flags & IBV_SEND_SIGNALED))
			signal_wr(ch, &wp->wr[ch->last]);
		rc = wp->cb.post(wp->ctx, k, &wp->wr[ch->first]);
		if (rc)
			return rc;
	}
	*nops += (uint64_t)n;
	return (int64_t)bytes;
}

int64_t wp_post(struct wpipe *wp, uint64_t budget, int64_t until_us, uint64_t *nops)
{
	uint64_t total = 0;
	int64_t got;

	*nops = 0;
	do {
		got = post_batch(wp, budget ? budget - total : 0, nops);
		if (got < 0)
			return got;
		total += (uint64_t)got;
	} while (got && (!budget || total < budget) && (!until_us || rd_now_us() <= until_us));
	return (int64_t)total;
}

unsigned wp_chan_index(const struct wpipe *wp, const struct fab_tag *tag)
{
	return (unsigned)(rd_container_of(tag, struct wp_chan, tag) - wp->chans);
}

/* Channel k's j-th WRITE is op position k + j * nchans, so the oldest op
 * not yet complete is the smallest such position over the channels. */
static void advance_done(struct wpipe *wp)
{
	uint64_t low = wp->posted, pos;
	unsigned k;

	for (k = 0; k < wp->nchans; k++) {
		pos = k + wp->chans[k].done * wp->nchans;
		if (pos < low)
			low = pos;
	}
	wp->done = low;
}

int wp_complete(struct wpipe *wp, const struct fab_tag *tag, struct rd_err *err)
{
	struct wp_chan *ch = rd_container_of(tag, struct wp_chan, tag);
	unsigned k = (unsigned)(ch - wp->chans);
	uint64_t upto;

	if (ch->mhead == ch->mtail)
		return rd_err_set(err, -EPROTO, "a WRITE completed that was never signaled");
	upto = ch->marks[ch->mhead++ % ch->mcap];
	for (; ch->done < upto; ch->done++)
		if (wp->cb.done)
			wp->cb.done(wp->ctx, wp_at(wp, k + ch->done * wp->nchans));
	advance_done(wp);
	return 0;
}
