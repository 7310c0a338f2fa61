/* throttle: slows a workload down while its migration waits for its dirty
 * rate to fit the link and the downtime (auto-converge, migrate-send(1)),
 * and makes sure the slowing ends with the migration, however it ends.
 *
 * QEMU can throttle its vCPUs only inside its own migration (its
 * auto-converge), and its dirty-limit needs KVM's dirty ring (absent under
 * TCG); so the workload's threads (a QEMU guest's vCPU threads, or every
 * thread of a process) are slowed from outside, by a mechanism behind an
 * ops table (throttle_int.h): cgroup v2 cpu.max on a threaded child of
 * each thread's cgroup (throttle_cgroup.c).
 *
 * A throttle left on a production guest is an outage of its own, and
 * migrate-send may be killed with SIGKILL.  So the throttle is applied and
 * released by a keeper: a small process migrate-send forks when the
 * throttle is opened, which does every change on migrate-send's word
 * (over a socket pair) and, when migrate-send is gone (the socket's end,
 * or PR_SET_PDEATHSIG), releases the throttle itself, and sends SIGCONT
 * to a workload that migrate-send had frozen for a moment (unless it was
 * stopped for good: the switch-over, throttle_hold()).  The keeper leaves
 * migrate-send's process group (setsid: a ^C or a kill of the group does
 * not take it along) and holds no other descriptor of migrate-send's.
 *
 * Functions return 0 or a negative errno with one line in @err; none
 * prints or exits. */
#ifndef RDMIG_CLI_THROTTLE_H
#define RDMIG_CLI_THROTTLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clierr.h"
#include "proc.h"
#include "throttle_target.h"

struct throttle;

/* Finds a mechanism that can slow @t down here (nothing is changed yet:
 * the error, naming the fix, comes before the migration starts), and
 * forks the keeper. */
int throttle_open(struct throttle **out, const struct thr_target *t, struct cli_err *err);
/* Releases the throttle (if the keeper still can) and lets the keeper go.
 * NULL is fine. */
void throttle_close(struct throttle *t);

/* From now on the threads get (100 - @pct) percent of the CPU time they
 * could use (QEMU's cpu-throttle-percentage); 0 releases the throttle. */
int throttle_set(struct throttle *t, unsigned pct, struct cli_err *err);
/* The workload is frozen by us for a moment (SIGSTOP), or runs again: the
 * keeper resumes one left frozen when migrate-send is gone.  Said before
 * the SIGSTOP and after the SIGCONT. */
void throttle_frozen(struct throttle *t, bool frozen);
/* The workload stops for good (a process at its switch-over): the keeper
 * leaves it stopped. */
void throttle_hold(struct throttle *t);
/* The workload was stopped by other means (QEMU's own migration pauses
 * the guest for the switch-over): the throttle steps aside, so that
 * nothing QEMU does then waits for a throttled vCPU thread, until it is
 * released or set again. */
void throttle_aside(struct throttle *t);

/* The throttle in force, in percent. */
unsigned throttle_pct(const struct throttle *t);
/* How long the workload has been throttled in all, in ms. */
uint64_t throttle_time_ms(const struct throttle *t);
/* The mechanism ("cgroup") and where it works ("/sys/fs/cgroup/x"). */
const char *throttle_method(const struct throttle *t);
const char *throttle_where(const struct throttle *t);

#endif
