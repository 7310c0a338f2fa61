/* recv_pcsock: migrate-recv's --postcopy-socket (recv_int.h says where it
 * fits).  A VMM in another process hands over its guest memory (one memfd
 * per region) and its userfaultfd; the memfds become the blocks received
 * into, and post-copy serves the VMM's faults.  The VMM gets its device
 * state ("state N" and N bytes, devstate_pcsock.c holds it until then),
 * then hears "run" when its guest may run, and "complete" or "failed:
 * REASON"; after a pre-copy that completed, "complete" follows the state
 * at once (migrate-recv(1), POST-COPY SOCKET).  Every write to the VMM is
 * bounded by --timeout. */
#ifndef RDMIG_CLI_RECV_PCSOCK_H
#define RDMIG_CLI_RECV_PCSOCK_H

#include "rdmig.h"
#include "recv_int.h"

/* Set-up, the loop made: listens on the path, takes one VMM of this user
 * (or root), maps its regions as the blocks, makes it the device state's
 * endpoint (ends_dest_vmm) and answers it.  0, or the exit code after
 * saying why. */
int recv_pcsock_attach(struct app *a);
/* A new handle takes post-copy with the VMM's userfaultfd; at the switch
 * the VMM gets its state, then "run" ... */
void recv_pcsock_hook(struct mig *m, struct rdmig_config *cfg);
/* ... and, its blocks lent, the VMM's views of them; -1 after saying why. */
int recv_pcsock_views(struct mig *m);
/* A failure's exit code @code, or CLI_EX_CANCELLED when the VMM hung up,
 * died or stopped reading (its doing, whatever failed first). */
int recv_pcsock_code(struct app *a, int code);
/* The migration ended: the VMM hears "complete" (@code 0) or why not. */
void recv_pcsock_end(struct app *a, int code, const char *msg);
/* Says "failed" if nothing was said; after a failure that followed "run",
 * waits (--timeout at most) for the VMM to hang up before letting go of
 * its userfaultfd; closes, and removes the socket. */
void recv_pcsock_close(struct app *a);

#endif
