#include <check.h>
#include <errno.h>
#include <stdint.h>

#include "creg.h"
#include "suite.h"
#include "suites.h"
#include "util.h"

#define MiB (UINT64_C(1) << 20)

/* Walks the LRU list from the head, checking the back links, into @out. */
static unsigned lru_order(const struct creg *c, uint64_t *out, unsigned max)
{
	uint64_t i, prev = CREG_NIL;
	unsigned n = 0;

	for (i = c->lru_head; i != CREG_NIL; i = creg_slot(c, i)->next) {
		ck_assert_uint_lt(n, max);
		ck_assert_ptr_nonnull(creg_slot(c, i));
		ck_assert_uint_eq(creg_slot(c, i)->prev, prev);
		ck_assert_int_eq(creg_slot(c, i)->state, CREG_READY);
		out[n++] = i;
		prev = i;
	}
	ck_assert_uint_eq(c->lru_tail, prev);
	return n;
}

static void assert_lru(const struct creg *c, const uint64_t *want, unsigned n)
{
	uint64_t got[64];
	unsigned i;

	ck_assert_uint_eq(lru_order(c, got, 64), n);
	for (i = 0; i < n; i++)
		ck_assert_uint_eq(got[i], want[i]);
}

START_TEST(init_and_fini)
{
	struct creg c;

	ck_assert_int_eq(creg_init(&c, 16, 4 * MiB), 0);
	ck_assert_uint_eq(c.nslots, 16);
	ck_assert_uint_eq(c.pinned_bytes, 0);
	ck_assert_uint_eq(c.lru_head, CREG_NIL);
	ck_assert_int_eq(creg_state(&c, 15), CREG_NONE);
	ck_assert_ptr_null(creg_slot(&c, 15));
	ck_assert_uint_eq(c.pages, 0);
	creg_fini(&c, NULL, NULL);
	ck_assert_ptr_null(c.dir);
	creg_fini(&c, NULL, NULL);
	ck_assert_int_eq(creg_init(&c, 0, 0), 0);
	ck_assert_int_eq(creg_add(&c, 0, MiB, CREG_READY), -EINVAL);
	creg_fini(&c, NULL, NULL);
	ck_assert_int_eq(creg_init(&c, UINT64_MAX, 0), -ENOMEM);
	creg_fini(&c, NULL, NULL);
}
END_TEST

START_TEST(add_rejects_bad_input)
{
	struct creg c;

	ck_assert_int_eq(creg_init(&c, 4, 0), 0);
	ck_assert_int_eq(creg_add(&c, 4, MiB, CREG_READY), -EINVAL);
	ck_assert_int_eq(creg_add(&c, 0, MiB, CREG_NONE), -EINVAL);
	ck_assert_int_eq(creg_add(&c, 0, MiB, 7), -EINVAL);
	ck_assert_int_eq(creg_add(&c, 0, MiB, CREG_PENDING), 0);
	ck_assert_int_eq(creg_add(&c, 0, MiB, CREG_READY), -EEXIST);
	ck_assert_int_eq(creg_add(&c, 1, UINT64_MAX, CREG_READY), -ENOSPC);
	ck_assert_uint_eq(c.pinned_bytes, MiB);
	/* Calls on unused or out-of-range slots change nothing. */
	creg_set_ready(&c, 3, 1, NULL);
	creg_touch(&c, 99);
	creg_get(&c, 99);
	creg_put(&c, 2);
	creg_remove(&c, 99);
	creg_remove(&c, 2);
	ck_assert_int_eq(creg_state(&c, 3), CREG_NONE);
	ck_assert_uint_eq(c.pinned_bytes, MiB);
	ck_assert_uint_eq(c.lru_head, CREG_NIL);
	creg_fini(&c, NULL, NULL);
}
END_TEST

START_TEST(lru_order_and_touch)
{
	struct creg c;
	int dummy;

	ck_assert_int_eq(creg_init(&c, 8, 0), 0);
	ck_assert_int_eq(creg_add(&c, 5, MiB, CREG_READY), 0);
	ck_assert_int_eq(creg_add(&c, 2, MiB, CREG_PENDING), 0);
	ck_assert_int_eq(creg_add(&c, 7, MiB, CREG_READY), 0);
	ck_assert_int_eq(creg_add(&c, 0, MiB, CREG_READY), 0);
	assert_lru(&c, (uint64_t[]){ 5, 7, 0 }, 3);
	/* A pending slot joins at the MRU end once ready. */
	creg_set_ready(&c, 2, 0x1234, &dummy);
	ck_assert_int_eq(creg_slot(&c, 2)->state, CREG_READY);
	ck_assert_uint_eq(creg_slot(&c, 2)->rkey, 0x1234);
	ck_assert_ptr_eq(creg_slot(&c, 2)->mr, &dummy);
	assert_lru(&c, (uint64_t[]){ 5, 7, 0, 2 }, 4);
	creg_touch(&c, 5);
	assert_lru(&c, (uint64_t[]){ 7, 0, 2, 5 }, 4);
	creg_touch(&c, 0);
	assert_lru(&c, (uint64_t[]){ 7, 2, 5, 0 }, 4);
	creg_touch(&c, 0);
	assert_lru(&c, (uint64_t[]){ 7, 2, 5, 0 }, 4);
	creg_remove(&c, 2);
	assert_lru(&c, (uint64_t[]){ 7, 5, 0 }, 3);
	creg_remove(&c, 7);
	assert_lru(&c, (uint64_t[]){ 5, 0 }, 2);
	creg_remove(&c, 0);
	assert_lru(&c, (uint64_t[]){ 5 }, 1);
	creg_remove(&c, 5);
	assert_lru(&c, NULL, 0);
	ck_assert_uint_eq(c.pinned_bytes, 0);
	ck_assert_uint_eq(c.peak_bytes, 4 * MiB);
	creg_fini(&c, NULL, NULL);
}
END_TEST

