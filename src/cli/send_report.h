/* send_report: how a migration ended, said once: the completed or failed
 * event (--json) or the summary on standard error, the exit status a
 * failure maps to, and why a limit was not kept.  It reads the sender and
 * its failure record; the migration has ended before it is called. */
#ifndef RDMIG_CLI_SEND_REPORT_H
#define RDMIG_CLI_SEND_REPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "rdmig.h"
#include "send_int.h"

/* What stopped a migration that did not converge, as the options say it. */
void send_limit_said(const struct sender *x, char *buf, size_t len);
/* "12.3 MiB left would take 812 ms at 15.1 MB/s" */
void send_left_said(const struct rdmig_advice *a, char *buf, size_t len);
/* Exit 12: a limit the operator gave was not kept.  The default 300 ms
 * is a target, reported like a limit when missed but not one the
 * operator asked the exit status to keep. */
bool send_promise_broken(const struct sender *x);
/* Completed: the completed event or the summary, and on standard error a
 * limit that was not kept, whatever the output. */
void send_report_success(struct sender *x);
/* Failed: the one line (and the failed event, with what became of the
 * workload); returns the exit status. */
int send_report_failure(struct sender *x);

#endif
