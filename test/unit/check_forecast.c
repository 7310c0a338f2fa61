/* rdmig_forecast(), through the public API only, as a VMM would call it
 * from rdmig(3): a workload that converges alone, one that needs the
 * throttle, one that never fits, and the argument checks. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "rdmig.h"
#include "suite.h"
#include "suites.h"

#define MIB (1ull << 20)

static struct rdmig_config cfg;
static struct rdmig_forecast_in in;
static struct rdmig_forecast out;
static char err[256];

static void setup(void)
{
	rdmig_config_init(&cfg);
	cfg.max_downtime_ms = 300;
	memset(&in, 0, sizeof(in));
	in.size = sizeof(in);
	in.image_bytes = 1024 * MIB;
	in.bandwidth = 100 * MIB;       /* the first round: 10.24 s */
	memset(&out, 0, sizeof(out));
	out.size = sizeof(out);
	err[0] = 0;
}

static int forecast(void)
{
	return rdmig_forecast(&cfg, &in, &out, err, sizeof(err));
}

/* 2 MiB/s dirtied: 20 MiB after the first round (200 ms to send), then
 * 0.4 MiB: it fits after round 1 or 2, unthrottled. */
START_TEST(quiet_workload_converges)
{
	in.dirty_rate = 2 * MIB;
	ck_assert_int_eq(forecast(), 0);
	ck_assert_uint_eq(out.decision, RDMIG_SWITCH_OVER);
	ck_assert_int_eq(out.within_limit, 1);
	ck_assert_uint_le(out.rounds, 2);
	ck_assert_uint_eq(out.throttle_pct, 0);
	ck_assert_uint_le(out.downtime_ms, 300);
	ck_assert_uint_ge(out.total_ms, 10240);
	ck_assert_msg(strstr(out.text, "switches over"), "%s", out.text);
}
END_TEST

/* Twice the link in a 200 MiB working set: never fits without the
 * throttle; with auto-converge it gets there, throttled. */
START_TEST(busy_workload_needs_the_throttle)
{
	in.dirty_rate = 200 * MIB;
	in.working_set = 200 * MIB;
	cfg.max_iterations = 30;
	ck_assert_int_eq(forecast(), 0);
	ck_assert_uint_eq(out.decision, RDMIG_GIVE_UP);
	ck_assert_int_eq(out.within_limit, 0);
	ck_assert_uint_eq(out.downtime_ms, 0);
	ck_assert_msg(strstr(out.text, "gives up"), "%s", out.text);

	cfg.auto_converge = 1;
	ck_assert_int_eq(forecast(), 0);
	ck_assert_uint_eq(out.decision, RDMIG_SWITCH_OVER);
	ck_assert_int_eq(out.within_limit, 1);
	ck_assert_uint_ge(out.throttle_pct, 50);
	ck_assert_uint_gt(out.rounds, 2);
	ck_assert_uint_le(out.rounds, 30);
}
END_TEST

/* The operator's choice at a limit: a switch-over above the limit, said. */
START_TEST(switch_over_at_a_limit_is_over_it)
{
	in.dirty_rate = 200 * MIB;
	in.working_set = 200 * MIB;
	cfg.max_iterations = 5;
	cfg.on_limit = RDMIG_ON_LIMIT_SWITCH_OVER;
	ck_assert_int_eq(forecast(), 0);
	ck_assert_uint_eq(out.decision, RDMIG_SWITCH_OVER);
	ck_assert_uint_eq(out.reason, RDMIG_REASON_MAX_ITERATIONS);
	ck_assert_int_eq(out.within_limit, 0);
	ck_assert_uint_gt(out.downtime_ms, 300);
	ck_assert_msg(strstr(out.text, "over the limit"), "%s", out.text);
}
END_TEST

/* A measured first round replaces image / bandwidth; the per-round cost
 * is paid each round. */
START_TEST(measured_first_round_and_round_cost)
{
	in.dirty_rate = 2 * MIB;
	in.first_round_ms = 20000;
	in.round_cost_ms = 50;
	ck_assert_int_eq(forecast(), 0);
	ck_assert_uint_eq(out.decision, RDMIG_SWITCH_OVER);
	ck_assert_uint_ge(out.total_ms, 20050);
}
END_TEST

/* No limit, no stall detection, never fits: the forecast still ends. */
START_TEST(endless_policy_still_ends)
{
	in.dirty_rate = 200 * MIB;
	in.working_set = 200 * MIB;
	cfg.stall_rounds = 0;
	cfg.max_iterations = 0;
	ck_assert_int_eq(forecast(), 0);
	ck_assert_uint_eq(out.decision, RDMIG_GIVE_UP);
	ck_assert_msg(strstr(out.text, "no end"), "%s", out.text);
}
END_TEST

START_TEST(arguments_checked)
{
	in.bandwidth = 0;
	ck_assert_int_eq(forecast(), -EINVAL);
	ck_assert_msg(strstr(err, "bandwidth"), "%s", err);
	in.bandwidth = 100 * MIB;
	out.size = 8;
	ck_assert_int_eq(forecast(), -EINVAL);
	out.size = sizeof(out);
	cfg.throttle_max = 100;
	ck_assert_int_eq(forecast(), -EINVAL);
	ck_assert_msg(strstr(err, "throttle_max"), "%s", err);
	ck_assert_int_eq(rdmig_forecast(&cfg, &in, &out, NULL, 0), -EINVAL);
}
END_TEST

void forecast_cases(Suite *s)
{
	TCase *tc = tu_case(s, "model", 0);

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, quiet_workload_converges);
	tcase_add_test(tc, busy_workload_needs_the_throttle);
	tcase_add_test(tc, switch_over_at_a_limit_is_over_it);
	tcase_add_test(tc, measured_first_round_and_round_cost);
	tcase_add_test(tc, endless_policy_still_ends);
	tcase_add_test(tc, arguments_checked);
}
