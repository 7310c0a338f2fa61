/* dirty_maps: the process's shared mappings of the RAM files (dirty_int.h
 * says where it fits).  Both return 0, or a negative errno with one line
 * in @err (-ESRCH: the process exited). */
#ifndef RDMIG_CLI_DIRTY_MAPS_H
#define RDMIG_CLI_DIRTY_MAPS_H

#include <stddef.h>

#include "clierr.h"
#include "dirty_int.h"

/* Fills each file's vmas; fails when a file is mapped only privately, or
 * not at all. */
int dirty_maps_find(struct dirty_set *s, struct cli_err *err);
/* -ESTALE when any file's mappings differ from what dirty_maps_find()
 * found. */
int dirty_maps_recheck(struct dirty_set *s, struct cli_err *err);

#endif
