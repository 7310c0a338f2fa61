#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bitmap.h"
#include "blocks.h"
#include "plan.h"
#include "suite.h"
#include "suites.h"
#include "util.h"

#define PG 4096u
#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define MAX_OPS 4096

/* ck_assert reports every passing check to the runner (a write per call):
 * per-page loops test first and fail once. */
#define CHECK(expr, ...) do { if (!(expr)) ck_abort_msg(__VA_ARGS__); } while (0)

/* One block under test: memory (page-rounded, with 0xee past blk_len so a
 * scan beyond the block would see data), dirty and written maps. */
struct blk {
	uint8_t *host;
	uint64_t len, npages;
	uint64_t *dirty, *written;
	struct plan_op ops[MAX_OPS];
	unsigned nops;
};

static void blk_setup(struct blk *b, uint64_t len, uint32_t page_size)
{
	uint64_t alloc;

	memset(b, 0, sizeof(*b));
	b->len = len;
	b->npages = blk_npages(len, page_size);
	alloc = b->npages * page_size;
	b->host = aligned_alloc(PG, alloc ? alloc : PG);
	ck_assert_ptr_nonnull(b->host);
	memset(b->host, 0, len);
	memset(b->host + len, 0xee, alloc - len);
	b->dirty = bm_alloc(b->npages);
	b->written = bm_alloc(b->npages);
	ck_assert_ptr_nonnull(b->dirty);
	ck_assert_ptr_nonnull(b->written);
}

static void blk_teardown(struct blk *b)
{
	free(b->host);
	bm_free(b->dirty);
	bm_free(b->written);
}

/* Puts a non-zero byte in every page of [first, first + n). */
static void fill_pages(struct blk *b, uint32_t page_size, uint64_t first, uint64_t n)
{
	uint64_t i;

	for (i = first; i < first + n; i++)
		b->host[i * page_size] = 0x5a;
}

/* Runs plan_next from page 0 until it returns 0; returns the op count. */
static unsigned run_plan(struct blk *b, const struct plan_params *p)
{
	uint64_t cursor = 0;

	b->nops = 0;
	while (plan_next(p, b->host, b->len, b->dirty, b->written, &cursor, &b->ops[b->nops])) {
		ck_assert_uint_lt(b->nops, MAX_OPS - 1);
		b->nops++;
	}
	ck_assert_uint_eq(cursor, b->npages);
	ck_assert_uint_eq(bm_count(b->dirty, b->npages), 0);
	return b->nops;
}

static void assert_op(const struct plan_op *op, enum plan_kind kind, uint64_t offset,
		      uint64_t length, uint64_t pages, uint64_t chunk)
{
	ck_assert_int_eq(op->kind, kind);
	ck_assert_uint_eq(op->offset, offset);
	ck_assert_uint_eq(op->length, length);
	ck_assert_uint_eq(op->pages, pages);
	ck_assert_uint_eq(op->chunk, chunk);
}

START_TEST(writes_stop_at_chunk_end)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 2 * MiB, .page_size = PG,
				 .detect_zero = true };
	static struct blk b;
	unsigned i;

	blk_setup(&b, 4 * MiB, PG);
	fill_pages(&b, PG, 0, b.npages);
	bm_set_range(b.dirty, 0, b.npages);
	ck_assert_uint_eq(run_plan(&b, &p), 4);
	for (i = 0; i < 4; i++)
		assert_op(&b.ops[i], PLAN_WRITE, i * MiB, MiB, 256, i);
	ck_assert_uint_eq(bm_count(b.written, b.npages), b.npages);

	/* A run starting mid-chunk stops at that chunk's end. */
	bm_set_range(b.dirty, 200, 100);
	ck_assert_uint_eq(run_plan(&b, &p), 2);
	assert_op(&b.ops[0], PLAN_WRITE, 200 * PG, 56 * PG, 56, 0);
	assert_op(&b.ops[1], PLAN_WRITE, MiB, 44 * PG, 44, 1);
	blk_teardown(&b);
}
END_TEST

