/* dirty_int: the write tracker's private state, shared by its files.
 *
 * dirty.c is the face (dirty.h) and the driver: it opens a set, chooses
 * the method, and runs each round.  Below it, each file is a job of its
 * own that never calls back up:
 *   dirty_pool   the collecting threads, made once at dirty_open, working
 *                through the slices in parallel
 *   dirty_scan   one slice: read pagemap, or PAGEMAP_SCAN it; and cutting
 *                the mappings into slices
 *   dirty_bits   one bitmap per file, indexed by file page: what a slice
 *                found is folded in, the runs come out of it in file order
 *   dirty_probe  what the kernel offers here and lets us do to the process:
 *                each method proved and set up, soft-dirty's clear
 *   dirty_maps   the process's shared mappings of the files, from
 *                /proc/PID/maps
 * Types and the kernel's interface only; nothing outside the tracker
 * includes it (check_dirty.c looks inside). */
#ifndef RDMIG_CLI_DIRTY_INT_H
#define RDMIG_CLI_DIRTY_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/types.h>

#include "clierr.h"
#include "proc.h"

#define PM_SOFT_DIRTY (1ull << 55)
/* Entries per pread of pagemap: 32 KiB, so a 16 GiB file is 128 reads. */
#define PM_BATCH 4096
/* Ranges per PAGEMAP_SCAN call; a slice with more takes more calls. */
#define PM_REGIONS 1024
#define HUGETLBFS_MAGIC_ 0x958458f6
/* Slices: at least 16 MiB (fewer calls), at most 1 GiB, about eight per
 * thread so that one slow slice does not hold the others up. */
#define SLICE_MIN_PAGES 4096ull
#define SLICE_MAX_PAGES 262144ull

/* The kernel's PAGEMAP_SCAN interface (linux/fs.h of Linux 6.7 and later;
 * the build hosts' headers may be older).  The values are ABI. */
struct pm_scan_arg_ {
	uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
	uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region_ {
	uint64_t start, end, categories;
};
#define PAGEMAP_SCAN_ _IOWR('f', 16, struct pm_scan_arg_)
#define PM_SCAN_WP_MATCHING_ (1ull << 0)
#define PM_SCAN_CHECK_WPASYNC_ (1ull << 1)
#define PAGE_IS_WRITTEN_ (1ull << 1)
#define PAGE_IS_SOFT_DIRTY_ (1ull << 7)
/* linux/userfaultfd.h of Linux 6.7 and later. */
#define UFFD_USER_MODE_ONLY_ 1
#define UFFD_FEATURE_WP_UNPOPULATED_ (1ull << 13)
#define UFFD_FEATURE_WP_ASYNC_ (1ull << 15)

/* How writes are seen (dirty.h says when each is taken). */
enum method {
	M_WP_ASYNC,        /* userfaultfd write-protection, PAGEMAP_SCAN reads */
	M_SOFT_DIRTY_SCAN, /* soft-dirty bits read as ranges by PAGEMAP_SCAN */
	M_SOFT_DIRTY,      /* soft-dirty bits read from pagemap, a word a page */
};

/* What the pool does with each slice. */
enum op {
	OP_READ,     /* soft-dirty: pread pagemap, bit 55 per page */
	OP_SCAN_SD,  /* soft-dirty-scan: PAGEMAP_SCAN for PAGE_IS_SOFT_DIRTY */
	OP_SCAN_WP,  /* wp-async: written ranges out, protected again */
	OP_ARM,      /* wp-async: protect everything, nothing out */
};

/* One shared mapping: virtual [start, end) shows the file from @off on. */
struct dirty_vma {
	uint64_t start, end, off;
};

struct dirty_file {
	char *path;
	char *real; /* @path resolved, as /proc/PID/maps names it; may be NULL */
	uint64_t len, npages;
	dev_t dev;
	ino_t ino;
	struct dirty_vma *vmas;
	size_t nvmas;
	uint64_t *bits; /* one bit per file page */
};

/* A piece of one mapping, for one thread at a time. */
struct slice {
	unsigned file;
	const struct dirty_vma *v;
	uint64_t start, end; /* virtual */
};

struct worker {
	struct dirty_set *s;
	pthread_t thread;
	bool started;
	void *buf;  /* PM_BATCH pagemap entries or PM_REGIONS page_regions */
	int rc;
	struct cli_err err;  /* why rc */
};

struct dirty_set {
	pid_t pid;
	struct proc_ref proc;   /* later opens cannot reach a reused PID */
	int pagemap_fd;         /* reads 0 bytes once the process's memory is gone */
	int uffd;               /* wp-async: ours, registered in its mm; else -1 */
	enum method method;
	struct cli_err why_not;
	bool armed;             /* dirty_clear ran once */
	uint64_t psz;
	struct dirty_file *files;
	unsigned nfiles;
	struct slice *slices;
	size_t nslices;

	/* The pool: workers[0] is the caller, the others wait for a new
	 * generation, work through the slices and count themselves out. */
	struct worker *workers;
	unsigned nworkers;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	bool sync_ready;
	uint64_t gen;
	unsigned running;
	bool quit;
	enum op op;
	atomic_size_t next;
};

#endif
