/* Tracking the pages a running process writes into its mappings of a RAM
 * file, with the kernel's soft-dirty bits (Documentation/admin-guide/mm/
 * soft-dirty.rst; CRIU's pre-dump works the same way).
 *
 * What it sees: writes the tracked process makes through its own shared
 * mappings of the file.  What it cannot see, so must not happen while
 * tracking (each would leave the destination with stale data):
 *  - writes by another process, through a mapping that is not the tracked
 *    process's, or with write()/pwrite()/DMA into the file: the tracked
 *    process must be the only writer, as a VM's QEMU is of its guest RAM;
 *  - hole punching or MADV_REMOVE on the file (the page reads as zero
 *    afterwards without any write);
 *  - the kernel unmapping a page dirtied since the last clear behind the
 *    process's back, which drops its soft-dirty bit: swapping out tmpfs pages
 *    (run without swap, or keep the file's pages locked) and khugepaged
 *    collapsing tmpfs pages into huge pages (tmpfs huge=never, the default);
 *  - hugetlbfs files: the kernel keeps no soft-dirty bit for their pages, so
 *    dirty_open refuses them.
 * Over-reporting is possible and harmless: until the first dirty_clear every
 * page reports dirty, and a transparent huge page reports all of its 4 KiB
 * pages when any one of them is written.
 *
 * A write between reading a page's bit (dirty_collect) and the next
 * dirty_clear is lost: the bits cannot be read and cleared atomically.  A
 * pre-copy loop must therefore stop the process (SIGSTOP, and wait until
 * every thread listed in /proc/PID/task shows state 't' or 'T') around each
 * "dirty_collect then dirty_clear" pair, then let it run while the collected
 * pages are sent: a page written while being sent is dirty again and goes in
 * the next round.
 *
 * All functions return 0 or a negative errno and then write one line naming
 * what failed into @err (which may be NULL).  None prints or exits.
 */
#ifndef RDMIG_CLI_DIRTY_H
#define RDMIG_CLI_DIRTY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc.h"

/* One process's view of one RAM file: its shared mappings of the file. */
struct dirty_map;

/**
 * dirty_open - start tracking @proc's writes to the file at @path
 * @out:      receives the map, to be freed with dirty_close()
 * @proc:     the writer (e.g. QEMU), held by identity (proc.h)
 * @path:     the RAM file; matched to @pid's mappings by device and inode
 * @file_len: length of the block; pages at or past it are never reported
 * @err:      receives the reason on failure
 *
 * Fails when the kernel cannot track soft-dirty bits, when @pid does not
 * exist, is not ours to inspect, maps @path only privately or not at all, or
 * when @path is on hugetlbfs.  Every shared mapping of the file is tracked,
 * whole or partial, each at its own file offset.
 */
int dirty_open(struct dirty_map **out, const struct proc_ref *proc, const char *path,
	       uint64_t file_len, char *err, size_t errlen);

/**
 * dirty_clear - clear the soft-dirty bits of every page of @proc
 *
 * Writes "4" to /proc/PID/clear_refs: this covers all of @proc's mappings,
 * so one call serves every dirty_map of that process.
 */
int dirty_clear(const struct proc_ref *proc, char *err, size_t errlen);

/**
 * dirty_collect - report the pages of the file written since the last clear
 * @cb: called once per maximal run of dirty pages, in increasing file order,
 *      with runs neither overlapping nor adjacent; @off is page aligned,
 *      @off + @len <= file_len (the last run may end inside a page).  A
 *      negative return stops the walk and is returned.
 *
 * Does not clear the bits.  Fails with -ESTALE when @pid has mapped,
 * unmapped or moved any part of the file since dirty_open (pages dirtied
 * through a mapping that is gone cannot be seen any more), and with -ESRCH
 * when @pid has exited.
 */
int dirty_collect(struct dirty_map *m,
		  int (*cb)(void *ctx, uint64_t off, uint64_t len), void *ctx,
		  char *err, size_t errlen);

/* Frees @m (NULL is fine).  The tracked process is not touched. */
void dirty_close(struct dirty_map *m);

#endif
