/* The learned price of work a step cannot cut short. */
#include <check.h>
#include <stdint.h>

#include "cost.h"
#include "suite.h"
#include "suites.h"

/* 20 ns a byte: 10 ms buys 500000 bytes; nothing for no time. */
START_TEST(bytes_for_time)
{
	struct cost c;

	cost_init(&c, 20.0);
	ck_assert_uint_eq(cost_bytes(&c, 10000, UINT64_MAX), 500000);
	ck_assert_uint_eq(cost_bytes(&c, 10000, 4096), 4096);
	ck_assert_uint_eq(cost_bytes(&c, 0, UINT64_MAX), 0);
	ck_assert_uint_eq(cost_bytes(&c, -5, UINT64_MAX), 0);
}
END_TEST

/* A slow piece raises the price at once; cheap ones bring it down a tenth
 * of the way each; pieces under a page are noise. */
START_TEST(up_at_once_down_slowly)
{
	struct cost c;
	int i;

	cost_init(&c, 1.0);
	cost_learn(&c, 1 << 20, 45LL * 1000 * 1000); /* 1 MiB in 45 ms */
	ck_assert(c.ns_per_byte > 42.9 && c.ns_per_byte < 43.0);
	cost_learn(&c, 1 << 20, 1000); /* 1 MiB in 1 us: a NIC */
	ck_assert(c.ns_per_byte > 38.0 && c.ns_per_byte < 39.0);
	for (i = 0; i < 100; i++)
		cost_learn(&c, 1 << 20, 1000);
	ck_assert(c.ns_per_byte < 0.01);
	cost_learn(&c, 100, 1000000);
	ck_assert(c.ns_per_byte < 0.01);
}
END_TEST

void cost_cases(Suite *s)
{
	TCase *tc = tu_case(s, "learn", 0);

	tcase_add_test(tc, bytes_for_time);
	tcase_add_test(tc, up_at_once_down_slowly);
}
