/* The bandwidth limit's token bucket, on a clock the test turns. */
#include <check.h>
#include <stdint.h>

#include "pace.h"
#include "suite.h"
#include "suites.h"

START_TEST(no_limit_is_unlimited)
{
	struct pace p;

	pace_init(&p, 0);
	ck_assert_uint_eq(pace_budget(&p, 1000), UINT64_MAX);
	pace_spent(&p, 1u << 30);
	ck_assert_uint_eq(pace_budget(&p, 1001), UINT64_MAX);
	ck_assert_int_eq(pace_wait_ms(&p), 0);
}
END_TEST

/* 10 MB/s: a full bucket holds 1/20 s of it; what was spent comes back at
 * the rate; idle time buys no more than the bucket. */
START_TEST(refills_at_the_rate)
{
	struct pace p;

	pace_init(&p, 10000000);
	ck_assert_uint_eq(pace_budget(&p, 1000), 500000);
	pace_spent(&p, 500000);
	ck_assert_uint_eq(pace_budget(&p, 1000), 0);
	ck_assert_int_eq(pace_wait_ms(&p), 1);
	ck_assert_uint_eq(pace_budget(&p, 1010), 100000);
	ck_assert_uint_eq(pace_budget(&p, 9000), 500000);
}
END_TEST

/* A burst beyond the tokens puts the bucket in debt; the wait says how
 * long until a page may go, at most a second so a raised limit is seen. */
START_TEST(debt_and_the_wait)
{
	struct pace p;

	pace_init(&p, 1000000);
	ck_assert_uint_eq(pace_budget(&p, 5000), 65536);
	pace_spent(&p, 65536 + 100000);
	ck_assert_uint_eq(pace_budget(&p, 5000), 0);
	ck_assert_int_eq(pace_wait_ms(&p), 105);
	pace_spent(&p, 10000000);
	ck_assert_int_eq(pace_wait_ms(&p), 1000);
	/* Any thread may lift the limit; the next budget sees it. */
	pace_set(&p, 0);
	ck_assert_uint_eq(pace_budget(&p, 5001), UINT64_MAX);
}
END_TEST

void pace_cases(Suite *s)
{
	TCase *tc = tu_case(s, "bucket", 0);

	tcase_add_test(tc, no_limit_is_unlimited);
	tcase_add_test(tc, refills_at_the_rate);
	tcase_add_test(tc, debt_and_the_wait);
}