START_TEST(writes_stop_at_merge_max)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 256 * KiB, .page_size = PG,
				 .detect_zero = false };
	static struct blk b;
	unsigned i;

	blk_setup(&b, 2 * MiB, PG);
	fill_pages(&b, PG, 0, b.npages);
	bm_set_range(b.dirty, 0, b.npages);
	ck_assert_uint_eq(run_plan(&b, &p), 8);
	for (i = 0; i < 8; i++)
		assert_op(&b.ops[i], PLAN_WRITE, i * 256 * KiB, 256 * KiB, 64, i / 4);

	/* merge_max 3 pages in 16 KiB chunks: 3 + 1 per chunk. */
	p.chunk_shift = 14;
	p.merge_max = 3 * PG;
	bm_set_range(b.dirty, 0, 8);
	ck_assert_uint_eq(run_plan(&b, &p), 4);
	assert_op(&b.ops[0], PLAN_WRITE, 0, 3 * PG, 3, 0);
	assert_op(&b.ops[1], PLAN_WRITE, 3 * PG, PG, 1, 0);
	assert_op(&b.ops[2], PLAN_WRITE, 4 * PG, 3 * PG, 3, 1);
	assert_op(&b.ops[3], PLAN_WRITE, 7 * PG, PG, 1, 1);

	/* merge_max below a page still makes progress, one page at a time. */
	p.merge_max = 0;
	bm_set_range(b.dirty, 10, 2);
	ck_assert_uint_eq(run_plan(&b, &p), 2);
	assert_op(&b.ops[1], PLAN_WRITE, 11 * PG, PG, 1, 2);
	blk_teardown(&b);
}
END_TEST

/* 3 MiB + 12 KiB + 100 bytes: a partial last chunk and a partial last page. */
START_TEST(block_not_a_multiple_of_chunk)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 2 * MiB, .page_size = PG,
				 .detect_zero = true };
	const uint64_t len = 3 * MiB + 12 * KiB + 100;
	static struct blk b;

	blk_setup(&b, len, PG);
	ck_assert_uint_eq(b.npages, 768 + 4);
	fill_pages(&b, PG, 0, b.npages);
	bm_set_range(b.dirty, 0, b.npages);
	ck_assert_uint_eq(run_plan(&b, &p), 4);
	assert_op(&b.ops[2], PLAN_WRITE, 2 * MiB, MiB, 256, 2);
	assert_op(&b.ops[3], PLAN_WRITE, 3 * MiB, 12 * KiB + 100, 4, 3);

	/* The partial page is zero within the block; the 0xee past its end
	 * must not count. */
	b.host[3 * MiB + 12 * KiB] = 0;
	bm_set(b.dirty, b.npages - 1);
	bm_set(b.dirty, b.npages - 2);
	ck_assert_uint_eq(run_plan(&b, &p), 2);
	assert_op(&b.ops[0], PLAN_WRITE, 3 * MiB + 8 * KiB, PG, 1, 3);
	assert_op(&b.ops[1], PLAN_ZERO, 3 * MiB + 12 * KiB, 100, 1, 3);
	ck_assert(!bm_test(b.written, b.npages - 1));
	blk_teardown(&b);
}
END_TEST

START_TEST(alternating_zero_pages)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 2 * MiB, .page_size = PG,
				 .detect_zero = true };
	static struct blk b;
	unsigned i;

	blk_setup(&b, 16 * PG, PG);
	for (i = 0; i < 16; i += 2)
		fill_pages(&b, PG, i, 1);
	bm_set_range(b.dirty, 0, 16);
	bm_set_range(b.written, 0, 16);
	ck_assert_uint_eq(run_plan(&b, &p), 16);
	for (i = 0; i < 16; i++)
		assert_op(&b.ops[i], i % 2 ? PLAN_ZERO : PLAN_WRITE, i * PG, PG, 1, 0);
	for (i = 0; i < 16; i++)
		ck_assert(bm_test(b.written, i) == !(i % 2));
	blk_teardown(&b);
}
END_TEST

