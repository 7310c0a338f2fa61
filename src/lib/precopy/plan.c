#include "plan.h"

#include "bitmap.h"
#include "blocks.h"
#include "zero.h"

/* Everything one call needs about the block, computed once. */
struct plan_ctx {
	const struct plan_params *p;
	const uint8_t *host;
	uint64_t blk_len, npages;
	const uint64_t *dirty, *written;
};

static enum plan_kind plan_classify(const struct plan_ctx *c, uint64_t page)
{
	uint64_t off, len;
	int zero = -1;

	if (!c->p->detect_zero)
		return PLAN_WRITE;
	if (c->p->zero_hint)
		zero = c->p->zero_hint(c->p->hint_ctx, page);
	if (zero < 0) {
		blk_page_span(c->blk_len, c->p->page_size, page, &off, &len);
		zero = zero_is_zero(c->host + off, len);
	}
	if (!zero)
		return PLAN_WRITE;
	if (c->p->dest_zeroed && !bm_test(c->written, page))
		return PLAN_SKIP;
	return PLAN_ZERO;
}

/* Pages in a WRITE starting at @first: up to the chunk end and merge_max. */
static uint64_t plan_write_limit(const struct plan_ctx *c, uint64_t first)
{
	unsigned shift = c->p->chunk_shift;
	uint64_t chunk_end, max_pages, lim;

	chunk_end = ((first * c->p->page_size >> shift) + 1) << shift;
	lim = blk_npages(chunk_end, c->p->page_size);
	max_pages = c->p->merge_max / c->p->page_size;
	if (!max_pages)
		max_pages = 1;
	if (lim - first > max_pages)
		lim = first + max_pages;
	return lim < c->npages ? lim : c->npages;
}

/* End (exclusive) of the run of @kind starting at dirty page @first. */
static uint64_t plan_run_end(const struct plan_ctx *c, enum plan_kind kind, uint64_t first)
{
	uint64_t lim = kind == PLAN_WRITE ? plan_write_limit(c, first) : c->npages;
	uint64_t next;

	if (kind != PLAN_WRITE && c->p->max_zero_pages && lim - first > c->p->max_zero_pages)
		lim = first + c->p->max_zero_pages;

	/* Without zero detection every dirty page is a WRITE: the bitmap alone
	 * decides, a word at a time.  With it, each page is read anyway, and
	 * the search must not run ahead to the end of a long dirty run on
	 * every call. */
	if (!c->p->detect_zero)
		return bm_next_clear(c->dirty, lim, first + 1);
	for (next = first + 1; next < lim; next++)
		if (!bm_test(c->dirty, next) || plan_classify(c, next) != kind)
			break;
	return next;
}

int plan_next(const struct plan_params *p, const uint8_t *host, uint64_t blk_len,
	      uint64_t *dirty, uint64_t *written, uint64_t *cursor, struct plan_op *op)
{
	struct plan_ctx c = {
		.p = p, .host = host, .blk_len = blk_len,
		.npages = blk_npages(blk_len, p->page_size),
		.dirty = dirty, .written = written,
	};
	uint64_t first, end, len;

	first = bm_next_set(dirty, c.npages, *cursor);
	if (first == c.npages) {
		*cursor = c.npages;
		return 0;
	}
	op->kind = plan_classify(&c, first);
	end = plan_run_end(&c, op->kind, first);
	op->offset = first * p->page_size;
	len = (end - first) * p->page_size;
	op->length = len < blk_len - op->offset ? len : blk_len - op->offset;
	op->pages = end - first;
	op->chunk = op->offset >> p->chunk_shift;
	bm_clear_range(dirty, first, end - first);
	if (op->kind == PLAN_WRITE)
		bm_set_range(written, first, end - first);
	else if (op->kind == PLAN_ZERO)
		bm_clear_range(written, first, end - first);
	*cursor = end;
	return 1;
}
