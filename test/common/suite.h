/* How the test runners build their suites: each suite is a name in its
 * runner's table and a function of its module that adds the suite's test
 * cases, so creating, naming and running suites is written once. */
#ifndef RDMIG_TEST_SUITE_H
#define RDMIG_TEST_SUITE_H

#include <check.h>
#include <stddef.h>

struct tu_suite {
	const char *name;          /* what CK_RUN_SUITE selects */
	void (*cases)(Suite *s);   /* adds the suite's test cases to @s */
};

/* A test case @name of @s, with Check's timeout @timeout_s (0: Check's
 * default); tests are added to the case it returns. */
TCase *tu_case(Suite *s, const char *name, int timeout_s);
/* Whether CK_RUN_CASE names @name: a case only added when asked for. */
int tu_case_asked(const char *name);
/* Runs the @n suites of @list in order: main's exit status. */
int tu_run_suites(const struct tu_suite *list, size_t n);

#endif
