/* Gathering short runs of pages into PAGES messages: what fits, runs that
 * continue each other merge, and a full message encodes within the frame
 * it was sized for. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "codec.h"
#include "pack.h"
#include "suite.h"
#include "suites.h"

START_TEST(gathers_merges_and_fits_the_frame)
{
	static uint8_t mem[1u << 20], frame[65536];
	struct pack p;
	struct rd_err e;
	Rdmig__Pages m;
	uint64_t off = 0;
	unsigned i;

	for (i = 0; i < sizeof(mem); i++)
		mem[i] = (uint8_t)(i / 4096 + 1);
	ck_assert_int_eq(pack_init(&p, sizeof(frame), &e), 0);
	ck_assert(pack_fits(&p, PACK_RUN_MAX));
	/* Pages 0 and 1 are one run; page 3 starts another; a page of
	 * another block another again. */
	pack_add(&p, 0, 0, mem, 4096);
	pack_add(&p, 0, 4096, mem + 4096, 4096);
	pack_add(&p, 0, 3 * 4096, mem + 3 * 4096, 4096);
	pack_add(&p, 1, 4 * 4096, mem + 4 * 4096, 4096);
	ck_assert_uint_eq(p.n, 3);
	ck_assert_uint_eq(p.length[0], 8192);
	ck_assert_uint_eq(p.offset[1], 3 * 4096);
	ck_assert_uint_eq(p.block[2], 1);
	ck_assert_uint_eq(p.len, 4 * 4096);
	ck_assert_uint_eq(p.data[2 * 4096], 4);
	pack_reset(&p);
	/* Fill it with scattered single pages until nothing more fits. */
	for (off = 0; pack_fits(&p, 4096); off += 2 * 4096)
		pack_add(&p, 7, off, mem + off % sizeof(mem), 4096);
	ck_assert_uint_ge(p.len, sizeof(frame) - 4096 - 1024);
	pack_msg(&p, &m);
	ck_assert_int_gt(ctrl_encode(CT_PAGES, 0, &m.base, frame, sizeof(frame), &e), 0);
	ck_assert_int_eq(ctrl_msg_check(CT_PAGES, &m.base, sizeof(frame), &e), 0);
	pack_fini(&p);
	/* A frame too small to carry a run never takes one. */
	ck_assert_int_eq(pack_init(&p, 4096, &e), 0);
	ck_assert(!pack_fits(&p, 4096));
	pack_fini(&p);
}
END_TEST

void pack_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, gathers_merges_and_fits_the_frame);
}
