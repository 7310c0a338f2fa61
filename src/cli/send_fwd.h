/* send_fwd: the device state, from its end (a file, standard input or
 * QEMU's migration stream) onto the library's state stream, through one
 * buffer of FWD_BUF.  The end's fd and the library's credits both drive
 * it: it runs whenever either may have moved. */
#ifndef RDMIG_CLI_SEND_FWD_H
#define RDMIG_CLI_SEND_FWD_H

#include "send_int.h"

/* Reads from the endpoint while the buffer is empty and queues what it
 * holds while the library takes it; the rest waits for the next step (no
 * credits) or the fd (nothing to read).  1 once the end's last byte is
 * queued, 0 while more is to come, or the negative errno it failed the
 * migration with. */
int send_fwd_state(struct sender *x);

#endif