START_TEST(zero_block_skipped_when_dest_zeroed)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 2 * MiB, .page_size = PG,
				 .detect_zero = true, .dest_zeroed = true };
	static struct blk b;

	blk_setup(&b, 5 * MiB + 1, PG);
	bm_set_range(b.dirty, 0, b.npages);
	ck_assert_uint_eq(run_plan(&b, &p), 1);
	assert_op(&b.ops[0], PLAN_SKIP, 0, 5 * MiB + 1, b.npages, 0);
	ck_assert_uint_eq(bm_count(b.written, b.npages), 0);

	/* One run per dirty run. */
	bm_set_range(b.dirty, 10, 300);
	bm_set_range(b.dirty, 400, 800);
	ck_assert_uint_eq(run_plan(&b, &p), 2);
	assert_op(&b.ops[0], PLAN_SKIP, 10 * PG, 300 * PG, 300, 0);
	assert_op(&b.ops[1], PLAN_SKIP, 400 * PG, 800 * PG, 800, 1);

	/* Without dest_zeroed the destination must clear them, across chunks. */
	p.dest_zeroed = false;
	bm_set_range(b.written, 0, b.npages);
	bm_set_range(b.dirty, 0, b.npages);
	ck_assert_uint_eq(run_plan(&b, &p), 1);
	assert_op(&b.ops[0], PLAN_ZERO, 0, 5 * MiB + 1, b.npages, 0);
	ck_assert_uint_eq(bm_count(b.written, b.npages), 0);
	blk_teardown(&b);
}
END_TEST

START_TEST(page_written_then_zeroed_is_cleared)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 2 * MiB, .page_size = PG,
				 .detect_zero = true, .dest_zeroed = true };
	static struct blk b;

	blk_setup(&b, 8 * PG, PG);
	fill_pages(&b, PG, 2, 2);
	bm_set_range(b.dirty, 0, 8);
	ck_assert_uint_eq(run_plan(&b, &p), 3);
	assert_op(&b.ops[0], PLAN_SKIP, 0, 2 * PG, 2, 0);
	assert_op(&b.ops[1], PLAN_WRITE, 2 * PG, 2 * PG, 2, 0);
	assert_op(&b.ops[2], PLAN_SKIP, 4 * PG, 4 * PG, 4, 0);

	/* Iteration 2: pages 1..4 dirty, all zero now: 1 was never written
	 * (skip), 2 and 3 hold data on the destination (zero them), 4 skip. */
	memset(b.host, 0, 8 * PG);
	bm_set_range(b.dirty, 1, 4);
	ck_assert_uint_eq(run_plan(&b, &p), 3);
	assert_op(&b.ops[0], PLAN_SKIP, PG, PG, 1, 0);
	assert_op(&b.ops[1], PLAN_ZERO, 2 * PG, 2 * PG, 2, 0);
	assert_op(&b.ops[2], PLAN_SKIP, 4 * PG, PG, 1, 0);

	/* Iteration 3: zeroed explicitly, so skipping is safe again. */
	bm_set_range(b.dirty, 2, 2);
	ck_assert_uint_eq(run_plan(&b, &p), 1);
	assert_op(&b.ops[0], PLAN_SKIP, 2 * PG, 2 * PG, 2, 0);
	blk_teardown(&b);
}
END_TEST

START_TEST(no_zero_detection_writes_everything)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 2 * MiB, .page_size = PG,
				 .detect_zero = false, .dest_zeroed = true };
	static struct blk b;
	uint64_t cursor = 0;
	struct plan_op op;

	blk_setup(&b, 2 * MiB, PG);
	fill_pages(&b, PG, 7, 1);
	bm_set_range(b.dirty, 0, b.npages);
	ck_assert_uint_eq(run_plan(&b, &p), 2);
	assert_op(&b.ops[0], PLAN_WRITE, 0, MiB, 256, 0);
	assert_op(&b.ops[1], PLAN_WRITE, MiB, MiB, 256, 1);

	/* The memory is not even looked at. */
	bm_set_range(b.dirty, 3, 2);
	ck_assert_int_eq(plan_next(&p, NULL, b.len, b.dirty, b.written, &cursor, &op), 1);
	assert_op(&op, PLAN_WRITE, 3 * PG, 2 * PG, 2, 0);
	blk_teardown(&b);
}
END_TEST

