/* recv_opts: migrate-recv's command line (recv_int.h says where it fits). */
#ifndef RDMIG_CLI_RECV_OPTS_H
#define RDMIG_CLI_RECV_OPTS_H

#include "recv_int.h"

/* Parses argv into @o with its defaults: -1 to go on, or the exit code to
 * leave with (0 after --help or --version, else a usage error, said). */
int recv_opts_parse(struct recv_opts *o, int argc, char **argv);
/* What parsing allocated (--ram, --auth-key); fine after a failed parse. */
void recv_opts_free(struct recv_opts *o);

#endif
