#ifndef RDMIG_UNIT_SUITES_H
#define RDMIG_UNIT_SUITES_H
#include <check.h>
Suite *util_suite(void);
Suite *api_suite(void);
Suite *auth_suite(void);
Suite *bitmap_suite(void);
Suite *zero_suite(void);
Suite *blocks_suite(void);
Suite *plan_suite(void);
Suite *creg_suite(void);
Suite *privdata_suite(void);
Suite *codec_suite(void);
Suite *arena_suite(void);
Suite *wpipe_suite(void);
Suite *dreg_suite(void);
Suite *populate_suite(void);
#endif
