/* The one way both commands open a file they did not create themselves:
 * --ram files in every mode, the files behind QEMU's RAM backends (in our
 * root, in QEMU's own root, or through QEMU's fd), --state-in, the key.
 *
 * A path is only a name, and whoever can write one of its directories (a
 * QEMU's user owns the directory of its RAM file) can make it name
 * something else at any moment: a symbolic link to a root-only file, a
 * device whose mere opening has effects (/dev/watchdog reboots the host, a
 * terminal or a FUSE file blocks).  So a path is resolved once, to an
 * O_PATH descriptor (which opens nothing), without following a symbolic
 * link at any level (openat2 RESOLVE_NO_SYMLINKS; inside QEMU's root also
 * RESOLVE_IN_ROOT, so that nothing leads out of it); what it names is
 * checked there (a regular file; the very file expected when its identity
 * is known; ours when it must be) and only then opened for reading or
 * writing, through that descriptor (/proc/self/fd/N), never by the name
 * again.
 *
 * Paths of the forms /proc/PID/fd/N and /proc/PID/root/REST are QEMU's
 * (qemu_ram.h): the first is its open file itself, the second REST inside
 * its root.
 *
 * Functions return 0 (or a descriptor) or a negative errno with one line
 * in @err naming the path; none prints or exits. */
#ifndef RDMIG_CLI_SAFEOPEN_H
#define RDMIG_CLI_SAFEOPEN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "clierr.h"

struct sopen_how {
	int flags;      /* O_RDONLY or O_RDWR (O_CLOEXEC and O_NOCTTY are added) */
	dev_t dev;      /* the file it must be, */
	ino_t ino;      /* when ino is not 0 */
	bool ours;      /* it must belong to us and have one name (no hard link
			 * another user made to it) */
	/* Follow symbolic links on the way: only for a file that is only
	 * read and that the operator named (the key, --state-in; Kubernetes
	 * mounts its secrets as links), where the danger is an open with
	 * effects, which resolving to O_PATH first still rules out. */
	bool follow;
};

/**
 * sopen_file - open @path as @how says, or refuse before opening anything
 * @st: receives what was opened
 *
 * Returns the descriptor.  -ELOOP when a symbolic link is in the way,
 * -EINVAL for anything but a regular file (named: a device, a FIFO, ...),
 * -ESTALE when it is not the file expected, -EPERM when it is not ours,
 * -EACCES (and the like) from the final open, which callers may retry
 * read-only.
 */
int sopen_file(const char *path, const struct sopen_how *how, struct stat *st, struct cli_err *err);

/* What @path names, resolved as sopen_file does (links not followed) but
 * without opening it: 0 with @st when it is a regular file. */
int sopen_stat(const char *path, struct stat *st, struct cli_err *err);

#endif
