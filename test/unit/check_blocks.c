#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "blocks.h"
#include "suite.h"
#include "suites.h"
#include "util.h"

#define MiB (UINT64_C(1) << 20)

START_TEST(chunk_and_page_counts)
{
	ck_assert_uint_eq(blk_nchunks(0, 20), 0);
	ck_assert_uint_eq(blk_nchunks(1, 20), 1);
	ck_assert_uint_eq(blk_nchunks(MiB, 20), 1);
	ck_assert_uint_eq(blk_nchunks(MiB + 1, 20), 2);
	ck_assert_uint_eq(blk_nchunks(3 * MiB + 12288, 20), 4);
	ck_assert_uint_eq(blk_nchunks(UINT64_MAX, 20), UINT64_C(1) << 44);
	ck_assert_uint_eq(blk_nchunks(UINT64_MAX, 12), UINT64_C(1) << 52);
	ck_assert_uint_eq(blk_npages(0, 4096), 0);
	ck_assert_uint_eq(blk_npages(4095, 4096), 1);
	ck_assert_uint_eq(blk_npages(4096, 4096), 1);
	ck_assert_uint_eq(blk_npages(4097, 4096), 2);
	ck_assert_uint_eq(blk_npages(UINT64_MAX, 4096), UINT64_C(1) << 52);
	ck_assert_uint_eq(blk_npages(3 * MiB, 2 * MiB), 2);
}
END_TEST

START_TEST(spans_clip_the_last_one)
{
	uint64_t off, len;

	blk_chunk_span(3 * MiB + 12288, 20, 0, &off, &len);
	ck_assert_uint_eq(off, 0);
	ck_assert_uint_eq(len, MiB);
	blk_chunk_span(3 * MiB + 12288, 20, 2, &off, &len);
	ck_assert_uint_eq(off, 2 * MiB);
	ck_assert_uint_eq(len, MiB);
	blk_chunk_span(3 * MiB + 12288, 20, 3, &off, &len);
	ck_assert_uint_eq(off, 3 * MiB);
	ck_assert_uint_eq(len, 12288);
	blk_chunk_span(4 * MiB, 20, 3, &off, &len);
	ck_assert_uint_eq(len, MiB);
	blk_page_span(10000, 4096, 2, &off, &len);
	ck_assert_uint_eq(off, 8192);
	ck_assert_uint_eq(len, 1808);
	blk_page_span(10000, 4096, 1, &off, &len);
	ck_assert_uint_eq(off, 4096);
	ck_assert_uint_eq(len, 4096);
	blk_page_span(1, 4096, 0, &off, &len);
	ck_assert_uint_eq(off, 0);
	ck_assert_uint_eq(len, 1);
}
END_TEST

START_TEST(ranges_from_the_peer)
{
	struct rd_err e = { "" };

	ck_assert_int_eq(blk_check_range("ram1", 8192, 0, 8192, &e), 0);
	ck_assert_int_eq(blk_check_range("ram1", 8192, 8191, 1, &e), 0);
	ck_assert_int_eq(blk_check_range("ram1", 8192, 4096, 4097, &e), -ERANGE);
	ck_assert_str_eq(e.msg, "range 0x1000+0x1001 outside block \"ram1\" of 0x2000 bytes");
	ck_assert_int_eq(blk_check_range("ram1", 8192, 8192, 1, &e), -ERANGE);
	ck_assert_int_eq(blk_check_range("ram1", 8192, UINT64_MAX, 2, &e), -ERANGE);
	ck_assert_str_eq(e.msg, "range 0xffffffffffffffff+0x2 outside block \"ram1\" of 0x2000 bytes");
	ck_assert_int_eq(blk_check_range("ram1", UINT64_MAX, 1, UINT64_MAX, &e), -ERANGE);
	ck_assert_int_eq(blk_check_range("ram1", 8192, 16, 0, &e), -ERANGE);
	ck_assert_str_eq(e.msg, "empty range at 0x10 in block \"ram1\"");
	ck_assert_int_eq(blk_check_range("ram1", 8192, 9000, 0, NULL), -ERANGE);
}
END_TEST