START_TEST(victims_in_lru_order)
{
	struct creg c;
	struct rd_err e = { "" };
	uint64_t out[8];
	uint64_t s;

	ck_assert_int_eq(creg_init(&c, 8, 4 * MiB), 0);
	for (s = 0; s < 4; s++)
		ck_assert_int_eq(creg_add(&c, s, MiB, CREG_READY), 0);
	ck_assert_int_eq(creg_add(&c, 4, MiB, CREG_READY), -ENOSPC);
	ck_assert_uint_eq(c.pinned_bytes, 4 * MiB);
	creg_touch(&c, 0);
	ck_assert_int_eq(creg_victims(&c, 0, out, 8, &e), 0);
	ck_assert_int_eq(creg_victims(&c, MiB, out, 8, &e), 1);
	ck_assert_uint_eq(out[0], 1);
	ck_assert_int_eq(creg_victims(&c, 2 * MiB + 1, out, 8, &e), 3);
	ck_assert_uint_eq(out[0], 1);
	ck_assert_uint_eq(out[1], 2);
	ck_assert_uint_eq(out[2], 3);
	/* Victims are only proposed: nothing changed. */
	ck_assert_uint_eq(c.pinned_bytes, 4 * MiB);
	assert_lru(&c, (uint64_t[]){ 1, 2, 3, 0 }, 4);
	/* @max cuts the list; the rest comes after another round. */
	ck_assert_int_eq(creg_victims(&c, 3 * MiB, out, 2, &e), 2);
	creg_remove(&c, out[0]);
	creg_remove(&c, out[1]);
	ck_assert_int_eq(creg_victims(&c, 3 * MiB, out, 2, &e), 1);
	ck_assert_uint_eq(out[0], 3);
	creg_fini(&c, NULL, NULL);
}
END_TEST

START_TEST(inflight_slots_are_never_victims)
{
	struct creg c;
	struct rd_err e = { "" };
	uint64_t out[8];

	ck_assert_int_eq(creg_init(&c, 8, 3 * MiB), 0);
	ck_assert_int_eq(creg_add(&c, 0, MiB, CREG_READY), 0);
	ck_assert_int_eq(creg_add(&c, 1, MiB, CREG_READY), 0);
	ck_assert_int_eq(creg_add(&c, 2, MiB, CREG_PENDING), 0);
	creg_get(&c, 0);
	creg_get(&c, 0);
	ck_assert_uint_eq(creg_slot(&c, 0)->inflight, 2);
	ck_assert_int_eq(creg_victims(&c, MiB, out, 8, &e), 1);
	ck_assert_uint_eq(out[0], 1);
	creg_get(&c, 1);
	/* Pending and busy slots cannot be evicted. */
	ck_assert_int_eq(creg_victims(&c, MiB, out, 8, &e), -ENOSPC);
	ck_assert_str_eq(e.msg, "cannot pin 1048576 more bytes under the 3145728-byte cap: "
			 "3145728 bytes are pinned, only 0 of them by idle chunks");
	creg_put(&c, 0);
	ck_assert_int_eq(creg_victims(&c, MiB, out, 8, &e), -ENOSPC);
	creg_put(&c, 0);
	creg_put(&c, 0); /* one too many: stays at 0 */
	ck_assert_uint_eq(creg_slot(&c, 0)->inflight, 0);
	ck_assert_int_eq(creg_victims(&c, MiB, out, 8, &e), 1);
	ck_assert_uint_eq(out[0], 0);
	ck_assert_int_eq(creg_victims(&c, 2 * MiB, out, 8, &e), -ENOSPC);
	ck_assert_str_eq(e.msg, "cannot pin 2097152 more bytes under the 3145728-byte cap: "
			 "3145728 bytes are pinned, only 1048576 of them by idle chunks");
	ck_assert_int_eq(creg_victims(&c, 3 * MiB + 1, out, 8, &e), -ENOSPC);
	ck_assert_str_eq(e.msg, "cannot pin 3145729 bytes: the cap is 3145728 bytes");
	creg_fini(&c, NULL, NULL);
}
END_TEST

