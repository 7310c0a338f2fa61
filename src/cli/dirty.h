/* Tracking the pages a running process writes into its shared mappings of
 * its RAM files, from outside the process, at a cost that follows what was
 * written rather than what the process owns.  The best way the kernel and
 * the process allow is taken (dirty_method() names it, dirty_why_not()
 * says why not a better one):
 *
 * "wp-async" (Linux 6.7 and later): the RAM files' ranges are registered for
 *   userfaultfd write-protection in asynchronous mode (UFFD_FEATURE_WP_ASYNC:
 *   a write to a protected page goes through at once and only drops that
 *   page's protection), and PAGEMAP_SCAN on /proc/PID/pagemap returns just
 *   the ranges written since they were protected and protects them again in
 *   the same walk, under the page-table lock
 *   (Documentation/admin-guide/mm/pagemap.rst, "PAGEMAP_SCAN IOCTL").  Only
 *   the RAM's page tables are walked, nothing of the rest of the process;
 *   what comes out is the written ranges, not a word per page; reading and
 *   re-protecting a page is one atomic step.  A userfaultfd belongs to the
 *   mm that created it, so it is created inside the tracked process, once,
 *   with two injected system calls (inject.h); every call after that is
 *   ours.  Needs ptrace access to the process and no seccomp filter in it
 *   (unless DIRTY_WP_ASYNC is asked for explicitly).
 * "soft-dirty-scan" (PAGEMAP_SCAN with PAGE_IS_SOFT_DIRTY, Linux 6.8 and
 *   later, when wp-async is not possible): the soft-dirty bits, read as
 *   ranges through PAGEMAP_SCAN.  Clearing them still writes "4" to
 *   /proc/PID/clear_refs, which walks every page table of the process: no
 *   kernel offers a clear of soft-dirty bits over a range.
 * "soft-dirty" (any kernel with CONFIG_MEM_SOFT_DIRTY, Debian 12's 6.1
 *   among them): the same bits read from /proc/PID/pagemap, 8 bytes per
 *   page of the RAM's ranges (Documentation/admin-guide/mm/soft-dirty.rst;
 *   CRIU's pre-dump works this way).
 * Collecting (and wp-async's first protection) runs in parallel over slices
 * of the RAM's ranges, on threads of our own made at dirty_open, one per
 * online CPU (at most DIRTY_MAX_THREADS).
 *
 * What is seen: writes the tracked process makes through its own shared
 * mappings of the files (the kernel's writes into them on its behalf, such
 * as read(2) into guest RAM, included).  What cannot be seen, so must not
 * happen while tracking (each would leave the destination with stale data):
 *  - writes by another process, through a mapping that is not the tracked
 *    process's, or with write()/pwrite()/DMA into the file: the tracked
 *    process must be the only writer, as a VM's QEMU is of its guest RAM;
 *  - hole punching or MADV_REMOVE on the file (the page reads as zero
 *    afterwards without any write);
 *  - the kernel unmapping a page written since the last collect behind the
 *    process's back, which drops what marked it: swapping out tmpfs pages
 *    (run without swap, or keep the file's pages locked) and khugepaged
 *    collapsing tmpfs pages into huge pages (tmpfs huge=never, the default);
 *  - hugetlbfs files: the kernel keeps no soft-dirty bit for their pages,
 *    so dirty_open refuses them.
 * Over-reporting is possible and harmless: until the first dirty_clear every
 * page reports dirty, and a transparent huge page reports all of its 4 KiB
 * pages when any one of them is written.
 *
 * Soft-dirty bits cannot be read and cleared at once: a write between
 * reading a page's bit (dirty_collect) and the next dirty_clear is lost.  A
 * pre-copy loop must therefore stop the process (SIGSTOP, and wait until
 * every thread listed in /proc/PID/task shows state 't' or 'T') around each
 * "dirty_collect then dirty_clear" pair, then let it run while the collected
 * pages are sent: a page written while being sent is dirty again and goes in
 * the next round.  wp-async loses nothing there (the collect protects again
 * what it reports; a page written after a collect is reported by the next
 * one, a clear between them notwithstanding), but the same loop is right
 * for it too.
 *
 * All functions return 0 or a negative errno and then write one line naming
 * what failed into @err (which may be NULL).  None prints or exits.
 */
