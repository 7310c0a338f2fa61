/* recv_admit: whether a source that proved itself may migrate here now
 * (recv_int.h says where it fits). */
#ifndef RDMIG_CLI_RECV_ADMIT_H
#define RDMIG_CLI_RECV_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "recv_int.h"

/* Admits @m's source, which announced @image_bytes: it is counted as a
 * migration, and its files and device-state endpoint are ready.  Else a
 * negative errno with the refusal in @err; m->final says when waiting on
 * for another source would not help. */
int recv_admit(struct mig *m, uint64_t image_bytes, struct cli_err *err);

#endif
