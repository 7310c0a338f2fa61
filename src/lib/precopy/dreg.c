#include "dreg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"

int dreg_init(struct dreg *d, const struct dreg_block *blocks, unsigned nblocks,
	      unsigned chunk_shift, uint64_t nslots, uint64_t cap, size_t max_batch,
	      const struct dreg_callbacks *ops, void *ctx, struct rd_err *err)
{
	unsigned i;

	memset(d, 0, sizeof(*d));
	if (max_batch < 2)
		return rd_err_set(err, -EINVAL, "a registration request must hold two chunks");
	d->blocks = blocks;
	d->nblocks = nblocks;
	d->chunk_shift = chunk_shift;
	d->max_batch = max_batch;
	d->ops = *ops;
	d->ctx = ctx;
	d->cb = calloc(max_batch, sizeof(*d->cb));
	d->rb = calloc(max_batch, sizeof(*d->rb));
	d->ci = calloc(max_batch, sizeof(*d->ci));
	d->ri = calloc(max_batch, sizeof(*d->ri));
	d->slots = calloc(max_batch, sizeof(*d->slots));
	for (i = 0; i < DREG_OUTSTANDING; i++)
		d->q[i].slots = calloc(max_batch, sizeof(*d->q[i].slots));
	for (i = 0; i < DREG_OUTSTANDING && d->q[i].slots; i++)
		;
	if (!d->cb || !d->rb || !d->ci || !d->ri || !d->slots || i < DREG_OUTSTANDING ||
	    creg_init(&d->creg, nslots, cap)) {
		dreg_fini(d);
		return rd_err_set(err, -ENOMEM, "out of memory for dynamic registration");
	}
	dreg_restart(d);
	return 0;
}

void dreg_fini(struct dreg *d)
{
	unsigned i;

	/* Every MR still recorded goes back through the callback. */
	creg_fini(&d->creg, d->ops.dereg, d->ctx);
	for (i = 0; i < DREG_OUTSTANDING; i++)
		free(d->q[i].slots);
	free(d->cb);
	free(d->rb);
	free(d->ci);
	free(d->ri);
	free(d->slots);
	memset(d, 0, sizeof(*d));
}

void dreg_restart(struct dreg *d)
{
	/* Small first batches let the first writes start after one quick
	 * round trip; later ones grow so the request count stays far below
	 * the chunk count while the destination registers ahead. */
	d->batch = 2;
}

