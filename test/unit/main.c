/* Unit tests: pure logic, no RDMA device needed. */
#include <check.h>
#include <stdlib.h>

#include "suites.h"

int main(void)
{
	SRunner *sr = srunner_create(util_suite());
	int failed;

	srunner_add_suite(sr, api_suite());
	srunner_add_suite(sr, auth_suite());
	srunner_add_suite(sr, bitmap_suite());
	srunner_add_suite(sr, zero_suite());
	srunner_add_suite(sr, blocks_suite());
	srunner_add_suite(sr, plan_suite());
	srunner_add_suite(sr, creg_suite());
	srunner_add_suite(sr, privdata_suite());
	srunner_add_suite(sr, codec_suite());
	srunner_add_suite(sr, arena_suite());
	srunner_add_suite(sr, wpipe_suite());
	srunner_add_suite(sr, wpost_suite());
	srunner_add_suite(sr, worker_suite());
	srunner_add_suite(sr, zscan_suite());
	srunner_add_suite(sr, dreg_suite());
	srunner_add_suite(sr, populate_suite());
	srunner_add_suite(sr, pack_suite());
	srunner_add_suite(sr, dest_suite());
	srunner_add_suite(sr, pace_suite());
	srunner_add_suite(sr, abi_suite());
	srunner_add_suite(sr, cost_suite());
	srunner_add_suite(sr, regq_suite());
	srunner_add_suite(sr, conv_suite());
	srunner_add_suite(sr, forecast_suite());
	srunner_add_suite(sr, chan_suite());
	srunner_add_suite(sr, pcset_suite());
	srunner_add_suite(sr, pcq_suite());
	srunner_add_suite(sr, states_suite());
	srunner_add_suite(sr, wire_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
