/* send_dirty: the workload's writes, onto the library's dirty marks.  At a
 * round's end the workload is frozen, what it wrote since the last clear
 * is marked in the library, and the bits are cleared before it runs again
 * (collecting and clearing timed for the iteration events).  Each returns 0, or fails the
 * migration (send_end.h) and returns its negative errno. */
#ifndef RDMIG_CLI_SEND_DIRTY_H
#define RDMIG_CLI_SEND_DIRTY_H

#include <stdint.h>

#include "send_int.h"

/* Freezes the workload, the library polled while it waits so that the
 * peer does not time out; a failure there is the library's. */
int send_freeze(struct sender *x);
/* Marks what the workload wrote since the last clear. */
int send_collect(struct sender *x, uint64_t *bytes);
/* Clears the dirty bits of the frozen workload, then lets it run. */
int send_clear_and_thaw(struct sender *x);

#endif
