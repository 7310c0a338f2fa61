#include "src_sweep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "privdata.h"
#include "src_int.h"

/* Zero and skipped runs end after this much, so one plan_next() call reads
 * a bounded amount of memory. */
#define SWEEP_ZERO_RUN (16u << 20)

int src_sweep_setup(struct rdmig_source *s, uint32_t msg_max, bool pages, struct rd_err *err)
{
	int rc;

	if (pages) {
		rc = pack_init(&s->pk, msg_max, err);
		if (rc)
			return rc;
	}
	s->zr_max = ctrl_zero_ranges_max(msg_max);
	s->zr_block = calloc(s->zr_max, sizeof(*s->zr_block));
	s->zr_offset = calloc(s->zr_max, sizeof(*s->zr_offset));
	s->zr_length = calloc(s->zr_max, sizeof(*s->zr_length));
	if (!s->zr_block || !s->zr_offset || !s->zr_length)
		return rd_err_set(err, -ENOMEM, "out of memory");
	return 0;
}

int src_sweep_start_helpers(struct rdmig_source *s, struct rd_err *err)
{
	int rc;

	/* With zero detection on a machine of several cores, helpers check
	 * pages for zeros ahead of the sweep (zscan.h). */
	if ((s->ss.caps & PD_CAP_ZERO_PAGES) && zs_default_threads()) {
		s->zsb = calloc(s->nblocks, sizeof(*s->zsb));
		if (!s->zsb)
			return rd_err_set(err, -ENOMEM, "out of memory");
		rc = zs_start(&s->zs, zs_default_threads(), err);
		if (rc)
			return rc;
		s->zs_on = true;
	}
	return 0;
}

void src_sweep_stop(struct rdmig_source *s)
{
	zs_stop(&s->zs);
	s->zs_on = false;
}

void src_sweep_destroy(struct rdmig_source *s)
{
	src_sweep_stop(s);
	free(s->zsb);
	s->zsb = NULL;
	free(s->zr_block);
	free(s->zr_offset);
	free(s->zr_length);
	s->zr_block = NULL;
	s->zr_offset = s->zr_length = NULL;
	pack_fini(&s->pk);
}

void src_sweep_begin(struct rdmig_source *s, uint64_t bytes)
{
	unsigned i;

	memset(&s->sweep, 0, sizeof(s->sweep));
	s->sweep.planned_bytes = bytes;
	if (!s->zs_on)
		return;
	for (i = 0; i < s->nblocks; i++)
		s->zsb[i] = (struct zs_block){ .host = s->blocks[i].host,
			.length = s->blocks[i].d.length, .npages = s->blocks[i].npages,
			.page_size = s->blocks[i].d.page_size, .sending = s->blocks[i].sending };
	zs_begin(&s->zs, s->zsb, s->nblocks);
}

bool src_sweep_done(const struct rdmig_source *s)
{
	return s->sweep.block == s->nblocks && s->sweep.run == RUN_NONE && !s->zr_n &&
	       !s->pk.n;
}

static int flush_zero_ranges(struct rdmig_source *s)
{
	Rdmig__ZeroRanges zr = RDMIG__ZERO_RANGES__INIT;
	int rc;

	if (!s->zr_n)
		return 0;
	if (!ctrl_can_send(&s->ss.ch))
		return -EAGAIN;
	zr.n_block = zr.n_offset = zr.n_length = s->zr_n;
	zr.block = s->zr_block;
	zr.offset = s->zr_offset;
	zr.length = s->zr_length;
	rc = ctrl_send(&s->ss.ch, CT_ZERO_RANGES, &zr.base);
	if (!rc) {
		s->zr_n = 0;
		s->zr_bytes = 0;
	}
	return rc;
}

void src_count_pages(struct rdmig_source *s, uint64_t pages, uint64_t bytes)
{
	if (!s->first_write_ms)
		s->first_write_ms = rd_now_ms();
	s->iter_bytes += bytes;
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.normal_bytes += bytes;
	s->ss.stats.st.normal_pages += pages;
	s->ss.stats.st.transferred += bytes;
	pthread_mutex_unlock(&s->ss.stats.lock);
}

static int flush_pages(struct rdmig_source *s)
{
	Rdmig__Pages m;
	int rc;

	if (!s->pk.n)
		return 0;
	if (!ctrl_can_send(&s->ss.ch))
		return -EAGAIN;
	pack_msg(&s->pk, &m);
	rc = ctrl_send(&s->ss.ch, CT_PAGES, &m.base);
	if (!rc) {
		/* In order on the control channel: landed for whatever the
		 * destination reads after it. */
		s->landed_bytes += s->pk.len;
		s->landed_pages += s->pk_pages;
		s->pk_pages = 0;
		pack_reset(&s->pk);
	}
	return rc;
}

/* A short run in a chunk nobody registered goes inside a PAGES message. */
static bool packable(const struct rdmig_source *s, const struct plan_op *op)
{
	const struct src_block *b = &s->blocks[s->sweep.block];

	return s->pk.data && op->length <= PACK_RUN_MAX &&
	       creg_state(&s->dreg.creg, b->first_slot + (op->offset >> s->slot_shift)) ==
	       CREG_NONE;
}

/* Packs the run, sending the gathered message first when it is full;
 * false when that cannot go yet (the run stays pending).  Page data in
 * PAGES counts against the bandwidth limit and the step's byte budget as
 * WRITEs do: at least one run goes while there is any budget left. */
