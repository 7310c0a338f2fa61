/* Unit tests: pure logic, no RDMA device needed. */
#include "suite.h"
#include "suites.h"

static const struct tu_suite suites[] = {
	{ "util", util_cases },
	{ "api", api_cases },
	{ "auth", auth_cases },
	{ "bitmap", bitmap_cases },
	{ "zero", zero_cases },
	{ "blocks", blocks_cases },
	{ "plan", plan_cases },
	{ "creg", creg_cases },
	{ "privdata", privdata_cases },
	{ "codec", codec_cases },
	{ "arena", arena_cases },
	{ "wpipe", wpipe_cases },
	{ "wpost", wpost_cases },
	{ "worker", worker_cases },
	{ "zscan", zscan_cases },
	{ "dreg", dreg_cases },
	{ "populate", populate_cases },
	{ "pack", pack_cases },
	{ "dest", dest_cases },
	{ "pace", pace_cases },
	{ "abi", abi_cases },
	{ "cost", cost_cases },
	{ "regq", regq_cases },
	{ "conv", conv_cases },
	{ "forecast", forecast_cases },
	{ "chan", chan_cases },
	{ "pcset", pcset_cases },
	{ "pcq", pcq_cases },
	{ "states", states_cases },
	{ "wire", wire_cases },
	{ "pcsock", pcsock_cases },
};

int main(void)
{
	return tu_run_suites(suites, sizeof(suites) / sizeof(suites[0]));
}
