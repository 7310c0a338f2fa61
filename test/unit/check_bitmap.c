#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "bitmap.h"
#include "suite.h"
#include "suites.h"
#include "util.h"

#define NB 320 /* five words */

/* ck_assert reports every passing check to the runner (a write per call):
 * loops over hundreds of thousands of bits test first and fail once. */
#define CHECK(expr, ...) do { if (!(expr)) ck_abort_msg(__VA_ARGS__); } while (0)

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

START_TEST(alloc_sizes)
{
	uint64_t *bm = bm_alloc(0);

	ck_assert_ptr_nonnull(bm);
	bm_free(bm);
	ck_assert_uint_eq(bm_words(0), 0);
	ck_assert_uint_eq(bm_words(1), 1);
	ck_assert_uint_eq(bm_words(64), 1);
	ck_assert_uint_eq(bm_words(65), 2);
	ck_assert_ptr_null(bm_alloc(UINT64_MAX));
	bm = bm_alloc(129);
	ck_assert_ptr_nonnull(bm);
	ck_assert_uint_eq(bm[0] | bm[1] | bm[2], 0);
	bm_free(bm);
	bm_free(NULL);
}
END_TEST

START_TEST(single_bits)
{
	uint64_t bm[3] = { 0 };
	static const uint64_t idx[] = { 0, 1, 63, 64, 65, 127, 128, 191 };
	size_t i;

	for (i = 0; i < RD_ARRAY_SIZE(idx); i++)
		bm_set(bm, idx[i]);
	ck_assert_uint_eq(bm[0], UINT64_C(0x8000000000000003));
	ck_assert_uint_eq(bm[1], UINT64_C(0x8000000000000003));
	ck_assert_uint_eq(bm[2], UINT64_C(0x8000000000000001));
	ck_assert(bm_test(bm, 63));
	ck_assert(!bm_test(bm, 62));
	bm_clear(bm, 64);
	bm_clear(bm, 191);
	ck_assert_uint_eq(bm[1], UINT64_C(0x8000000000000002));
	ck_assert_uint_eq(bm[2], 1); /* bit 128 */
	ck_assert_uint_eq(bm_count(bm, 192), 6);
}
END_TEST

/* Every range of a five-word map, set and cleared, against bit-by-bit. */
START_TEST(ranges_match_reference)
{
	uint64_t start, n, i, bm[NB / 64];

	for (start = 0; start < NB; start++) {
		for (n = 0; start + n <= NB; n += (n < 140 ? 1 : 7)) {
			memset(bm, 0, sizeof(bm));
			bm_set_range(bm, start, n);
			for (i = 0; i < NB; i++)
				CHECK(bm_test(bm, i) == (i >= start && i < start + n),
					      "set_range(%lu, %lu) bit %lu", (unsigned long)start,
					      (unsigned long)n, (unsigned long)i);
			memset(bm, 0xff, sizeof(bm));
			bm_clear_range(bm, start, n);
			for (i = 0; i < NB; i++)
				CHECK(bm_test(bm, i) == !(i >= start && i < start + n),
					      "clear_range(%lu, %lu) bit %lu", (unsigned long)start,
					      (unsigned long)n, (unsigned long)i);
		}
	}
}
END_TEST

static uint64_t ref_next(const uint64_t *bm, uint64_t nbits, uint64_t from, bool val)
{
	for (; from < nbits; from++)
		if (bm_test(bm, from) == val)
			return from;
	return nbits;
}

/* Bits above nbits are set on purpose: they must never be reported. */
START_TEST(next_and_count_match_reference)
{
	static const uint64_t nbits_list[] = { 0, 1, 63, 64, 65, 200, 256, 319, 320 };
	uint64_t seed = 0x9e3779b97f4a7c15, bm[NB / 64];
	size_t k, round;
	uint64_t from, nbits, ref, i;

	for (round = 0; round < 200; round++) {
		unsigned density = round % 4;

		for (i = 0; i < NB / 64; i++) {
			bm[i] = rng_next(&seed);
			if (density == 1)
				bm[i] &= rng_next(&seed) & rng_next(&seed);
			else if (density == 2)
				bm[i] |= rng_next(&seed) | rng_next(&seed);
			else if (density == 3)
				bm[i] = (round & 4) ? 0 : ~UINT64_C(0);
		}
		for (k = 0; k < RD_ARRAY_SIZE(nbits_list); k++) {
			nbits = nbits_list[k];
			for (from = 0; from <= nbits + 2; from++) {
				CHECK(bm_next_set(bm, nbits, from) == ref_next(bm, nbits, from, true),
				      "next_set(%lu) in %lu bits", (unsigned long)from, (unsigned long)nbits);
				CHECK(bm_next_clear(bm, nbits, from) == ref_next(bm, nbits, from, false),
				      "next_clear(%lu) in %lu bits", (unsigned long)from, (unsigned long)nbits);
			}
			for (ref = 0, i = 0; i < nbits; i++)
				ref += bm_test(bm, i);
			CHECK(bm_count(bm, nbits) == ref, "count of %lu bits", (unsigned long)nbits);
		}
	}
}
END_TEST

START_TEST(next_on_sparse_map)
{
	uint64_t *bm = bm_alloc(1 << 20);

	ck_assert_ptr_nonnull(bm);
	ck_assert_uint_eq(bm_next_set(bm, 1 << 20, 0), 1 << 20);
	bm_set(bm, 777777);
	ck_assert_uint_eq(bm_next_set(bm, 1 << 20, 5), 777777);
	ck_assert_uint_eq(bm_next_set(bm, 1 << 20, 777778), 1 << 20);
	ck_assert_uint_eq(bm_next_set(bm, 777777, 0), 777777); /* outside nbits */
	bm_set_range(bm, 0, 1 << 20);
	ck_assert_uint_eq(bm_next_clear(bm, 1 << 20, 0), 1 << 20);
	bm_clear(bm, (1 << 20) - 1);
	ck_assert_uint_eq(bm_next_clear(bm, 1 << 20, 3), (1 << 20) - 1);
	ck_assert_uint_eq(bm_count(bm, 1 << 20), (1 << 20) - 1);
	bm_free(bm);
}
END_TEST

void bitmap_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 60);

	tcase_add_test(tc, alloc_sizes);
	tcase_add_test(tc, single_bits);
	tcase_add_test(tc, ranges_match_reference);
	tcase_add_test(tc, next_and_count_match_reference);
	tcase_add_test(tc, next_on_sparse_map);
}
