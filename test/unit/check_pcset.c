/* pcset: the page set of post-copy cut into ranges and taken back, and
 * the keys to read the source's memory; every rule a receiver enforces. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "bitmap.h"
#include "pcset.h"
#include "suite.h"
#include "suites.h"

#define CHECK(expr, ...) do { if (!(expr)) ck_abort_msg(__VA_ARGS__); } while (0)

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random sets over three blocks (one empty, one of a single page), cut in
 * messages of up to @max ranges, taken back: the same sets, the same
 * count, every message accepted. */
static void round_trip(size_t max, uint64_t seed)
{
	const uint64_t npages[3] = { 1000, 1, 4097 };
	uint64_t *src[3], *dst[3], pages = 0, i, s = seed;
	uint32_t blk[64];
	uint64_t first[64], count[64];
	struct pcset_cursor c = { 0, 0 };
	struct pcset_rx rx;
	struct rd_err e;
	unsigned b;
	size_t n;

	for (b = 0; b < 3; b++) {
		src[b] = bm_alloc(npages[b]);
		dst[b] = bm_alloc(npages[b]);
		for (i = 0; b != 1 && i < npages[b]; i++)
			if (rng_next(&s) % 3 == 0)
				bm_set(src[b], i);
	}
	bm_set(src[1], 0);
	pcset_rx_init(&rx, 3, npages, dst);
	while ((n = pcset_cut((const uint64_t *const *)src, npages, 3, &c, blk, first, count,
			      max, &pages)) > 0) {
		CHECK(n <= max, "cut %zu ranges, at most %zu asked", n, max);
		CHECK(!pcset_take(&rx, blk, first, count, n, &e), "taken back: %s", e.msg);
	}
	CHECK(c.block == 3, "the cursor ends past the last block");
	CHECK(rx.pages == pages, "%lu pages taken, %lu cut", (unsigned long)rx.pages,
	      (unsigned long)pages);
	for (b = 0; b < 3; b++) {
		CHECK(!memcmp(src[b], dst[b], bm_words(npages[b]) * 8), "block %u differs", b);
		pages -= bm_count(src[b], npages[b]);
		bm_free(src[b]);
		bm_free(dst[b]);
	}
	CHECK(pages == 0, "the count is the bits set");
}

START_TEST(cut_and_take)
{
	round_trip(1, 1);
	round_trip(3, 2);
	round_trip(64, 3);
}
END_TEST

START_TEST(empty_set)
{
	const uint64_t npages[2] = { 10, 20 };
	uint64_t *bm[2] = { bm_alloc(10), bm_alloc(20) }, pages = 0, first[4], count[4];
	struct pcset_cursor c = { 0, 0 };
	uint32_t blk[4];

	ck_assert_uint_eq(pcset_cut((const uint64_t *const *)bm, npages, 2, &c, blk, first,
				    count, 4, &pages), 0);
	ck_assert_uint_eq(c.block, 2);
	ck_assert_uint_eq(pages, 0);
	bm_free(bm[0]);
	bm_free(bm[1]);
}
END_TEST

/* Takes one message of @n ranges after @prev (one range, or none when
 * @prev_n is 0) and returns what pcset_take said. */
static int take(const uint32_t *blk, const uint64_t *first, const uint64_t *count, size_t n,
		struct rd_err *e, uint64_t **bm)
{
	static const uint64_t npages[2] = { 100, 50 };
	struct pcset_rx rx;

	memset(bm[0], 0, bm_words(100) * 8);
	memset(bm[1], 0, bm_words(50) * 8);
	pcset_rx_init(&rx, 2, npages, bm);
	return pcset_take(&rx, blk, first, count, n, e);
}

START_TEST(ranges_refused)
{
	uint64_t *bm[2] = { bm_alloc(100), bm_alloc(50) };
	struct rd_err e;

	/* A block that does not exist. */
	ck_assert_int_eq(take((uint32_t[]){ 2 }, (uint64_t[]){ 0 }, (uint64_t[]){ 1 }, 1, &e, bm),
			 -EPROTO);
	ck_assert_ptr_nonnull(strstr(e.msg, "block index 2 of 2"));
	/* Empty, past the end, wrapping around. */
	ck_assert_int_eq(take((uint32_t[]){ 0 }, (uint64_t[]){ 5 }, (uint64_t[]){ 0 }, 1, &e, bm),
			 -EPROTO);
	ck_assert_int_eq(take((uint32_t[]){ 1 }, (uint64_t[]){ 40 }, (uint64_t[]){ 11 }, 1, &e,
			      bm), -EPROTO);
	ck_assert_int_eq(take((uint32_t[]){ 0 }, (uint64_t[]){ UINT64_MAX }, (uint64_t[]){ 2 }, 1,
			      &e, bm), -EPROTO);
	/* Out of order, overlapping, a block again after a later one. */
	ck_assert_int_eq(take((uint32_t[]){ 0, 0 }, (uint64_t[]){ 10, 5 }, (uint64_t[]){ 1, 1 },
			      2, &e, bm), -EPROTO);
	ck_assert_ptr_nonnull(strstr(e.msg, "not after"));
	ck_assert_int_eq(take((uint32_t[]){ 0, 0 }, (uint64_t[]){ 10, 12 }, (uint64_t[]){ 3, 1 },
			      2, &e, bm), -EPROTO);
	ck_assert_int_eq(take((uint32_t[]){ 1, 0 }, (uint64_t[]){ 0, 90 }, (uint64_t[]){ 1, 1 },
			      2, &e, bm), -EPROTO);
	/* Nothing of a refused message was set. */
	ck_assert_uint_eq(bm_count(bm[0], 100) + bm_count(bm[1], 50), 0);
	/* Touching ranges, the last page of each block: fine. */
	ck_assert_int_eq(take((uint32_t[]){ 0, 0, 1 }, (uint64_t[]){ 10, 13, 49 },
			      (uint64_t[]){ 3, 87, 1 }, 3, &e, bm), 0);
	ck_assert_uint_eq(bm_count(bm[0], 100), 90);
	ck_assert_uint_eq(bm_count(bm[1], 50), 1);
	bm_free(bm[0]);
	bm_free(bm[1]);
}
END_TEST

