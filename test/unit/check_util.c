#include <check.h>
#include <errno.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#include "suite.h"
#include "suites.h"
#include "util.h"

START_TEST(err_set_returns_code_and_message)
{
	struct rd_err e = { "" };

	ck_assert_int_eq(rd_err_set(&e, -EINVAL, "bad %s %d", "value", 7), -EINVAL);
	ck_assert_str_eq(e.msg, "bad value 7");
	ck_assert_int_eq(rd_err_prefix(&e, -EINVAL, "block %s", "ram0"), -EINVAL);
	ck_assert_str_eq(e.msg, "block ram0: bad value 7");
	ck_assert_int_eq(rd_err_set(NULL, -EIO, "ignored"), -EIO);
}
END_TEST

START_TEST(err_message_truncates_safely)
{
	struct rd_err e;
	char big[1000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	rd_err_set(&e, -E2BIG, "%s", big);
	ck_assert_uint_eq(strlen(e.msg), RD_ERRLEN - 1);
	rd_err_prefix(&e, -E2BIG, "%s", big);
	ck_assert_uint_lt(strlen(e.msg), RD_ERRLEN);
}
END_TEST

START_TEST(deadlines)
{
	int64_t d = rd_deadline(1000);

	ck_assert(!rd_expired(d));
	ck_assert_int_gt(rd_remaining_ms(d), 900);
	ck_assert_int_le(rd_remaining_ms(d), 1000);
	ck_assert(rd_expired(rd_deadline(0)));
	ck_assert_int_eq(rd_remaining_ms(rd_now_ms() - 5), 0);
	ck_assert_int_eq(rd_deadline(-1), RD_NO_DEADLINE);
	ck_assert_int_eq(rd_remaining_ms(RD_NO_DEADLINE), -1);
	ck_assert(!rd_expired(RD_NO_DEADLINE));
}
END_TEST

START_TEST(overflow_helpers)
{
	uint64_t r;

	ck_assert(!rd_add_overflow_u64(1, 2, &r));
	ck_assert_uint_eq(r, 3);
	ck_assert(rd_add_overflow_u64(UINT64_MAX, 1, &r));
	ck_assert(rd_mul_overflow_u64(UINT64_MAX / 2, 3, &r));
	ck_assert(rd_is_pow2(1u << 20));
	ck_assert(!rd_is_pow2(0));
	ck_assert(!rd_is_pow2(3u << 20));
}
END_TEST

/* Phases in order, their times adding up to the total; more phases than
 * it holds are counted in the total, not listed; a short buffer truncates. */
START_TEST(laps_account_for_the_step)
{
	struct rd_laps l;
	char buf[512], small[12];
	int64_t sum = 0;
	unsigned i;

	rd_laps_start(&l);
	rd_laps_mark(&l, "first");
	usleep(2000);
	rd_laps_mark(&l, "second");
	ck_assert_uint_eq(l.n, 2);
	ck_assert_int_ge(l.us[1], 2000);
	for (i = 0; i < l.n; i++)
		sum += l.us[i];
	ck_assert_int_eq(sum, rd_laps_total(&l));
	rd_laps_format(&l, buf, sizeof(buf));
	ck_assert_ptr_nonnull(strstr(buf, "first "));
	ck_assert_ptr_nonnull(strstr(buf, ", second "));
	for (i = 0; i < RD_LAPS_MAX + 3; i++)
		rd_laps_mark(&l, "more");
	ck_assert_uint_eq(l.n, RD_LAPS_MAX);
	ck_assert_int_ge(rd_laps_total(&l), l.us[1]);
	rd_laps_format(&l, small, sizeof(small));
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

void util_cases(Suite *s)
{
	TCase *tc = tu_case(s, "core", 0);

	tcase_add_test(tc, err_set_returns_code_and_message);
	tcase_add_test(tc, err_message_truncates_safely);
	tcase_add_test(tc, deadlines);
	tcase_add_test(tc, overflow_helpers);
	tcase_add_test(tc, laps_account_for_the_step);
}