static unsigned block_of(const struct dreg *d, uint64_t slot)
{
	unsigned lo = 0, hi = d->nblocks;

	/* The last block whose first slot is at or below @slot. */
	while (hi - lo > 1) {
		unsigned mid = lo + (hi - lo) / 2;

		if (d->blocks[mid].first_slot <= slot)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static void span(const struct dreg *d, uint64_t slot, unsigned *blk, uint64_t *off,
		 uint64_t *len)
{
	*blk = block_of(d, slot);
	blk_chunk_span(d->blocks[*blk].length, d->chunk_shift,
		       slot - d->blocks[*blk].first_slot, off, len);
}

/* Releases idle chunks until @need more bytes fit under the cap; their
 * release goes in this request.  -ENOSPC when nothing more can go now. */
static int make_room(struct dreg *d, uint64_t need)
{
	uint64_t victims[64];
	size_t room;
	int n, i;

	for (;;) {
		room = d->max_batch - d->n - d->nrel;
		if (room > 64)
			room = 64;
		if (!room)
			return d->creg.cap_bytes &&
			       d->creg.pinned_bytes + need > d->creg.cap_bytes ? -ENOSPC : 0;
		n = creg_victims(&d->creg, need, victims, room, NULL);
		if (n <= 0)
			return n < 0 ? -ENOSPC : 0;
		for (i = 0; i < n; i++) {
			unsigned blk = block_of(d, victims[i]);

			d->ops.dereg(d->ctx, creg_slot(&d->creg, victims[i])->mr);
			creg_remove(&d->creg, victims[i]);
			d->rb[d->nrel] = blk;
			d->ri[d->nrel++] = victims[i] - d->blocks[blk].first_slot;
		}
	}
}

int dreg_build(struct dreg *d, const struct wpipe *wp, Rdmig__RegisterReq *req)
{
	size_t want = d->batch < d->max_batch ? d->batch : d->max_batch;

	if (d->qlen == DREG_OUTSTANDING)
		return 0;
	if (d->frontier < wp->done)
		d->frontier = wp->done;
	d->n = d->nrel = 0;
	while (d->frontier < wp->tail && d->n < want) {
		const struct wp_op *op = wp_at(wp, d->frontier);

		if (creg_state(&d->creg, op->slot) == CREG_NONE) {
			unsigned blk;
			uint64_t off, len;

			span(d, op->slot, &blk, &off, &len);
			/* Everything pinned may be in flight: wait for completions. */
			if (make_room(d, len) < 0 || creg_add(&d->creg, op->slot, len, CREG_PENDING))
				break;
			d->cb[d->n] = blk;
			d->ci[d->n] = op->slot - d->blocks[blk].first_slot;
			d->slots[d->n++] = op->slot;
		}
		creg_get(&d->creg, op->slot);
		creg_touch(&d->creg, op->slot);
		d->frontier++;
	}
	if (!d->n && !d->nrel)
		return 0;
	rdmig__register_req__init(req);
	req->req_id = d->next_id + 1;
	req->n_chunk_block = req->n_chunk_index = d->n;
	req->chunk_block = d->cb;
	req->chunk_index = d->ci;
	req->n_release_block = req->n_release_index = d->nrel;
	req->release_block = d->rb;
	req->release_index = d->ri;
	return 1;
}

void dreg_sent(struct dreg *d, const Rdmig__RegisterReq *req)
{
	struct dreg_req *q = &d->q[(d->qhead + d->qlen) % DREG_OUTSTANDING];

	d->next_id = req->req_id;
	q->id = req->req_id;
	q->n = d->n;
	q->nsub = q->nlocal = 0;
	memcpy(q->slots, d->slots, d->n * sizeof(*d->slots));
	d->qlen++;
	if (d->batch < d->max_batch)
		d->batch *= 2;
	d->requests++;
	d->chunks += d->n;
}

/* A request leaves the queue once answered and registered on our side. */
static void retire(struct dreg *d)
{
	while (d->qanswered && d->q[d->qhead].nlocal == d->q[d->qhead].n) {
		d->qhead = (d->qhead + 1) % DREG_OUTSTANDING;
		d->qlen--;
		d->qanswered--;
	}
}

int dreg_reg_local(struct dreg *d)
{
	unsigned k;
	int did = 0;

	for (k = 0; k < d->qlen; k++) {
		struct dreg_req *q = &d->q[(d->qhead + k) % DREG_OUTSTANDING];

		while (q->nsub < q->n) {
			uint64_t slot = q->slots[q->nsub], off, len;
			unsigned blk;
			int rc;

			span(d, slot, &blk, &off, &len);
			rc = d->ops.reg(d->ctx, blk, slot, off, len);
			if (rc == -EAGAIN)
				return did;
			if (rc)
				return rc;
			q->nsub++;
			did = 1;
		}
	}
	return did;
}

int dreg_local_done(struct dreg *d, uint64_t slot, void *mr, uint32_t lkey,
		    struct rd_err *err)
{
	unsigned k;

	for (k = 0; k < d->qlen; k++) {
		struct dreg_req *q = &d->q[(d->qhead + k) % DREG_OUTSTANDING];

		if (q->nlocal == q->nsub)
			continue;
		if (q->slots[q->nlocal] != slot)
			break;
		creg_set_mr(&d->creg, slot, mr, lkey);
		q->nlocal++;
		retire(d);
		return 0;
	}
	return rd_err_set(err, -EPROTO, "registration of chunk slot %" PRIu64 " finished "
			  "out of order", slot);
}

int dreg_on_resp(struct dreg *d, const Rdmig__RegisterResp *r, struct rd_err *err)
{
	struct dreg_req *q = &d->q[(d->qhead + d->qanswered) % DREG_OUTSTANDING];
	size_t i;

	if (d->qanswered == d->qlen || r->req_id != q->id)
		return rd_err_set(err, -EPROTO, "REGISTER_RESP for request %" PRIu64
				  " that is not the oldest outstanding", r->req_id);
	if (r->n_rkeys != q->n)
		return rd_err_set(err, -EPROTO, "REGISTER_RESP carries %zu keys for %zu "
				  "chunks", r->n_rkeys, q->n);
	for (i = 0; i < q->n; i++) {
		const struct creg_slot *cs = creg_slot(&d->creg, q->slots[i]);

		creg_set_ready(&d->creg, q->slots[i], r->rkeys[i], cs ? cs->mr : NULL);
	}
	d->qanswered++;
	retire(d);
	return 0;
}

bool dreg_ready(const struct dreg *d, uint64_t pos, const struct wp_op *op,
		uint32_t *lkey, uint32_t *rkey)
{
	const struct creg_slot *cs;

	/* An op past the frontier holds no reference on its chunk yet. */
	if (pos >= d->frontier)
		return false;
	cs = creg_slot(&d->creg, op->slot);
	if (!cs || cs->state != CREG_READY || !cs->mr)
		return false;
	*lkey = cs->lkey;
	*rkey = cs->rkey;
	return true;
}

void dreg_op_done(struct dreg *d, const struct wp_op *op)
{
	creg_put(&d->creg, op->slot);
}
