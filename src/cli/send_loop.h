/* send_loop: the library's fd and timer, and the device-state end's fd,
 * on the sender's libev loop.  The watchers themselves are set up by the
 * driver (send.c), which owns their callbacks; this is what every part
 * arms them with. */
#ifndef RDMIG_CLI_SEND_LOOP_H
#define RDMIG_CLI_SEND_LOOP_H

#include "send_int.h"

/* Runs the library now (from the timer at 0): right after an operation
 * starts its fd may not be readable yet. */
void send_kick(struct sender *x);
/* Runs the library when its own timeout says (it has none: not at all). */
void send_arm_src_timer(struct sender *x);
/* Watches the device-state end's fd unless it is watched already; an end
 * whose ds_read never waits has none. */
void send_watch_state(struct sender *x);

#endif
