/* Integration suite: runs inside tools/softroce, drives real processes over
 * the Soft-RoCE device named by RDMIG_TEST_ADDR. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "suites.h"

int main(void)
{
	SRunner *sr = srunner_create(fabric_suite());

	srunner_add_suite(sr, migrate_suite());
	srunner_add_suite(sr, dirty_suite());
	srunner_add_suite(sr, cli_suite());
	srunner_add_suite(sr, faults_suite());
	srunner_add_suite(sr, qemu_suite());
	srunner_add_suite(sr, converge_suite());
	srunner_add_suite(sr, qmp_suite());
	srunner_add_suite(sr, security_suite());
	srunner_add_suite(sr, embed_suite());
	srunner_add_suite(sr, local_suite());
	srunner_add_suite(sr, libvirt_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