/* Order holds across messages too. */
START_TEST(order_across_messages)
{
	static const uint64_t npages[1] = { 100 };
	uint64_t *bm[1] = { bm_alloc(100) };
	struct pcset_rx rx;
	struct rd_err e;

	pcset_rx_init(&rx, 1, npages, bm);
	ck_assert_int_eq(pcset_take(&rx, (uint32_t[]){ 0 }, (uint64_t[]){ 20 },
				    (uint64_t[]){ 10 }, 1, &e), 0);
	ck_assert_int_eq(pcset_take(&rx, (uint32_t[]){ 0 }, (uint64_t[]){ 25 },
				    (uint64_t[]){ 1 }, 1, &e), -EPROTO);
	ck_assert_int_eq(pcset_take(&rx, (uint32_t[]){ 0 }, (uint64_t[]){ 30 },
				    (uint64_t[]){ 1 }, 1, &e), 0);
	ck_assert_uint_eq(rx.pages, 11);
	bm_free(bm[0]);
}
END_TEST

START_TEST(keys)
{
	/* 3 MiB and a page, and 1 MiB: pieces of 1 MiB, 4 + 1. */
	static const uint64_t len[2] = { (3u << 20) + 4096, 1u << 20 };
	struct pckeys k;
	struct rd_err e;
	uint32_t rkey;
	uint64_t left, at;

	pckeys_init(&k, 2, len);
	ck_assert(!pckeys_complete(&k));
	/* A size outside the limits. */
	ck_assert_int_eq(pckeys_take(&k, 12, (uint32_t[]){ 0 }, (uint64_t[]){ 0 },
				     (uint64_t[]){ 0x1000 }, (uint32_t[]){ 1 }, 1, &e), -EPROTO);
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 0, 0 }, (uint64_t[]){ 0, 3 },
				     (uint64_t[]){ 0x100000, 0x400000 }, (uint32_t[]){ 7, 8 }, 2,
				     &e), 0);
	/* Another size, a piece twice (in one message, or again), one past
	 * the end, a block that does not exist, an address that wraps. */
	ck_assert_int_eq(pckeys_take(&k, 21, (uint32_t[]){ 0 }, (uint64_t[]){ 1 },
				     (uint64_t[]){ 1 }, (uint32_t[]){ 1 }, 1, &e), -EPROTO);
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 0, 0 }, (uint64_t[]){ 1, 1 },
				     (uint64_t[]){ 1, 1 }, (uint32_t[]){ 1, 1 }, 2, &e), -EPROTO);
	ck_assert_ptr_nonnull(strstr(e.msg, "has a key already"));
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 0 }, (uint64_t[]){ 3 },
				     (uint64_t[]){ 1 }, (uint32_t[]){ 1 }, 1, &e), -EPROTO);
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 0 }, (uint64_t[]){ 4 },
				     (uint64_t[]){ 1 }, (uint32_t[]){ 1 }, 1, &e), -EPROTO);
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 2 }, (uint64_t[]){ 0 },
				     (uint64_t[]){ 1 }, (uint32_t[]){ 1 }, 1, &e), -EPROTO);
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 1 }, (uint64_t[]){ 0 },
				     (uint64_t[]){ UINT64_MAX - 100 }, (uint32_t[]){ 1 }, 1, &e),
			 -EPROTO);
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 1 }, (uint64_t[]){ 0 },
				     (uint64_t[]){ 0 }, (uint32_t[]){ 1 }, 1, &e), -EPROTO);
	/* A refused message left its first entries unseen: block 0's piece 1
	 * (refused above, twice in one message) is still free. */
	ck_assert(!pckeys_complete(&k));
	ck_assert_int_eq(pckeys_take(&k, 20, (uint32_t[]){ 0, 0, 1 }, (uint64_t[]){ 1, 2, 0 },
				     (uint64_t[]){ 0x200000, 0x300000, 0x9000000 },
				     (uint32_t[]){ 9, 10, 11 }, 3, &e), 0);
	ck_assert(pckeys_complete(&k));
	/* The last piece is a page long; offsets map into the pieces. */
	at = pckeys_at(&k, 0, (3u << 20) + 100, &rkey, &left);
	ck_assert_uint_eq(at, 0x400000 + 100);
	ck_assert_uint_eq(rkey, 8);
	ck_assert_uint_eq(left, 4096 - 100);
	at = pckeys_at(&k, 0, (1u << 20) + 4096, &rkey, &left);
	ck_assert_uint_eq(at, 0x200000 + 4096);
	ck_assert_uint_eq(rkey, 9);
	ck_assert_uint_eq(left, (1u << 20) - 4096);
	at = pckeys_at(&k, 1, 0, &rkey, &left);
	ck_assert_uint_eq(at, 0x9000000);
	ck_assert_uint_eq(left, 1u << 20);
	pckeys_fini(&k);
}
END_TEST

void pcset_cases(Suite *s)
{
	TCase *tc = tu_case(s, "ranges", 0);

	tcase_add_test(tc, cut_and_take);
	tcase_add_test(tc, empty_set);
	tcase_add_test(tc, ranges_refused);
	tcase_add_test(tc, order_across_messages);
	tc = tu_case(s, "keys", 0);
	tcase_add_test(tc, keys);
}
