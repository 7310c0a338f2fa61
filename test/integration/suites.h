#ifndef RDMIG_INTEG_SUITES_H
#define RDMIG_INTEG_SUITES_H
#include <check.h>
Suite *fabric_suite(void);
Suite *migrate_suite(void);
Suite *dirty_suite(void);
Suite *cli_suite(void);
Suite *faults_suite(void);
Suite *qemu_suite(void);
Suite *qmp_suite(void);
Suite *security_suite(void);
Suite *embed_suite(void);
TCase *embed_trial_tcase(void);
TCase *embed_busy_tcase(void);
Suite *local_suite(void);
Suite *libvirt_suite(void);
Suite *converge_suite(void);
#endif