START_TEST(chunks_from_the_peer)
{
	struct rd_err e = { "" };

	ck_assert_int_eq(blk_check_chunk("ram0", 3 * MiB + 1, 20, 3, &e), 0);
	ck_assert_int_eq(blk_check_chunk("ram0", 3 * MiB + 1, 20, 4, &e), -ERANGE);
	ck_assert_str_eq(e.msg, "chunk 4 outside block \"ram0\" of 0x300001 bytes (4 chunks)");
	ck_assert_int_eq(blk_check_chunk("ram0", 3 * MiB, 20, 3, &e), -ERANGE);
	ck_assert_int_eq(blk_check_chunk("ram0", 3 * MiB, 20, UINT64_MAX, &e), -ERANGE);
}
END_TEST

START_TEST(name_rules)
{
	struct rd_err e = { "" };
	char name[BLK_NAME_MAX + 2];

	ck_assert_int_eq(blk_name_valid("ram0", &e), 0);
	ck_assert_int_eq(blk_name_valid("pc.ram", &e), 0);
	ck_assert_int_eq(blk_name_valid("!~", &e), 0);
	ck_assert_int_eq(blk_name_valid("", &e), -EINVAL);
	ck_assert_str_eq(e.msg, "empty block name");
	ck_assert_int_eq(blk_name_valid(NULL, &e), -EINVAL);
	/* QEMU's RAMBlock idstrs. */
	ck_assert_int_eq(blk_name_valid("/rom@etc/acpi/tables", &e), 0);
	ck_assert_int_eq(blk_name_valid("0000:00:02.0/vga.vram", &e), 0);
	ck_assert_int_eq(blk_name_valid("a=b c", &e), 0);
	ck_assert_int_eq(blk_name_valid("tab\t", &e), -EINVAL);
	ck_assert_str_eq(e.msg, "block name has byte 0x09 at position 3: only printable ASCII "
			 "is allowed");
	ck_assert_int_eq(blk_name_valid("\x7f", &e), -EINVAL);
	ck_assert_int_eq(blk_name_valid("caf\xc3\xa9", &e), -EINVAL);
	ck_assert_int_eq(blk_name_valid("\x1b[2J", &e), -EINVAL);
	memset(name, 'x', BLK_NAME_MAX);
	name[BLK_NAME_MAX] = '\0';
	ck_assert_int_eq(blk_name_valid(name, &e), 0);
	name[BLK_NAME_MAX] = 'y';
	name[BLK_NAME_MAX + 1] = '\0';
	ck_assert_int_eq(blk_name_valid(name, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "block name \"xxxxxxxxxxxxxxxx...\" is longer than 255 bytes");
}
END_TEST

static struct blk_desc desc(const char *name, uint64_t length, uint32_t page_size)
{
	struct blk_desc d;

	memset(&d, 0, sizeof(d));
	strncpy(d.name, name, BLK_NAME_MAX);
	d.length = length;
	d.page_size = page_size;
	return d;
}

START_TEST(match_reorders_by_name)
{
	const struct blk_desc ann[] = {
		desc("ram0", 32 * MiB, 4096), desc("vram", 8 * MiB, 4096), desc("rom", 4096, 4096),
	};
	/* Page sizes may differ: hugetlbfs on one side, tmpfs on the other. */
	const struct blk_desc loc[] = {
		desc("rom", 4096, 4096), desc("ram0", 32 * MiB, 2 * MiB), desc("vram", 8 * MiB, 4096),
	};
	unsigned map[3] = { 99, 99, 99 };
	struct rd_err e = { "" };

	ck_assert_int_eq(blk_match(ann, 3, loc, 3, map, &e), 0);
	ck_assert_uint_eq(map[0], 1);
	ck_assert_uint_eq(map[1], 2);
	ck_assert_uint_eq(map[2], 0);
	ck_assert_int_eq(blk_match(ann, 0, loc, 0, map, &e), 0);
}
END_TEST

START_TEST(match_errors_name_the_block)
{
	const struct blk_desc ann[] = { desc("ram1", 32 * MiB, 4096), desc("ram2", MiB, 4096) };
	const struct blk_desc loc[] = { desc("ram1", 16 * MiB, 4096), desc("vram", MiB, 4096) };
	const struct blk_desc loc_ok[] = { desc("ram2", MiB, 4096), desc("ram1", 32 * MiB, 4096) };
	const struct blk_desc extra[] = {
		desc("ram1", 32 * MiB, 4096), desc("ram2", MiB, 4096), desc("vram", MiB, 4096),
	};
	const struct blk_desc dup[] = { desc("ram1", 32 * MiB, 4096), desc("ram1", MiB, 4096) };
	unsigned map[BLK_MAX + 1];
	struct rd_err e = { "" };

	ck_assert_int_eq(blk_match(ann, 2, loc, 2, map, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "block \"ram1\": the source's length 33554432 differs from "
			 "the destination's 16777216");
	ck_assert_int_eq(blk_match(ann, 2, loc_ok, 1, map, &e), -ENOENT);
	ck_assert_str_eq(e.msg, "block \"ram1\" is not configured on the destination");
	ck_assert_int_eq(blk_match(&ann[1], 1, loc_ok, 2, map, &e), -ENOENT);
	ck_assert_str_eq(e.msg, "block \"ram1\" was not sent by the source");
	ck_assert_int_eq(blk_match(ann, 2, extra, 3, map, &e), -ENOENT);
	ck_assert_str_eq(e.msg, "block \"vram\" was not sent by the source");
	ck_assert_int_eq(blk_match(extra, 3, loc_ok, 2, map, &e), -ENOENT);
	ck_assert_str_eq(e.msg, "block \"vram\" is not configured on the destination");
	ck_assert_int_eq(blk_match(dup, 2, loc_ok, 2, map, &e), -EEXIST);
	ck_assert_str_eq(e.msg, "block \"ram1\" appears twice in the source's block map");
	ck_assert_int_eq(blk_match(loc_ok, 2, dup, 2, map, &e), -EEXIST);
	ck_assert_str_eq(e.msg, "block \"ram1\" appears twice on the destination");
	ck_assert_int_eq(blk_match(ann, BLK_MAX + 1, loc, 2, map, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "1025 blocks on the source and 2 on the destination: at most "
			 "1024 are supported");
	ck_assert_int_eq(blk_match(ann, 2, loc, 2, map, NULL), -EINVAL);
}
END_TEST

/* The largest map: 1024 blocks in reverse order on the other side. */
START_TEST(match_full_table)
{
	static struct blk_desc ann[BLK_MAX], loc[BLK_MAX];
	static unsigned map[BLK_MAX];
	struct rd_err e = { "" };
	char name[32];
	unsigned i;

	for (i = 0; i < BLK_MAX; i++) {
		snprintf(name, sizeof(name), "ram%u", i);
		ann[i] = desc(name, (i + 1) * 4096, 4096);
		loc[BLK_MAX - 1 - i] = ann[i];
	}
	ck_assert_int_eq(blk_match(ann, BLK_MAX, loc, BLK_MAX, map, &e), 0);
	for (i = 0; i < BLK_MAX; i++)
		ck_assert_uint_eq(map[i], BLK_MAX - 1 - i);
}
END_TEST

void blocks_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, chunk_and_page_counts);
	tcase_add_test(tc, spans_clip_the_last_one);
	tcase_add_test(tc, ranges_from_the_peer);
	tcase_add_test(tc, chunks_from_the_peer);
	tcase_add_test(tc, name_rules);
	tcase_add_test(tc, match_reorders_by_name);
	tcase_add_test(tc, match_errors_name_the_block);
	tcase_add_test(tc, match_full_table);
}
