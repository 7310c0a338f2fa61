/* send_end: the end of a migration, reached once.  A failure is recorded
 * first (the library's message, or one of the command's own about the
 * workload or its tracking), then the end: the phase is PH_DONE, the
 * stop timer and the device-state fd are no longer watched, a failed
 * migration leaves the workload running here again, the report is made
 * (send_report.h), the exit status kept in x->exit_code, and the loop
 * told to stop.  Whatever fails later is a consequence, not reported. */
#ifndef RDMIG_CLI_SEND_END_H
#define RDMIG_CLI_SEND_END_H

#include "cli.h"
#include "send_int.h"

/* The library failed with @rc in @phase: its message (or "cancelled"),
 * then the end.  Returns @rc. */
int send_lib_fail(struct sender *x, int rc, enum cli_phase phase);
/* The command's own failure, @msg (@rc 0 counts as -EIO), in the transfer
 * phase, then the end.  Returns the rc recorded. */
int send_local_fail(struct sender *x, int rc, const char *msg);
/* Success or failure: reported once, the loop ends. */
void send_finish(struct sender *x);

#endif
