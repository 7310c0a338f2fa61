/* Integration suite: runs inside tools/softroce, drives real processes over
 * the Soft-RoCE device named by RDMIG_TEST_ADDR. */
#include "suite.h"
#include "suites.h"

static const struct tu_suite suites[] = {
	{ "fabric", fabric_cases },
	{ "migrate", migrate_cases },
	{ "dirty", dirty_cases },
	{ "cli", cli_cases },
	{ "faults", faults_cases },
	{ "qemu", qemu_cases },
	{ "converge", converge_cases },
	{ "qmp", qmp_cases },
	{ "security", security_cases },
	{ "embed", embed_cases },
	{ "local", local_cases },
	{ "libvirt", libvirt_cases },
	{ "pcsock", pcsock_cases },
};

int main(void)
{
	return tu_run_suites(suites, sizeof(suites) / sizeof(suites[0]));
}
