#ifndef RDMIG_INTEG_SUITES_H
#define RDMIG_INTEG_SUITES_H
#include <check.h>
/* Each adds its suite's test cases (test/common/suite.h); the embed_*
 * ones add one case each to the embed suite. */
void fabric_cases(Suite *);
void migrate_cases(Suite *);
void dirty_cases(Suite *);
void cli_cases(Suite *);
void faults_cases(Suite *);
void qemu_cases(Suite *);
void qmp_cases(Suite *);
void security_cases(Suite *);
void embed_cases(Suite *);
void embed_trial_cases(Suite *);
void embed_busy_cases(Suite *);
void embed_postcopy_cases(Suite *);
void embed_postcopy_recover_cases(Suite *);
/* The embed suite's destinations that keep no device state use this sink
 * (check_embed.c). */
int embed_drop_state(void *ctx, const void *data, size_t len, char *err, size_t errlen);
void local_cases(Suite *);
void libvirt_cases(Suite *);
void converge_cases(Suite *);
void pcsock_cases(Suite *);
#endif
