/* dirty_pool: the collecting threads (dirty_int.h says where it fits). */
#ifndef RDMIG_CLI_DIRTY_POOL_H
#define RDMIG_CLI_DIRTY_POOL_H

#include <stddef.h>

#include "clierr.h"
#include "dirty_int.h"

/* Makes @threads workers (the caller is the first, so at least 1) and
 * their buffers. */
int dirty_pool_start(struct dirty_set *s, unsigned threads, struct cli_err *err);
/* Runs @op over every slice on every thread; the first failure is
 * returned. */
int dirty_pool_run(struct dirty_set *s, enum op op, struct cli_err *err);
/* Ends the threads and frees what dirty_pool_start() made, as far as it
 * got. */
void dirty_pool_stop(struct dirty_set *s);

#endif
