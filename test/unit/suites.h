#ifndef RDMIG_UNIT_SUITES_H
#define RDMIG_UNIT_SUITES_H
#include <check.h>
Suite *util_suite(void);
#endif