START_TEST(accounting_and_peak)
{
	struct creg c;
	struct rd_err e = { "" };
	uint64_t out[4];
	int round, n;

	ck_assert_int_eq(creg_init(&c, 64, 10 * MiB), 0);
	ck_assert_int_eq(creg_add(&c, 0, 6 * MiB, CREG_PENDING), 0);
	ck_assert_int_eq(creg_add(&c, 1, 4 * MiB, CREG_READY), 0);
	ck_assert_uint_eq(c.pinned_bytes, 10 * MiB);
	ck_assert_uint_eq(c.peak_bytes, 10 * MiB);
	creg_remove(&c, 0);
	ck_assert_uint_eq(c.pinned_bytes, 4 * MiB);
	ck_assert_uint_eq(c.peak_bytes, 10 * MiB);
	creg_set_ready(&c, 1, 9, NULL);

	/* Remove/add cycles through every slot keep the books exact. */
	for (round = 0; round < 200; round++) {
		uint64_t slot = (uint64_t)(round % 62) + 2;

		n = creg_victims(&c, 3 * MiB, out, 4, &e);
		ck_assert_int_ge(n, 0);
		while (n--)
			creg_remove(&c, out[n]);
		ck_assert_int_eq(creg_add(&c, slot, 3 * MiB, round % 2 ? CREG_READY : CREG_PENDING), 0);
		if (round % 2 == 0)
			creg_set_ready(&c, slot, (uint32_t)round, NULL);
		ck_assert_uint_le(c.pinned_bytes, 10 * MiB);
	}
	/* 3 slots of 3 MiB fit under 10 MiB, after the 4 MiB one left. */
	ck_assert_uint_eq(c.pinned_bytes, 9 * MiB);
	ck_assert_int_eq(creg_state(&c, 1), CREG_NONE);
	assert_lru(&c, (uint64_t[]){ 199 % 62 + 2 - 2, 199 % 62 + 2 - 1, 199 % 62 + 2 }, 3);
	ck_assert_uint_eq(c.peak_bytes, 10 * MiB);
	creg_fini(&c, NULL, NULL);
}
END_TEST

START_TEST(cap_zero_is_unlimited)
{
	struct creg c;
	struct rd_err e = { "" };
	uint64_t out[4], s;

	ck_assert_int_eq(creg_init(&c, 1000, 0), 0);
	for (s = 0; s < 1000; s++)
		ck_assert_int_eq(creg_add(&c, s, UINT64_C(1) << 40, CREG_READY), 0);
	ck_assert_uint_eq(c.pinned_bytes, UINT64_C(1000) << 40);
	ck_assert_uint_eq(c.peak_bytes, UINT64_C(1000) << 40);
	ck_assert_int_eq(creg_victims(&c, UINT64_C(1) << 60, out, 4, &e), 0);
	for (s = 0; s < 1000; s += 2)
		creg_remove(&c, s);
	ck_assert_uint_eq(c.pinned_bytes, UINT64_C(500) << 40);
	ck_assert_uint_eq(c.lru_head, 1);
	ck_assert_uint_eq(c.lru_tail, 999);
	creg_fini(&c, NULL, NULL);
}
END_TEST

static unsigned released;

static void count_release(void *ctx, void *mr)
{
	ck_assert_ptr_null(ctx);
	ck_assert_ptr_nonnull(mr);
	released++;
}

/* What a peer announces costs a directory entry per CREG_PAGE chunks; slot
 * pages exist only while one of their chunks is registered. */
START_TEST(pages_follow_registrations)
{
	uint64_t huge = (UINT64_C(1) << 40) >> 12; /* 1 TiB in 4 KiB chunks */
	struct creg c;
	int mr;

	ck_assert_int_eq(creg_init(&c, huge, 0), 0);
	ck_assert_uint_eq(c.pages, 0);
	ck_assert_int_eq(creg_add(&c, huge - 1, 4096, CREG_PENDING), 0);
	ck_assert_int_eq(creg_add(&c, huge - 2, 4096, CREG_READY), 0);
	ck_assert_int_eq(creg_add(&c, 0, 4096, CREG_READY), 0);
	ck_assert_uint_eq(c.pages, 2);
	creg_set_mr(&c, huge - 1, &mr, 5);
	creg_set_ready(&c, 0, 7, &mr);
	ck_assert_int_eq(creg_state(&c, 5), CREG_NONE);
	ck_assert_int_eq(creg_add(&c, huge, 4096, CREG_READY), -EINVAL);
	creg_remove(&c, 0);
	ck_assert_uint_eq(c.pages, 1);
	creg_remove(&c, huge - 2);
	ck_assert_uint_eq(c.pages, 1);
	released = 0;
	creg_fini(&c, count_release, NULL);
	ck_assert_uint_eq(released, 1);
}
END_TEST

void creg_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, init_and_fini);
	tcase_add_test(tc, add_rejects_bad_input);
	tcase_add_test(tc, lru_order_and_touch);
	tcase_add_test(tc, victims_in_lru_order);
	tcase_add_test(tc, inflight_slots_are_never_victims);
	tcase_add_test(tc, accounting_and_peak);
	tcase_add_test(tc, cap_zero_is_unlimited);
	tcase_add_test(tc, pages_follow_registrations);
}
