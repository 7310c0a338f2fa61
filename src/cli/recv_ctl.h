/* recv_ctl: what stops or asks about migrate-recv from outside, the control
 * socket (status, cancel) and the signals (recv_int.h says where it fits). */
#ifndef RDMIG_CLI_RECV_CTL_H
#define RDMIG_CLI_RECV_CTL_H

#include "recv_int.h"

/* Watches SIGINT, SIGTERM and SIGHUP, and opens --control: 0, or the exit
 * code of a usage error, said. */
int recv_ctl_start(struct app *a);
/* Closes the control socket, stops the signal watchers; fine when
 * recv_ctl_start() never ran or failed. */
void recv_ctl_stop(struct app *a);

#endif