START_TEST(cursor_bounds_the_scan)
{
	struct plan_params p = { .chunk_shift = 20, .merge_max = 2 * MiB, .page_size = PG,
				 .detect_zero = true };
	static struct blk b;
	uint64_t cursor = 5;
	struct plan_op op;

	blk_setup(&b, 64 * PG, PG);
	fill_pages(&b, PG, 0, 64);
	bm_set_range(b.dirty, 2, 6);
	ck_assert_int_eq(plan_next(&p, b.host, b.len, b.dirty, b.written, &cursor, &op), 1);
	assert_op(&op, PLAN_WRITE, 5 * PG, 3 * PG, 3, 0);
	ck_assert_uint_eq(cursor, 8);
	ck_assert_int_eq(plan_next(&p, b.host, b.len, b.dirty, b.written, &cursor, &op), 0);
	ck_assert_uint_eq(cursor, 64);
	/* Pages before the cursor stay dirty for the next pass. */
	ck_assert_uint_eq(bm_count(b.dirty, 64), 3);
	cursor = 1000;
	ck_assert_int_eq(plan_next(&p, b.host, b.len, b.dirty, b.written, &cursor, &op), 0);
	blk_teardown(&b);
}
END_TEST

START_TEST(huge_pages)
{
	struct plan_params p = { .chunk_shift = 22, .merge_max = 4 * MiB, .page_size = 2 * MiB,
				 .detect_zero = true };
	static struct blk b;

	blk_setup(&b, 9 * MiB, 2 * MiB);
	fill_pages(&b, 2 * MiB, 0, 2);
	b.host[9 * MiB - 1] = 1;
	bm_set_range(b.dirty, 0, 5);
	ck_assert_uint_eq(run_plan(&b, &p), 3);
	assert_op(&b.ops[0], PLAN_WRITE, 0, 4 * MiB, 2, 0);
	assert_op(&b.ops[1], PLAN_ZERO, 4 * MiB, 4 * MiB, 2, 1);
	assert_op(&b.ops[2], PLAN_WRITE, 8 * MiB, MiB, 1, 2);
	blk_teardown(&b);
}
END_TEST

/* ---- property test against a page-by-page reference -------------------- */

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static enum plan_kind ref_kind(const struct plan_params *p, const struct blk *b,
			       const uint64_t *written0, uint64_t page)
{
	uint64_t off = page * p->page_size, end = off + p->page_size, i;

	if (!p->detect_zero)
		return PLAN_WRITE;
	if (end > b->len)
		end = b->len;
	for (i = off; i < end; i++)
		if (b->host[i])
			return PLAN_WRITE;
	return p->dest_zeroed && !bm_test(written0, page) ? PLAN_SKIP : PLAN_ZERO;
}

/* Why a WRITE may end before the next page: the run, the chunk or merge_max. */
static bool write_may_end(const struct plan_params *p, const struct plan_op *op,
			  const uint64_t *dirty0, uint64_t next, uint64_t npages)
{
	return next == npages || !bm_test(dirty0, next) ||
	       ((next * p->page_size) >> p->chunk_shift) != op->chunk ||
	       (op->pages + 1) * p->page_size > p->merge_max;
}

