/* send_policy: migrate-send's side of the convergence policy, which the
 * library decides (rdmig(3), Convergence): the limits it is given (the
 * time limits counted from start, the switch-over's cost as measured
 * here), its advice taken after each round, and giving up when it says
 * so.  The decision itself is not made here. */
#ifndef RDMIG_CLI_SEND_POLICY_H
#define RDMIG_CLI_SEND_POLICY_H

#include <stdint.h>

#include "send_int.h"

/* The library's policy decides (rdmig(3), Convergence) from what this
 * round left, which send_collect() just marked: another round, a
 * throttle, the switch-over, or giving up.  The throttle it advises is
 * applied here, before the workload runs again. */
int send_advise(struct sender *x);
/* A limit before convergence, and --on-timeout cancel: the migration ends
 * here, cancelled in the library (the destination is told), and the
 * workload runs on, unthrottled (send_finish()). */
void send_give_up(struct sender *x);
/* The time limits count from the command's start; with --defer, from
 * start: the library counts from connecting, so the wait is added. */
void send_set_time_limits(struct sender *x);
/* Stopping a process at a round's end costs what stopping it for the
 * switch-over will, and the confirmation after the last round about as
 * much again (both 2-21 ms on a loaded bed, against a prediction that
 * counted 1): the switch-over's cost counts twice the longest stop seen. */
void send_note_freeze(struct sender *x, uint64_t ms);
/* The device-state end got ready in @ms, a measure of how fast its monitor
 * answers, which the switch-over pays a few times: the switch-over's cost
 * counts twice that, and the workload's resume (--resume-cost). */
void send_note_prepare(struct sender *x, uint64_t ms);

#endif
