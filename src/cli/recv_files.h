/* recv_files: the files of one migration, and the destination's ends made
 * at set-up (recv_int.h says where it fits).  Calls that take @err return
 * 0 or a negative errno with one line there. */
#ifndef RDMIG_CLI_RECV_FILES_H
#define RDMIG_CLI_RECV_FILES_H

#include <stddef.h>

#include "rdmig.h"
#include "recv_int.h"

/* Set-up: maps the blocks that exist already (QEMU's, or --ram files with
 * --use-existing) and checks the directories files will be made in; 0, or
 * the exit code of a usage error, said. */
int recv_files_prepare(struct app *a);
/* Makes the library ask this module for each block's memory, for where
 * the device state goes, and before it confirms completion. */
void recv_files_hook(struct mig *m, struct rdmig_config *cfg);
/* Single mode: lends the blocks mapped at set-up to @m's handle; -1 after
 * saying why not. */
int recv_files_lend(struct mig *m);
/* Admission: the daemon's DIR/N, markers and fault watches on the lent
 * files, and the device state's endpoint, ready. */
int recv_files_claim(struct mig *m, struct cli_err *err);
/* After the block map: every --ram block must have been announced. */
int recv_files_check_set(struct mig *m, struct cli_err *err);
/* Whether a page of the files could not be provided (SIGBUS caught by
 * faultguard.h): the image is not whole. */
int recv_files_check_faults(struct mig *m, struct cli_err *err);
/* The source holds the confirmation: the image becomes usable. */
int recv_files_finish(struct mig *m, struct cli_err *err);
/* Closes the state endpoint and the files (removed when m->discard), says
 * what could not be put back; the daemon's empty DIR/N goes. */
void recv_files_release(struct mig *m);

#endif
