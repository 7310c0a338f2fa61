/* A QEMU guest's RAM, as rdmig can carry it: the RAM backends QEMU has,
 * which of them are the guest's memory, and the very files QEMU maps for
 * them, reached from our side even when QEMU runs in its own root (a
 * chroot, a container's mount namespace).
 *
 * QMP says which backends exist and where they sit in guest memory ("info
 * mtree -f"), "gpa2hva" where QEMU maps them; QEMU's /proc/PID/maps names
 * the file of that mapping (device and inode), which is then found under
 * the path QEMU was given (our root, then QEMU's root through
 * /proc/PID/root) or, failing those, through QEMU's own fd to it
 * (/proc/PID/fd/N: memfds, unlinked files).  Needs to run as QEMU's user
 * or root to read those /proc files.
 *
 * What rdmig can carry is decided here too: guest RAM in a backend QEMU
 * maps shared and writable that QEMU's x-ignore-shared skips on this
 * version (a memfd only before QEMU 8.1: from 8.1 on QEMU skips
 * file-backed RAM only and would send a memfd's pages itself, after the
 * guest stopped).
 *
 * Functions return 0 or a negative errno with one line in @err (which may
 * be NULL); none prints or exits. */
#ifndef RDMIG_CLI_QEMU_RAM_H
#define RDMIG_CLI_QEMU_RAM_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli.h"

struct qmp;

enum qram_kind {
	QRAM_FILE,  /* memory-backend-file */
	QRAM_MEMFD, /* memory-backend-memfd */
	QRAM_RAM,   /* memory-backend-ram: anonymous memory */
};

/* One RAM backend object of QEMU's (/objects/ID). */
struct qram_backend {
	char id[128]; /* QEMU names the RAMBlock after it */
	enum qram_kind kind;
	uint64_t size;
	bool shared;   /* share=on: QEMU maps it MAP_SHARED */
	bool in_guest; /* mapped into guest memory (the machine's RAM or a
			* DIMM's), hence a RAMBlock QEMU migrates */
	/* A file to open and mmap MAP_SHARED to reach the same memory as QEMU:
	 * the mem-path of a file backend (prefixed with /proc/PID/root when
	 * QEMU sees it in a root of its own), /proc/PID/fd/N for a memfd or a
	 * file QEMU holds no name of (valid while QEMU runs).  "" when there is
	 * none: a backend that is not shared (its file, if any, is not the
	 * guest's memory) or is a memory-backend-ram; a file backend whose
	 * mem-path is a directory and that is in no guest memory; a memfd
	 * backend in no guest memory whose size another such memfd shares, so
	 * that nothing tells them apart. */
	char path[PATH_MAX];
	char mem_path[PATH_MAX]; /* as QEMU was given it, "" for a memfd */
	dev_t dev; /* the file QEMU maps, when path is set */
	ino_t ino;
};

/**
 * qram_backends - list QEMU's RAM backends and the files behind them
 * @out: receives a malloc'd array (free() it), NULL when there is none
 *
 * A guest-memory backend QEMU maps read-only is refused (-EACCES): a
 * process posing as QEMU could name a file it may only read.  A mem-path
 * that names another file than the one QEMU maps, in our root and in
 * QEMU's, with no fd of QEMU's to it either, is -ESTALE naming the paths.
 */
int qram_backends(struct qmp *q, struct qram_backend **out, size_t *n,
		  struct cli_err *err);

/**
 * qram_check - whether rdmig can carry all of the guest's RAM
 * @b, @n: from qram_backends
 *
 * 0 when every backend in guest memory is shared, has a path and is one
 * this QEMU's x-ignore-shared skips, and together they make
 * query-memory-size-summary's base plus plugged memory; else -ENOTSUP with
 * what to change.
 */
int qram_check(struct qmp *q, const struct qram_backend *b, size_t n,
	       struct cli_err *err);

/**
 * qram_blocks - the guest's RAM as blocks to map: qram_backends and
 * qram_check, then one cli_ram per backend in guest memory (name: its id,
 * path: where we reach QEMU's file), appended to *@rams.
 */
int qram_blocks(struct qmp *q, struct cli_ram **rams, unsigned *n, struct cli_err *err);

#endif
