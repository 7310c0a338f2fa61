/* dirty_probe: what the kernel offers and the process lets us do
 * (dirty_int.h says where it fits).  Each returns 0, or a negative errno
 * with one line in @err naming the fix where there is one. */
#ifndef RDMIG_CLI_DIRTY_PROBE_H
#define RDMIG_CLI_DIRTY_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "clierr.h"
#include "dirty_int.h"

/* @f->path's identity (dev, inode, resolved path); refuses hugetlbfs,
 * whose pages carry no soft-dirty bits. */
int dirty_probe_file(struct dirty_file *f, struct cli_err *err);
/* Opens the process's pagemap into s->pagemap_fd. */
int dirty_probe_pagemap(struct dirty_set *s, struct cli_err *err);
/* Sets up wp-async once s->files' mappings are known: a userfaultfd made
 * inside the process (@forced: even past a seccomp filter, inject.h), the
 * mappings registered.  Fails with the reason in @why and nothing left
 * behind. */
int dirty_probe_wp(struct dirty_set *s, bool forced, struct cli_err *why);
/* Sets up soft-dirty, proved to work here, read as ranges where the
 * kernel's PAGEMAP_SCAN knows the category (soft-dirty-scan). */
int dirty_probe_soft(struct dirty_set *s, struct cli_err *err);
/* soft-dirty: writes "4" to /proc/PID/clear_refs, which clears the bits of
 * every page of the process. */
int dirty_probe_clear_refs(struct dirty_set *s, struct cli_err *err);

#endif
