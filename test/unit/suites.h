#ifndef RDMIG_UNIT_SUITES_H
#define RDMIG_UNIT_SUITES_H
#include <check.h>
/* Each adds its suite's test cases (test/common/suite.h). */
void util_cases(Suite *);
void api_cases(Suite *);
void auth_cases(Suite *);
void bitmap_cases(Suite *);
void zero_cases(Suite *);
void blocks_cases(Suite *);
void plan_cases(Suite *);
void creg_cases(Suite *);
void privdata_cases(Suite *);
void codec_cases(Suite *);
void arena_cases(Suite *);
void wpipe_cases(Suite *);
void wpost_cases(Suite *);
void worker_cases(Suite *);
void zscan_cases(Suite *);
void dreg_cases(Suite *);
void populate_cases(Suite *);
void pack_cases(Suite *);
void dest_cases(Suite *);
void pace_cases(Suite *);
void abi_cases(Suite *);
void cost_cases(Suite *);
void regq_cases(Suite *);
void conv_cases(Suite *);
void forecast_cases(Suite *);
void chan_cases(Suite *);
void pcset_cases(Suite *);
void pcq_cases(Suite *);
void states_cases(Suite *);
void wire_cases(Suite *);
void pcsock_cases(Suite *);
#endif
