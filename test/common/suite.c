#include "suite.h"

#include <stdlib.h>
#include <string.h>

TCase *tu_case(Suite *s, const char *name, int timeout_s)
{
	TCase *tc = tcase_create(name);

	if (timeout_s)
		tcase_set_timeout(tc, timeout_s);
	suite_add_tcase(s, tc);
	return tc;
}

int tu_case_asked(const char *name)
{
	const char *want = getenv("CK_RUN_CASE");

	return want && !strcmp(want, name);
}

int tu_run_suites(const struct tu_suite *list, size_t n)
{
	SRunner *sr = srunner_create(NULL);
	size_t i;
	int failed;

	for (i = 0; i < n; i++) {
		Suite *s = suite_create(list[i].name);

		list[i].cases(s);
		srunner_add_suite(sr, s);
	}
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
