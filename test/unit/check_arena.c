#include <check.h>
#include <stdint.h>
#include <string.h>

#include "arena.h"
#include "suite.h"
#include "suites.h"

static void *get(struct arena *a, size_t len)
{
	void *p = a->pc.alloc(a->pc.allocator_data, len);

	ck_assert_ptr_nonnull(p);
	return p;
}

static void put(struct arena *a, void *p)
{
	a->pc.free(a->pc.allocator_data, p);
}

/* Pieces are 16-byte aligned and never overlap, whatever their lengths. */
START_TEST(pieces_aligned)
{
	static const size_t lens[] = { 1, 15, 16, 17, 0, 40, 3, 100 };
	uint8_t *p[RD_ARRAY_SIZE(lens)];
	struct arena a;
	struct rd_err e;
	size_t i;

	ck_assert_int_eq(arena_init(&a, 1000, &e), 0);
	ck_assert_uint_eq(a.size, 992);
	for (i = 0; i < RD_ARRAY_SIZE(lens); i++) {
		p[i] = get(&a, lens[i]);
		ck_assert_uint_eq((uintptr_t)p[i] % 16, 0);
		ck_assert(arena_owns(&a, p[i]));
		memset(p[i], 0xa5, lens[i]);
		if (i) /* a zero-length piece still takes a byte */
			ck_assert_uint_ge((uintptr_t)p[i], (uintptr_t)p[i - 1] +
					  (lens[i - 1] ? lens[i - 1] : 1));
	}
	ck_assert_uint_eq(a.fallbacks, 0);
	for (i = 0; i < RD_ARRAY_SIZE(lens); i++)
		put(&a, p[i]);
	arena_fini(&a);
}
END_TEST

/* What does not fit comes from malloc and goes back to free (valgrind and
 * ASan see a leak otherwise); what does fit still comes from the buffer. */
START_TEST(fallback_when_full)
{
	struct arena a;
	struct rd_err e;
	void *big, *small, *last;

	ck_assert_int_eq(arena_init(&a, 64, &e), 0);
	small = get(&a, 40);
	big = get(&a, 4096);
	ck_assert(!arena_owns(&a, big));
	ck_assert_uint_eq(a.fallbacks, 1);
	memset(big, 1, 4096);
	last = get(&a, 16);
	ck_assert(arena_owns(&a, last));
	put(&a, big);
	put(&a, small);
	put(&a, last);
	arena_fini(&a);
}
END_TEST

/* The buffer is reused once the last holder lets go, not before. */
START_TEST(reused_after_last_release)
{
	struct arena a;
	struct rd_err e;
	void *p1, *p2;

	ck_assert_int_eq(arena_init(&a, 256, &e), 0);
	arena_hold(&a);
	p1 = get(&a, 32);
	arena_hold(&a);
	p2 = get(&a, 32);
	ck_assert_ptr_ne(p1, p2);
	arena_release(&a);
	ck_assert_uint_eq(a.used, 64);
	arena_release(&a);
	ck_assert_uint_eq(a.used, 0);
	arena_hold(&a);
	ck_assert_ptr_eq(get(&a, 8), p1);
	arena_release(&a);
	arena_fini(&a);
}
END_TEST

START_TEST(empty_and_zeroed)
{
	struct arena a;
	struct rd_err e;
	void *p;

	memset(&a, 0, sizeof(a));
	arena_fini(&a);
	ck_assert_int_eq(arena_init(&a, 0, &e), 0);
	ck_assert(!arena_owns(&a, &a));
	p = get(&a, 10);
	ck_assert(!arena_owns(&a, p));
	put(&a, p);
	arena_fini(&a);
}
END_TEST

void arena_cases(Suite *s)
{
	TCase *tc = tu_case(s, "arena", 0);

	tcase_add_test(tc, pieces_aligned);
	tcase_add_test(tc, fallback_when_full);
	tcase_add_test(tc, reused_after_last_release);
	tcase_add_test(tc, empty_and_zeroed);
}