static void check_random_round(uint64_t *seed)
{
	static struct blk b;
	struct plan_params p = { 0 };
	uint64_t *dirty0, *written0, *covered, len, pg, i, page;
	unsigned k;

	p.page_size = PG << (rng(seed) % 2);
	p.chunk_shift = (unsigned)(__builtin_ctz(p.page_size) + rng(seed) % 4);
	p.merge_max = p.page_size * (1 + rng(seed) % 6);
	p.detect_zero = rng(seed) % 4 != 0;
	p.dest_zeroed = rng(seed) % 2;
	/* Sometimes zero runs are cut short, as a bounded sweep does. */
	p.max_zero_pages = rng(seed) % 3 ? 0 : 1 + rng(seed) % 8;
	len = 1 + rng(seed) % (80 * PG);
	blk_setup(&b, len, p.page_size);
	dirty0 = bm_alloc(b.npages);
	written0 = bm_alloc(b.npages);
	covered = bm_alloc(b.npages);
	ck_assert(dirty0 && written0 && covered);
	for (page = 0; page < b.npages; page++) {
		uint64_t off = page * p.page_size, plen = len - off < p.page_size ? len - off : p.page_size;

		if (rng(seed) % 3)
			bm_set(b.dirty, page);
		if (rng(seed) % 2)
			bm_set(b.written, page);
		if (rng(seed) % 2)
			b.host[off + rng(seed) % plen] = (uint8_t)(1 + rng(seed) % 255);
	}
	memcpy(dirty0, b.dirty, bm_words(b.npages) * 8);
	memcpy(written0, b.written, bm_words(b.npages) * 8);
	run_plan(&b, &p);

	for (k = 0; k < b.nops; k++) {
		const struct plan_op *op = &b.ops[k];
		uint64_t first = op->offset / p.page_size, end = first + op->pages;

		ck_assert_uint_eq(op->offset % p.page_size, 0);
		ck_assert_uint_gt(op->pages, 0);
		ck_assert_uint_le(end, b.npages);
		pg = op->pages * p.page_size;
		ck_assert_uint_eq(op->length, end == b.npages ? len - op->offset : pg);
		ck_assert_uint_eq(op->chunk, op->offset >> p.chunk_shift);
		if (op->kind == PLAN_WRITE) {
			ck_assert_uint_le(pg, p.merge_max);
			ck_assert_uint_eq((op->offset + pg - 1) >> p.chunk_shift, op->chunk);
		}
		for (page = first; page < end; page++) {
			CHECK(bm_test(dirty0, page), "clean page %lu in an op", (unsigned long)page);
			CHECK(!bm_test(covered, page), "page %lu twice", (unsigned long)page);
			bm_set(covered, page);
			CHECK(op->kind == ref_kind(&p, &b, written0, page), "page %lu: kind %d, want %d",
			      (unsigned long)page, op->kind, ref_kind(&p, &b, written0, page));
		}
		/* Runs are maximal: a run of the same kind goes on unless a
		 * limit stops it. */
		if (end < b.npages && bm_test(dirty0, end) &&
		    ref_kind(&p, &b, written0, end) == op->kind)
			CHECK(op->kind == PLAN_WRITE ?
			      write_may_end(&p, op, dirty0, end, b.npages) :
			      p.max_zero_pages && op->pages == p.max_zero_pages,
			      "op %u at page %lu ended early", k, (unsigned long)first);
		if (op->kind != PLAN_WRITE && p.max_zero_pages)
			CHECK(op->pages <= p.max_zero_pages, "op %u: %lu zero pages, limit %lu", k,
			      (unsigned long)op->pages, (unsigned long)p.max_zero_pages);
	}
	for (i = 0; i < bm_words(b.npages); i++)
		ck_assert_uint_eq(covered[i], dirty0[i]);
	for (page = 0; page < b.npages; page++) {
		bool want = bm_test(written0, page);

		if (bm_test(dirty0, page)) {
			enum plan_kind kind = ref_kind(&p, &b, written0, page);

			want = kind == PLAN_WRITE ? true : kind == PLAN_ZERO ? false : want;
		}
		CHECK(bm_test(b.written, page) == want, "written bit of page %lu", (unsigned long)page);
	}
	bm_free(dirty0);
	bm_free(written0);
	bm_free(covered);
	blk_teardown(&b);
}

START_TEST(random_blocks_match_reference)
{
	uint64_t seed = 0x2545f4914f6cdd1d + (uint64_t)_i;
	unsigned round;

	for (round = 0; round < 50; round++)
		check_random_round(&seed);
}
END_TEST

void plan_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 120);

	tcase_add_test(tc, writes_stop_at_chunk_end);
	tcase_add_test(tc, writes_stop_at_merge_max);
	tcase_add_test(tc, block_not_a_multiple_of_chunk);
	tcase_add_test(tc, alternating_zero_pages);
	tcase_add_test(tc, zero_block_skipped_when_dest_zeroed);
	tcase_add_test(tc, page_written_then_zeroed_is_cleared);
	tcase_add_test(tc, no_zero_detection_writes_everything);
	tcase_add_test(tc, cursor_bounds_the_scan);
	tcase_add_test(tc, huge_pages);
	tcase_add_loop_test(tc, random_blocks_match_reference, 0, 20);
}
