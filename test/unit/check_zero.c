#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "suite.h"
#include "suites.h"
#include "util.h"
#include "zero.h"

typedef bool zero_fn(const void *p, size_t len);

/* ck_assert reports every passing check to the runner (a write per call):
 * loops test first and fail once. */
#define CHECK(expr, ...) do { if (!(expr)) ck_abort_msg(__VA_ARGS__); } while (0)

#define GUARD 128 /* non-zero bytes around the range: must never be read */

static const size_t lens[] = {
	0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257,
	319, 511, 512, 513, 1000, 4095, 4096, 4097,
};
static const size_t aligns[] = { 0, 1, 3, 7, 8, 15, 16, 33, 63 };

/* A zeroed range of @len bytes at alignment @al (mod 64) inside a buffer
 * whose other bytes are all 0xff. */
static unsigned char *range_in_guarded(unsigned char **buf, size_t len, size_t al)
{
	unsigned char *b = aligned_alloc(64, (GUARD + 64 + len + GUARD + 63) / 64 * 64);
	unsigned char *r;

	ck_assert_ptr_nonnull(b);
	r = b + GUARD + al;
	memset(b, 0xff, GUARD + al);
	memset(r, 0, len);
	memset(r + len, 0xff, GUARD);
	*buf = b;
	return r;
}

/* Every position of a single non-zero byte, for each length and alignment. */
static void check_every_position(zero_fn *fn)
{
	static const unsigned char vals[] = { 0x01, 0x80 };
	size_t li, ai, pos;
	unsigned char *buf, *r;

	for (li = 0; li < RD_ARRAY_SIZE(lens); li++) {
		for (ai = 0; ai < RD_ARRAY_SIZE(aligns); ai++) {
			size_t len = lens[li];

			r = range_in_guarded(&buf, len, aligns[ai]);
			ck_assert_msg(fn(r, len), "len %zu align %zu reads as non-zero", len, aligns[ai]);
			for (pos = 0; pos < len; pos++) {
				r[pos] = vals[pos % 2];
				CHECK(!fn(r, len), "len %zu align %zu: byte %zu missed",
					      len, aligns[ai], pos);
				r[pos] = 0;
			}
			free(buf);
		}
	}
}

START_TEST(every_position_dispatched)
{
	check_every_position(zero_is_zero);
}
END_TEST

START_TEST(every_position_portable)
{
	check_every_position(zero_is_zero_portable);
}
END_TEST

/* 2 MiB (a huge page): every position near both ends, around some 256-byte
 * block boundaries and at a prime stride, at several alignments.  Every
 * position of the whole range would scan terabytes. */
static void check_huge(zero_fn *fn)
{
	const size_t len = 2u << 20;
	size_t ai, pos;
	unsigned char *buf, *r;

	for (ai = 0; ai < 3; ai++) {
		size_t al = (size_t[]){ 0, 1, 63 }[ai];

		r = range_in_guarded(&buf, len, al);
		ck_assert(fn(r, len));
		for (pos = 0; pos < len; pos++) {
			size_t in_block = (pos + al) % 256;
			bool probe = pos < 1024 || pos >= len - 72 || pos % 65521 == 0 ||
				     ((pos / 256) % 509 == 0 && (in_block < 2 || in_block > 253));

			if (!probe)
				continue;
			r[pos] = 0x40;
			CHECK(!fn(r, len), "2 MiB align %zu: byte %zu missed", al, pos);
			r[pos] = 0;
		}
		free(buf);
	}
}

START_TEST(huge_page_dispatched)
{
	check_huge(zero_is_zero);
}
END_TEST

START_TEST(huge_page_portable)
{
	check_huge(zero_is_zero_portable);
}
END_TEST

START_TEST(dense_data_is_not_zero)
{
	unsigned char page[4096];
	size_t i;

	for (i = 0; i < sizeof(page); i++)
		page[i] = (unsigned char)(i * 7 + 1);
	ck_assert(!zero_is_zero(page, sizeof(page)));
	ck_assert(!zero_is_zero_portable(page, sizeof(page)));
	memset(page, 0, sizeof(page));
	ck_assert(zero_is_zero(page, sizeof(page)));
	ck_assert(zero_is_zero(page + 4095, 1));
	ck_assert(zero_is_zero(page, 0));
}
END_TEST

void zero_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 300);

	tcase_add_test(tc, every_position_dispatched);
	tcase_add_test(tc, every_position_portable);
	tcase_add_test(tc, huge_page_dispatched);
	tcase_add_test(tc, huge_page_portable);
	tcase_add_test(tc, dense_data_is_not_zero);
}
