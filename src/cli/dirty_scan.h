/* dirty_scan: the slices, and what the kernel reports for one (dirty_int.h
 * says where it fits). */
#ifndef RDMIG_CLI_DIRTY_SCAN_H
#define RDMIG_CLI_DIRTY_SCAN_H

#include <stddef.h>

#include "clierr.h"
#include "dirty_int.h"

/* Cuts every mapping's part below its file's length into s->slices, sized
 * for @threads. */
int dirty_scan_cut(struct dirty_set *s, unsigned threads, struct cli_err *err);
/* Does s->op for @sl on @w's buffer, marking what it finds: 0, or a
 * negative errno with the line in w->err. */
int dirty_scan_slice(struct worker *w, const struct slice *sl);

#endif