#ifndef RDMIG_CLI_DIRTY_H
#define RDMIG_CLI_DIRTY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clierr.h"
#include "proc.h"

#define DIRTY_MAX_THREADS 16

enum dirty_mode {
	DIRTY_AUTO,        /* wp-async where possible, else soft-dirty */
	DIRTY_WP_ASYNC,    /* wp-async, or fail saying why not */
	DIRTY_SOFT_DIRTY,  /* soft-dirty bits (read as ranges where possible) */
};

struct dirty_opts {
	enum dirty_mode mode;
	unsigned threads;  /* collecting threads, the caller's included; 0: one
			    * per online CPU */
};

/* One process's view of its RAM files: their shared mappings. */
struct dirty_set;

/* Receives a maximal run of written pages of file @file (an index into
 * dirty_open's @paths); a negative return stops the walk and is returned. */
typedef int (*dirty_run_fn)(void *ctx, unsigned file, uint64_t off, uint64_t len);

/**
 * dirty_open - start tracking @proc's writes to the files at @paths
 * @out:   receives the set, to be freed with dirty_close()
 * @proc:  the writer (e.g. QEMU), held by identity (proc.h)
 * @paths: the RAM files; matched to @proc's mappings by device and inode
 * @lens:  each file's length; pages at or past it are never reported
 * @n:     how many files
 * @o:     how to track (NULL: DIRTY_AUTO, a thread per CPU)
 *
 * Fails when the kernel cannot track writes the way @o asks, when the
 * process does not exist, is not ours to inspect, maps a file only
 * privately or not at all, or when a file is on hugetlbfs.  Every shared
 * mapping of a file is tracked, whole or partial, each at its own offset.
 */
int dirty_open(struct dirty_set **out, const struct proc_ref *proc, const char *const *paths,
	       const uint64_t *lens, unsigned n, const struct dirty_opts *o, struct cli_err *err);

/**
 * dirty_clear - forget what was written until now
 *
 * wp-async: the first call protects the RAM's ranges (a walk of their page
 * tables); later ones only forget what the last collect reported, which that
 * collect protected again already.  soft-dirty: writes "4" to
 * /proc/PID/clear_refs, which clears the bits of every page of the process.
 */
int dirty_clear(struct dirty_set *s, struct cli_err *err);

/**
 * dirty_collect - report the pages written since the last clear
 * @cb: called once per maximal run of written pages, file by file in the
 *      order of dirty_open's @paths and in increasing file order within a
 *      file, with runs neither overlapping nor adjacent; @off is page
 *      aligned, @off + @len <= that file's length (the last run may end
 *      inside a page).
 *
 * Does not forget: a second collect reports the same pages again, and more.
 * Fails with -ESTALE when the process has mapped, unmapped or moved any part
 * of a file since dirty_open (pages written through a mapping that is gone
 * cannot be seen any more), and with -ESRCH when it has exited.
 */
int dirty_collect(struct dirty_set *s, dirty_run_fn cb, void *ctx, struct cli_err *err);

/* "wp-async", "soft-dirty-scan" or "soft-dirty". */
const char *dirty_method(const struct dirty_set *s);
/* Why wp-async is not the method ("" when it is): the cause, for the
 * operator to fix or accept. */
const char *dirty_why_not(const struct dirty_set *s);
/* The threads a collect runs on, the caller's included. */
unsigned dirty_threads(const struct dirty_set *s);

/* Frees @s (NULL is fine); with wp-async, closing the userfaultfd lifts
 * every protection it set.  The tracked process is not otherwise touched. */
void dirty_close(struct dirty_set *s);

#endif
