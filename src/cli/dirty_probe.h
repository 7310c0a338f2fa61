/* dirty_probe: what the kernel offers and the process lets us do
 * (dirty_int.h says where it fits).  Each returns 0, or a negative errno
 * with one line in @err naming the fix where there is one. */
#ifndef RDMIG_CLI_DIRTY_PROBE_H
#define RDMIG_CLI_DIRTY_PROBE_H

#include <stddef.h>

#include "dirty_int.h"

/* @f->path's identity (dev, inode, resolved path); refuses hugetlbfs,
 * whose pages carry no soft-dirty bits. */
int dirty_probe_file(struct dirty_file *f, char *err, size_t errlen);
/* Opens the process's pagemap into s->pagemap_fd. */
int dirty_probe_pagemap(struct dirty_set *s, char *err, size_t errlen);
/* Chooses and sets up s->method as @mode asks, after s->files' mappings
 * are known: wp-async where possible (its failure kept in s->why_not),
 * else soft-dirty, read as ranges where the kernel can. */
int dirty_probe_method(struct dirty_set *s, enum dirty_mode mode, char *err, size_t errlen);
/* soft-dirty: writes "4" to /proc/PID/clear_refs, which clears the bits of
 * every page of the process. */
int dirty_probe_clear_refs(struct dirty_set *s, char *err, size_t errlen);

#endif