static bool pack_run(struct rdmig_source *s, const struct plan_op *op, uint64_t *budget,
		     int *rc)
{
	const struct src_block *b = &s->blocks[s->sweep.block];
	struct plan_op run = *op;

	*rc = 0;
	if (!*budget || pace_budget(&s->pace, rd_now_ms()) < PACE_MIN_SEND) {
		s->sweep.pending = run;
		s->sweep.run = RUN_PACK;
		return false;
	}
	if (!pack_fits(&s->pk, run.length)) {
		*rc = flush_pages(s);
		if (*rc) {
			if (*rc == -EAGAIN)
				*rc = 0;
			s->sweep.pending = run;
			s->sweep.run = RUN_PACK;
			return false;
		}
	}
	pack_add(&s->pk, s->sweep.block, run.offset, b->host + run.offset, run.length);
	src_count_pages(s, run.pages, run.length);
	s->pk_pages += run.pages;
	pace_spent(&s->pace, run.length);
	if (*budget != UINT64_MAX)
		*budget = *budget > run.length ? *budget - run.length : 0;
	s->sweep.run = RUN_NONE;
	return true;
}

static void count_zero(struct rdmig_source *s, uint64_t pages, bool skipped)
{
	pthread_mutex_lock(&s->ss.stats.lock);
	s->ss.stats.st.zero_pages += pages;
	if (skipped)
		s->ss.stats.st.zero_pages_skipped += pages;
	pthread_mutex_unlock(&s->ss.stats.lock);
}

/* Cuts the pending WRITE run into ops that stay within a chunk (and so
 * within a pin-all piece) and merge_max; false once the window is full. */
static bool cut_pending(struct rdmig_source *s)
{
	struct src_sweep *w = &s->sweep;
	const struct src_block *b = &s->blocks[w->block];
	uint64_t chunk = 1ull << s->chunk_shift, len;

	while (w->pending.length) {
		if (!wp_room(&s->wp))
			return false;
		len = chunk - (w->pending.offset & (chunk - 1));
		if (len > s->op_max)
			len = s->op_max;
		if (len > w->pending.length)
			len = w->pending.length;
		wp_push(&s->wp, &(struct wp_op){
			.block = w->block, .offset = w->pending.offset, .length = len,
			.slot = b->first_slot + (w->pending.offset >> s->slot_shift) });
		w->pending.offset += len;
		w->pending.length -= len;
	}
	w->run = RUN_NONE;
	return true;
}

static int take_zero(struct rdmig_source *s, const struct plan_op *op)
{
	s->zr_block[s->zr_n] = s->sweep.block;
	s->zr_offset[s->zr_n] = op->offset;
	s->zr_length[s->zr_n] = op->length;
	s->zr_n++;
	s->zr_bytes += op->length;
	count_zero(s, op->pages, false);
	return 0;
}

/* The longest zero run plan_next() returns for @b. */
static uint64_t max_zero_run(const struct src_block *b)
{
	return SWEEP_ZERO_RUN > b->d.page_size ? SWEEP_ZERO_RUN : b->d.page_size;
}

static int zero_hint(void *ctx, uint64_t page)
{
	struct rdmig_source *s = ctx;

	return zs_hint(&s->zs, s->sweep.block, page);
}

static struct plan_params plan_of(struct rdmig_source *s, const struct src_block *b)
{
	struct plan_params p = { .chunk_shift = s->chunk_shift,
				 .merge_max = s->ss.cfg.merge_max,
				 .page_size = b->d.page_size,
				 .detect_zero = !!(s->ss.caps & PD_CAP_ZERO_PAGES),
				 .dest_zeroed = b->dest_zeroed,
				 .max_zero_pages = SWEEP_ZERO_RUN / b->d.page_size ?
						   SWEEP_ZERO_RUN / b->d.page_size : 1,
				 .zero_hint = s->zs_on ? zero_hint : NULL, .hint_ctx = s };

	/* A huge page is one dirty unit; cut_pending cuts it into WRITEs of
	 * at most merge_max, each within a chunk. */
	if (p.merge_max < p.page_size)
		p.merge_max = p.page_size;
	return p;
}

int src_sweep_fill(struct rdmig_source *s, int64_t until, uint64_t *budget, bool *moved)
{
	struct src_sweep *w = &s->sweep;
	struct plan_params p;
	struct src_block *b;
	struct plan_op op;
	int rc;

	for (;;) {
		rc = 0;
		if ((w->run == RUN_PACK && !pack_run(s, &w->pending, budget, &rc)) ||
		    (w->run == RUN_WRITE && !cut_pending(s)))
			return rc;
		/* Full, or the next range might take it past what one message
		 * may cover. */
		if (s->zr_n == s->zr_max || (w->block < s->nblocks &&
		    s->zr_bytes + max_zero_run(&s->blocks[w->block]) > CTRL_ZERO_BYTES_MAX)) {
			rc = flush_zero_ranges(s);
			if (rc)
				return rc == -EAGAIN ? 0 : rc;
		}
		if (w->block == s->nblocks)
			break;
		/* Time is up once something was planned: every step moves. */
		if (*moved && rd_now_us() > until)
			return 0;
		b = &s->blocks[w->block];
		p = plan_of(s, b);
		if (s->zs_on)
			zs_feed(&s->zs, w->block, w->cursor);
		if (!plan_next(&p, b->host, b->d.length, b->sending, b->written, &w->cursor, &op)) {
			w->block++;
			w->cursor = 0;
			continue;
		}
		*moved = true;
		if (op.kind == PLAN_WRITE && packable(s, &op)) {
			if (!pack_run(s, &op, budget, &rc))
				return rc;
		} else if (op.kind == PLAN_WRITE) {
			w->pending = op;
			w->run = RUN_WRITE;
		} else if (op.kind == PLAN_ZERO) {
			take_zero(s, &op);
		} else {
			count_zero(s, op.pages, true);
		}
	}
	rc = flush_zero_ranges(s);
	if (!rc)
		rc = flush_pages(s);
	return rc == -EAGAIN ? 0 : rc;
}
