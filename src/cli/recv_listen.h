/* recv_listen: the listener, and the limits on connections that have not
 * authenticated yet (recv_int.h says where it fits). */
#ifndef RDMIG_CLI_RECV_LISTEN_H
#define RDMIG_CLI_RECV_LISTEN_H

#include "recv_int.h"

/* Listens on --listen and says so (a line, or the "listening" event): 0,
 * or the exit code after saying why not. */
int recv_listen_start(struct app *a);
/* Stops taking connections; frees the spare handle.  Fine when
 * recv_listen_start() never ran or failed. */
void recv_listen_stop(struct app *a);

#endif
