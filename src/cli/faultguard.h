/* A page that cannot be had fails its migration, not the process.
 *
 * The destination writes parts of its images with the CPU (data pages
 * carried inside control messages, zero ranges, the verify digests read
 * them).  A file on tmpfs or hugetlbfs whose filesystem is full when such a
 * page is first touched (another process filled it, or the file was
 * truncated under us) raises SIGBUS, which would end every migration of a
 * daemon.  With the guard, the faulting page of a watched range is replaced
 * by an anonymous one (the write lands there and is thrown away), the
 * range's owner is told, and the command fails that migration.  A SIGBUS
 * anywhere else keeps its default action.
 *
 * One guard per process; watch and unwatch from one thread (the handler may
 * run in any). */
#ifndef RDMIG_CLI_FAULTGUARD_H
#define RDMIG_CLI_FAULTGUARD_H

#include <stddef.h>
#include <stdint.h>

#include "clierr.h"

/* Installs the SIGBUS handler with room for @capacity ranges. */
int fg_install(unsigned capacity, struct cli_err *err);
/* Watches [@start, @start + @len) mapped with pages of @pgsz bytes, for
 * @owner.  Returns a slot (>= 0) for fg_unwatch, or -ENOSPC. */
int fg_watch(void *start, uint64_t len, uint64_t pgsz, const void *owner);
/* Before the range is unmapped.  A negative slot is ignored. */
void fg_unwatch(int slot);
/* 1 when a page of the range in @slot faulted since it was watched, with
 * the offset of the first fault in it; else 0. */
int fg_faulted(int slot, uint64_t *offset);

#endif
